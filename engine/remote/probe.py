"""One look at an OpenAI-compatible server before the console attaches to it: is it there
(/health, which needs no key), does it take the key (/v1/models), which models it serves and
whether it asks for a key at all. Blocking: callers run it off their GUI thread. No Qt here."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from .errors import connection_error, error_from_response
from .urls import normalize_base_url


@dataclass(frozen=True)
class ProbeResult:
    url: str  # normalized base URL (or what was typed, when it could not be normalized)
    ok: bool  # reachable and the key accepted
    status: str = ""  # /health's "status" ("ok", "no_model", "loading", ...) or its HTTP code
    models: tuple[str, ...] = ()
    keyed: bool | None = None  # the server refuses requests without a key; None: unknown
    error: str = ""

    def summary(self) -> str:
        """One line for the Connect dialog."""
        if not self.ok:
            return self.error
        models = ", ".join(self.models) if self.models else "no model loaded"
        key = {True: "API key required", False: "no API key needed", None: ""}[self.keyed]
        return " · ".join(p for p in (f"reachable ({self.status})", models, key) if p)


def _health_status(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("status"), str):
        return body["status"]
    return f"HTTP {r.status_code}"


def probe_server(url: str, api_key: str | None = None, timeout_s: float = 5.0) -> ProbeResult:
    """Never raises for a server that is down, refuses the key or answers oddly: the result
    says what went wrong in one sentence."""
    try:
        base = normalize_base_url(url)
    except ValueError as exc:
        return ProbeResult(url.strip(), False, error=str(exc))
    key = (api_key or "").strip() or None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with httpx.Client(base_url=base, timeout=timeout_s) as client:
            status = _health_status(client.get("/health"))
            r = client.get("/v1/models", headers=headers)
            if r.status_code in (401, 403):
                why = ("the server needs an API key" if not key else
                       "the server refused the API key")
                return ProbeResult(base, False, status, keyed=True,
                                   error=f"{why} (HTTP {r.status_code})")
            if r.status_code != 200:
                err = error_from_response(r.status_code, r.content, r.headers, base)
                return ProbeResult(base, False, status, error=err.message)
            try:
                cards = r.json().get("data", [])
                models = tuple(str(c["id"]) for c in cards if isinstance(c, dict) and c.get("id"))
            except (ValueError, AttributeError):
                return ProbeResult(base, False, status,
                                   error=f"{base}/v1/models did not answer OpenAI's JSON")
            keyed: bool | None = False
            if key:  # would it have answered without the key?
                keyed = client.get("/v1/models").status_code in (401, 403)
    except httpx.HTTPError as exc:
        return ProbeResult(base, False, error=connection_error(exc, base).message)
    return ProbeResult(base, True, status, models, keyed)
