"""The engine requests behind one HTTP request (n choices for each prompt), started and awaited
together, and cancelled together when the client leaves or the server stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from engine.api.context import ApiContext
from engine.runtime.types import (
    EngineError,
    Event,
    FinishEvent,
    GenerationRequest,
    RequestHandle,
    TokenEvent,
)


@dataclass
class ChoiceResult:
    index: int
    prompt_index: int
    pieces: list[str] = field(default_factory=list)
    finish: FinishEvent | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


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

    def submit(self) -> None:
        """Submit every request; if one is refused, take back the ones already queued."""
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
        if len(self.handles) == 1:
            async for ev in self.handles[0]:
                if isinstance(ev, FinishEvent):
                    self.finished.add(0)
                yield 0, ev
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, handle: RequestHandle) -> None:
            try:
                async for ev in handle:
                    queue.put_nowait((i, ev))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised where the events are awaited
                queue.put_nowait((i, exc))

        tasks = [asyncio.ensure_future(pump(i, h)) for i, h in enumerate(self.handles)]
        try:
            while len(self.finished) < len(self.handles):
                i, ev = await queue.get()
                if isinstance(ev, BaseException):
                    raise ev
                if isinstance(ev, FinishEvent):
                    self.finished.add(i)
                yield i, ev
        finally:
            for t in tasks:
                t.cancel()

    async def collect(self) -> list[ChoiceResult]:
        results = [ChoiceResult(index=i, prompt_index=i // self.n)
                   for i in range(len(self.handles))]
        async for i, ev in self.events():
            if isinstance(ev, TokenEvent):
                results[i].pieces.append(ev.text)
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
