"""A serving run: `npu-console serve` on a free local port, `npu-console bench serve` against it
at the given concurrency, then the server is stopped (SIGTERM, then SIGKILL if it lingers). The
bench's JSON and the server's exit status go to stdout as one JSON document.

    python tests/device/gpu_serving.py --model DIR [--device cuda] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, server: subprocess.Popen, limit_s: float) -> str | None:
    """None once /health answers 200, else why not."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if server.poll() is not None:
            return f"the server exited with status {server.returncode} before it was healthy"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return None
        except OSError:
            pass
        time.sleep(0.5)
    return f"no healthy /health within {limit_s:.0f} s"


def stop(server: subprocess.Popen) -> int:
    server.send_signal(signal.SIGTERM)
    try:
        return server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        return server.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--start-limit", type=float, default=120.0)
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "npu_console.cli.main"]
    server = subprocess.Popen(
        [*cli, "serve", "--model", args.model, "--device", args.device, "--dtype", args.dtype,
         "--port", str(port), "--max-running", str(args.concurrency), "--grace", "5",
         "--log-level", "warning"], cwd=ROOT, stdout=sys.stderr)
    res: dict = {"ok": False, "base_url": url, "concurrency": args.concurrency}
    try:
        why = wait_healthy(url, server, args.start_limit)
        if why is None:
            bench = subprocess.run(
                [*cli, "bench", "serve", "--base-url", url, "--concurrency",
                 str(args.concurrency), "--num-prompts", str(args.num_prompts), "--input-len",
                 str(args.input_len), "--output-len", str(args.output_len), "--tokenizer",
                 args.model, "--json"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                check=False)
            why = f"bench serve exit {bench.returncode}" if bench.returncode else None
            out = bench.stdout
            if "{" in out:
                doc = json.loads(out[out.find("{"):])
                doc.pop("requests", None)  # one row per request: the metrics are enough here
                res["bench"] = doc
                failed = doc.get("metrics", {}).get("failed")
                why = why or (f"{failed} requests failed" if failed else None)
            else:
                res["bench"] = out[-2000:]
                why = why or "no JSON from bench serve"
        res["reason"] = why
        res["ok"] = why is None
    finally:
        res["server_exit"] = stop(server)
    print(json.dumps(res, indent=2, default=str))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
