"""Settings of the HTTP API, and the safety rules that apply to them before anything binds."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


class UnsafeSettingsError(ValueError):
    """The settings would expose the engine without protection; the message says what to add."""


def is_loopback(host: str) -> bool:
    if host.strip().lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: treat as exposed


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "ip6-localhost")


def parse_hosts(text: str | None) -> tuple[str, ...]:
    """`--allowed-hosts "api.example.com, 10.0.0.5"` -> lower-cased names ("*": any)."""
    if not text:
        return ()
    return tuple(h.strip().lower().strip("[]") for h in text.split(",") if h.strip())


def parse_origins(text: str | None) -> tuple[str, ...]:
    """`--cors "http://a, http://b"` -> ("http://a", "http://b"); "*" stays "*"."""
    if not text:
        return ()
    return tuple(o.strip() for o in text.split(",") if o.strip())


@dataclass(frozen=True)
class ApiSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    # /v1/admin's own key; None: admin takes the API key like every other route
    admin_key: str | None = None
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    max_body_bytes: int = 1_000_000  # 413 above this, checked while the body arrives
    log_prompts: bool = False  # prompts/completions go to the log only when asked for
    request_log_size: int = 500
    default_max_tokens: int = 256  # used when a request names no max_tokens
    # fields a request leaves unset take the model's generation_config.json values (vLLM's
    # --generation-config auto); False: the OpenAI defaults (temperature 1, top_p 1, ...)
    model_defaults: bool = True
    max_n: int = 8  # the most choices (n x prompts) one request may ask for
    # a stream writes at most once per interval: tokens that come faster are sent together
    # (like vLLM's --stream-interval, but in time, so slow streams are never held back);
    # 0 sends every token in its own chunk
    stream_interval_ms: float = 20.0
    # Host headers answered (DNS-rebinding guard). Empty: the loopback names when bound to
    # loopback, any host otherwise (an exposed server needs an API key); "*": any
    allowed_hosts: tuple[str, ...] = ()
    expose_paths: bool = False  # /v1/models shows model folders' paths only when asked
    # a request still running after this is cancelled (0: none). Not none by default: n=8,
    # ignore_eos and max_tokens at the full context must not hold every decode slot for good
    request_timeout_s: float = 600.0
    limit_concurrency: int = 1024  # open connections + requests beyond which uvicorn says 503
    header_timeout_s: float = 10.0  # a connection whose request headers take longer is closed
    body_timeout_s: float = 30.0  # a request body not all there this long after its start: 408
    # a stream whose client takes longer than this to accept one write is ended (and its
    # engine requests cancelled): a client that stops reading cannot hold a slot
    stream_write_timeout_s: float = 30.0
    # /v1/admin (routes_admin.py): off unless asked for; clients name models only by paths
    # relative to these roots, and quantize writes only under output_root
    allow_admin: bool = False
    model_roots: tuple[str, ...] = ()
    output_root: str | None = None  # None: state_dir()/quantized, as the wizard's runs

    def host_allowed(self, host: str) -> bool:
        """Whether a request with this Host header (port and brackets stripped) is served."""
        allowed = self.allowed_hosts or (LOOPBACK_NAMES if is_loopback(self.host) else ("*",))
        if "*" in allowed:
            return True
        if is_loopback(self.host) and host in LOOPBACK_NAMES:
            return True
        return host in allowed

    def check_safe(self) -> None:
        """Refuse to expose the engine beyond this machine without an API key."""
        if not is_loopback(self.host) and not self.api_key:
            raise UnsafeSettingsError(
                f"refusing to listen on {self.host} without an API key: pass --api-key KEY "
                "(or bind 127.0.0.1)")
        if "*" in self.cors_origins and not self.api_key:
            raise UnsafeSettingsError(
                "refusing --cors '*' without an API key: any web page could use this server; "
                "pass --api-key KEY or name the origins (--cors http://app.example)")
        if self.admin_key is not None and not self.admin_key.strip():
            raise UnsafeSettingsError("--admin-key must not be empty")
        if self.max_body_bytes < 1024:
            raise UnsafeSettingsError("max_body_bytes must be at least 1024")
        if self.stream_interval_ms < 0:
            raise UnsafeSettingsError("stream_interval_ms must be 0 or more")
        if self.max_n < 1:
            raise UnsafeSettingsError("max_n must be at least 1")
        if self.request_timeout_s < 0:
            raise UnsafeSettingsError("request_timeout_s must be 0 (none) or more")
        if self.limit_concurrency < 1:
            raise UnsafeSettingsError("limit_concurrency must be at least 1")
        if self.header_timeout_s <= 0 or self.body_timeout_s <= 0 \
                or self.stream_write_timeout_s <= 0:
            raise UnsafeSettingsError("the header, body and stream write timeouts must be "
                                      "positive")
        if self.allow_admin and not self.model_roots:
            raise UnsafeSettingsError("--allow-admin needs at least one --model-root DIR: the "
                                      "folders whose models clients may list, load and quantize")
