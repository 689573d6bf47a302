"""Transcript widgets: a scrolling column of message bubbles with Markdown and per-reply stats."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from ..chat_store import Message, format_stats, thinking_summary
from .basic import discard
from .thinking import ThinkingBlock


class Bubble(QFrame):
    edit_requested = Signal(object)  # the Bubble

    def __init__(self, message: Message, parent=None):
        super().__init__(parent)
        self.message = message
        self.setObjectName("Bubble")
        self.setProperty("role", message.role)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        lay.setSpacing(3)
        head = QHBoxLayout()
        who = QLabel("You" if message.role == "user" else (message.model or "Assistant"))
        who.setProperty("muted", True)
        head.addWidget(who)
        head.addStretch(1)
        if message.role == "user":
            edit = QPushButton("Edit")
            edit.setFlat(True)
            edit.setToolTip("Put this message back in the input box and drop what followed")
            edit.clicked.connect(lambda: self.edit_requested.emit(self))
            head.addWidget(edit)
        lay.addLayout(head)
        # a reasoning model's thinking, above the answer; hidden for replies without any
        self.thinking = ThinkingBlock()
        self.thinking.setVisible(False)
        lay.addWidget(self.thinking)
        self.thinking_live: dict | None = None  # reasoning_tokens / reasoning_s while streaming
        self.body = QLabel()
        self.body.setTextFormat(Qt.MarkdownText)
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextSelectableByMouse | Qt.LinksAccessibleByMouse)
        self.body.setOpenExternalLinks(True)
        lay.addWidget(self.body)
        self.stats = QLabel()
        self.stats.setObjectName("Stats")
        self.stats.setWordWrap(True)
        lay.addWidget(self.stats)
        self.render()

    def render(self, streaming: bool = False) -> None:
        text = self.message.content
        self._render_thinking(streaming)
        if streaming and self.message.reasoning and not text:
            self.body.setTextFormat(Qt.PlainText)
            self.body.setText("▍")
        elif streaming:
            # plain text while tokens arrive: re-parsing Markdown of a growing reply on every
            # flush is the costliest GUI work during streaming; it is rendered once at the end
            if self.body.textFormat() != Qt.PlainText:
                self.body.setTextFormat(Qt.PlainText)
            self.body.setText(text + " ▍")
        else:
            self.body.setTextFormat(Qt.MarkdownText)
            empty = "_(no answer: the reply ended while thinking)_" if self.message.reasoning \
                else "_(empty reply)_"
            self.body.setText(text if text else empty
                              if self.message.role == "assistant" and self.message.stats else text)
        self.stats.setText(format_stats(self.message.stats) if self.message.stats else "")
        self.stats.setVisible(bool(self.message.stats))

    def _render_thinking(self, streaming: bool) -> None:
        reasoning = self.message.reasoning
        self.thinking.setVisible(bool(reasoning))
        if not reasoning:
            return
        thinking = streaming and not self.message.content
        stats = self.thinking_live if streaming else self.message.stats
        self.thinking.set_content(reasoning, thinking_summary(stats, live=thinking))
        # open while the model thinks, folded once the answer starts (or when loaded)
        self.thinking.set_expanded(thinking)


class Transcript(QScrollArea):
    """Keeps a Bubble per Message; follows the bottom while streaming unless the user scrolled up."""

    edit_requested = Signal(int)  # index of the user message to edit

    def __init__(self, title: str = "", parent=None):
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        inner = QWidget()
        self.col = QVBoxLayout(inner)
        self.col.setContentsMargins(8, 8, 8, 8)
        self.col.setSpacing(8)
        self.placeholder = QLabel(title or "Send a message to start.")
        self.placeholder.setAlignment(Qt.AlignCenter)
        self.placeholder.setProperty("muted", True)
        self.placeholder.setWordWrap(True)
        self.col.addWidget(self.placeholder)
        self.col.addStretch(1)
        self.setWidget(inner)
        self.bubbles: list[Bubble] = []
        self._follow = True
        self.verticalScrollBar().valueChanged.connect(self._track)
        self.verticalScrollBar().rangeChanged.connect(self._on_range)

    def _track(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 24

    def _on_range(self, _lo: int, hi: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(hi)

    def set_placeholder(self, text: str) -> None:
        self.placeholder.setText(text)

    def add(self, message: Message) -> Bubble:
        bubble = Bubble(message)
        bubble.edit_requested.connect(lambda b: self.edit_requested.emit(self.bubbles.index(b)))
        self.col.insertWidget(self.col.count() - 1, bubble)
        self.bubbles.append(bubble)
        self.placeholder.setVisible(False)
        self._follow = True
        QTimer.singleShot(0, lambda: self.verticalScrollBar().setValue(
            self.verticalScrollBar().maximum()))
        return bubble

    def truncate(self, n: int) -> None:
        """Keep the first n bubbles."""
        for bubble in self.bubbles[n:]:
            discard(bubble)
        self.bubbles = self.bubbles[:n]
        self.placeholder.setVisible(not self.bubbles)

    def clear(self) -> None:
        self.truncate(0)


class ChatInput(QPlainTextEdit):
    """Enter inserts a newline; Ctrl+Enter submits."""

    submit = Signal()

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key_Return, Qt.Key_Enter) and event.modifiers() & Qt.ControlModifier:
            self.submit.emit()
            return
        super().keyPressEvent(event)
