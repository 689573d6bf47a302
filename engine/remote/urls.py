"""The base URL of an OpenAI-compatible server, as every client here takes it (the remote
engine, the serving benchmark): surrounding space and trailing slashes dropped, an http:// or
https:// scheme required (anything else is refused, not guessed), and a trailing /v1 removed,
since the clients add the /v1/... paths themselves."""

from __future__ import annotations


def normalize_base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"remote URL must start with http:// or https://, got {url!r}")
    return url.removesuffix("/v1")
