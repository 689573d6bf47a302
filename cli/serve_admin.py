"""`npu-console serve`'s admin endpoints (/v1/admin, engine/api/routes_admin.py): off unless
--allow-admin; clients then list, load and quantize models under the --model-root folders only,
and quantize into --output-root."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .errors import CliError

ADMIN_KEY_ENV = "NPU_CONSOLE_ADMIN_KEY"


def add_admin_args(p) -> None:
    p.add_argument("--allow-admin", action="store_true",
                   help="serve /v1/admin: list the models under --model-root, load and unload "
                        "them, quantize one into --output-root, follow and cancel those jobs "
                        "(off: those routes answer 403). Needs --api-key unless bound to "
                        "loopback; clients can never name a path outside the roots")
    p.add_argument("--admin-key", default=os.environ.get(ADMIN_KEY_ENV), metavar="KEY",
                   help="the key /v1/admin takes ('Authorization: Bearer KEY'; or set "
                        f"{ADMIN_KEY_ENV}); the --api-key then opens only inference and "
                        "/metrics. Without it, /v1/admin takes the --api-key")
    p.add_argument("--model-root", action="append", default=None, metavar="DIR",
                   help="a folder whose models (folders with config.json, .gguf files, up to 3 "
                        "levels down) admin clients may load and quantize; repeat for more "
                        "(default: the folder that holds --model)")
    p.add_argument("--output-root", default=None, metavar="DIR",
                   help="where admin quantize jobs write their output folders (default: "
                        "the console's own quantized/ folder, where the wizard writes); its "
                        "models can be loaded too")


def admin_settings(args) -> dict:
    """The ApiSettings fields behind the admin flags (none set without --allow-admin)."""
    if not args.allow_admin:
        flag_key = args.admin_key and args.admin_key != os.environ.get(ADMIN_KEY_ENV)
        if args.model_root or args.output_root or flag_key:
            raise CliError("--model-root, --output-root and --admin-key only matter with "
                           "--allow-admin")
        return {}
    roots = args.model_root or [_default_root(args.model)]
    for root in roots:
        if not Path(root).expanduser().is_dir():
            raise CliError(f"--model-root {root}: no such folder")
    return {"allow_admin": True, "model_roots": tuple(roots), "output_root": args.output_root,
            "admin_key": args.admin_key or None}


def warn_if_open(args) -> None:
    """Say once, at start, that a keyless admin server lets any local user load and quantize."""
    from ..engine.api.settings import is_loopback

    if args.allow_admin and not (args.api_key or args.admin_key) and is_loopback(args.host):
        print("warning: --allow-admin without --api-key: every user of this machine can load "
              "and quantize models through this server; set a key on shared hosts",
              file=sys.stderr, flush=True)


def _default_root(model: str) -> str:
    path = Path(model).expanduser()
    if not path.exists():
        raise CliError("--allow-admin: name the folders clients may use with --model-root DIR "
                       f"(--model {model} is not a local folder to default to)")
    return str(path.resolve().parent)
