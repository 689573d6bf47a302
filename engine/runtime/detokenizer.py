"""Incremental detokenization and stop strings.

Decoding tokens one at a time breaks words (SentencePiece drops a leading space at the start of a
decode) and UTF-8 characters split across byte tokens. So each step decodes a short window that
starts a few tokens back, emits only what the window added, and holds the text while it ends in
U+FFFD (an incomplete character). `StopStringFilter` then holds back any tail that could still grow
into a stop string, so a stop string never leaks, not even in part.
"""

from __future__ import annotations

from typing import Any

_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, prompt_ids: list[int], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = list(prompt_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip)

    def step(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full_text = self._decode(self.ids[self.prefix_offset:])
        if len(full_text) > len(prefix_text) and not full_text.endswith("\ufffd"):
            delta = full_text[len(prefix_text):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            # keep the window short: only the context tokens are needed again
            if self.prefix_offset > 64:
                drop = self.prefix_offset
                self.ids = self.ids[drop:]
                self.prefix_offset -= drop
                self.read_offset -= drop
            return delta
        return ""


class StopStringFilter:
    """Feed text deltas; get back what is safe to show and the stop string once one appears."""

    def __init__(self, stops: tuple[str, ...] | list[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, delta: str) -> tuple[str, str | None]:
        if not self.stops:
            return delta, None
        buf = self.pending + delta
        first, which = -1, None
        for s in self.stops:
            i = buf.find(s)
            if i != -1 and (first == -1 or i < first):
                first, which = i, s
        if which is not None:
            self.pending = ""
            return buf[:first], which
        hold = 0
        for s in self.stops:
            # longest tail of buf that is a proper prefix of s
            for k in range(min(len(s) - 1, len(buf)), hold, -1):
                if buf.endswith(s[:k]):
                    hold = k
                    break
        self.pending = buf[len(buf) - hold:] if hold else ""
        return buf[:len(buf) - hold], None

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out
