"""`npu-console eval`: perplexity of any loadable model (float, INT8 or GGUF) on a text file,
by llama.cpp's method (default) or per document (engine.quant.eval_methods)."""

from __future__ import annotations

import json
import sys


def register(sub) -> None:
    from ..engine.quant.eval_methods import DEFAULT_CTX
    from .common import add_model_args

    p = sub.add_parser("eval", help="perplexity of a model on a text file (as llama-perplexity)")
    add_model_args(p)
    p.add_argument("--data", required=True, metavar="FILE", help="held-out text (.txt or .jsonl)")
    p.add_argument("--ctx", type=int, default=None,
                   help=f"tokens per chunk (default {DEFAULT_CTX}, capped by the model's context)")
    p.add_argument("--per-document", action="store_true",
                   help="score each .jsonl record / blank-line-separated paragraph on its own, "
                        "BOS first (as lm-eval)")
    p.add_argument("--window", type=int, default=None,
                   help="the earlier sliding-window method: tokens per window")
    p.add_argument("--stride", type=int, default=None,
                   help="with --window: new tokens per window (default window/2)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="evaluate only about the first N tokens (whole chunks)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=run)


def _has_chat_records(path: str) -> bool:
    """Whether a .jsonl holds {"messages": ...} records (read once the tokenizer is loaded)."""
    if not str(path).lower().endswith(".jsonl"):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            return any('"messages"' in line for line in f)
    except (OSError, UnicodeDecodeError):
        return False  # the real read reports it


def run(args) -> int:
    from ..engine.quant import eval_methods as em
    from ..engine.quant.config import QuantError
    from .common import load_for_cli
    from .errors import CliError

    if args.per_document and args.window:
        raise CliError("--per-document and --window are two different methods; choose one")
    def read(tokenizer):
        try:
            return em.read_eval_text(args.data, tokenizer)
        except QuantError as exc:
            raise CliError(str(exc).replace("calibration file", "data file")) from None
        except OSError as exc:
            raise CliError(f"{args.data}: cannot read: {exc.strerror or exc}") from None

    ctx = args.window or args.ctx or em.DEFAULT_CTX
    if ctx < 4:
        raise CliError("--ctx must be at least 4")
    method = "documents" if args.per_document else ("sliding" if args.window else "chunks")
    chat = _has_chat_records(args.data)
    if not chat:
        whole, docs = read(None)  # a bad file fails before the model loads
    loaded = load_for_cli(args, quiet=args.json)
    if chat:  # conversations need the model's chat template
        whole, docs = read(loaded.tokenizer)
    try:
        if method == "sliding":
            res = em.sliding(loaded.model, loaded.tokenizer, docs, ctx, stride=args.stride,
                             max_tokens=args.max_tokens)
        else:
            res = em.evaluate_texts(loaded.model, loaded.tokenizer, docs, method, ctx,
                                    whole=whole, max_tokens=args.max_tokens)
    except ValueError as exc:
        raise CliError(f"{args.data}: {exc}") from None
    out = {**res.to_dict(), "model": str(loaded.path), "quantization": loaded.quantization,
           "dtype": loaded.dtype, "data": str(args.data)}
    if args.json:
        print(json.dumps(out))
    else:
        what = {"chunks": f"{res.pieces} chunks of {res.ctx}, second halves scored (llama.cpp)",
                "documents": f"{res.pieces} documents, BOS first, ctx {res.ctx} (lm-eval)",
                "sliding": f"sliding window {res.ctx}"}[method]
        print(f"perplexity {res.perplexity:.4f} over {res.tokens} tokens ({what})")
    sys.stdout.flush()
    return 0
