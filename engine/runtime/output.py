"""One request's output path: token id -> text -> reasoning / answer -> stop strings.

The engine thread calls `step()` with each sampled token. The detokenizer turns it into text,
the reasoning parser (chat requests to a model that has one) splits off the reasoning, and the
stop-string filter watches the answer only: a stop string inside the reasoning does not end the
reply (the reasoning is the model's scratch space; a stop string is about the answer). With no
parser every token is answer text, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engine.runtime.detokenizer import IncrementalDetokenizer, StopStringFilter
from engine.runtime.reasoning import ReasoningParser, Split
from engine.runtime.types import FinishEvent, GenerationRequest, SamplingParams

_PROMPT_TAIL_TOKENS = 8


@dataclass(frozen=True)
class TokenOutput:
    """What one token released, and whether the request ends with it."""

    text: str  # answer text
    reasoning: str = ""
    reasoning_tokens: int = 0
    finish: str | None = None  # "stop" or "length"
    stop_reason: str | int | None = None


def reasoning_parser_for(variant: Any, request: GenerationRequest,
                         prompt_ids: list[int]) -> ReasoningParser | None:
    """The request's parser: chat requests to a model with a reasoning parser get one, started
    inside the block when the rendered prompt opened it."""
    kind = getattr(variant.info, "reasoning_parser", None)
    if kind is None or request.messages is None:
        return None
    # this thread's own copy of the tokenizer (engine.runtime.prompting): no lock needed
    encoder = getattr(variant, "encoder", None)
    tok = encoder.thread_tokenizer() if encoder is not None else variant.tokenizer
    tail = tok.decode(prompt_ids[-_PROMPT_TAIL_TOKENS:], skip_special_tokens=False)
    return ReasoningParser(kind, tail)


class OutputProcessor:
    def __init__(self, tokenizer: Any, prompt_ids: list[int], params: SamplingParams,
                 stop_ids: frozenset[int], parser: ReasoningParser | None = None):
        self.detok = IncrementalDetokenizer(tokenizer, prompt_ids)
        self.stop = StopStringFilter(params.stop)
        self.stop_ids = stop_ids
        self.params = params
        self.parser = parser
        self.first_answer: float | None = None  # monotonic time of the first answer text
        self.first_reasoning: float | None = None
        self.last_reasoning: float | None = None

    @property
    def reasoning_tokens(self) -> int | None:
        """Tokens of the reasoning (tags included); None without a parser."""
        return None if self.parser is None else self.parser.reasoning_tokens

    def _split(self, delta: str, end: bool) -> Split:
        if self.parser is None:
            return Split(answer=delta)
        s = self.parser.feed(delta)
        if not end:
            return s
        f = self.parser.finish()
        return Split(s.reasoning + f.reasoning, s.answer + f.answer,
                     s.reasoning_tokens + f.reasoning_tokens)

    def step(self, tok: int, num_output: int, now: float) -> TokenOutput:
        """Process the request's `num_output`-th token, sampled at `now` (monotonic)."""
        finish = stop_reason = None
        if tok in self.stop_ids:
            split = self._split("", end=True)
            finish = "stop"
            stop_reason = tok if tok in self.params.stop_token_ids else None
        else:
            delta = self.detok.step(tok)
            split = self._split(delta, end=num_output >= self.params.max_tokens)
            if num_output >= self.params.max_tokens:
                finish = "length"
        text, hit = self.stop.feed(split.answer) if split.answer else ("", None)
        if hit is not None:
            finish, stop_reason = "stop", hit
        elif finish is not None:
            text += self.stop.flush()
        if split.reasoning or split.reasoning_tokens:
            self.first_reasoning = self.first_reasoning or now
            self.last_reasoning = now
        if text and self.first_answer is None:
            self.first_answer = now
        return TokenOutput(text, split.reasoning, split.reasoning_tokens, finish, stop_reason)

    def annotate(self, fin: FinishEvent, arrival_mono: float) -> FinishEvent:
        """`fin` with the reasoning token count and the answer / reasoning timings."""
        t = fin.timings
        if self.parser is None:  # all of it is answer: its first token is the first token
            return replace(fin, timings=replace(t, first_answer_s=t.ttft_s))
        first = None if self.first_answer is None else self.first_answer - arrival_mono
        spent = None if self.first_reasoning is None else \
            self.last_reasoning - self.first_reasoning
        return replace(fin, usage=replace(fin.usage, reasoning_tokens=self.reasoning_tokens),
                       timings=replace(t, first_answer_s=first, reasoning_s=spent))
