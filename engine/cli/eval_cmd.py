"""`npu-console eval`: perplexity of any loadable model (float or INT8) on a text file."""

from __future__ import annotations

import json
import sys


def register(sub) -> None:
    from engine.cli.common import add_model_args

    p = sub.add_parser("eval", help="perplexity of a model on a text file (sliding window)")
    add_model_args(p)
    p.add_argument("--data", required=True, metavar="FILE", help="held-out text (.txt or .jsonl)")
    p.add_argument("--window", type=int, default=None,
                   help="tokens per window (default: min(context, 1024))")
    p.add_argument("--stride", type=int, default=None, help="new tokens per window (default window/2)")
    p.add_argument("--max-tokens", type=int, default=None, help="evaluate only the first N tokens")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.cli.common import load_for_cli
    from engine.cli.errors import CliError
    from engine.quant.config import QuantError
    from engine.quant.report import text_token_ids

    try:
        from engine.quant.calib import read_texts

        texts = read_texts(args.data)
    except QuantError as exc:
        raise CliError(str(exc).replace("calibration file", "data file")) from None
    loaded = load_for_cli(args, quiet=args.json)
    ids = text_token_ids(loaded.tokenizer, texts)
    if args.max_tokens:
        ids = ids[: args.max_tokens]
    if len(ids) < 2:
        raise CliError(f"{args.data}: fewer than 2 tokens of text")
    from engine.quant.evaluate import perplexity

    ctx = int(getattr(loaded.model.config, "max_position_embeddings", 1024) or 1024)
    window = args.window or min(ctx, 1024)
    if window < 2:
        raise CliError("--window must be at least 2")
    stride = args.stride or max(1, window // 2)
    res = perplexity(loaded.model, ids, window=window, stride=stride)
    out = {"perplexity": res.perplexity, "tokens": res.tokens, "nll": res.nll,
           "window": window, "stride": stride, "model": str(loaded.path),
           "quantization": loaded.quantization, "dtype": loaded.dtype}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"perplexity {res.perplexity:.4f} over {res.tokens} tokens "
              f"(window {window}, stride {stride})")
    sys.stdout.flush()
    return 0
