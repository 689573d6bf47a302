"""Prompt -> token ids: chat-template rendering and tokenization, on the caller's thread.

Callers (HTTP worker threads, the GUI's stream threads, the CLI) tokenize before anything
reaches the engine thread. Hugging Face fast tokenizers are not safe to share between threads
(a call may reconfigure truncation on the shared Rust object, and a second thread then fails
with "Already borrowed"), and a lock around them would make a 1 MB prompt hold up every other
request. So every thread encodes with its own copy of the model's tokenizer, made on the
thread's first use and dropped with the thread: no lock is held while text is encoded.
Each thread also remembers its last prompt, so the n choices of one HTTP request (submitted
one after another on one worker thread) render and encode their prompt once, not n times.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any

from engine.runtime.types import GenerationRequest, InvalidRequestError


def render_chat(tokenizer: Any, messages: list[dict]) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # models without a template (base models such as stories260K): a plain transcript
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n".join(lines) + "\nAssistant:"


class PromptEncoder:
    """Encodes requests for one model with a per-thread copy of its tokenizer."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._local = threading.local()
        self._copy_lock = threading.Lock()  # held only while a copy is made, once per thread

    def thread_tokenizer(self) -> Any:
        tok = getattr(self._local, "tokenizer", None)
        if tok is None:
            with self._copy_lock:
                try:
                    tok = copy.deepcopy(self.tokenizer)
                except Exception:  # noqa: BLE001 - an uncopyable tokenizer: share it (slow ones
                    tok = self.tokenizer  # are pure Python and hold no borrowed state)
            self._local.tokenizer = tok
        return tok

    def encode(self, req: GenerationRequest) -> list[int]:
        """The prompt's token ids, as the engine will run them; InvalidRequestError for a
        prompt that cannot be encoded (a failing chat template, a prompt that is no string)."""
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        # everything that shapes the prompt (not the id or the sampling) must match
        key = {f.name: getattr(req, f.name) for f in dataclasses.fields(req)
               if f.name not in ("request_id", "params")}
        last = getattr(self._local, "last", None)
        if last is not None and last[0] == key:
            return list(last[1])
        ids = self._encode(req)
        self._local.last = (copy.deepcopy(key), ids)
        return list(ids)

    def _encode(self, req: GenerationRequest) -> list[int]:
        tok = self.thread_tokenizer()
        if req.messages is not None:
            try:
                text = render_chat(tok, req.messages)
            except Exception as exc:  # noqa: BLE001 - template errors are user errors
                raise InvalidRequestError(f"chat template failed: {exc}",
                                          param="messages") from None
            # the rendered template already carries the special tokens
            return list(tok.encode(text, add_special_tokens=False))
        if not isinstance(req.prompt, str):
            raise InvalidRequestError("prompt must be a string", param="prompt")
        return list(tok.encode(req.prompt, add_special_tokens=req.add_special_tokens))
