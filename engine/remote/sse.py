"""Reading an OpenAI-style server-sent event stream: `data: {json}` events ending in [DONE]."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx


class StreamEnd(Exception):
    pass


MAX_LINE_BYTES = 1 << 20  # one SSE line (a chunk is ~200 bytes; a server is not trusted)
MAX_EVENT_BYTES = 1 << 20  # one event's data lines together
MAX_ERROR_BYTES = 64 << 10  # what is read of an error answer's body
MAX_MESSAGE_CHARS = 500  # an error message as shown to the user


class _LineSplitter:
    """Bytes in, lines out (CR, LF or CRLF ends); `over` once a line grows past MAX_LINE_BYTES
    (httpx's own line readers would buffer it whole). Shared by the async and sync readers."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, piece: bytes) -> list[str]:
        self.buf += piece
        out = []
        while True:
            ends = [i for i in (self.buf.find(b"\n"), self.buf.find(b"\r")) if i >= 0]
            if not ends:
                break
            cut = min(ends)
            if self.buf[cut:cut + 1] == b"\r" and cut + 1 == len(self.buf):
                break  # a CR at the end of a piece: its LF may be in the next one
            line = bytes(self.buf[:cut])
            step = 2 if self.buf[cut:cut + 2] == b"\r\n" else 1
            del self.buf[:cut + step]
            out.append(line.decode("utf-8", "replace"))
        return out

    @property
    def over(self) -> bool:
        return len(self.buf) > MAX_LINE_BYTES

    def rest(self) -> list[str]:
        return [bytes(self.buf).rstrip(b"\r").decode("utf-8", "replace")] if self.buf else []


async def _lines(response: httpx.Response) -> AsyncIterator[str | None]:
    """The body's lines; None, then the end, when a line grows past MAX_LINE_BYTES."""
    split = _LineSplitter()
    async for piece in response.aiter_bytes():
        for line in split.feed(piece):
            yield line
        if split.over:
            yield None
            return
    for line in split.rest():
        yield line


def capped_lines(response: httpx.Response) -> Iterator[str | None]:
    """The sync twin of _lines (the admin client reads job events on a worker thread)."""
    split = _LineSplitter()
    for piece in response.iter_bytes():
        yield from split.feed(piece)
        if split.over:
            yield None
            return
    yield from split.rest()


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """JSON payloads of the `data:` events, in order, until [DONE] or the end of the body.

    Comment lines (`: keep-alive`) and other fields are skipped; multi-line data is joined as the
    SSE format says. A payload that is not JSON is reported as {"error": {"message": ...}}, and
    so is a line or an event over its size cap, which ends the stream.
    """
    data: list[str] = []
    size = 0
    async for line in _lines(response):
        if line is None:
            yield {"error": {"message": f"stream line over {MAX_LINE_BYTES} bytes: the server "
                                        "is not sending server-sent events"}}
            return
        if line == "":
            if data:
                payload = "\n".join(data)
                data, size = [], 0
                if payload.strip() == "[DONE]":
                    return
                yield _parse(payload)
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            size += len(value)
            if size > MAX_EVENT_BYTES:
                yield {"error": {"message": f"stream event over {MAX_EVENT_BYTES} bytes"}}
                return
            data.append(value.removeprefix(" "))
    if data:  # a server that closes without the blank line after its last event
        payload = "\n".join(data)
        if payload.strip() != "[DONE]":
            yield _parse(payload)


async def read_capped(response: httpx.Response, limit: int = MAX_ERROR_BYTES) -> bytes:
    """At most `limit` bytes of a body (an error answer): the rest is never read."""
    out = bytearray()
    async for piece in response.aiter_bytes():
        out += piece
        if len(out) >= limit:
            break
    return bytes(out[:limit])


def read_capped_sync(response: httpx.Response, limit: int) -> bytes | None:
    """The whole body if it is at most `limit` bytes, else None (the rest is never read)."""
    out = bytearray()
    for piece in response.iter_bytes():
        out += piece
        if len(out) > limit:
            return None
    return bytes(out)


def _short(text: str) -> str:
    """One line of at most MAX_MESSAGE_CHARS: a server's message goes into the GUI as it is."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MAX_MESSAGE_CHARS else flat[:MAX_MESSAGE_CHARS - 3] + "..."


def _parse(payload: str) -> dict[str, Any]:
    try:
        obj = json.loads(payload)
    except json.JSONDecodeError:
        return {"error": {"message": f"unreadable stream event: {payload[:120]!r}"}}
    return obj if isinstance(obj, dict) else {"error": {"message": "stream event is not an object"}}


def chunk_text(chunk: dict[str, Any]) -> tuple[str, str | None, Any]:
    """(text, finish_reason, stop_reason) of the first choice of a completion or chat chunk."""
    choices = chunk.get("choices") or []
    if not choices:
        return "", None, None
    c = choices[0]
    if "delta" in c:
        text = (c.get("delta") or {}).get("content") or ""
    else:
        text = c.get("text") or ""
    return text, c.get("finish_reason"), c.get("stop_reason")


def chunk_reasoning(chunk: dict[str, Any]) -> str:
    """The reasoning text of the first choice of a chat chunk: vLLM's `reasoning_content`, or
    `reasoning` (the name newer vLLM releases and some other servers use)."""
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    part = choices[0].get("delta") or choices[0].get("message") or {}
    if not isinstance(part, dict):
        return ""
    value = part.get("reasoning_content") or part.get("reasoning") or ""
    return value if isinstance(value, str) else ""


def reasoning_tokens(usage: Any) -> int | None:
    """usage.completion_tokens_details.reasoning_tokens, None when the server sent none."""
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def error_message(body: Any, status: int | None = None) -> tuple[str, str | None, str | None]:
    """(message, param, code) from an OpenAI-shaped error body (or whatever the server sent),
    each cut to one short line."""
    message, param, code = _error_parts(body, status)
    return (_short(message),
            None if param is None else _short(param)[:100],
            None if code is None else _short(code)[:100])


def _error_parts(body: Any, status: int | None) -> tuple[str, Any, Any]:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or json.dumps(err)[:300]
            return str(msg), err.get("param"), err.get("code")
        if isinstance(err, str):
            return err, None, None
        if "detail" in body:
            return str(body["detail"])[:300], None, None
    text = str(body)[:300] if body else ""
    return text or f"HTTP {status}", None, None
