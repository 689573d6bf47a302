"""Server-sent events: the wire format and a response that notices a client leaving.

Starlette only watches for a disconnect while streaming on ASGI spec < 2.4; on 2.4 it learns of it
from the next failed write, which never comes while a request waits in the engine queue. This
response always listens, so a client that hangs up frees its engine slot at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

DONE = b"data: [DONE]\n\n"


def sse_data(payload: dict[str, Any] | str) -> bytes:
    """One `data:` event; JSON is compact and kept on one line (json never emits raw newlines)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"),
                                                               ensure_ascii=False)
    return b"data: " + text.encode() + b"\n\n"


class SSEResponse(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], headers: dict[str, str] | None = None,
                 write_timeout_s: float | None = None):
        base = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(content, headers={**base, **(headers or {})},
                         media_type=self.media_type)
        # a client that stops reading fills the socket buffers and then every write waits:
        # past this deadline for one write the stream ends and its generator's cleanup runs
        self.write_timeout_s = write_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # plain asyncio (uvicorn runs on it): anyio's task group would import its backend on
        # the first stream, a pause that a burst of clients notices
        streamer = asyncio.ensure_future(self._stream_quietly(send))
        watcher = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait({streamer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (streamer, watcher):
                task.cancel()
            await asyncio.gather(streamer, watcher, return_exceptions=True)
            # a cancelled body iterator is only closed when collected; close it now so its
            # `finally` (engine cancel) runs before we return
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _stream_quietly(self, send: Send) -> None:
        timeout = self.write_timeout_s

        async def send_in_time(message) -> None:
            async with asyncio.timeout(timeout):  # no task per write, unlike wait_for
                await send(message)

        try:
            await self.stream_response(send_in_time if timeout else send)
        except OSError:  # TimeoutError is one too: a write that did not go out in time
            pass  # the client is gone; the generator's cleanup cancels the request
