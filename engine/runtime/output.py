"""The output side of the engine: sampled token ids -> text -> events for the caller.

`OutputProcessor` is one request's path: token id -> text -> reasoning / answer -> stop strings.
`RequestOutputs` is the engine's: it holds every request's handle, turns each sampled token into
a `TokenEvent` and each ending into a `FinishEvent` with usage and timings, and delivers them.

The engine thread calls `OutputProcessor.step()` with each sampled token. The detokenizer turns it into text,
the reasoning parser (chat requests to a model that has one) splits off the reasoning, and the
stop-string filter watches the answer only: a stop string inside the reasoning does not end the
reply (the reasoning is the model's scratch space; a stop string is about the answer). With no
parser every token is answer text, as before.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from .detokenizer import IncrementalDetokenizer, StopStringFilter
from .reasoning import ReasoningParser, Split
from .sequence import Sequence
from .types import (
    Event,
    FinishEvent,
    GenerationRequest,
    RequestTimings,
    SamplingParams,
    TokenEvent,
    Usage,
)

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


def output_for(variant: Any, request: GenerationRequest, prompt_ids: list[int],
               params: SamplingParams) -> OutputProcessor:
    """A request's OutputProcessor (built on the caller's thread, with its tokenizer copy)."""
    stop_ids = frozenset(params.stop_token_ids) | (
        frozenset() if params.ignore_eos else variant.eos)
    return OutputProcessor(variant.tokenizer, prompt_ids, params, stop_ids,
                           reasoning_parser_for(variant, request, prompt_ids))


def finish_event(seq: Sequence, model: str, reason: str, error: str | None) -> FinishEvent:
    """The FinishEvent of `seq` ending now: usage and timings from what it recorded."""
    now = time.monotonic()
    times = seq.token_times
    n = len(seq.output_ids)
    ttft = times[0] - seq.arrival_mono if times else None
    e2e = now - seq.arrival_mono
    tpot = (times[-1] - times[0]) / (n - 1) if n > 1 else None
    itl = tuple(b - a for a, b in itertools.pairwise(times))
    queue = (seq.first_scheduled - seq.arrival_mono) if seq.first_scheduled else e2e
    timings = RequestTimings(arrival=seq.arrival, queue_s=queue, ttft_s=ttft, e2e_s=e2e,
                             tpot_s=tpot, itl_s=itl)
    return FinishEvent(seq.request_id, reason, Usage(len(seq.prompt_ids), n, seq.num_cached),
                       timings, model, error=error, stop_reason=seq.stop_reason)


class RequestOutputs:
    """Every open request's handle, and the events the engine thread sends them.

    `handles` is shared with callers under `lock` (the engine's); the rest runs on the engine
    thread. `metrics` (EngineMetrics) records each finish."""

    def __init__(self, lock: threading.Condition, metrics: Any):
        self._lock = lock
        self.metrics = metrics
        self.handles: dict[str, Any] = {}  # request id -> LocalRequestHandle
        self.finished: list[FinishEvent] = []  # since the last StepStats

    def take_finished(self) -> list[FinishEvent]:
        finished, self.finished = self.finished, []
        return finished

    def token(self, seq: Sequence, tok: int) -> tuple[str | None, list[Event]]:
        """Record `seq`'s new token. While the request goes on its TokenEvent is pushed now
        and (None, []) comes back; when the token ends it, (finish reason, events to send
        before the FinishEvent)."""
        now = time.monotonic()
        seq.output_ids.append(tok)
        seq.token_times.append(now)
        out = seq.extra["out"].step(tok, len(seq.output_ids), now)
        if out.stop_reason is not None:
            seq.stop_reason = out.stop_reason
        events: list[Event] = [TokenEvent(seq.request_id, out.text, (tok,), out.reasoning,
                                          out.reasoning_tokens)]
        if out.finish is None:
            handle = self.handles.get(seq.request_id)
            if handle is not None:
                handle._push(events)
            return None, []
        return out.finish, events

    def finish(self, seq: Sequence, model: str, reason: str, error: str | None = None,
               pre_events: list[Event] | None = None) -> FinishEvent:
        """End a request the scheduler held: its FinishEvent (after `pre_events`)."""
        seq.error = error
        fin = finish_event(seq, model, reason, error)
        if "out" in seq.extra:  # reasoning tokens, time to the first answer token
            fin = seq.extra["out"].annotate(fin, seq.arrival_mono)
        self._deliver(fin, (pre_events or []), failed=reason == "error")
        return fin

    def finish_unscheduled(self, seq: Sequence, model: str, reason: str, error: str) -> None:
        """End a request that never reached a scheduler (its model went away, a failed add)."""
        self._deliver(finish_event(seq, model, reason, error), [], failed=True)

    def _deliver(self, fin: FinishEvent, events: list[Event], failed: bool) -> None:
        self.metrics.record_finish(fin.timings, failed=failed)
        self.finished.append(fin)
        with self._lock:
            handle = self.handles.pop(fin.request_id, None)
        if handle is not None:
            handle._push(events + [fin])

    def abandon_all(self, reason: str, message: str) -> None:
        """End every handle still open (shutdown or a dead loop), whatever its state."""
        with self._lock:
            left, self.handles = list(self.handles.values()), {}
        for handle in left:  # still queued, or caught mid-step
            self.metrics.record_finish(handle._abandon(reason, message).timings, failed=True)
