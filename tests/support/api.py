"""Helpers for the API tests: real engines on stories260K and real servers on loopback.

Engines are cached per configuration for the whole run (loading costs seconds on a busy
2-core machine), servers are started per test module on a free port.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from pathlib import Path

import httpx

_ENGINES: dict[tuple, object] = {}
_LOCK = threading.Lock()

STORY_PROMPT = "Once upon a time"


def engine_for(stories_dir: Path, name: str = "stories", extra_names: tuple[str, ...] = (),
               **config):
    """A LocalEngine with stories260K loaded as `name` and again under each extra name: a name
    ending in "-bf16" loads it in bfloat16, one ending in "-w8a16" or "-w8a8-dynamic" serves an
    INT8 copy quantized with that method (as `npu-console serve --quant` does)."""
    from npu_console.engine.runtime.config import EngineConfig
    from npu_console.engine.runtime.engine import LocalEngine

    # one torch thread: on a shared 2-core machine two spinning OpenMP threads made decode of
    # this tiny model about 25x slower than one
    config.setdefault("num_threads", 1)
    key = (str(stories_dir), name, extra_names, tuple(sorted(config.items())))
    with _LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            eng = LocalEngine(EngineConfig(**config))
            eng.load(stories_dir, name=name, default=True).result(300)
            for extra in extra_names:
                method = next((m for m in ("w8a16", "w8a8-dynamic") if extra.endswith(m)), None)
                if method:
                    from npu_console.cli.serve_cmd import add_int8_variant
                    from npu_console.engine.models import load_model

                    add_int8_variant(eng, load_model(stories_dir), method, extra)
                else:
                    eng.load(stories_dir, name=extra, dtype="bfloat16").result(300)
            _ENGINES[key] = eng
        return eng


def default_engine(stories_dir: Path):
    """The engine most API tests share: stories260K as "stories" (float32, the default), as
    "stories-bf16" and as an INT8 (W8A8 dynamic) "stories-w8a8-dynamic"."""
    return engine_for(stories_dir, extra_names=("stories-bf16", "stories-w8a8-dynamic"))


@contextlib.contextmanager
def own_engine(model, name: str | None = None, timeout: float = 300, **config):
    """A LocalEngine of the caller's own (one torch thread unless `config` says otherwise) with
    `model` in it as `name`: a folder to load, a LoadedModel to add, or None for an empty
    engine. For tests that wrap its parts (fakes.faults) or need their own configuration: the
    shared engines above stay untouched."""
    from npu_console.engine.runtime import EngineConfig, LocalEngine

    config.setdefault("num_threads", 1)
    eng = LocalEngine(EngineConfig(**config))
    try:
        if isinstance(model, (str, Path)):
            eng.load(model, name=name).result(timeout)
        elif model is not None:
            eng.add_model(model, name=name).result(timeout)
        yield eng
    finally:
        eng.shutdown(5)


@contextlib.contextmanager
def keyed_server(model_dir: Path, name: str, api_key: str, max_running: int):
    """A LocalEngine of its own serving `model_dir` as `name` on loopback behind `api_key`:
    yields (engine, url)."""
    from npu_console.engine.api import ServerController
    from npu_console.engine.runtime import EngineConfig, LocalEngine

    engine = LocalEngine(EngineConfig(max_running=max_running, num_threads=1))
    try:
        engine.load(model_dir, name=name).result(300)  # a loaded shared machine
        controller = ServerController(engine)
        url = controller.start(port=0, api_key=api_key)
        try:
            yield engine, url
        finally:
            controller.stop(grace_s=1.0)
    finally:
        engine.shutdown()


@atexit.register
def _shutdown_engines() -> None:
    for eng in _ENGINES.values():
        eng.shutdown(2.0)


@contextlib.contextmanager
def running_server(engine, **start_kw):
    from npu_console.engine.api import ServerController

    controller = ServerController(engine)
    start_kw.setdefault("host", "127.0.0.1")
    start_kw.setdefault("port", 0)
    url = controller.start(**start_kw)
    try:
        yield controller, url
    finally:
        controller.stop(grace_s=2.0)


def sse_events(lines) -> list:
    """Parsed `data:` payloads of an SSE stream ("[DONE]" kept as the string)."""
    out = []
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream_post(url: str, body: dict, timeout: float = 120.0, headers=None) -> list:
    with httpx.stream("POST", url, json=body, timeout=timeout, headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r.iter_lines())


def token_count(stories_dir: Path, text: str, special: bool = True) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(stories_dir))
    return len(tok.encode(text, add_special_tokens=special))


def metric_value(metrics_text: str, name: str) -> float | None:
    """Sum of the samples of `name` (any labels) in Prometheus text, None if absent."""
    total = None
    for line in metrics_text.splitlines():
        if line.startswith("#"):
            continue
        metric, _, value = line.rpartition(" ")
        base = metric.split("{", 1)[0]
        if base == name:
            total = (total or 0.0) + float(value)
    return total


# ----------------------------------------------------------------------------- load clients


async def stream_completion(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    """One streaming request: status, text, final usage, whether [DONE] came last."""
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return {"status": r.status_code, "retry_after": r.headers.get("retry-after"),
                    "body": r.json()}
        text, usage, last = [], None, None
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            last = line[6:]
            if last == "[DONE]":
                continue
            chunk = json.loads(last)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk["choices"]:
                text.append(c["text"])
        return {"status": 200, "text": "".join(text), "usage": usage, "done": last == "[DONE]"}


def run_stream_clients(base_url: str, bodies: list[dict], stagger_s: float = 0.0) -> list[dict]:
    """One connection per body against /v1/completions, client i starting i * stagger_s
    after the first (all of them then overlap: each lasts far longer than the ramp)."""
    import asyncio

    async def one(client, i, body):
        await asyncio.sleep(i * stagger_s)
        return await stream_completion(client, base_url + "/v1/completions", body)

    async def main():
        limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits, timeout=300) as client:
            return await asyncio.gather(*[one(client, i, b) for i, b in enumerate(bodies)])
    return asyncio.run(main())


def run_stream_clients_in_subprocess(base_url: str, bodies: list[dict],
                                     stagger_s: float = 0.0) -> list[dict]:
    """The same from another process, as real clients would be: the server's process then
    shares its GIL with nobody but the engine."""
    import subprocess
    import sys

    # niced: on a 2-core machine the load generator must not starve the server it measures
    out = subprocess.run([sys.executable, __file__, base_url, str(stagger_s)],
                         input=json.dumps(bodies),
                         capture_output=True, text=True, timeout=600, check=False,
                         preexec_fn=lambda: os.nice(10))
    if out.returncode != 0:
        raise RuntimeError(f"load client failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


if __name__ == "__main__":
    import sys

    print(json.dumps(run_stream_clients(sys.argv[1], json.loads(sys.stdin.read()),
                                        float(sys.argv[2]))))
