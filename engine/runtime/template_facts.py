"""What a model's chat template implies, found by rendering it (no per-model tables):

* the token that ends an assistant turn (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, ...), which
  must end a reply even when the model's EOS is another token (Llama 3's `<|end_of_text|>`,
  Qwen2.5's `<|endoftext|>`);
* the system prompt the template inserts when a conversation has none (SmolLM2: "You are a
  helpful AI assistant named SmolLM, trained by Hugging Face"), so the chat page can show it
  and let the user edit it.

Both return None when the template does not say; a template that fails to render says nothing.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

# markers that no template contains: found again in the rendered text
_USER = "\u2063u5er-m4rk\u2063"
_REPLY = "\u2063r3ply-m4rk\u2063"
_SYSTEM = "\u2063sy5tem-m4rk\u2063"


def _render(tokenizer: Any, messages: list[dict]) -> str | None:
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # templates raise anything (e.g. "roles must alternate")
        log.debug("chat template did not render", exc_info=True)
        return None


def end_of_turn_id(tokenizer: Any) -> int | None:
    """The special token right after an assistant reply in the rendered template."""
    text = _render(tokenizer, [{"role": "user", "content": _USER},
                               {"role": "assistant", "content": _REPLY}])
    if text is None or _REPLY not in text:
        return None
    tail = text[text.rindex(_REPLY) + len(_REPLY):].lstrip(" ")
    if not tail:
        return None
    ids = tokenizer(tail, add_special_tokens=False)["input_ids"]
    if not ids:
        return None
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    special |= set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    return ids[0] if ids[0] in special else None


def default_system_prompt(tokenizer: Any) -> str | None:
    """The system text the template adds to a conversation that has none, or None."""
    with_system = _render(tokenizer, [{"role": "system", "content": _SYSTEM},
                                      {"role": "user", "content": _USER}])
    without = _render(tokenizer, [{"role": "user", "content": _USER}])
    if not with_system or not without or _SYSTEM not in with_system:
        return None
    before, after = with_system.split(_SYSTEM, 1)
    after = after[:after.index(_USER)] if _USER in after else after
    if not before or not without.startswith(before):
        return None  # the template puts a system message somewhere we cannot line up
    rest = without[len(before):]
    end = rest.find(after) if after else -1
    if end <= 0:
        return None
    found = rest[:end].strip()
    return found or None
