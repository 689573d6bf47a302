"""Reasoning parsers: split a reply into its reasoning (`<think> ... </think>`) and its answer.

Reasoning models (DeepSeek-R1 and its distills, QwQ, Qwen3 in thinking mode) write their
reasoning before the answer between `<think>` and `</think>`. The parser works on the text the
detokenizer emits, one token's text at a time, so tags split across tokens are found: it holds
back any tail that could still become a tag. Two flavours, as vLLM names them:

- `deepseek_r1`: the reply starts inside the reasoning whether or not it writes `<think>` (newer
  R1 templates open the block in the prompt); everything up to `</think>` is reasoning, and a
  reply that never closes the block is all reasoning.
- `qwen3`: the reply is reasoning only if it opens with `<think>` (or the prompt opened it);
  otherwise it is all answer (Qwen3 with thinking off).

A prompt that ends with an open `<think>` starts in the reasoning; one that ends with a closed
block (`<think></think>`, thinking switched off by the template) starts in the answer. Whitespace
around the reasoning and before the answer is dropped.

Each fed piece is one token's text; the parser also says how many tokens are known to be
reasoning (the tags included), so usage can count them: every token whose text starts before
the end of `</think>` is a reasoning token.
"""

from __future__ import annotations

from dataclasses import dataclass

OPEN = "<think>"
CLOSE = "</think>"
PARSER_CHOICES = ("auto", "deepseek_r1", "qwen3", "none")

_START, _REASONING, _ANSWER = "start", "reasoning", "answer"


def choose_parser(setting: str, chat_template: object) -> str | None:
    """The parser for a model: `setting`, or for "auto" what its chat template implies
    (a template that mentions the tags: qwen3 if it has an enable_thinking switch, else
    deepseek_r1); None when there is none."""
    if setting not in PARSER_CHOICES:
        raise ValueError(f"unknown reasoning parser {setting!r} "
                         f"(choose from {', '.join(PARSER_CHOICES)})")
    if setting == "none":
        return None
    if setting != "auto":
        return setting
    if isinstance(chat_template, dict):  # named templates (default, tool_use, ...)
        chat_template = "\n".join(str(t) for t in chat_template.values())
    if isinstance(chat_template, list):
        chat_template = "\n".join(str(t.get("template", "")) for t in chat_template
                                  if isinstance(t, dict))
    if not isinstance(chat_template, str) or (OPEN not in chat_template
                                              and CLOSE not in chat_template):
        return None
    return "qwen3" if "enable_thinking" in chat_template else "deepseek_r1"


def prompt_state(prompt_tail: str) -> str | None:
    """"open" when the prompt ends inside a think block, "closed" when it ends right after one,
    None otherwise."""
    tail = prompt_tail.rstrip()
    if tail.endswith(OPEN):
        return "open"
    if tail.endswith(CLOSE):
        return "closed"
    return None


@dataclass(frozen=True)
class Split:
    """What one fed piece released: reasoning text, answer text, tokens now known to be
    reasoning (this piece's token and earlier undecided ones)."""

    reasoning: str = ""
    answer: str = ""
    reasoning_tokens: int = 0


def _partial_suffix(buf: str, tag: str) -> int:
    """Length of the longest tail of buf that is a proper prefix of tag."""
    for k in range(min(len(tag) - 1, len(buf)), 0, -1):
        if buf.endswith(tag[:k]):
            return k
    return 0


