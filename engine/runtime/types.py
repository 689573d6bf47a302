"""Data that crosses the engine boundary: requests in, events out.

Everything a caller (GUI, HTTP API, CLI, benchmarks) hands to or gets from an `EngineClient` is
defined here, as plain dataclasses, so that every front end and the remote client agree on one
contract.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

_ids = itertools.count(1)


def new_request_id(prefix: str = "req") -> str:
    return f"{prefix}-{next(_ids)}-{int(time.time() * 1000) % 100000}"


# ----------------------------------------------------------------------------- errors


class EngineError(Exception):
    """Base of every error the engine reports to callers; `http_status` is what the API returns."""

    http_status = 500
    error_type = "server_error"

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class Cancelled(EngineError):
    """The caller cancelled (a Job, a cancel event): the one cancellation exception of the
    engine (model loads, GGUF conversion, quantization, console jobs). Nothing it started stays
    allocated or written."""

    error_type = "cancelled"

    def __init__(self, message: str = "cancelled", param: str | None = None):
        super().__init__(message, param)


class InvalidRequestError(EngineError):
    """A parameter is out of range or the prompt does not fit; `param` names it."""

    http_status = 400
    error_type = "invalid_request_error"


class ContextLengthError(InvalidRequestError):
    """Prompt (+ max_tokens) exceeds the model's context; the message carries both numbers."""


class ModelNotFoundError(EngineError):
    http_status = 404
    error_type = "not_found_error"


class QueueFullError(EngineError):
    """The waiting queue is at capacity; retry later (HTTP 429 with Retry-After)."""

    http_status = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NoModelLoadedError(EngineError):
    """No model is ready (none loaded, or one is loading): HTTP 503."""

    http_status = 503
    error_type = "service_unavailable"


class EngineStoppedError(EngineError):
    http_status = 503
    error_type = "service_unavailable"


# ----------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding settings; temperature 0 means greedy."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    # max_tokens is a default the caller did not ask for (an API request without max_tokens):
    # shrink it to what the context leaves after the prompt instead of refusing the request
    max_tokens_fits: bool = False
    # fields (of MODEL_DEFAULT_FIELDS) the caller left unset: each takes the model's own
    # default from its generation_config.json, where it has one (vLLM's --generation-config auto)
    model_defaults: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1


# the fields a model's generation_config.json may set for requests that leave them unset
MODEL_DEFAULT_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


@dataclass
class GenerationRequest:
    """What a caller submits. Exactly one of prompt / prompt_token_ids / messages is set.

    `messages` ([{"role": ..., "content": ...}]) goes through the model's chat template.
    `model` names a loaded variant; None means the default (first loaded) one.
    """

    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    model: str | None = None
    request_id: str = field(default_factory=new_request_id)
    add_special_tokens: bool = True


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    # completion tokens of the reasoning (<think> block, tags included); None when the request
    # had no reasoning parser (engine.runtime.reasoning)
    reasoning_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class RequestTimings:
    """Per-request timings in seconds, named as vLLM's serving benchmark names them.

    ttft: arrival -> first token; tpot: (e2e - ttft) / (completion_tokens - 1);
    itl: gaps between consecutive token events; queue: arrival -> first scheduled.
    """

    arrival: float  # time.time() at submit
    queue_s: float
    ttft_s: float | None
    e2e_s: float
    tpot_s: float | None
    itl_s: tuple[float, ...] = ()
    # arrival -> first token of the answer (after the reasoning); equals ttft_s for requests
    # without a reasoning parser, None if the answer never started
    first_answer_s: float | None = None
    reasoning_s: float | None = None  # first to last reasoning token (None: no reasoning)

    @property
    def decode_tokens_per_s(self) -> float | None:
        return 1.0 / self.tpot_s if self.tpot_s else None


FinishReason = Literal["stop", "length", "cancelled", "error"]


