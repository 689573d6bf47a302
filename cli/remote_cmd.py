"""`npu-console remote`: drive a server's admin endpoints (`serve --allow-admin`) from a shell:
list its models, load, unload, quantize, list and cancel jobs. Load and quantize follow the job's
progress on stderr until it ends (Ctrl-C cancels it on the server); --no-wait returns at once."""

from __future__ import annotations

import json
import os
import sys

from .errors import CliError

API_KEY_ENV = "NPU_CONSOLE_API_KEY"


def register(sub) -> None:
    p = sub.add_parser("remote", help="drive a server's admin endpoints (serve --allow-admin)",
                       description="List, load, unload and quantize models on a server started "
                                   "with `npu-console serve --allow-admin`. Paths are the "
                                   "server's (ROOT/FOLDER, as `remote models` lists them).")
    p.add_argument("--base-url", default="http://127.0.0.1:8000", metavar="URL",
                   help="the server (default http://127.0.0.1:8000)")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                   help=f"its API key (or set {API_KEY_ENV})")
    p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    acts.add_parser("models", help="the models under the server's roots, and the served ones")
    a = acts.add_parser("load", help="load a model into the server's engine")
    a.add_argument("path", help="ROOT/FOLDER as `remote models` lists it")
    a.add_argument("--name", default=None, help="model id (default: the folder name)")
    a.add_argument("--device", default="auto")
    a.add_argument("--no-wait", action="store_true", help="print the job and return")
    a = acts.add_parser("unload", help="remove a served model")
    a.add_argument("name")
    a = acts.add_parser("quantize", help="quantize a model into the server's output root")
    a.add_argument("path")
    a.add_argument("out_name", help="the output folder's name")
    a.add_argument("--method", default="w8a8-dynamic",
                   choices=["w8a16", "w8a8-dynamic", "w8a8-static"])
    a.add_argument("--recipe", default="auto", choices=["auto", "plain"])
    a.add_argument("--format", default="native",
                   choices=["native", "compressed-tensors", "msmodelslim"])
    a.add_argument("--overwrite", action="store_true")
    a.add_argument("--no-wait", action="store_true", help="print the job and return")
    acts.add_parser("jobs", help="the server's admin jobs")
    a = acts.add_parser("cancel", help="cancel a job")
    a.add_argument("job_id")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..engine.remote.admin import RemoteAdmin
    from ..engine.runtime.types import EngineError

    try:
        admin = RemoteAdmin(args.base_url, args.api_key)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        with admin:
            return _act(admin, args)
    except EngineError as exc:
        raise CliError(exc.message, code=1) from None


def _act(admin, args) -> int:
    if args.action == "models":
        listing = admin.models()
        if args.json:
            return _print_json({"roots": listing.roots, "output_root": listing.output_root,
                                "models": [m.__dict__ for m in listing.models],
                                "loaded": listing.loaded})
        for m in listing.models:
            served = f"  [serving as {', '.join(m.loaded_as)}]" if m.loaded_as else ""
            problem = "" if m.ok else f"  (cannot load: {m.problems[0] if m.problems else '?'})"
            print(f"{m.path:<40} {m.summary}{served}{problem}")
        for info in listing.loaded:
            print(f"served: {info['name']} ({info.get('architecture')}, {info.get('dtype')} on "
                  f"{info.get('device')})")
        return 0
    if args.action == "unload":
        admin.unload(args.name)
        print(f"unloaded {args.name}", file=sys.stderr)
        return 0
    if args.action == "jobs":
        jobs = admin.jobs()
        if args.json:
            return _print_json([j.__dict__ for j in jobs])
        for j in jobs:
            print(f"{j.id}  {j.kind:<8} {j.state:<9} {j.fraction:4.0%}  {j.message}")
        return 0
    if args.action == "cancel":
        return _finish(admin.cancel(args.job_id), args)
    if args.action == "load":
        job = admin.load(args.path, args.name, device=args.device)
    else:
        job = admin.quantize(args.path, args.out_name, method=args.method, recipe=args.recipe,
                             format=args.format, overwrite=args.overwrite)
    if args.no_wait:
        return _finish(job, args)
    return _finish(_follow(admin, job.id), args)


def _follow(admin, job_id: str):
    tty = sys.stderr.isatty()

    def show(state) -> None:
        line = f"[{state.fraction * 100:3.0f}%] {state.message}"
        print(f"\r{line:<60}" if tty else line, end="" if tty else "\n", file=sys.stderr,
              flush=True)

    try:
        final = admin.wait(job_id, on_progress=show)
    except KeyboardInterrupt:
        print(f"\ncancelling {job_id}", file=sys.stderr, flush=True)
        final = admin.cancel(job_id)
    if tty:
        print(file=sys.stderr)
    return final


def _finish(job, args) -> int:
    if args.json:
        _print_json(job.__dict__)
    elif job.state == "failed":
        print(f"{job.id} failed: {job.error}", file=sys.stderr)
    else:
        result = job.result or {}
        where = result.get("path") or result.get("name") or ""
        print(f"{job.id} {job.state}{': ' + where if where else ''}", file=sys.stderr)
    return {"failed": 1, "cancelled": 130}.get(job.state, 0)


def _print_json(obj) -> int:
    print(json.dumps(obj, indent=2, default=str))
    return 0
