"""`npu-console serve` with a fatal fault planted in its engine, for the fail-fast tests:
every runner the engine builds is the real one with its `execute` wrapped on the instance, and
a request whose sampling seed is CRASH_SEED kills the engine loop (fakes.faults.EngineKilled).

    python tests/fakes/serve_with_fault.py serve --model DIR --port 0 ...
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `fakes`

CRASH_SEED = 4242


def plant() -> None:
    from npu_console.engine.runtime import variant

    from fakes.faults import EngineKilled

    real_make_runner = variant.make_runner

    def make_runner(*args, **kwargs):
        runner = real_make_runner(*args, **kwargs)
        original = runner.execute

        def execute(items, decode_count):
            if any(it.seq.params.seed == CRASH_SEED for it in items):
                raise EngineKilled("injected: the engine thread was killed")
            return original(items, decode_count)
        runner.execute = execute
        return runner
    variant.make_runner = make_runner


if __name__ == "__main__":
    plant()
    from npu_console.cli.main import main

    sys.exit(main(sys.argv[1:]))
