"""`npu-console serve`: load a model and serve the OpenAI-compatible API until SIGINT/SIGTERM."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading

from ..engine.runtime.config import KV_DTYPES
from .common import add_model_args, add_reasoning_arg, load_for_cli
from .errors import CliError
from .serve_admin import add_admin_args, admin_settings, warn_if_open
from .serve_telemetry import (
    add_telemetry_args,
    check_telemetry_args,
    start_poller,
)

API_KEY_ENV = "NPU_CONSOLE_API_KEY"


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the OpenAI-compatible HTTP API (headless)",
                       description="Load --model and serve /v1/chat/completions, /v1/completions, "
                                   "/v1/models, /health, /metrics and /v1/telemetry until Ctrl-C "
                                   "or SIGTERM; with --allow-admin also /v1/admin (list, load and "
                                   "unload models under --model-root, quantize into "
                                   "--output-root, follow and cancel those jobs).")
    add_model_args(p)
    p.add_argument("--name", default=None, help="model id clients use (default: folder name)")
    p.add_argument("--quant", default=None, choices=["w8a16", "w8a8-dynamic"],
                   help="also serve an INT8 copy of the model, as ID-METHOD (e.g. demo-w8a16); "
                        "requests pick a variant by its id")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs --api-key)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (0: any free port)")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"require 'Authorization: Bearer KEY' on every route but /health (or set "
                        f"{API_KEY_ENV}, which keeps the key out of the process list): "
                        "inference, /v1/models, /metrics, telemetry, and /v1/admin unless "
                        "--admin-key gives admin its own key")
    p.add_argument("--cors", default=None, metavar="ORIGINS",
                   help="comma-separated origins allowed by CORS, the only web pages that may "
                        "send requests ('*' needs --api-key; default: CORS off)")
    p.add_argument("--max-queue", type=int, default=256, metavar="N",
                   help="waiting requests beyond which clients get 429 (default 256)")
    p.add_argument("--max-running", type=int, default=None, metavar="N",
                   help="sequences decoded together (default: the engine's)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch threads of the engine (default: the engine's choice)")
    p.add_argument("--kv-dtype", default="auto", choices=KV_DTYPES,
                   help="the KV cache's dtype (auto: float16 on CPU with the native kernels, the "
                        "rows read into fp32 to attend, else float32; the model's dtype on "
                        "accelerators; float32 for bit-exact attention on CPU)")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000,
                   help="largest accepted request body (413 above it)")
    p.add_argument("--log-prompts", action="store_true",
                   help="write prompts to the log (off by default: prompts may be private)")
    p.add_argument("--stream-interval-ms", type=float, default=20.0, metavar="MS",
                   help="a stream writes at most this often; faster tokens go out together "
                        "(0: one chunk per token, for per-token ITL measurements)")
    p.add_argument("--generation-config", default="auto", choices=["auto", "none"],
                   help="auto: sampling fields a request leaves unset (temperature, top_p, "
                        "top_k, min_p, repetition_penalty) take the model's "
                        "generation_config.json values, as in vLLM; none: OpenAI's defaults")
    add_reasoning_arg(p)
    p.add_argument("--grace", type=float, default=10.0, metavar="S",
                   help="on stop, seconds open streams may run before they are cancelled")
    p.add_argument("--allowed-hosts", default=None, metavar="HOSTS",
                   help="comma-separated Host header names answered (DNS-rebinding guard; "
                        "default: the loopback names when bound to loopback, any otherwise; "
                        "'*': any)")
    p.add_argument("--expose-paths", action="store_true",
                   help="show the model folders' paths in /v1/models (off: only model ids)")
    p.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                   help="cancel a request still running after S seconds (504, or an error "
                        "event in a stream; default 600; 0: no limit)")
    p.add_argument("--limit-concurrency", type=int, default=1024, metavar="N",
                   help="open connections and requests beyond which new requests get 503 "
                        "(default 1024)")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="close a connection whose request headers take longer (default 10)")
    p.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                   help="answer 408 to a request body not all there S seconds after it "
                        "started (a total deadline; default 30)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_telemetry_args(p)
    add_admin_args(p)
    p.set_defaults(func=run)


def _check_args(args) -> None:
    from ..engine.api.settings import ApiSettings, UnsafeSettingsError, parse_origins

    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be between 0 and 65535, got {args.port}")
    if args.max_queue < 1:
        raise CliError(f"--max-queue must be at least 1, got {args.max_queue}")
    if args.max_running is not None and args.max_running < 1:
        raise CliError(f"--max-running must be at least 1, got {args.max_running}")
    if args.threads is not None and args.threads < 1:
        raise CliError(f"--threads must be at least 1, got {args.threads}")
    if args.grace < 0:
        raise CliError("--grace must not be negative")
    if args.stream_interval_ms < 0:
        raise CliError("--stream-interval-ms must not be negative")
    check_telemetry_args(args)
    try:
        ApiSettings(host=args.host, port=args.port, api_key=args.api_key,
                    cors_origins=parse_origins(args.cors),
                    max_body_bytes=args.max_body_bytes, **_hardening(args),
                    **admin_settings(args)).check_safe()
    except UnsafeSettingsError as exc:
        raise CliError(str(exc)) from None


def run(args) -> int:
    import logging

    from ..engine.api.ports import PortInUseError, ServerStartError, port_in_use

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    # fail before the imports of torch and a long model load, not after them
    _check_args(args)
    try:
        if args.port and port_in_use(args.host, args.port):
            raise CliError(str(PortInUseError(args.host, args.port)))
    except ServerStartError as exc:
        raise CliError(str(exc)) from None

    from ..engine.api import ServerController
    from ..engine.api.settings import UnsafeSettingsError, parse_origins
    from ..engine.runtime.config import EngineConfig
    from ..engine.runtime.engine import LocalEngine
    from ..engine.runtime.types import EngineError

    loaded = load_for_cli(args)
    config = EngineConfig(max_waiting=args.max_queue,
                          reasoning_parser=args.reasoning_parser, kv_dtype=args.kv_dtype)
    if args.max_running:
        config.max_running = args.max_running
    if args.threads:
        config.num_threads = args.threads
    engine = LocalEngine(config)
    poller = None
    try:
        name = args.name or loaded.name
        try:
            info = engine.add_model(loaded, name=name, default=True).result()
            if args.quant:
                quantized = add_int8_variant(engine, load_for_cli(args, quiet=True), args.quant,
                                             f"{name}-{args.quant}")
                print(f"also serving {quantized.name} ({quantized.quantization})",
                      file=sys.stderr, flush=True)
        except EngineError as exc:
            raise CliError(str(exc)) from None
        # the model's objects live as long as the process: keep the collector from walking them
        # (a full collection over torch and transformers stalls every request for ~1 s)
        gc.collect()
        gc.freeze()
        poller = start_poller(args, engine)
        controller = ServerController(engine, telemetry_poller=poller)
        try:
            url = controller.start(args.host, args.port, api_key=args.api_key,
                                   cors_origins=parse_origins(args.cors),
                                   max_body_bytes=args.max_body_bytes,
                                   log_prompts=args.log_prompts, log_level=args.log_level,
                                   stream_interval_ms=args.stream_interval_ms,
                                   model_defaults=args.generation_config == "auto",
                                   **_hardening(args), **admin_settings(args))
        except (ServerStartError, UnsafeSettingsError) as exc:
            raise CliError(str(exc)) from None
        warn_if_open(args)
        print(f"serving {info.name} ({info.architecture}, {info.dtype} on {info.device}) at "
              f"{url}/v1  -  Ctrl-C to stop", file=sys.stderr, flush=True)
        try:
            _wait_for_signal(controller, engine)
        except CliError:
            # the engine is dead: nothing left to wait for, and a client holding a connection
            # (a body half sent) must not keep the process up; exit within 5 s
            controller.stop(grace_s=0.5, wait_s=1.0)
            raise
        print("stopping: letting open streams finish", file=sys.stderr, flush=True)
        controller.stop(grace_s=args.grace)
    finally:
        if poller is not None:
            poller.close()
        engine.shutdown()
    print("stopped", file=sys.stderr, flush=True)
    return 0


def _hardening(args) -> dict:
    """The ApiSettings fields behind --allowed-hosts, --expose-paths and the timeouts."""
    from ..engine.api.settings import parse_hosts

    return {"allowed_hosts": parse_hosts(args.allowed_hosts), "expose_paths": args.expose_paths,
            "request_timeout_s": args.request_timeout,
            "limit_concurrency": args.limit_concurrency,
            "header_timeout_s": args.header_timeout, "body_timeout_s": args.body_timeout}


def add_int8_variant(engine, loaded, method: str, name: str):
    """Quantize a second copy of the model in memory (methods that need no calibration) and
    serve it beside the float one; returns its ModelInfo."""
    from ..engine.quant import (
        QuantConfig,
        QuantError,
        prepare_for_serving,
        quantize_model,
    )
    from ..engine.runtime.threads import run_in_fresh_thread

    def quantize() -> None:
        quantize_model(loaded.model, QuantConfig(method=method))
        prepare_for_serving(loaded.model)

    try:
        run_in_fresh_thread(quantize, name="quantize")
    except QuantError as exc:
        raise CliError(f"cannot quantize {loaded.name}: {exc}") from None
    loaded.quantization = method
    return engine.add_model(loaded, name=name).result()


def _wait_for_signal(controller, engine, poll_s: float = 0.25) -> None:
    """Block until SIGINT/SIGTERM; raise CliError (exit status 1, so a service manager
    restarts the process) when the server thread or the engine loop dies first."""
    stop = threading.Event()
    previous = {}

    def handler(signum, frame) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    try:
        while not stop.wait(poll_s):
            if not controller.is_running:
                raise CliError("the API server stopped unexpectedly", code=1)
            crashed = getattr(engine, "crash_reason", None)
            if crashed:
                raise CliError(f"the engine stopped: {crashed}", code=1)
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)
