"""The engine requests behind one HTTP request (n choices for each prompt), started and awaited
together, and cancelled together when the client leaves or the server stops."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ..runtime.types import (
    EngineError,
    Event,
    FinishEvent,
    GenerationRequest,
    RequestHandle,
    TokenEvent,
)
from .context import ApiContext
from .errors import ApiError


@dataclass
class ChoiceResult:
    index: int
    prompt_index: int
    pieces: list[str] = field(default_factory=list)
    finish: FinishEvent | None = None
    reasoning_pieces: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_pieces)


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


class RequestTimedOut(ApiError):
    """The request ran past its deadline (ApiSettings.request_timeout_s): 504, and its engine
    requests are cancelled (a stream gets it as an error event instead)."""

    def __init__(self, message: str):
        super().__init__(504, message, code="request_timeout", error_type="timeout_error")


class Batch:
    def __init__(self, ctx: ApiContext, requests: list[GenerationRequest], n: int,
                 param_names: dict[str, str] | None = None):
        self.ctx = ctx
        # the engine names its own fields (prompt_token_ids); the client knows the route's
        self.param_names = param_names or {}
        self.requests = requests
        self.n = n
        self.handles: list[RequestHandle] = []
        self.finished: set[int] = set()
        self.deadline: float | None = None  # time.monotonic() by which it must end

    async def submit_async(self) -> None:
        """submit() on a worker thread: rendering a chat template and tokenizing a long prompt
        never stall the event loop, and with it every other stream."""
        await asyncio.get_running_loop().run_in_executor(None, self.submit)

    def submit(self) -> None:
        """Submit every request; if one is refused, take back the ones already queued."""
        timeout = self.ctx.settings.request_timeout_s
        self.deadline = time.monotonic() + timeout if timeout else None
        try:
            for req in self.requests:
                handle = self.ctx.engine.submit(req)
                self.handles.append(handle)
                self.ctx.track(handle)
        except EngineError as exc:
            self.close()
            if exc.param in self.param_names:
                exc.param = self.param_names[exc.param]
            raise

    def close(self) -> None:
        """Cancel what has not finished (a no-op after a normal end) and forget the handles."""
        for i, h in enumerate(self.handles):
            if i not in self.finished:
                h.cancel()
            self.ctx.untrack(h.request_id)

    async def events(self) -> AsyncIterator[tuple[int, Event]]:
        """(choice index, event) pairs from all requests, in arrival order."""
        async for group in self.event_groups():
            for pair in group:
                yield pair

    async def event_groups(self, min_interval: float = 0.0
                           ) -> AsyncIterator[list[tuple[int, Event]]]:
        """Lists of (choice index, event): everything that arrived since the last list.

        With `min_interval` > 0, once tokens come faster than that, lists are handed out on
        the ticks of a grid `min_interval` apart on the loop's clock, each carrying all
        tokens since the last: a stream then costs one wake-up and one write per tick instead
        of one per token, and since every stream on the loop shares the grid, one loop turn
        serves them all. The first token and tokens slower than the interval go at once.
        """
        loop = asyncio.get_running_loop()

        def next_tick(after: float) -> float:
            return (math.floor(after / min_interval) + 1) * min_interval

        def recent(last: float | None) -> bool:
            return min_interval > 0 and last is not None and loop.time() - last < min_interval

        tasks: list[asyncio.Future] = []
        hold = asyncio.sleep
        if len(self.handles) == 1:
            take_first, take_rest = self._handle_takers(self.handles[0])
            # until the tick, unless the request finishes first: its last chunk goes at once
            hold = getattr(self.handles[0], "wait_finish", asyncio.sleep)
        else:
            queue, tasks = self._pump_all()
            take_first, take_rest = self._queue_takers(queue)
        last: float | None = None
        try:
            while len(self.finished) < len(self.handles):
                group = []
                if recent(last):  # tokens are flowing: gather until the next tick
                    await hold(max(0.0, next_tick(last) - loop.time()))
                    group = take_rest()
                if not group:
                    group = await self._before_deadline(take_first())
                    if not group:  # a handle ended without its FinishEvent reaching us
                        return
                    if recent(last) and not any(isinstance(ev, FinishEvent) for _, ev in group):
                        await hold(max(0.0, next_tick(last) - loop.time()))
                        group += take_rest()
                if last is None:
                    # the first token goes out alone even when the next ones were already
                    # waiting (a fast model outruns the loop's wake-up): the first chunk is the
                    # first token, and its time is the TTFT a client measures
                    k = next((n for n, (_, ev) in enumerate(group)
                              if isinstance(ev, TokenEvent) and (ev.text or ev.reasoning)),
                             len(group))
                    if k + 1 < len(group):
                        yield self._account(group[:k + 1])
                        group = group[k + 1:]
                last = loop.time()
                yield self._account(group)
        finally:
            for t in tasks:
                t.cancel()

    async def _before_deadline(self, waiting):
        if self.deadline is None:
            return await waiting
        try:
            return await asyncio.wait_for(waiting, max(0.0, self.deadline - time.monotonic()))
        except TimeoutError:
            raise RequestTimedOut(
                f"the request ran longer than the server's limit of "
                f"{self.ctx.settings.request_timeout_s:g} s (--request-timeout)") from None

    def _account(self, group: list) -> list:
        """Raise what a handle raised; note which choices finished."""
        for i, ev in group:
            if isinstance(ev, BaseException):
                raise ev
            if isinstance(ev, FinishEvent):
                self.finished.add(i)
        return group

    def _pump_all(self):
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, handle: RequestHandle) -> None:
            try:
                async for ev in handle:
                    queue.put_nowait((i, ev))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised where the events are awaited
                queue.put_nowait((i, exc))

        return queue, [asyncio.ensure_future(pump(i, h)) for i, h in enumerate(self.handles)]

    @staticmethod
    def _handle_takers(handle: RequestHandle):
        async def take_first() -> list:
            return [(0, ev) for ev in await handle.next_events()]

        def take_rest() -> list:
            return [(0, ev) for ev in handle.drain()]

        return take_first, take_rest

    @staticmethod
    def _queue_takers(queue: asyncio.Queue):
        def take_rest() -> list:
            out = []
            while not queue.empty():
                out.append(queue.get_nowait())
            return out

        async def take_first() -> list:
            return [await queue.get(), *take_rest()]

        return take_first, take_rest

    async def collect(self) -> list[ChoiceResult]:
        results = [ChoiceResult(index=i, prompt_index=i // self.n)
                   for i in range(len(self.handles))]
        async for i, ev in self.events():
            if isinstance(ev, TokenEvent):
                results[i].pieces.append(ev.text)
                if ev.reasoning:
                    results[i].reasoning_pieces.append(ev.reasoning)
            else:
                results[i].finish = ev
        return results

    async def collect_unless_gone(self, receive) -> list[ChoiceResult]:
        """collect(), but give up (and cancel) as soon as the client disconnects."""
        collector = asyncio.ensure_future(self.collect())
        watcher = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            done, _ = await asyncio.wait({collector, watcher},
                                         return_when=asyncio.FIRST_COMPLETED)
            if collector in done:
                return collector.result()
            raise ClientGone()
        finally:
            for t in (collector, watcher):
                if not t.done():
                    t.cancel()
            self.close()


async def _wait_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
