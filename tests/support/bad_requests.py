"""The corpus of bad requests (tests/data/bad_requests.json) that the API must answer with a
4xx and a message, never a 5xx: replayed by tests/test_security_corpus.py against a real server
and mixed 1 in 10 into the soak (tests/bench/soak_api.py).

Each entry: name, method, path, expect (the statuses allowed), and the body as `json` or `raw`
text (a `repeat` {field, times} makes a list of the json that long; {PAD} replaced by `pad` copies of `pad_char`, so large bodies stay small on disk);
`headers` are sent as given ("content-type": "" sends none)."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "data" / "bad_requests.json"


def load_corpus() -> list[dict]:
    return json.loads(CORPUS.read_text(encoding="utf-8"))


def request_args(entry: dict) -> dict:
    """Keyword arguments for httpx's request(): method, url (the path), content, headers."""
    headers = {k: v for k, v in (entry.get("headers") or {}).items() if v}
    content = None
    if "json" in entry:
        body = entry["json"]
        if "repeat" in entry:  # a long list, stored as one item and a count
            field, times = entry["repeat"]["field"], entry["repeat"]["times"]
            body = {**body, field: body[field] * times}
        content = json.dumps(body).encode()
        headers.setdefault("content-type", "application/json")
    elif "raw" in entry:
        text = entry["raw"]
        if "pad" in entry:
            text = text.replace("{PAD}", entry.get("pad_char", "a") * entry["pad"])
        content = text.encode()
    return {"method": entry["method"], "url": entry["path"], "content": content,
            "headers": headers}
