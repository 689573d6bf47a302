"""The reasoning demo model's chat format: the demo model's markers, plus `<think>` blocks.

An assistant turn is `<think>\\n...\\n</think>\\n\\nanswer`. As in DeepSeek-R1's and Qwen3's
templates, earlier assistant turns lose their reasoning when a conversation is rendered again (the
template keeps what follows `</think>`), so only the turn being generated carries one. `<think>` is
ordinary text for this model's tokenizer, not a special token: the tags reach the engine split
across several tokens, as they do for models whose tokenizer has no single token for them.
"""

from __future__ import annotations

from . import chat as demo_chat

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# `open_thinking` (a template variable, false unless a caller sets it) makes the generation
# prompt open the block itself, as DeepSeek-R1's newer templates do; the tests render it that way.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'user' %}<|user|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}"
    "{% set content = message['content'] %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1].lstrip() %}"
    "{% endif %}"
    "<|assistant|>\n{{ content }}{{ eos_token }}\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n"
    "{% if open_thinking is defined and open_thinking %}<think>\n{% endif %}{% endif %}"
)


def assistant_turn(reasoning: str, answer: str) -> str:
    return f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n{answer}"


def strip_reasoning(content: str) -> str:
    """What the template keeps of an earlier assistant turn."""
    if THINK_CLOSE in content:
        return content.split(THINK_CLOSE)[-1].lstrip()
    return content


def render(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """Same text as CHAT_TEMPLATE; the last assistant turn keeps its reasoning when it is the
    turn a training sample teaches (training renders the whole conversation, the reply last)."""
    last = len(messages) - 1

    def shown(i: int, content: str) -> str:
        return content if (i == last and not add_generation_prompt) else strip_reasoning(content)

    return demo_chat.render(messages, add_generation_prompt, shown)
