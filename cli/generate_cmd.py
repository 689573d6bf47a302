"""`npu-console generate`: stream a continuation of a prompt to stdout."""

from __future__ import annotations

import sys

from .common import add_model_args, add_sampling_args, load_for_cli


def register(sub) -> None:
    p = sub.add_parser("generate", help="stream a continuation of --prompt to stdout")
    add_model_args(p)
    p.add_argument("--prompt", required=True, help="text to continue")
    add_sampling_args(p, max_tokens=128, temperature=0.0, top_p=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--stats", action="store_true", help="print TTFT and tokens/s to stderr at the end")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..engine.runtime import EngineConfig, LocalEngine
    from ..engine.runtime.types import EngineError, GenerationRequest, SamplingParams
    from .errors import CliError

    loaded = load_for_cli(args)
    engine = LocalEngine(EngineConfig(max_running=1))
    try:
        engine.add_model(loaded).result()
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                                top_p=args.top_p, top_k=args.top_k, seed=args.seed)
        try:
            handle = engine.submit(GenerationRequest(prompt=args.prompt, params=params))
        except EngineError as exc:
            raise CliError(exc.message) from None
        finish = None
        try:
            for ev in handle:
                if hasattr(ev, "text"):
                    sys.stdout.write(ev.text)
                    sys.stdout.flush()
                else:
                    finish = ev
        except KeyboardInterrupt:
            handle.cancel()
            raise
        print()
        if finish is not None and finish.finish_reason == "error":
            raise CliError(f"generation failed: {finish.error}")
        if args.stats and finish is not None:
            t = finish.timings
            ttft = f"{t.ttft_s * 1000:.0f} ms" if t.ttft_s is not None else "n/a"
            tps = f"{t.decode_tokens_per_s:.1f} tok/s" if t.decode_tokens_per_s else "n/a"
            print(f"TTFT {ttft}, decode {tps}, {finish.usage.completion_tokens} tokens "
                  f"({finish.finish_reason})", file=sys.stderr)
    finally:
        engine.shutdown()
    return 0
