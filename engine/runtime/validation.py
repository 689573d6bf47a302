"""Checks a request before it is queued, so bad input fails at submit with a one-line error."""

from __future__ import annotations

import dataclasses
import math

from .types import (
    ContextLengthError,
    GenerationRequest,
    InvalidRequestError,
    SamplingParams,
)


def _num(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequestError(f"{name} must be a finite number, got {value!r}", param=name)
    return float(value)


def normalize_params(p: SamplingParams) -> SamplingParams:
    if isinstance(p.max_tokens, bool) or not isinstance(p.max_tokens, int) or p.max_tokens < 1:
        raise InvalidRequestError(f"max_tokens must be an integer >= 1, got {p.max_tokens!r}",
                                  param="max_tokens")
    if _num(p.temperature, "temperature") < 0:
        raise InvalidRequestError(f"temperature must be >= 0, got {p.temperature}",
                                  param="temperature")
    if not 0.0 < _num(p.top_p, "top_p") <= 1.0:
        raise InvalidRequestError(f"top_p must be in (0, 1], got {p.top_p}", param="top_p")
    top_k = p.top_k
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1:
        raise InvalidRequestError(f"top_k must be an integer >= 0 (or -1 for off), got {top_k!r}",
                                  param="top_k")
    if not 0.0 <= _num(p.min_p, "min_p") <= 1.0:
        raise InvalidRequestError(f"min_p must be in [0, 1], got {p.min_p}", param="min_p")
    if _num(p.repetition_penalty, "repetition_penalty") <= 0:
        raise InvalidRequestError(
            f"repetition_penalty must be > 0, got {p.repetition_penalty}",
            param="repetition_penalty")
    for name in ("presence_penalty", "frequency_penalty"):
        if not -2.0 <= _num(getattr(p, name), name) <= 2.0:
            raise InvalidRequestError(f"{name} must be in [-2, 2], got {getattr(p, name)}",
                                      param=name)
    if p.seed is not None and (isinstance(p.seed, bool) or not isinstance(p.seed, int)):
        raise InvalidRequestError(f"seed must be an integer, got {p.seed!r}", param="seed")
    stop = (p.stop,) if isinstance(p.stop, str) else tuple(p.stop or ())
    if not all(isinstance(s, str) for s in stop):
        raise InvalidRequestError("stop must be a string or a list of strings", param="stop")
    stop = tuple(s for s in stop if s)
    stop_ids = tuple(p.stop_token_ids or ())
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise InvalidRequestError("stop_token_ids must be integers", param="stop_token_ids")
    return dataclasses.replace(p, top_k=max(0, top_k), stop=stop, stop_token_ids=stop_ids)


def check_prompt_source(req: GenerationRequest) -> None:
    given = [n for n in ("prompt", "prompt_token_ids", "messages") if getattr(req, n) is not None]
    if len(given) != 1:
        raise InvalidRequestError(
            "give exactly one of prompt, prompt_token_ids or messages"
            + (f" (got {', '.join(given)})" if given else ""), param="prompt")
    if req.messages is not None:
        if not isinstance(req.messages, list) or not req.messages:
            raise InvalidRequestError("messages must be a non-empty list", param="messages")
        for m in req.messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise InvalidRequestError("each message needs a role and a content",
                                          param="messages")


def check_token_ids(ids: list[int], vocab_size: int) -> None:
    if not ids:
        raise InvalidRequestError("the prompt is empty", param="prompt")
    bad = next((t for t in ids if isinstance(t, bool) or not isinstance(t, int)
                or not 0 <= t < vocab_size), None)
    if bad is not None:
        raise InvalidRequestError(
            f"prompt token id {bad!r} is outside the vocabulary (0..{vocab_size - 1})",
            param="prompt_token_ids")


def check_prompt_fits(prompt_len: int, max_len: int) -> None:
    """The prompt alone must leave room for one token (checked before its ids are listed)."""
    if prompt_len >= max_len:
        raise ContextLengthError(
            f"This model's maximum context length is {max_len} tokens, but the prompt has "
            f"{prompt_len} tokens; shorten the prompt.", param="prompt")


def check_context(prompt_len: int, max_tokens: int, max_len: int) -> None:
    check_prompt_fits(prompt_len, max_len)
    if prompt_len + max_tokens > max_len:
        raise ContextLengthError(
            f"This model's maximum context length is {max_len} tokens. However, you requested "
            f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} for the "
            f"completion); reduce the prompt or max_tokens (at most {max_len - prompt_len}).",
            param="max_tokens")
