"""Chat playground: streaming replies, stop, regenerate, edit-and-resend, A/B, saved chats."""

from __future__ import annotations

import logging
import time

from PySide6.QtWidgets import QComboBox

from ..chat_session import ChatSession, LiveReply
from ..chat_store import export
from ..engines import LOCAL, ModelChoice
from . import chat_layout
from .base import Page

log = logging.getLogger(__name__)


class ChatPage(Page):
    page_id = "chat"
    title = "Chat"
    icon = "✎"

    def __init__(self, ctx, parent=None):
        super().__init__(ctx, parent)
        self.session = ChatSession()  # the Qt-free model: the conversation, its store, requests
        self.live: dict[str, LiveReply] = {}  # the replies streaming, by request id
        # a message sent while the first model loads waits here (already in the transcript)
        # and goes out when a model is ready
        self.held = False
        self.models: list = []  # the console's own (ModelInfo)
        self.choices: list = []  # what the model boxes offer (ModelChoice), servers' too
        chat_layout.build(self)
        chat_layout.listen(self)
        self._follow_session()
        self.refresh_list()
        self._update_buttons()

    def _follow_session(self) -> None:
        """The transcripts and the chat list follow the session's announcements."""
        ev = self.session.events
        ev.subscribe("message", lambda pane, msg: self.transcripts[pane].add(msg))
        ev.subscribe("truncated", lambda pane, n: self.transcripts[pane].truncate(n))
        ev.subscribe("conversation", lambda conv: chat_layout.show_conversation(self, conv))
        ev.subscribe("panes", self._panes_changed)
        ev.subscribe("saved", lambda _conv: self.refresh_list())

    def _panes_changed(self, conv) -> None:
        if len(conv.panes) > 1:
            chat_layout.render_pane(self, conv, 1)
        else:
            self.transcripts[1].clear()

    # ------------------------------------------------------------------ models

    def set_models(self, models) -> None:
        """`models`: the console's own; each connected server's follow, labelled with its host
        (a box's item data is its ModelChoice: the engine and the model name)."""
        self.models = list(models)
        self.choices = self.ctx.engines.choices(self.models)
        chat_layout.fill_model_boxes(self, self.choices)
        self._update_context()
        self._update_buttons()
        if self.held and self.choices:
            self.held = False
            self._generate()

    @property
    def conv(self):
        return self.session.conv

    @property
    def store(self):
        return self.session.store

    def _servers_changed(self) -> None:
        if [c.label for c in self.ctx.engines.choices(self.models)] != \
                [c.label for c in self.choices]:
            self.set_models(self.models)

    def _model_info(self, label: str | None):
        return next((c.info for c in self.choices if c.label == label), None)

    def choice(self, box: QComboBox):
        """The ModelChoice a model box has selected (None when it is empty); a name typed in
        without one is a model of this console's."""
        data = box.currentData()
        if data is None and box.currentText():
            return ModelChoice(LOCAL, box.currentText(), box.currentText())
        return data

    def set_ab(self, on: bool) -> None:
        chat_layout.show_ab(self, on)
        if on:
            half = max(200, self.panes_split.width() // 2)
            self.panes_split.setSizes([half, half])
        # B starts from the same history as A so both sides answer the same conversation
        self.session.set_ab(on, self.model_b.currentText() or None)

    # ------------------------------------------------------------------ sending

    def busy(self) -> bool:
        """A reply streams, or a message waits for a model to load."""
        return bool(self.live) or self.held

    def send(self, text: str | None = None) -> list[str]:
        """Send the input box (or `text`) to every pane; returns the request ids. With no model
        yet but one loading, the message is held and sent when it is ready; with none at all
        it stays in the box."""
        if self.busy():
            return []
        text = (self.input.toPlainText() if text is None else text).strip()
        if not text:
            return []
        if not self.choices and not self.ctx.loads.loading:
            self.error_label.setText("No model loaded: load one on the Models page.")
            return []
        self.input.clear()
        self.session.add_user_turn(text)
        if not self.choices:
            self.held = True
            self.error_label.setText("")
            self._show_load()
            self._update_buttons()
            self.save()
            return []
        return self._generate()

    def _show_load(self) -> None:
        chat_layout.show_load(self, self.ctx.loads.current(), self.held)

    def _load_ended(self, ended) -> None:
        if not ended.error or not self.held or self.ctx.loads.loading or self.choices:
            return
        self.error_label.setText(f"{ended.name} did not load ({ended.error}); your message "
                                 "waits for a model: load one on the Models page.")

    def _generate(self) -> list[str]:
        from ...engine.runtime.types import EngineError

        self.error_label.setText("")
        try:
            params = self.sampling.sampling_params()
        except ValueError as exc:
            self.error_label.setText(str(exc))
            return []
        picked = [self.choice(box) for box in (self.model_a, self.model_b)]
        models = [c.model if c else None for c in picked]
        ids = []
        for i, reply, request in self.session.turn_requests(self.sampling.values(), params,
                                                             models):
            target = picked[i].target if picked[i] else LOCAL
            if target != LOCAL:
                reply.model = picked[i].label  # the bubble says which server answered
            try:
                engine = self.ctx.engines.engine_for(target)
                if engine is None:
                    raise EngineError(f"{self.ctx.engines.label_for(target)} is no longer "
                                      "connected: pick another model")
                rid = self.ctx.bridge.submit(request, engine=engine)
            except EngineError as exc:
                self.session.add_reply(i, reply, exc.message)
                self.error_label.setText(exc.message)
                continue
            self.session.add_reply(i, reply)
            bubble = self.transcripts[i].bubbles[-1]  # drawn as the session announced it
            bubble.render(streaming=True)
            self.live[rid] = LiveReply(i, reply, bubble)
            ids.append(rid)
        self._update_buttons()
        self.save()
        return ids

    def on_tokens(self, rid: str, text: str) -> None:
        live = self.live.get(rid)
        if live is None:
            return
        live.message.content += text
        live.bubble.render(streaming=True)

    def on_reasoning(self, rid: str, text: str, n_tokens: int) -> None:
        """A reasoning model's thinking, streamed into the reply's Thinking block."""
        live = self.live.get(rid)
        if live is None:
            return
        live.bubble.thinking_live = live.add_reasoning(text, n_tokens, time.monotonic())
        live.bubble.render(streaming=True)

    def on_finished(self, rid: str, fin) -> None:
        live = self.live.pop(rid, None)
        if live is None:
            return
        live.finish(fin)
        if fin.error:
            self.error_label.setText(fin.error)
        live.bubble.render()
        if live.pane == 0:
            self._last_usage = fin.usage.total_tokens
        self._update_context()
        self._update_buttons()
        self.save()

    def stop(self) -> None:
        """Stop the replies streaming; a held message is not sent (Regenerate sends it)."""
        self.held = False
        self._update_buttons()
        for rid in list(self.live):
            self.ctx.bridge.cancel(rid)

    def regenerate(self) -> list[str]:
        """Drop the last reply of every pane and ask again with the same history."""
        if self.busy() or self.conv.empty:
            return []
        answerable = self.session.drop_last_replies()
        return self._generate() if answerable else []

    def edit_message(self, pane_index: int, message_index: int) -> None:
        """Edit-and-resend: the message goes back to the input; it and what followed are dropped."""
        if self.busy():
            return
        msg = self.conv.panes[pane_index].messages[message_index]
        self.session.truncate(message_index)
        self.input.setPlainText(msg.content)
        self.input.setFocus()
        self._update_buttons()

    # ------------------------------------------------------------------ conversations

    def new_chat(self) -> None:
        if self.busy():
            self.stop()
        self.live.clear()
        self.held = False
        self.session.new(self.model_b.currentText() or None, ab=self.ab_check.isChecked())
        self._last_usage = 0
        self._update_context()
        self._update_buttons()
        self.input.setFocus()

    def save(self) -> None:
        try:
            self.session.save()  # its "saved" refreshes the chat list
        except OSError as exc:
            self.error_label.setText(f"Could not save the chat: {exc}")

    def refresh_list(self) -> None:
        chat_layout.fill_conversations(self, self.store.list(), self.conv.id)

    def open_conversation(self, conv_id: str) -> None:
        if self.busy():
            return
        try:
            self.session.open(conv_id)  # its "conversation" draws the chat
        except (OSError, ValueError, KeyError) as exc:
            self.error_label.setText(f"Could not open the chat: {exc}")

    def choose_export(self, suffix: str) -> None:
        self._dialog = chat_layout.export_dialog(self, suffix, f"chat-{self.conv.id}{suffix}",
                                                 lambda path: export(self.conv, path))

    # ------------------------------------------------------------------ state

    _last_usage = 0

    def _update_context(self) -> None:
        info = self._model_info(self.model_a.currentText())
        self.sampling.set_template_system(info.default_system_prompt if info else None)
        chat_layout.show_context(self, self._last_usage, info.max_context if info else 0)

    def _update_buttons(self) -> None:
        busy = self.busy()
        has_model = bool(self.choices)
        self.send_btn.setEnabled(not busy and (has_model or self.ctx.loads.loading))
        self.stop_btn.setEnabled(busy)
        self.regen_btn.setEnabled(not busy and has_model and not self.conv.empty)

    def activated(self) -> None:
        self.set_models(self.ctx.engine_host.models())
        self._show_source()
        self.input.setFocus()

    def _show_source(self) -> None:
        """The status bar names the engine model A runs on."""
        if self.isVisible():
            choice = self.choice(self.model_a)
            self.ctx.remote.set_focus(choice.target if choice else LOCAL)

    def shutdown(self) -> None:
        self.stop()
        self.save()
