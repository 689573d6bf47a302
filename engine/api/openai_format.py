"""Engine results -> OpenAI response objects and stream chunks (plain dicts / SSE bytes).

`timings` is an extra field (as llama.cpp's server adds one) on non-streaming responses and on the
final usage chunk: queue, time to first token, end to end, per-token time and decode speed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.types import FinishEvent
from .batch import ChoiceResult


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def usage_dict(results: list[ChoiceResult]) -> dict[str, Any]:
    """Prompt tokens count once per prompt (as OpenAI counts them for n > 1), completions all."""
    prompt = cached = 0
    seen: set[int] = set()
    completion = 0
    reasoning: int | None = None  # stays None (no details) unless a reasoning parser ran
    for r in results:
        if r.finish is None:
            continue
        if r.prompt_index not in seen:
            seen.add(r.prompt_index)
            prompt += r.finish.usage.prompt_tokens
            cached += r.finish.usage.cached_tokens
        completion += r.finish.usage.completion_tokens
        if r.finish.usage.reasoning_tokens is not None:
            reasoning = (reasoning or 0) + r.finish.usage.reasoning_tokens
    out = {"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": cached}}
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def chat_message(r: ChoiceResult) -> dict[str, Any]:
    """The assistant message; `reasoning_content` (vLLM's name) only when there was reasoning."""
    message: dict[str, Any] = {"role": "assistant", "content": r.text}
    if r.reasoning:
        message["reasoning_content"] = r.reasoning
    return message


def timings_dict(finishes: list[FinishEvent]) -> dict[str, Any]:
    """One request's timings, or for n > 1 the span of all of them (first token, last end)."""
    if not finishes:
        return {}
    ttfts = [f.timings.ttft_s for f in finishes if f.timings.ttft_s is not None]
    e2e = max(f.timings.e2e_s for f in finishes)
    predicted = sum(f.usage.completion_tokens for f in finishes)
    ttft = min(ttfts) if ttfts else None
    decode_s = e2e - ttft if ttft is not None else None
    if len(finishes) == 1:
        tpot = finishes[0].timings.tpot_s
    else:
        tpot = None
    per_s = None
    if decode_s and decode_s > 0 and predicted > len(finishes):
        per_s = round((predicted - len(finishes)) / decode_s, 3)
    return {
        "queue_ms": _ms(max(f.timings.queue_s for f in finishes)),
        "ttft_ms": _ms(ttft),
        "e2e_ms": _ms(e2e),
        "tpot_ms": _ms(tpot),
        "prompt_n": sum(f.usage.prompt_tokens for f in finishes),
        "cached_n": sum(f.usage.cached_tokens for f in finishes),
        "predicted_n": predicted,
        "predicted_per_second": per_s,
    }


def public_finish_reason(finish: FinishEvent | None) -> str | None:
    return None if finish is None else finish.finish_reason


def chat_response(rid: str, model: str, results: list[ChoiceResult]) -> dict[str, Any]:
    return _response(rid, "chat.completion", model, results, "message", chat_message)


def completion_response(rid: str, model: str, results: list[ChoiceResult],
                        echo_prompts: list[str] | None = None) -> dict[str, Any]:
    def text(r: ChoiceResult) -> str:
        prefix = echo_prompts[r.prompt_index] if echo_prompts else ""
        return prefix + r.text

    return _response(rid, "text_completion", model, results, "text", text)


def _response(rid: str, obj: str, model: str, results: list[ChoiceResult], key: str,
              content: Callable[[ChoiceResult], Any]) -> dict[str, Any]:
    """The non-streaming body both endpoints share; a choice differs only in its `key`
    ("message" for chat, "text" for completions) and what `content` gives for it."""
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [{
            "index": r.index,
            key: content(r),
            "logprobs": None,
            "finish_reason": public_finish_reason(r.finish),
            "stop_reason": r.finish.stop_reason if r.finish else None,
        } for r in results],
        "usage": usage_dict(results),
        "timings": timings_dict([r.finish for r in results if r.finish]),
    }


@dataclass
class ChunkWriter:
    """Encodes stream chunks. The fixed part of each chunk is formatted once per stream, so a
    token costs one json.dumps of its text: this is the hot path of streaming."""

    rid: str
    model: str
    chat: bool
    include_usage: bool

    def __post_init__(self) -> None:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        self.created = int(time.time())
        head = {"id": self.rid, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None}
        self._head = json.dumps(head, separators=(",", ":"))[:-1]  # without the closing brace
        self._tail = ',"usage":null}' if self.include_usage else "}"

    def _encode(self, choice: str) -> bytes:
        return b"data: " + (self._head + ',"choices":[' + choice + "]" + self._tail).encode() \
            + b"\n\n"

    def role(self, index: int) -> bytes:
        return self._encode(f'{{"index":{index},"delta":{{"role":"assistant","content":""}},'
                            f'"logprobs":null,"finish_reason":null}}')

    def text(self, index: int, text: str) -> bytes:
        t = json.dumps(text, ensure_ascii=False)
        if self.chat:
            return self._encode(f'{{"index":{index},"delta":{{"content":{t}}},'
                                f'"logprobs":null,"finish_reason":null}}')
        return self._encode(f'{{"index":{index},"text":{t},"logprobs":null,'
                            f'"finish_reason":null}}')

    def reasoning(self, index: int, reasoning: str, text: str = "") -> bytes:
        """A chat delta with reasoning_content (and the answer text that followed it in the
        same chunk, if any)."""
        r = json.dumps(reasoning, ensure_ascii=False)
        t = f',"content":{json.dumps(text, ensure_ascii=False)}' if text else ""
        return self._encode(f'{{"index":{index},"delta":{{"reasoning_content":{r}{t}}},'
                            f'"logprobs":null,"finish_reason":null}}')

    def finish(self, index: int, finish: FinishEvent) -> bytes:
        reason = json.dumps(finish.finish_reason)
        stop = json.dumps(finish.stop_reason)
        if self.chat:
            return self._encode(f'{{"index":{index},"delta":{{}},"logprobs":null,'
                                f'"finish_reason":{reason},"stop_reason":{stop}}}')
        return self._encode(f'{{"index":{index},"text":"","logprobs":null,'
                            f'"finish_reason":{reason},"stop_reason":{stop}}}')

    def usage(self, results: list[ChoiceResult]) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        body = {"id": self.rid, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None, "choices": [], "usage": usage_dict(results),
                "timings": timings_dict([r.finish for r in results if r.finish])}
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

    @staticmethod
    def error(message: str, error_type: str = "server_error", code: str | None = None) -> bytes:
        body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
