"""Reading an OpenAI-style server-sent event stream: `data: {json}` events ending in [DONE]."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx


class StreamEnd(Exception):
    pass


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """JSON payloads of the `data:` events, in order, until [DONE] or the end of the body.

    Comment lines (`: keep-alive`) and other fields are skipped; multi-line data is joined as the
    SSE format says. A payload that is not JSON is reported as {"error": {"message": ...}}.
    """
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                payload = "\n".join(data)
                data = []
                if payload.strip() == "[DONE]":
                    return
                yield _parse(payload)
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value.removeprefix(" "))
    if data:  # a server that closes without the blank line after its last event
        payload = "\n".join(data)
        if payload.strip() != "[DONE]":
            yield _parse(payload)


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
    """(message, param, code) from an OpenAI-shaped error body (or whatever the server sent)."""
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
