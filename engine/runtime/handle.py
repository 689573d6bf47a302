"""Caller-side objects: the per-request event stream and the future-like model-loading Job.

Both are filled by the engine (or loader) thread and read from any thread or asyncio loop. Plain
threads block on a Condition; asyncio consumers register a waker that the producer fires with
`loop.call_soon_threadsafe`, so nobody polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from .types import (
    Completion,
    EngineError,
    Event,
    FinishEvent,
    RequestTimings,
    TokenEvent,
    Usage,
)

log = logging.getLogger(__name__)

_batch = threading.local()


@contextlib.contextmanager
def batched_wakeups() -> Iterator[None]:
    """Hold back asyncio wake-ups made on this thread until the block ends, then wake each
    event loop once.

    The engine pushes one token to every running request per step. Waking the loop of each
    consumer per push costs a self-pipe write each, and every wake makes that loop's thread
    compete with the engine thread for the GIL while the engine is still distributing the
    step's tokens; one wake per loop per step lets it take all of them in a single turn.
    """
    if getattr(_batch, "pending", None) is not None:  # nested: the outer block flushes
        yield
        return
    _batch.pending = pending = {}
    try:
        yield
    finally:
        _batch.pending = None
        for loop, futs in pending.items():
            try:
                loop.call_soon_threadsafe(_resolve_all, futs)
            except RuntimeError:  # loop closed: its consumers are gone
                pass


class _Waiters:
    """Thread-safe buffer with blocking and asyncio wake-ups."""

    def __init__(self):
        self._cond = threading.Condition()
        self._async: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    def _wake(self) -> None:
        # caller holds self._cond
        self._cond.notify_all()
        waiters, self._async = self._async, []
        pending = getattr(_batch, "pending", None)
        for loop, fut in waiters:
            if pending is not None:
                pending.setdefault(loop, []).append(fut)
                continue
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # loop closed: its consumer is gone
                pass


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _resolve_all(futs: list[asyncio.Future]) -> None:
    for fut in futs:
        _resolve(fut)


class LocalRequestHandle(_Waiters):
    """One request's events. Iterate once (sync or async), or call result()."""

    def __init__(self, request_id: str, model: str, cancel_fn: Callable[[str], None]):
        super().__init__()
        self.request_id = request_id
        self.model = model
        self._cancel_fn = cancel_fn
        self._buf: deque[Event] = deque()
        self._finish: FinishEvent | None = None
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._ids: list[int] = []
        self._callbacks: list[Callable[[list[Event]], None]] = []
        self._finish_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        # result() waits on this, not on the condition that every token push notifies: a
        # waiter there was woken once a step to find nothing to do, taking a core from the
        # step's threads and the GIL from the engine thread
        self._finished = threading.Event()

    # ---------------------------------------------------------------- producer (engine thread)
    def _push(self, events: list[Event]) -> None:
        with self._cond:
            for ev in events:
                if isinstance(ev, TokenEvent):
                    self._text.append(ev.text)
                    if ev.reasoning:
                        self._reasoning.append(ev.reasoning)
                    self._ids.extend(ev.token_ids)
                else:
                    self._finish = ev
            self._buf.extend(events)
            callbacks = list(self._callbacks)
            self._wake()
            if self._finish is not None:
                self._finished.set()
                finish_waiters, self._finish_waiters = self._finish_waiters, []
                for loop, fut in finish_waiters:
                    try:
                        loop.call_soon_threadsafe(_resolve, fut)
                    except RuntimeError:  # loop closed: its consumer is gone
                        pass
        for cb in callbacks:
            try:
                cb(events)
            except Exception:  # a consumer's bug must not stop the engine
                log.exception("request event callback failed")

    def _abandon(self, reason: str, message: str) -> FinishEvent:
        """End a request the engine can no longer run (it stopped, or its loop died)."""
        with self._cond:
            produced = len(self._ids)
        fin = FinishEvent(self.request_id, reason, Usage(0, produced),
                          RequestTimings(arrival=time.time(), queue_s=0.0, ttft_s=None,
                                         e2e_s=0.0, tpot_s=None), self.model, error=message)
        self._push([fin])
        return fin

    # ---------------------------------------------------------------- consumers
    def add_callback(self, fn: Callable[[list[Event]], None]) -> None:
        """Call `fn(events)` on the producing thread as events arrive (keep it short); events
        already produced are delivered at once, on this thread, before any later ones (the
        producer waits for the lock this holds)."""
        with self._cond:
            self._callbacks.append(fn)
            past = list(self._buf)
            if past:
                fn(past)

    @property
    def done(self) -> bool:
        return self._finish is not None

    def cancel(self) -> None:
        self._cancel_fn(self.request_id)

    def __iter__(self) -> Iterator[Event]:
        while True:
            with self._cond:
                while not self._buf:
                    self._cond.wait()
                ev = self._buf.popleft()
            yield ev
            if isinstance(ev, FinishEvent):
                return

    def drain(self) -> list[Event]:
        """Every event buffered so far, without waiting (the iteration's events, taken in bulk;
        use one or the other)."""
        with self._cond:
            events = list(self._buf)
            self._buf.clear()
        return events

    async def next_events(self) -> list[Event]:
        """Wait (on the running loop) for at least one event, then take all that are buffered.
        Empty only after the FinishEvent was taken."""
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._buf or (self._finish is not None):
                    events = list(self._buf)
                    self._buf.clear()
                    return events
                fut = loop.create_future()
                self._async.append((loop, fut))
            await fut

    async def wait_finish(self, timeout: float) -> None:
        """Sleep `timeout` seconds on the running loop, or less if the request finishes
        first. A stream that writes on a time grid waits with this, so that its last chunk
        (which a client's next request waits for) never waits for the grid's next tick."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._cond:
            if self._finish is not None:
                return
            self._finish_waiters.append((loop, fut))
        timer = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            with self._cond:
                if (loop, fut) in self._finish_waiters:
                    self._finish_waiters.remove((loop, fut))

    async def _aiter(self) -> AsyncIterator[Event]:
        while True:
            events = await self.next_events()
            if not events:
                return
            for ev in events:
                yield ev
                if isinstance(ev, FinishEvent):
                    return

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._aiter()

    def result(self, timeout: float | None = None) -> Completion:
        if not self._finished.wait(timeout):
            raise TimeoutError(f"request {self.request_id} did not finish in {timeout} s")
        with self._cond:
            return Completion(self.request_id, "".join(self._text), tuple(self._ids),
                              self._finish, "".join(self._reasoning))

    async def aresult(self) -> Completion:
        async for _ in self:
            pass
        return self.result(0)


class Job(_Waiters):
    """A long operation (model load): progress callbacks, cancel, result()."""

    def __init__(self, description: str):
        super().__init__()
        self.description = description
        self.progress = 0.0
        self.message = ""
        self._cancelled = threading.Event()
        self._done = False
        self._result: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[float, str], None]] = []

    def add_progress_callback(self, fn: Callable[[float, str], None]) -> None:
        """`fn(fraction, message)`, called on the worker thread, and once now with the
        progress so far. That first call is made under the lock the worker reports under, so
        a report cannot reach `fn` before it: called after the lock, it once came after the
        worker's newer reports, and the console's load bar went from 19 % back to 2 %."""
        with self._cond:
            self._callbacks.append(fn)
            fn(self.progress, self.message)

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def done(self) -> bool:
        return self._done

    # worker side
    def _report(self, fraction: float, message: str) -> None:
        with self._cond:
            self.progress, self.message = fraction, message
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb(fraction, message)
            except Exception:
                log.exception("job progress callback failed")

    def _finish(self, result: Any = None, error: BaseException | None = None) -> None:
        with self._cond:
            self._result, self._error, self._done = result, error, True
            self._wake()
        if error is None:
            self._report(1.0, "done")

    def result(self, timeout: float | None = None) -> Any:
        with self._cond:
            if not self._cond.wait_for(lambda: self._done, timeout):
                raise TimeoutError(f"{self.description} still running after {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.result(timeout)
        except EngineError as exc:
            return exc
        except TimeoutError:
            raise
        except Exception as exc:  # noqa: BLE001
            return exc
        return None

    def __await__(self):
        return self._wait_async().__await__()

    async def _wait_async(self):
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._done:
                    break
                fut = loop.create_future()
                self._async.append((loop, fut))
            await fut
        return self.result(0)
