"""Conversations as plain data, saved as JSON under state_dir()/conversations; Markdown export.

No Qt here: the chat page edits these objects and calls save()."""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..engine.atomic_files import atomic_write_text, keep_corrupt
from ..engine.paths import state_dir


@dataclass
class Message:
    role: str  # "user" | "assistant" | "system"
    content: str
    model: str | None = None
    # ttft_s, tokens_per_s, prompt_tokens, completion_tokens, finish; for a reply with reasoning
    # also first_answer_s (time to the first answer token), reasoning_tokens, reasoning_s
    stats: dict | None = None
    reasoning: str = ""  # a reasoning model's thinking (<think> block), apart from the answer


@dataclass
class Pane:
    """One side of the conversation: single chat has one pane, A/B has two."""

    model: str | None = None
    messages: list[Message] = field(default_factory=list)

    def history(self) -> list[dict]:
        return [{"role": m.role, "content": m.content} for m in self.messages]


@dataclass
class Conversation:
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    system_prompt: str = ""
    params: dict = field(default_factory=dict)
    panes: list[Pane] = field(default_factory=lambda: [Pane()])

    @property
    def empty(self) -> bool:
        return not any(p.messages for p in self.panes)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Conversation:
        """The conversation in `data`; TypeError/KeyError for anything of another shape (a
        file is not trusted: the chat page must never meet a title that is a list)."""
        _need(data, dict, "a conversation")
        _need(data["id"], str, "id")
        panes = []
        for p in _need(data.get("panes", []), list, "panes"):
            _need(p, dict, "a pane")
            msgs = []
            for m in _need(p.get("messages", []), list, "messages"):
                _need(m, dict, "a message")
                msg = Message(**m)
                _need(msg.role, str, "role")
                _need(msg.content, str, "content")
                _need(msg.reasoning, str, "reasoning")
                _need(msg.model, (str, type(None)), "model")
                _need(msg.stats, (dict, type(None)), "stats")
                msgs.append(msg)
            panes.append(Pane(_need(p.get("model"), (str, type(None)), "model"), msgs))
        now = time.time()
        return cls(id=data["id"], title=_need(data.get("title", "Chat"), str, "title"),
                   created=_number(data.get("created", now), "created"),
                   updated=_number(data.get("updated", now), "updated"),
                   system_prompt=_need(data.get("system_prompt", ""), str, "system_prompt"),
                   params=_need(data.get("params", {}), dict, "params"),
                   panes=panes or [Pane()])

    def to_markdown(self) -> str:
        lines = [f"# {self.title}", "",
                 f"_Saved {time.strftime('%Y-%m-%d %H:%M', time.localtime(self.updated))}_", ""]
        if self.system_prompt:
            lines += ["**System:** " + self.system_prompt, ""]
        for i, pane in enumerate(self.panes):
            if len(self.panes) > 1:
                lines += [f"## {'AB'[i] if i < 2 else i + 1}: {pane.model or 'default model'}", ""]
            for m in pane.messages:
                who = "You" if m.role == "user" else (m.model or "Assistant")
                lines += [f"**{who}:**", ""]
                if m.reasoning:  # folded, as GitHub and most Markdown viewers show <details>
                    lines += [f"<details><summary>{thinking_summary(m.stats)}</summary>", "",
                              m.reasoning, "", "</details>", ""]
                lines += [m.content, ""]
                if m.stats:
                    lines += [f"> {format_stats(m.stats)}", ""]
        return "\n".join(lines).rstrip() + "\n"


def _need(value, kind, what: str):
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise TypeError(f"{what} has the wrong type ({type(value).__name__})")
    return value


def _number(value, what: str) -> float:
    _need(value, (int, float), what)
    if not math.isfinite(value):
        raise ValueError(f"{what} is not a finite number")
    return float(value)


def thinking_summary(stats: dict | None, live: bool = False) -> str:
    """'Thinking · 42 tokens · 1.3 s' (the reasoning's own count and time)."""
    stats = stats or {}
    parts = ["Thinking…" if live else "Thinking"]
    if stats.get("reasoning_tokens") is not None:
        n = stats["reasoning_tokens"]
        parts.append(f"{n} token{'' if n == 1 else 's'}")
    if stats.get("reasoning_s") is not None:
        parts.append(f"{stats['reasoning_s']:.1f} s")
    return " · ".join(parts)


def format_stats(stats: dict) -> str:
    parts = []
    if stats.get("ttft_s") is not None:
        parts.append(f"TTFT {stats['ttft_s'] * 1000:.0f} ms")
    if stats.get("reasoning_tokens") and stats.get("first_answer_s") is not None:
        parts.append(f"first answer token {stats['first_answer_s'] * 1000:.0f} ms")
    if stats.get("tokens_per_s") is not None:
        parts.append(f"{stats['tokens_per_s']:.1f} tok/s")
    if stats.get("prompt_tokens") is not None:
        parts.append(f"{stats['prompt_tokens']} prompt + {stats.get('completion_tokens', 0)} "
                     "completion tokens")
    if stats.get("finish"):
        parts.append(f"finish: {stats['finish']}")
    if stats.get("error"):
        parts.append(f"error: {stats['error']}")
    return " · ".join(parts)


class ChatStore:
    def __init__(self, root: Path | None = None):
        self.root = root or state_dir() / "conversations"
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, conv_id: str) -> Path:
        return self.root / f"{conv_id}.json"

    def save(self, conv: Conversation) -> Path:
        conv.updated = time.time()
        # the settings' writer: UTF-8, flushed to disk, renamed over the old file, so a crash
        # (or a full disk) never leaves half a conversation
        return atomic_write_text(self.path(conv.id),
                                 json.dumps(conv.to_json(), indent=1, ensure_ascii=False))

    def load(self, conv_id: str) -> Conversation:
        return Conversation.from_json(
            json.loads(self.path(conv_id).read_text(encoding="utf-8")))

    def list(self) -> list[Conversation]:
        out = []
        for p in self.root.glob("*.json"):
            try:
                out.append(Conversation.from_json(json.loads(p.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError, TypeError, AttributeError,
                    RecursionError) as exc:
                # a damaged file must not hide the others; it is kept aside and reported
                keep_corrupt(p, f"{type(exc).__name__}: {exc}"[:200])
        return sorted(out, key=lambda c: c.updated, reverse=True)

    def delete(self, conv_id: str) -> None:
        self.path(conv_id).unlink(missing_ok=True)


def export(conv: Conversation, path: str | Path) -> Path:
    """Markdown for .md, JSON otherwise."""
    path = Path(path)
    if path.suffix.lower() in (".md", ".markdown"):
        path.write_text(conv.to_markdown())
    else:
        path.write_text(json.dumps(conv.to_json(), indent=1, ensure_ascii=False))
    return path
