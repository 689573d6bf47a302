"""Request bodies of the OpenAI-compatible routes (pydantic), and their translation to engine params.

Ranges are declared on the fields so they appear in the OpenAPI schema and a bad value is a 400
naming the parameter. Parameters this engine cannot honour (logprobs, tools, suffix, best_of) are
refused with a 400 rather than silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..runtime.types import MODEL_DEFAULT_FIELDS, SamplingParams
from .errors import ApiError

MAX_STOP = 16
MAX_STOP_CHARS = 256  # each stop string is matched against the text after every token
MAX_MESSAGES = 1024  # each message is rendered through the chat template
MAX_SEED = 2**63 - 1


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class SamplingFields(BaseModel):
    """Fields shared by chat and text completions (OpenAI's, plus vLLM's usual extensions)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = Field(None, description="a loaded variant's id; default: the first")
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, description="0 or -1: off")
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=10.0)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = Field(None, max_length=64)
    ignore_eos: bool = False
    n: int = Field(1, ge=1, le=128)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        if len(stops) > MAX_STOP:
            raise ApiError(400, f"at most {MAX_STOP} stop sequences are allowed, got {len(stops)}",
                           param="stop")
        if any(s == "" for s in stops):
            raise ApiError(400, "stop sequences must not be empty strings", param="stop")
        longest = max(len(s) for s in stops) if stops else 0
        if longest > MAX_STOP_CHARS:
            raise ApiError(400, f"a stop sequence may have at most {MAX_STOP_CHARS} characters, "
                                f"got {longest}", param="stop")
        return tuple(stops)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def sampling(self, default_max_tokens: int, max_tokens: int | None = None,
                 seed_offset: int = 0, model_defaults: bool = True) -> SamplingParams:
        """The engine's parameters; with model_defaults, the fields this request leaves unset
        take the model's generation_config values at submit (as `generate` and vLLM do)."""
        top_k = self.top_k or 0
        seed = None if self.seed is None else (self.seed + seed_offset) % (MAX_SEED + 1)
        asked = max_tokens or self.max_tokens
        return SamplingParams(
            max_tokens=asked or default_max_tokens, max_tokens_fits=not asked,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=max(top_k, 0),
            min_p=self.min_p or 0.0,
            repetition_penalty=self.repetition_penalty or 1.0,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            seed=seed,
            stop=self.stop_tuple(),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
            model_defaults=tuple(f for f in MODEL_DEFAULT_FIELDS if getattr(self, f) is None)
            if model_defaults else (),
        )


_NO_LOGPROBS = "logprobs are not supported by this server"


def _refuse(*checks: tuple[str, Any, str]) -> None:
    """The first (param, value, message) whose value is set is a 400 naming that param: the
    OpenAI fields this server does not implement fail loudly instead of being ignored."""
    for param, value, message in checks:
        if value:
            raise ApiError(400, message, param=param)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[Any] | None = None
    tool_choice: Any | None = None
    response_format: dict[str, Any] | None = None

    def refuse_unsupported(self) -> None:
        text_only = (self.response_format or {}).get("type", "text") == "text"
        if len(self.messages) > MAX_MESSAGES:
            raise ApiError(400, f"at most {MAX_MESSAGES} messages are allowed, got "
                                f"{len(self.messages)}", param="messages")
        _refuse(("logprobs", self.logprobs, _NO_LOGPROBS),
                ("top_logprobs", self.top_logprobs is not None,
                 "top_logprobs is not supported by this server (no logprobs)"),
                ("tools", self.tools, "tools / function calling are not supported by this server"),
                ("response_format", not text_only,
                 "only response_format {\"type\": \"text\"} is supported"))

    def engine_messages(self) -> list[dict[str, str]]:
        """Messages as the chat template wants them: role + plain text content."""
        out = []
        for i, m in enumerate(self.messages):
            if m.content is None or isinstance(m.content, str):
                text = m.content or ""
            else:
                parts = []
                for j, part in enumerate(m.content):
                    if part.type != "text" or part.text is None:
                        raise ApiError(400, f"only text content parts are supported, got "
                                            f"'{part.type}'",
                                       param=f"messages.{i}.content.{j}.type")
                    parts.append(part.text)
                text = "".join(parts)
            out.append({"role": m.role, "content": text})
        return out

    def completion_budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)
    logprobs: int | None = Field(None, ge=0, le=5)

    def refuse_unsupported(self) -> None:
        _refuse(("logprobs", self.logprobs, _NO_LOGPROBS),
                ("suffix", self.suffix, "suffix (insertion) is not supported by this server"),
                ("best_of", self.best_of not in (None, self.n),
                 "best_of is not supported (leave it unset or equal to n)"))

    def prompts(self) -> list[str | list[int]]:
        """The batch of prompts: text, or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise ApiError(400, "prompt must not be empty", param="prompt")
        if all(isinstance(x, int) for x in p):
            if min(p) < 0:
                raise ApiError(400, "token ids must not be negative", param="prompt")
            return [list(p)]
        if all(isinstance(x, str) for x in p):
            return list(p)
        if all(isinstance(x, list) for x in p):
            if any(not x for x in p):
                raise ApiError(400, "a token-id prompt must not be empty", param="prompt")
            if min(min(x) for x in p) < 0:
                raise ApiError(400, "token ids must not be negative", param="prompt")
            return [list(x) for x in p]
        raise ApiError(400, "prompt must be a string, a list of strings, a list of token ids "
                            "or a list of lists of token ids", param="prompt")


class LegacyChatRequest(BaseModel):
    """The original console's POST /chat body."""

    model_config = ConfigDict(extra="ignore")
    prompt: str
    max_length: int = Field(128, ge=1, description="the most new tokens to generate")
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    model: str | None = None