class ReasoningParser:
    """One reply's parser. feed() each token's text in order, then finish() once."""

    def __init__(self, kind: str, prompt_tail: str = ""):
        if kind not in ("deepseek_r1", "qwen3"):
            raise ValueError(f"unknown reasoning parser {kind!r}")
        self.kind = kind
        opened = prompt_state(prompt_tail)
        self.state = _ANSWER if opened == "closed" else _START
        # without an opening tag the reply is reasoning (R1, or a prompt that opened the block)
        self.implicit = kind == "deepseek_r1" or opened == "open"
        self.buf = ""  # raw text not yet released
        self.pos = 0  # raw characters fed so far
        self.answer_at: int | None = 0 if self.state == _ANSWER else None
        self.unsure: list[int] = []  # start offsets of tokens not yet counted
        self.reasoning_started = False  # leading whitespace of the reasoning is dropped
        self.answer_started = False  # so is the whitespace before the answer
        self.reasoning_tokens = 0
        self.answer_tokens = 0

    @property
    def in_reasoning(self) -> bool:
        return self.state == _REASONING

    # ------------------------------------------------------------------ feeding
    def feed(self, text: str) -> Split:
        self.unsure.append(self.pos)
        self.pos += len(text)
        self.buf += text
        reasoning, answer = self._advance()
        return Split(reasoning, answer, self._count())

    def finish(self) -> Split:
        """Release what is held: the reply ended (end of sequence, max tokens, stop)."""
        reasoning = answer = ""
        if self.state == _START:
            self.state = _REASONING if self.implicit else _ANSWER
            if self.state == _ANSWER:
                self.answer_at = self.pos - len(self.buf)
        if self.state == _REASONING:
            reasoning = self._reason(self.buf.rstrip())
        else:
            answer = self._answer(self.buf)
        self.buf = ""
        n = self._count()
        # whatever is left undecided belongs to the state the reply ended in
        left = len(self.unsure)
        if self.state == _REASONING:
            n += left
            self.reasoning_tokens += left
        else:
            self.answer_tokens += left
        self.unsure.clear()
        return Split(reasoning, answer, n)

    # ------------------------------------------------------------------ internals
    def _advance(self) -> tuple[str, str]:
        reasoning = answer = ""
        if self.state == _START:
            stripped = self.buf.lstrip()
            if stripped.startswith(OPEN):
                self.buf = stripped[len(OPEN):]
                self.state = _REASONING
            elif OPEN.startswith(stripped):
                return "", ""  # maybe the opening tag, still arriving
            elif self.implicit:
                self.state = _REASONING
            else:
                self.state = _ANSWER
                self.answer_at = self.pos - len(self.buf)
        if self.state == _REASONING:
            i = self.buf.find(CLOSE)
            if i >= 0:
                reasoning = self._reason(self.buf[:i].rstrip())
                rest = self.buf[i + len(CLOSE):]
                self.answer_at = self.pos - len(rest)
                self.state = _ANSWER
                self.buf = rest
            else:
                # hold a tail that may grow into the closing tag, with the whitespace before
                # it (dropped if the tag comes)
                hold = _partial_suffix(self.buf, CLOSE)
                head = self.buf[:len(self.buf) - hold]
                keep = len(head) - len(head.rstrip())
                cut = len(head) - keep
                reasoning = self._reason(self.buf[:cut])
                self.buf = self.buf[cut:]
                return reasoning, ""
        if self.state == _ANSWER:
            answer = self._answer(self.buf)
            self.buf = ""
        return reasoning, answer

    def _reason(self, text: str) -> str:
        if not self.reasoning_started:
            text = text.lstrip()
            self.reasoning_started = bool(text)
        return text

    def _answer(self, text: str) -> str:
        if not self.answer_started:
            text = text.lstrip()
            self.answer_started = bool(text)
        return text

    def _count(self) -> int:
        """Classify the tokens that can be classified now; returns how many are reasoning."""
        if self.answer_at is not None:
            n = sum(1 for start in self.unsure if start < self.answer_at)
            self.answer_tokens += len(self.unsure) - n
        elif self.state == _REASONING or (self.state == _START and self.implicit):
            n = len(self.unsure)  # inside the block (or sure to be): before its end
        else:
            return 0  # undecided: the opening tag may still come
        self.unsure.clear()
        self.reasoning_tokens += n
        return n
