"""Prompt -> token ids: chat-template rendering and tokenization, on the caller's thread.

Callers (HTTP worker threads, the GUI's stream threads, the CLI) tokenize before anything
reaches the engine thread. Hugging Face fast tokenizers are not safe to share between threads
(a call may reconfigure truncation on the shared Rust object, and a second thread then fails
with "Already borrowed"), and a lock around them would make a 1 MB prompt hold up every other
request. So every thread encodes with its own copy of the model's tokenizer, made on the
thread's first use and dropped with the thread: no lock is held while text is encoded.
Each thread also remembers its last prompt, so the n choices of one HTTP request (submitted
one after another on one worker thread) render and encode their prompt once, not n times.

Fast tokenizers encode through their Rust backend's `encode_batch_fast` (`encode_batch` before
tokenizers 0.20), which releases the GIL while it works (its `encode` does not: a 900 KB prompt
then held the GIL for a second). Whatever runs after it holds the GIL, and so stalls every other
stream of the server, measured on a 900 KB prompt (~300,000 tokens): the "fast" variant keeps no
character offsets, and freeing an encoding with offsets took 40-55 ms; turning the ids into a
Python list takes 15-30 ms, so a prompt that cannot fit the context (`max_len`) is refused on
the encoding's length before any list is built (transformers' `encode` would also build the
attention mask and more). The shortcut is used only where it gives the ids the tokenizer's own
`encode` gives on a probe, special tokens included.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from typing import Any

from .types import GenerationRequest, InvalidRequestError
from .validation import check_prompt_fits


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

    def encode(self, req: GenerationRequest, max_len: int | None = None) -> list[int]:
        """The prompt's token ids, as the engine will run them; InvalidRequestError for a
        prompt that cannot be encoded (a failing chat template, a prompt that is no string).
        With `max_len`, a tokenized text prompt of `max_len` tokens or more may be refused
        here with ContextLengthError (submit's own check, made before the ids are listed)."""
        if req.prompt_token_ids is not None:
            return list(req.prompt_token_ids)
        # everything that shapes the prompt (not the id or the sampling) must match
        key = {f.name: getattr(req, f.name) for f in dataclasses.fields(req)
               if f.name not in ("request_id", "params")}
        last = getattr(self._local, "last", None)
        if last is not None and last[0] == key:
            return list(last[1])
        ids = self._encode(req, max_len)
        self._local.last = (copy.deepcopy(key), ids)
        return list(ids)

    def _encode(self, req: GenerationRequest, max_len: int | None = None) -> list[int]:
        tok = self.thread_tokenizer()
        if req.messages is not None:
            try:
                text = render_chat(tok, req.messages)
            except Exception as exc:  # noqa: BLE001 - template errors are user errors
                raise InvalidRequestError(f"chat template failed: {exc}",
                                          param="messages") from None
            # the rendered template already carries the special tokens
            return self._text_ids(tok, text, False, max_len)
        if not isinstance(req.prompt, str):
            raise InvalidRequestError("prompt must be a string", param="prompt")
        return self._text_ids(tok, req.prompt, req.add_special_tokens, max_len)

    def _text_ids(self, tok: Any, text: str, special: bool, max_len: int | None) -> list[int]:
        fast = getattr(self._local, "fast", None)
        if fast is None:
            fast = self._local.fast = _backend_agrees(tok)
        if not fast:
            return list(tok.encode(text, add_special_tokens=special))
        encoding = _backend_encode(tok.backend_tokenizer)([text], add_special_tokens=special)[0]
        if max_len is not None:
            check_prompt_fits(len(encoding), max_len)
        return encoding.ids


def _backend_encode(backend: Any) -> Any:
    """The backend's batch encode that keeps no character offsets, where it has one."""
    return getattr(backend, "encode_batch_fast", None) or backend.encode_batch


def _backend_agrees(tok: Any) -> bool:
    """Whether the Rust backend alone encodes like the tokenizer (probe texts, with and
    without special tokens, and a rendered chat when the model has a template)."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or not getattr(tok, "is_fast", False):
        return False
    probes = ["Once upon a time, 12 dogs ran home.", " leading space\nand lines\t tabs"]
    try:
        if getattr(tok, "chat_template", None):
            probes.append(render_chat(tok, [{"role": "user", "content": "Hi there"}]))
        encode = _backend_encode(backend)
        return all(encode([p], add_special_tokens=s)[0].ids
                   == list(tok.encode(p, add_special_tokens=s))
                   for p in probes for s in (True, False))
    except Exception:  # noqa: BLE001 - any doubt: the tokenizer's own encode
        return False
