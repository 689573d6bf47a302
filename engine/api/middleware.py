"""Pure ASGI middleware: request log, API-key check and body-size limit.

Pure ASGI (not BaseHTTPMiddleware) so streaming responses pass through untouched and a client's
disconnect still reaches the route.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any

from .request_log import RequestInfo, RequestLog, RequestLogEntry

log = logging.getLogger("npu_console.engine.api")

Scope = dict[str, Any]

INFO_KEY = "npu_console_request_info"


def request_info(scope_state: Any) -> RequestInfo:
    """The RequestInfo of the current request (a fresh one if the middleware is not installed)."""
    info = getattr(scope_state, INFO_KEY, None)
    return info if info is not None else RequestInfo()


async def _send_json_error(send, status: int, message: str, error_type: str, code: str | None,
                           extra_headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"error": {"message": message, "type": error_type, "param": None,
                                 "code": code}}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()), *extra_headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def printable(text: str, limit: int = 500) -> str:
    """`text` with control characters (newlines, escapes) and backslashes written as escapes,
    cut to `limit` characters: one log line per request, whatever the client sent."""
    out = []
    for ch in text[:limit]:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out) + ("..." if len(text) > limit else "")


class RequestLogMiddleware:
    def __init__(self, app, request_log: RequestLog, log_prompts: bool = False):
        self.app = app
        self.request_log = request_log
        self.log_prompts = log_prompts

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.time()
        t0 = time.perf_counter()
        info = RequestInfo()
        scope.setdefault("state", {})[INFO_KEY] = info
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            client = scope.get("client")
            entry = RequestLogEntry(
                time=started, method=scope.get("method", ""), route=scope.get("path", ""),
                status=status["code"], duration_s=time.perf_counter() - t0, model=info.model,
                prompt_tokens=info.prompt_tokens, completion_tokens=info.completion_tokens,
                ttft_s=info.ttft_s, stream=info.stream,
                client=f"{client[0]}:{client[1]}" if client else None,
                finish_reason=info.finish_reason, error=info.error,
                prompt=info.prompt if self.log_prompts else None,
                template=getattr(scope.get("route"), "path", None))
            self.request_log.add(entry)
            if log.isEnabledFor(logging.INFO):
                tokens = "" if entry.prompt_tokens is None else \
                    f" {entry.prompt_tokens}+{entry.completion_tokens or 0} tok"
                # the path as the client wrote it, escaped: a decoded %0a would start a
                # forged line in the log
                log.info("%s %s %d%s %.3fs", printable(entry.method), printable(entry.route),
                         entry.status, tokens, entry.duration_s)
                if self.log_prompts and info.prompt is not None:
                    log.info("prompt: %s", printable(info.prompt, 4000))


class ApiKeyMiddleware:
    """Bearer check on every route but /health (and CORS preflights, which carry no key).

    /v1/admin takes `admin_key` when one is set (the API key then opens only inference), else
    the API key; without an API key, the other routes are open."""

    OPEN_PATHS = ("/health",)
    ADMIN_PREFIX = "/v1/admin"

    def __init__(self, app, api_key: str | None, admin_key: str | None = None):
        self.app = app
        self._key = api_key.encode() if api_key else None
        self._admin_key = admin_key.encode() if admin_key else None

    def _required(self, path: str) -> tuple[bytes | None, str]:
        admin = path == self.ADMIN_PREFIX or path.startswith(self.ADMIN_PREFIX + "/")
        if admin and self._admin_key is not None:
            return self._admin_key, "admin key"
        return self._key, "API key"

    async def __call__(self, scope: Scope, receive, send) -> None:
        if (scope["type"] != "http" or scope.get("path") in self.OPEN_PATHS
                or scope.get("method") == "OPTIONS"):
            await self.app(scope, receive, send)
            return
        key, what = self._required(scope.get("path", ""))
        if key is None:
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = token.strip()
                break
        # compare_digest on equal-type bytes: the time taken does not leak how much matched
        if given and hmac.compare_digest(given, key):
            await self.app(scope, receive, send)
            return
        state = scope.get("state")
        if isinstance(state, dict) and INFO_KEY in state:
            state[INFO_KEY].error = f"missing or invalid {what}"
        message = (f"invalid {what}" if given else
                   f"missing {what}: send 'Authorization: Bearer <key>'")
        await _send_json_error(send, 401, message, "authentication_error", "invalid_api_key",
                               [(b"www-authenticate", b"Bearer")])


def host_name(value: bytes) -> str:
    """A Host header's name: lower case, without port, IPv6 brackets or a trailing dot."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        text = text[1:text.index("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text.rstrip(".")


