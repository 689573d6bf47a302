"""The demo model's chat format: one Jinja template for inference, the same layout for training."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

BOS = "<|bos|>"
EOS = "<|eos|>"
PAD = "<|pad|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, SYSTEM, USER, ASSISTANT]

# Rendered by transformers' apply_chat_template. The assistant turn ends with eos so generation
# stops there; `render` below must produce exactly the same text for training samples.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'user' %}<|user|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}<|assistant|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_MARKERS = {"system": SYSTEM, "user": USER}

SYSTEM_PROMPT = "You are a small demo model that explains the Python standard library."

_QUESTIONS = (
    "What does {name} do?",
    "Explain {name}.",
    "What is {name} for?",
    "Tell me about {name}.",
    "Describe {name} briefly.",
)


def render(messages: list[dict[str, str]], add_generation_prompt: bool = False,
           assistant_text: Callable[[int, str], str] | None = None) -> str:
    """Same output as CHAT_TEMPLATE; used to build training text without a tokenizer object.
    `assistant_text(i, content)` is what assistant turn i shows (the reasoning model's template
    drops the thinking of earlier turns); by default its content."""
    out = [BOS]
    for i, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role == "assistant":
            shown = assistant_text(i, content) if assistant_text else content
            out.append(f"{ASSISTANT}\n{shown}{EOS}\n")
        else:
            out.append(f"{_MARKERS[role]}\n{content}\n")
    if add_generation_prompt:
        out.append(f"{ASSISTANT}\n")
    return "".join(out)


def qa_conversation(name: str, answer: str) -> list[dict[str, str]]:
    """A deterministic question about `name` (choice keyed on the name, not on a random state)."""
    pick = hashlib.sha256(name.encode("utf-8")).digest()
    short = name.rsplit(".", 1)[-1] if pick[1] % 2 else name
    messages = []
    if pick[2] % 4 == 0:
        messages.append({"role": "system", "content": SYSTEM_PROMPT})
    messages.append({"role": "user", "content": _QUESTIONS[pick[0] % len(_QUESTIONS)].format(name=short)})
    messages.append({"role": "assistant", "content": answer})
    return messages
