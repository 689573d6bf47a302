"""`npu-console serve` whose engine holds every step for SLOW_STEP_S seconds (default 0.03), for
the tests that act on a remote stream while it runs (stop it, kill the server under it): the
demo model decodes hundreds of tokens in well under a second, faster than a test can act. The
runner is the real one, its `execute` wrapped on the instance, as serve_with_fault.py does.

    SLOW_STEP_S=0.03 python tests/fakes/serve_slowed.py serve --model DIR --port 0 ...
"""

from __future__ import annotations

import os
import sys
import time


def plant(delay_s: float) -> None:
    from npu_console.engine.runtime import variant

    real_make_runner = variant.make_runner

    def make_runner(*args, **kwargs):
        runner = real_make_runner(*args, **kwargs)
        original = runner.execute

        def execute(items, decode_count):
            time.sleep(delay_s)
            return original(items, decode_count)
        runner.execute = execute
        return runner
    variant.make_runner = make_runner


if __name__ == "__main__":
    plant(float(os.environ.get("SLOW_STEP_S", "0.03")))
    from npu_console.cli.main import main

    sys.exit(main(sys.argv[1:]))
