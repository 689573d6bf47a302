"""CrossSiteGuardMiddleware: a web page in the user's browser must not drive the API.

A page on any site can send `fetch(url, {method: "POST", mode: "no-cors", body})` to a loopback
server: no preflight, no Content-Type (or text/plain, a form), and the browser does not let it
read the answer, but the request itself still runs (load a model, start a quantization, burn
the decode slots). So, on every state-changing method, whatever FastAPI version parses the body:

- the body must be declared `application/json` (415 otherwise; a DELETE without a body needs
  none): a cross-site page can send
  JSON only after a CORS preflight, which this server answers only for --cors origins;
- a browser's `Origin` must be this server itself (the Host it was reached by) or one of the
  --cors origins, and `Sec-Fetch-Site: cross-site` is refused unless its Origin is allowed
  (403 otherwise). Clients that are not browsers send neither header and are not affected.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

STATE_CHANGING = frozenset({"POST", "PUT", "DELETE", "PATCH"})


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


def is_json(content_type: bytes | None) -> bool:
    """`application/json`, with or without parameters (charset)."""
    if content_type is None:
        return False
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json"


def _has_body(scope: dict[str, Any]) -> bool:
    length = _header(scope, b"content-length")
    if _header(scope, b"transfer-encoding") is not None:
        return True
    return length is not None and length.strip() not in (b"", b"0")


class CrossSiteGuardMiddleware:
    def __init__(self, app, cors_origins: tuple[str, ...] = ()):
        self.app = app
        self.any_origin = "*" in cors_origins
        self.origins = frozenset(o.rstrip("/").lower() for o in cors_origins if o != "*")

    def origin_allowed(self, origin: str, host: bytes | None) -> bool:
        if self.any_origin or origin.rstrip("/").lower() in self.origins:
            return True
        if origin == "null":
            return False  # sandboxed frames, file:// pages, redirects: never this server
        netloc = urlsplit(origin).netloc.lower()
        return bool(netloc) and host is not None and netloc == host.decode("latin-1").lower()

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] != "http" or scope.get("method") not in STATE_CHANGING:
            await self.app(scope, receive, send)
            return
        from .middleware import INFO_KEY, _send_json_error

        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, code, message = refusal
        state = scope.get("state")
        if isinstance(state, dict) and INFO_KEY in state:
            state[INFO_KEY].error = message
        await _send_json_error(send, status, message,
                               "invalid_request_error" if status == 415 else "permission_error",
                               code)

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str, str] | None:
        """(status, code, message) when the request must be refused, else None."""
        raw_origin = _header(scope, b"origin")
        origin = raw_origin.decode("latin-1").strip() if raw_origin is not None else None
        host = _header(scope, b"host")
        origin_ok = origin is not None and self.origin_allowed(origin, host)
        if origin is not None and not origin_ok:
            return (403, "cross_site_refused",
                    (f"cross-site request refused: origin {origin[:200]!r} is not this server; "
                     "allow a web app's origin with --cors ORIGIN"))
        site = _header(scope, b"sec-fetch-site")
        if site is not None and site.strip().lower() == b"cross-site" and not origin_ok:
            return (403, "cross_site_refused",
                    ("cross-site request refused (Sec-Fetch-Site: cross-site); allow a web "
                     "app's origin with --cors ORIGIN"))
        content_type = _header(scope, b"content-type")
        if scope.get("method") == "DELETE" and content_type is None and not _has_body(scope):
            # a bodyless DELETE (curl -X DELETE) carries nothing to parse, and a page cannot
            # send DELETE cross-site without a preflight that only --cors origins pass
            return None
        if not is_json(content_type):
            shown = "none" if content_type is None else repr(content_type.decode("latin-1")[:100])
            return (415, "unsupported_media_type",
                    f"{scope.get('method')} needs 'Content-Type: application/json' (got {shown})")
        return None
