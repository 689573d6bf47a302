"""The Server page's "Use it" snippets (curl and the openai client), with the API key masked
unless the user reveals it: a screen share or a screenshot must not hand the key out."""

from __future__ import annotations

import json

MASK = "•" * 8


def mask(key: str) -> str:
    """Enough to recognise the key by its end, never enough to use it."""
    return MASK + key[-4:] if len(key) >= 16 else MASK


def snippets(url: str, model: str, key: str, lan: bool, reveal: bool = False) -> tuple[str, str]:
    """(curl, python) for a chat completion against `url`; `key` masked unless `reveal`."""
    shown = key if reveal else mask(key) if key else ""
    auth = f" \\\n  -H \"Authorization: Bearer {shown or '$NPU_CONSOLE_API_KEY'}\"" \
        if key or lan else ""
    body = (f'{{"model": {json.dumps(model)}, "max_tokens": 64,\n'
            '       "messages": [{"role": "user", "content": "Hello!"}]}')
    curl = (f"curl {url}/v1/chat/completions{auth} \\\n  -H \"Content-Type: application/json\""
            f" \\\n  -d '{body}'\n")
    python = ("from openai import OpenAI\n\n"
              f"client = OpenAI(base_url=\"{url}/v1\", api_key=\"{shown or 'not-needed'}\")\n"
              "reply = client.chat.completions.create(\n"
              f"    model=\"{model}\",\n"
              "    messages=[{\"role\": \"user\", \"content\": \"Hello!\"}],\n"
              "    max_tokens=64,\n)\n"
              "print(reply.choices[0].message.content)\n")
    return curl, python