class HostCheckMiddleware:
    """Answer only requests whose Host header names this server (settings.host_allowed).

    A web page whose DNS name is re-pointed at 127.0.0.1 (DNS rebinding) reaches a loopback
    server as its own origin, so the browser lets it read the answers; its requests still
    carry the page's name in Host, which is refused here."""

    def __init__(self, app, settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] == "http":
            host = next((v for k, v in scope.get("headers", ()) if k == b"host"), None)
            name = host_name(host) if host is not None else None
            if name is None or not self.settings.host_allowed(name):
                # no Host at all is refused too: every HTTP/1.1 client sends one, and a
                # request without it could not be told from a rebinding page's
                message = ("the request has no Host header (DNS rebinding guard)"
                           if name is None else
                           f"host {name[:200]!r} is not served here (DNS rebinding guard); "
                           "allow it with --allowed-hosts")
                state = scope.get("state")
                if isinstance(state, dict) and INFO_KEY in state:
                    state[INFO_KEY].error = message
                await _send_json_error(send, 400, message, "invalid_request_error",
                                       "invalid_host")
                return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a body over `limit` bytes, decided before the whole body has been read.

    The body is buffered here (requests are small JSON) and replayed to the app; after the replay
    the app's receive() goes to the connection again, so disconnects are still seen. A body
    not all there `timeout` seconds after it started gets 408 and the connection is closed
    (slow clients).

    Before a 413 the rest of a body of up to DRAIN_FACTOR x `limit` is read and dropped: a
    server that closes with unread data resets the connection, and the client, still sending,
    loses the 413 and sees only "connection reset" (1 in 3 such requests in the soak). A larger
    body is answered at once and the connection closed.
    """

    DRAIN_FACTOR = 4

    def __init__(self, app, limit: int, timeout: float = 30.0):
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.limit:
                    if declared <= self.limit * self.DRAIN_FACTOR:
                        await self._drain(receive, time.monotonic() + self.timeout, declared)
                    await self._too_large(scope, send, declared)
                    return
        chunks: list[bytes] = []
        total = 0
        # one deadline for the whole body, not per chunk: a client that trickles a byte a
        # second must not hold the request open
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(),
                                                 max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                await _send_json_error(send, 408, f"the request body did not arrive within "
                                       f"{self.timeout:g} s", "invalid_request_error",
                                       "body_timeout", [(b"connection", b"close")])
                return
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body: nothing to answer
            body = message.get("body", b"")
            total += len(body)
            if total > self.limit:
                if message.get("more_body", False):
                    await self._drain(receive, deadline, self.limit * self.DRAIN_FACTOR - total)
                await self._too_large(scope, send, None)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _drain(receive, deadline: float, budget: int) -> None:
        """Read and drop the body until its end, `budget` bytes, the deadline or a disconnect."""
        while budget > 0:
            try:
                message = await asyncio.wait_for(receive(),
                                                 max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                return
            budget -= len(message.get("body", b""))

    async def _too_large(self, scope: Scope, send, declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else f"more than {self.limit} bytes"
        message = f"request body too large: {size}, the limit is {self.limit} bytes"
        state = scope.get("state")
        if isinstance(state, dict) and INFO_KEY in state:
            state[INFO_KEY].error = message
        # close the connection: the rest of a larger body is never read
        await _send_json_error(send, 413, message, "invalid_request_error", "body_too_large",
                               [(b"connection", b"close")])


class AdmissionMiddleware:
    """Shed load cheaply: while the engine queue is full, a generation request gets its 429
    before its body is parsed or its prompt tokenized, so a burst of excess clients costs the
    server little and /health stays quick. The engine's own check at submit stays the
    authority; this one only saves work."""

    ROUTES = ("/v1/chat/completions", "/v1/completions", "/chat")

    def __init__(self, app, engine):
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Scope, receive, send) -> None:
        if (scope["type"] == "http" and scope.get("method") == "POST"
                and scope.get("path") in self.ROUTES):
            try:
                stats = self.engine.stats()
                full = stats.max_waiting > 0 and stats.waiting >= stats.max_waiting
            except Exception:  # noqa: BLE001 - no verdict: let the route decide
                full = False
            if full:
                message = (f"the engine queue is full ({stats.max_waiting} waiting requests); "
                           "retry later")
                state = scope.get("state")
                if isinstance(state, dict) and INFO_KEY in state:
                    state[INFO_KEY].error = message
                await _send_json_error(send, 429, message, "rate_limit_error", "queue_full",
                                       [(b"retry-after", b"1")])
                return
        await self.app(scope, receive, send)
