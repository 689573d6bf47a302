"""Running a command cut off from the network: in a network namespace with no interfaces where
this machine allows one, else through a dead proxy; pip's own configuration left out."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess


@functools.cache
def offline_prefix() -> list[str]:
    """Run a command in a network namespace of its own (no interfaces) when this machine allows it."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True,
                                                  timeout=20, check=False).returncode == 0:
        return ["unshare", "-n"]
    return []  # then offline_env's dead proxy stands in


def offline_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    # without a namespace, any attempt to reach the network hits a closed local port
    dead = "http://127.0.0.1:9"
    env.update(http_proxy=dead, https_proxy=dead, HTTP_PROXY=dead, HTTPS_PROXY=dead)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env