@dataclass(frozen=True)
class TokenEvent:
    """New text for one request. `text` is UTF-8 safe and never contains (part of) a stop string.

    `text` is the answer; with a reasoning parser the reasoning (the <think> block, without the
    tags) arrives in `reasoning`, and `reasoning_tokens` counts the tokens newly known to be
    reasoning (their sum is Usage.reasoning_tokens)."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    reasoning: str = ""
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class FinishEvent:
    """Last event of every request, whatever happened to it."""

    request_id: str
    finish_reason: FinishReason
    usage: Usage
    timings: RequestTimings
    model: str
    error: str | None = None  # message when finish_reason == "error"
    stop_reason: str | int | None = None  # the stop string / token id that ended it


Event = TokenEvent | FinishEvent


@dataclass(frozen=True)
class Completion:
    """A request's collected result (RequestHandle.result())."""

    request_id: str
    text: str
    token_ids: tuple[int, ...]
    finish: FinishEvent
    reasoning: str = ""  # the reasoning, apart from the answer in `text`


# ----------------------------------------------------------------------------- models and stats


@dataclass(frozen=True)
class ModelInfo:
    """One loaded variant."""

    name: str  # the id requests use ("demo", "demo-w8a8", ...)
    path: str
    architecture: str
    dtype: str  # torch dtype name of the float parts
    quantization: str | None  # None, "w8a16", "w8a8-dynamic", "w8a8-static"
    device: str
    max_context: int
    num_parameters: int
    weight_bytes: int
    kv_bytes: int
    path_kind: str  # "batched" (our runner) or "fallback" (generic HF forward)
    created: float
    # what runs the float products of decode steps: "native" (engine.runtime.cpu_linear) or
    # "torch"; quantized layers report their kernels through the quantization backend
    linear_kernels: str = "torch"
    # what runs steps made only of decode rows: "native" (every layer in one call,
    # engine.runtime.native_decode) or "torch" (the runner's PyTorch loop)
    decode_step: str = "torch"
    # "" on the batched path; else why not, e.g. "runs unbatched: no native support for X"
    unbatched_reason: str = ""
    # what runs the int8 layers, e.g. "native-avx512-vnni", "native-avx2" or "fbgemm" (several
    # joined by "+"); "" if none
    int8_kernels: str = ""
    # the preallocated KV cache's dtype ("float16", "float32", ...); "" where none is (the
    # unbatched path, a remote model)
    kv_dtype: str = ""
    # the system prompt the chat template adds when a conversation has none (shown, editable)
    default_system_prompt: str | None = None
    # the model's sampling defaults (generation_config.json), as (field, value) pairs
    sampling_defaults: tuple[tuple[str, float], ...] = ()
    # the reasoning parser chat requests get ("deepseek_r1", "qwen3"), None for none
    reasoning_parser: str | None = None


@dataclass(frozen=True)
class EngineStats:
    """Snapshot of the engine, cheap to take (no torch calls)."""

    state: Literal["idle", "loading", "ready", "stopped", "error"]
    running: int
    waiting: int
    max_running: int
    max_waiting: int
    kv_used_tokens: int
    kv_total_tokens: int
    prefix_hit_rate: float  # cached prompt tokens / prompt tokens, over the recent window
    prompt_tokens_per_s: float  # over the recent window
    generation_tokens_per_s: float
    steps: int
    requests_finished: int
    requests_failed: int
    models: tuple[str, ...]
    loading: str | None = None  # what is loading, if anything
    last_error: str | None = None

    @property
    def kv_usage(self) -> float:
        return self.kv_used_tokens / self.kv_total_tokens if self.kv_total_tokens else 0.0


# ----------------------------------------------------------------------------- the client contract


class RequestHandle(Protocol):
    """What submit() returns: one request's event stream plus cancel."""

    request_id: str

    def __iter__(self) -> Iterator[Event]:
        """Blocking iteration over events; ends after the FinishEvent."""

    def __aiter__(self) -> AsyncIterator[Event]:
        """Async iteration (no busy-waiting) on the running asyncio loop."""

    async def next_events(self) -> list[Event]:
        """Wait for at least one event and take every buffered one (empty once finished)."""

    def drain(self) -> list[Event]:
        """Take the buffered events without waiting."""

    def cancel(self) -> None: ...

    def result(self, timeout: float | None = None) -> Completion:
        """Block until finished and return the collected text."""


class EngineClient(Protocol):
    """The one facade every front end uses; thread-safe. Local and remote engines implement it."""

    def submit(self, request: GenerationRequest) -> RequestHandle:
        """Validate and enqueue; raises InvalidRequestError, ContextLengthError,
        ModelNotFoundError, QueueFullError or NoModelLoadedError at once."""

    def cancel(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    def models(self) -> list[ModelInfo]: ...

    def shutdown(self, timeout: float = 5.0) -> None: ...
