"""The console's API server as a model, free of Qt (napari-style): it owns the server (an
engine.api ServerController over the console's engine), its request log, its API key and the
engine's queue limit. The Server page is a view bound to it; the Benchmark page asks it for the
URL and key of "this console's server". Start and stop run on a worker thread
(console.threads): binding and uvicorn's start-up, or a stop's grace period, never block the
caller. It announces on `events` (console.events.Emitter): "state" with a ServerState at each
change (starting and stopping on the caller's thread, the outcome on the worker's), and
"log_entry" with each finished request (on the server's thread)."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine.api.settings import ApiSettings, parse_hosts
from .events import Emitter
from .threads import start_thread

log = logging.getLogger(__name__)

LOG_ROWS = 500


@dataclass(frozen=True)
class ServerState:
    """What the API server is doing: "stopped", "starting", "running" (at url), "stopping",
    or "failed": the start or stop named by `op` ended with `error` (one line)."""

    phase: str = "stopped"
    url: str | None = None
    error: str = ""
    op: str = ""


@dataclass(frozen=True)
class AdvancedOptions:
    """The API hardening options `serve` takes on its command line, as the Server page's
    Advanced group sets them; the defaults are ApiSettings' own (serve's defaults)."""

    allowed_hosts: str = ""  # as --allowed-hosts: comma-separated names, "*" for any
    request_timeout_s: float = ApiSettings.request_timeout_s  # --request-timeout (0: none)
    header_timeout_s: float = ApiSettings.header_timeout_s  # --header-timeout
    body_timeout_s: float = ApiSettings.body_timeout_s  # --body-timeout
    limit_concurrency: int = ApiSettings.limit_concurrency  # --limit-concurrency
    expose_paths: bool = ApiSettings.expose_paths  # --expose-paths

    def settings_kw(self) -> dict[str, Any]:
        """The ApiSettings fields, named and parsed as serve passes them."""
        kw = dataclasses.asdict(self)
        kw["allowed_hosts"] = parse_hosts(self.allowed_hosts)
        return kw


class ServerService:
    def __init__(self, engine: Callable[[], Any], key_store: Any,
                 poller: Callable[[], Any] = lambda: None):
        self._engine = engine  # the console's engine, once it exists
        self._poller = poller  # the telemetry poller behind /v1/telemetry
        self.key_store = key_store  # console.api_key_store.ApiKeyStore
        self.api_key: str = key_store.load()
        self.controller = None
        self.request_log = None
        self.url: str | None = None
        self._busy = False
        self.state = ServerState()
        self.events = Emitter()  # "state" (ServerState), "log_entry" (RequestLogEntry)
        self._unsubscribe = None

    # ------------------------------------------------------------------ state
    def running(self) -> bool:
        return self.controller is not None and self.controller.is_running

    def busy(self) -> bool:
        return self._busy

    def key(self) -> str | None:
        """The key clients must send, or None for an open (loopback) server."""
        return self.api_key.strip() or None

    def set_key(self, key: str, save: bool = False) -> None:
        self.api_key = key
        if save:
            self.key_store.save(key)

    def generate_key(self) -> str:
        key = secrets.token_urlsafe(24)
        self.set_key(key, save=True)
        return key

    def set_queue_limit(self, limit: int) -> None:
        """Hand the queue limit to the engine, its one owner (Chat shares it; the admission
        middleware answers 429 from it before parsing a body); safe while requests run."""
        engine = self._engine()
        if engine is not None and hasattr(engine, "set_max_waiting"):
            engine.set_max_waiting(int(limit))


    def clear_log(self) -> None:
        if self.request_log is not None:
            self.request_log.clear()

    # ------------------------------------------------------------------ start / stop
    def start_problem(self, host: str) -> str | None:
        """Why a start on `host` would be refused now, or None."""
        if self._busy or self.running():
            return "The server is already running."
        if self._engine() is None:
            return ("The engine is not running yet: wait for it or load a model on the "
                    "Models page.")
        if host != "127.0.0.1" and not self.key():
            return "Listening on the network needs an API key: press Generate."
        return None

    def start(self, host: str, port: int, cors: str,
              options: AdvancedOptions | None = None) -> str | None:
        """Start on a worker thread; a reason (and nothing started) when it cannot. `options`
        apply from this start until the server stops."""
        problem = self.start_problem(host)
        if problem:
            return problem
        engine, key, poller = self._engine(), self.key(), self._poller()
        extra = (options or AdvancedOptions()).settings_kw()
        self._busy = True
        self._set_state(ServerState("starting"))

        def work():
            # fastapi/uvicorn/pydantic import here, never on the GUI thread: the import takes
            # a while, and racing a model load's imports of pydantic broke it half-initialised
            try:
                from ..engine.api.request_log import RequestLog
                from ..engine.api.server import ServerController
                from ..engine.api.settings import parse_origins

                if self.controller is None or self.controller.engine is not engine:
                    if self.request_log is None:
                        self.request_log = RequestLog(LOG_ROWS)
                        self._unsubscribe = self.request_log.subscribe(self._log_entry)
                    self.controller = ServerController(engine, request_log=self.request_log,
                                                       telemetry_poller=poller)
                url = self.controller.start(host, port, api_key=key,
                                            cors_origins=parse_origins(cors), **extra)
            except Exception as exc:  # noqa: BLE001 - shown as one line on the page
                self._ended("start", "", str(exc).splitlines()[0] or type(exc).__name__)
            else:
                self._ended("start", url, "")

        start_thread(work, "server-start")
        return None

    def stop(self) -> bool:
        if self._busy or not self.running():
            return False
        controller = self.controller
        self._busy = True
        self._set_state(ServerState("stopping", self.url))

        def work():
            try:
                controller.stop(grace_s=2.0)
            except Exception as exc:  # noqa: BLE001
                self._ended("stop", "", str(exc).splitlines()[0] or type(exc).__name__)
            else:
                self._ended("stop", "", "")

        start_thread(work, "server-stop")
        return True

    def shutdown(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.running():
            self.controller.stop(grace_s=0.5)

    def _ended(self, op: str, url: str, error: str) -> None:
        self.url = url or None
        self._busy = False
        if error:
            self._set_state(ServerState("failed", self.url, error, op))
        else:
            self._set_state(ServerState("running" if op == "start" else "stopped", self.url))

    def _set_state(self, state: ServerState) -> None:
        self.state = state
        self.events.emit("state", state)

    def _log_entry(self, entry: Any) -> None:
        self.events.emit("log_entry", entry)


def log_cells(e: Any) -> tuple[str, ...]:
    """A RequestLogEntry as the request log's row says it: time, route, status, model, tokens
    (prompt → completion), TTFT and duration."""
    tokens = "" if e.completion_tokens is None else \
        f"{e.prompt_tokens or 0} → {e.completion_tokens}"
    return (time.strftime("%H:%M:%S", time.localtime(e.time)), f"{e.method} {e.route}",
            str(e.status), e.model or "", tokens,
            "" if e.ttft_s is None else f"{e.ttft_s * 1000:.0f} ms",
            f"{e.duration_s * 1000:.0f} ms")
