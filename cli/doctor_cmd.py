"""`npu-console doctor`: the environment checklist."""

from __future__ import annotations

import json
import sys

_MARK = {"ok": "\u2713", "warn": "!", "fail": "\u2717", "info": "-"}


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check drivers, CANN, torch/torch_npu, devices and disk")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument("--npu-smi", default="npu-smi", help="npu-smi binary to try (default: from PATH)")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="also check a model folder or GGUF file: does it load, does it run "
                        "batched or unbatched (no native support for its architecture)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..engine.doctor import as_dict, run_checks

    checks = run_checks(args.npu_smi, model=args.model)
    if args.json:
        json.dump(as_dict(checks), sys.stdout, indent=2)
        print()
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f" {_MARK[c.status]} {c.name:<{width}}  {c.detail}")
            if c.fix and c.status != "ok":
                print(f"   {'':<{width}}  fix: {c.fix}")
    return 1 if any(c.status == "fail" for c in checks) else 0
