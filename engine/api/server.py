"""Run the API with uvicorn on a thread of its own: used by the GUI and by `npu-console serve`.

The controller binds the listening socket itself, so "port in use" is a typed error raised by
start() (no race between a check and uvicorn's own bind, no sys.exit from inside uvicorn), and a
port of 0 picks a free one. uvicorn runs on its own event loop in its own thread and installs no
signal handlers there; stop() stops accepting, gives running streams a grace period, then cancels
their engine requests so they end cleanly with [DONE] instead of being cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from ..runtime.types import EngineClient
from .app import build_app
from .ports import ServerStartError, bound_socket
from .request_log import RequestLog
from .settings import ApiSettings
from .slow_clients import protocol_class

log = logging.getLogger("npu_console.engine.api")


class _ThreadServer(uvicorn.Server):
    def capture_signals(self):
        # signals belong to whoever owns the process (the GUI, or serve_cmd's main thread)
        return contextlib.nullcontext()


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (Linux, macOS), else asyncio's own loop.

    The server thread shares the GIL with the engine thread, so every bit of Python it runs
    per streamed token is time the engine waits; uvloop runs the loop and its socket writes in
    C. Measured on the 2-core test VM: streaming at concurrency 8 went from 0.85 to 0.95 of
    in-process throughput with this alone (docs/benchmarks.md#http-api).
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


class ServerController:
    """Start and stop the API many times over one engine; one server at a time."""

    def __init__(self, engine: EngineClient, *, request_log: RequestLog | None = None,
                 telemetry_poller: Any = None):
        self.engine = engine
        self.request_log = request_log if request_log is not None else RequestLog()
        self.telemetry_poller = telemetry_poller
        self._lock = threading.Lock()
        self._server: _ThreadServer | None = None
        self._thread: threading.Thread | None = None
        self._app = None
        self._settings: ApiSettings | None = None
        self._port: int | None = None
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ state
    @property
    def is_running(self) -> bool:
        t, s = self._thread, self._server
        return bool(t and t.is_alive() and s and s.started and not s.should_exit)

    @property
    def url(self) -> str | None:
        if self._settings is None or self._port is None or not self.is_running:
            return None
        return _url(self._settings.host, self._port)

    @property
    def port(self) -> int | None:
        return self._port if self.is_running else None

    @property
    def settings(self) -> ApiSettings | None:
        return self._settings

    @property
    def app(self):
        return self._app

    # ------------------------------------------------------------------ lifecycle
    def start(self, host: str = "127.0.0.1", port: int = 8000, *, api_key: str | None = None,
              cors_origins: tuple[str, ...] | list[str] = (), log_level: str = "warning",
              startup_timeout_s: float = 15.0, **settings_kw: Any) -> str:
        """Listen on host:port (0 = any free port) and return the base URL.

        Raises UnsafeSettingsError (non-loopback without a key), PortInUseError or
        ServerStartError, each with a one-line message.
        """
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise ServerStartError(f"the server is already running at {self.url}")
            settings = ApiSettings(host=host, port=port, api_key=api_key or None,
                                   cors_origins=tuple(cors_origins), **settings_kw)
            settings.check_safe()
            app = build_app(self.engine, settings, request_log=self.request_log,
                            telemetry_poller=self.telemetry_poller)
            sock = bound_socket(host, port)
            sock.listen(2048)
            # slow clients: idle keep-alive connections close after 5 s, headers must arrive
            # within header_timeout_s (slow_clients.py), a body within body_timeout_s
            # (BodyLimitMiddleware); beyond limit_concurrency connections uvicorn answers 503
            config = uvicorn.Config(app, log_config=None, log_level=log_level, access_log=False,
                                    lifespan="off", loop="asyncio",
                                    http=protocol_class(settings.header_timeout_s),
                                    timeout_keep_alive=5, backlog=2048,
                                    limit_concurrency=settings.limit_concurrency)
            server = _ThreadServer(config)
            self._error = None
            thread = threading.Thread(target=self._run, args=(server, sock),
                                      name=f"npu-console-api:{sock.getsockname()[1]}",
                                      daemon=True)
            self._server, self._thread, self._app = server, thread, app
            self._settings = settings
            self._port = sock.getsockname()[1]
            thread.start()
            deadline = time.monotonic() + startup_timeout_s
            while not server.started and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            if not server.started:
                server.should_exit = True
                thread.join(5)
                sock.close()
                reason = f": {self._error}" if self._error else ""
                raise ServerStartError(f"the API server did not start{reason}")
            log.info("API listening on %s", self.url)
            return _url(host, self._port)

    def _run(self, server: _ThreadServer, sock: socket.socket) -> None:
        loop = _new_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(server.serve(sockets=[sock]))
        except BaseException as exc:  # noqa: BLE001 - reported through start()/stop()
            self._error = exc
            log.error("API server stopped with an error: %s", exc)
        finally:
            sock.close()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def stop(self, grace_s: float = 5.0, *, wait_s: float = 5.0) -> None:
        """Stop accepting, let open streams run up to `grace_s`, then cancel them and give
        them `wait_s` to end before the server is forced down (admin jobs get the grace plus
        `wait_s` to clean up); returns when the port is free and the server thread has ended.

        An engine that died needs no grace: stop(0.5, wait_s=1) ends within a few seconds
        whatever the clients do (a body half sent, a connection held open)."""
        with self._lock:
            server, thread = self._server, self._thread
            if server is None or thread is None:
                return
            server.should_exit = True
            # telemetry streams never end on their own: end them now, not after the grace
            self._app.state.telemetry_streams.close_all()
            # admin jobs are cancelled (a quantization removes its output) and their event
            # streams end with the final state
            admin = getattr(self._app.state, "admin", None)
            started = time.monotonic()
            if admin is not None:
                admin.close(wait_s=grace_s + wait_s)
            thread.join(max(0.0, grace_s - (time.monotonic() - started)))
            if thread.is_alive():
                cancelled = self._app.state.ctx.cancel_all()
                log.info("grace period over: cancelled %d running request(s)", cancelled)
                thread.join(wait_s)
            if thread.is_alive():
                server.force_exit = True
                thread.join(5.0)
            if thread.is_alive():
                log.error("API server thread did not end")
            self._app.state.metrics.close()
            self._server = self._thread = None
            self._port = None
