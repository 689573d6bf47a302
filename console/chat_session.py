"""One chat as a model, free of Qt (napari-style): the conversation (one pane, or two side by
side for A/B), where it is saved, the requests a turn sends and what a finished reply records.
It announces each change; the Chat page subscribes and draws the panes, and hands the requests
to the bridge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .chat_store import ChatStore, Conversation, Message, Pane
from .events import Emitter

TITLE_CHARS = 48


@dataclass
class LiveReply:
    """A reply streaming into pane `pane`; `bubble` is whatever draws it (the Chat page's
    message bubble; opaque here)."""

    pane: int
    message: Message
    bubble: Any = None
    thinking_since: float | None = None  # the clock at the first reasoning text

    def add_reasoning(self, text: str, n_tokens: int, now: float) -> dict[str, Any]:
        """A reasoning model's thinking so far; returns what the Thinking block shows live."""
        if self.thinking_since is None:
            self.thinking_since = now
        self.message.reasoning += text
        return {"reasoning_tokens": n_tokens, "reasoning_s": now - self.thinking_since}

    def finish(self, fin: Any) -> None:
        """Record the FinishEvent: the stats, and the model that answered (a server's reply
        keeps its "model @ host" label)."""
        self.message.stats = reply_stats(fin)
        if not (self.message.model or "").startswith(f"{fin.model} @ "):
            self.message.model = fin.model or self.message.model


class ChatSession:
    """Announces on `events` (console.events.Emitter), on the thread that changed it:
    "message" (pane index, Message) for each message appended to a pane; "truncated" (pane
    index, messages kept) when a pane loses its tail; "conversation" (Conversation) when
    another chat is in place (new, opened); "panes" (Conversation) when A/B adds or drops the
    second pane; "saved" (Conversation) once it is written."""

    def __init__(self, store: ChatStore | None = None):
        self.store = store or ChatStore()
        self.conv = Conversation()
        self.events = Emitter()

    # ------------------------------------------------------------------ turns
    def add_user_turn(self, text: str) -> list[Message]:
        """The user's message, appended to every pane (the first one names the chat)."""
        if self.conv.empty:
            self.conv.title = text[:TITLE_CHARS] + ("…" if len(text) > TITLE_CHARS else "")
        msgs = []
        for i, pane in enumerate(self.conv.panes):
            msg = Message("user", text)
            pane.messages.append(msg)
            msgs.append(msg)
            self.events.emit("message", i, msg)
        return msgs

    def turn_requests(self, values: dict[str, Any], params: Any,
                      models: list[str | None]) -> list[tuple[int, Message, Any]]:
        """(pane index, empty reply, GenerationRequest) for each pane, from the sampling panel's
        `values` (its system prompt is kept with the chat) and `params`; `models[i]` serves
        pane i. The caller appends each reply once its request is accepted."""
        from ..engine.runtime.types import GenerationRequest

        self.conv.system_prompt = values["system_prompt"]
        self.conv.params = {k: v for k, v in values.items() if k != "system_prompt"}
        out = []
        for i, pane in enumerate(self.conv.panes):
            pane.model = models[i] if i < len(models) else None
            history = pane.history()
            if self.conv.system_prompt:
                history = [{"role": "system", "content": self.conv.system_prompt}] + history
            reply = Message("assistant", "", model=pane.model)
            out.append((i, reply, GenerationRequest(messages=history, params=params,
                                                    model=pane.model)))
        return out

    def add_reply(self, pane: int, reply: Message, error: str | None = None) -> None:
        """A turn's reply joins its pane once its request is accepted; a refused request's
        joins too, finished with the error."""
        if error is not None:
            reply.stats = {"finish": "error", "error": error}
        self.conv.panes[pane].messages.append(reply)
        self.events.emit("message", pane, reply)

    def drop_last_replies(self) -> bool:
        """Remove each pane's last reply (regenerate); True when a user turn is left to answer."""
        for i, pane in enumerate(self.conv.panes):
            if pane.messages and pane.messages[-1].role == "assistant":
                pane.messages.pop()
                self.events.emit("truncated", i, len(pane.messages))
        first = self.conv.panes[0].messages
        return bool(first) and first[-1].role == "user"

    def truncate(self, message_index: int) -> Message:
        """Edit-and-resend: drop the message at `message_index` and all after it, in every
        pane; returns the dropped message of the first pane."""
        msg = self.conv.panes[0].messages[message_index]
        for i, pane in enumerate(self.conv.panes):
            del pane.messages[message_index:]
            self.events.emit("truncated", i, message_index)
        return msg

    # ------------------------------------------------------------------ conversations
    def new(self, second_model: str | None = None, ab: bool = False) -> None:
        self.conv = Conversation()
        if ab:
            self.conv.panes.append(Pane(second_model))
        self.events.emit("conversation", self.conv)

    def set_ab(self, on: bool, second_model: str | None) -> None:
        """Add a second pane (a copy of the first's messages) or drop it."""
        if on and len(self.conv.panes) < 2:
            self.conv.panes.append(Pane(second_model,
                                        [Message(**vars(m)) for m in self.conv.panes[0].messages]))
        elif not on and len(self.conv.panes) > 1:
            self.conv.panes = self.conv.panes[:1]
        else:
            return
        self.events.emit("panes", self.conv)

    def open(self, conv_id: str) -> None:
        """Load a saved chat (raises OSError / ValueError / KeyError for a bad one)."""
        self.conv = self.store.load(conv_id)
        self.events.emit("conversation", self.conv)

    def save(self) -> bool:
        """Write the chat (an empty one is not kept); raises OSError."""
        if self.conv.empty:
            return False
        self.store.save(self.conv)
        self.events.emit("saved", self.conv)
        return True


def reply_stats(fin: Any) -> dict[str, Any]:
    """What a finished reply records from its FinishEvent: TTFT, tokens/s after the first
    token, token counts, finish reason and error; a reasoning model's reasoning count and time
    and its time to the first answer token."""
    t = fin.timings
    tps = None
    if fin.usage.completion_tokens > 1 and t.ttft_s is not None and t.e2e_s > t.ttft_s:
        tps = (fin.usage.completion_tokens - 1) / (t.e2e_s - t.ttft_s)
    stats = {"ttft_s": t.ttft_s, "tokens_per_s": tps,
             "prompt_tokens": fin.usage.prompt_tokens,
             "completion_tokens": fin.usage.completion_tokens,
             "finish": fin.finish_reason, "error": fin.error}
    if fin.usage.reasoning_tokens:
        stats.update(reasoning_tokens=fin.usage.reasoning_tokens, reasoning_s=t.reasoning_s,
                     first_answer_s=t.first_answer_s)
    return stats
