"""Perplexity the way people already measure it, so our numbers sit beside theirs.

* "chunks" (the default) follows llama.cpp's `llama-perplexity`: the whole text is tokenized
  once (with BOS where the tokenizer adds one), split into non-overlapping chunks of `ctx`
  tokens, each chunk's first token replaced by BOS where the tokenizer adds one, and only the
  second half of each chunk scored (every scored token has at least ctx/2 tokens of context).
* "documents" follows lm-eval's rolling log-likelihood: each document on its own, after a BOS
  (or, for tokenizers without one, the end-of-text token), every token scored; a document
  longer than `ctx` is scored in windows that overlap by half.
* "sliding" is the earlier method (one token stream, windows overlapping by half, no BOS per
  window), kept for comparisons with old reports.

All three use the same model forward and return the same result type, which names the method.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .calib import Cancelled

METHODS = ("chunks", "documents", "sliding")
DEFAULT_CTX = 512
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class EvalResult:
    perplexity: float
    nll: float  # mean negative log-likelihood per scored token, in nats
    tokens: int  # tokens scored
    method: str
    ctx: int
    pieces: int  # chunks, documents or windows evaluated

    def to_dict(self) -> dict:
        return asdict(self)


def model_context(model: Any, default: int = 2048) -> int:
    return int(getattr(model.config, "max_position_embeddings", default) or default)


def adds_bos(tokenizer: Any) -> bool:
    """Whether encoding a text puts BOS first (llama.cpp's add_bos for this vocabulary)."""
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a")["input_ids"][:1] == [bos]


def read_eval_text(path: str | Path, tokenizer: Any = None) -> tuple[str, list[str]]:
    """The file as one text (what llama-perplexity reads) and as documents (.jsonl records,
    conversations rendered through `tokenizer`'s chat template, or blank-line-separated
    paragraphs of a .txt)."""
    from .calib import read_texts

    docs = read_texts(path, tokenizer)
    p = Path(path)
    whole = p.read_text(encoding="utf-8") if p.suffix.lower() != ".jsonl" else "\n\n".join(docs)
    return whole, docs


def text_token_ids(tokenizer: Any, texts: list[str]) -> list[int]:
    """Documents joined with EOS, starting with BOS when the tokenizer has one."""
    ids: list[int] = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    for t in texts:
        ids.extend(tokenizer(t, add_special_tokens=False)["input_ids"])
        if tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
    return ids


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled()


def _logits(model: Any, ids: list[int], keep: int) -> torch.Tensor:
    """Float logits of the last `keep` positions of one sequence."""
    dev = next(model.parameters()).device
    x = torch.tensor([ids], device=dev)
    try:
        out = model(input_ids=x, use_cache=False, logits_to_keep=keep).logits
    except TypeError:  # a model whose forward has no logits_to_keep
        out = model(input_ids=x, use_cache=False).logits
    return out[0, -keep:].float()


@torch.inference_mode()
def chunks(model: Any, tokenizer: Any, text: str, ctx: int = DEFAULT_CTX,
           max_chunks: int | None = None, progress: ProgressFn | None = None,
           cancel: threading.Event | None = None) -> EvalResult:
    """llama.cpp's perplexity (see the module docstring)."""
    ctx = min(ctx, model_context(model))
    if ctx < 4:
        raise ValueError("ctx must be at least 4 tokens")
    tokens = tokenizer(text)["input_ids"]
    n_chunks = len(tokens) // ctx
    if max_chunks:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks == 0:
        # shorter than one chunk: one chunk of the whole text (the result reports its ctx)
        if len(tokens) < 4:
            raise ValueError(f"the text has {len(tokens)} tokens; perplexity needs at least 4")
        ctx, n_chunks = len(tokens), 1
    bos = tokenizer.bos_token_id if adds_bos(tokenizer) else None
    first = ctx // 2
    nll_sum, counted = 0.0, 0
    for i in range(n_chunks):
        _check(cancel)
        start = i * ctx
        inp = tokens[start:start + ctx]
        targets = torch.tensor(inp[first + 1:])
        if bos is not None:
            inp = [bos] + inp[1:]
        logits = _logits(model, inp, ctx - first)[:-1]
        nll_sum += F.cross_entropy(logits, targets.to(logits.device), reduction="sum").item()
        counted += targets.numel()
        if progress:
            progress(i + 1, n_chunks)
    nll = nll_sum / counted
    return EvalResult(math.exp(nll), nll, counted, "chunks", ctx, n_chunks)


@torch.inference_mode()
def documents(model: Any, tokenizer: Any, docs: list[str], ctx: int = DEFAULT_CTX,
              progress: ProgressFn | None = None,
              cancel: threading.Event | None = None) -> EvalResult:
    """lm-eval's rolling log-likelihood per document (see the module docstring)."""
    from .evaluate import perplexity

    ctx = min(ctx, model_context(model))
    prefix = tokenizer.bos_token_id
    if prefix is None:
        prefix = tokenizer.eos_token_id
    nll_sum, counted, used = 0.0, 0, 0
    for i, doc in enumerate(docs):
        _check(cancel)
        ids = ([prefix] if prefix is not None else []) + \
            tokenizer(doc, add_special_tokens=False)["input_ids"]
        if len(ids) >= 2:
            res = perplexity(model, ids, window=ctx, stride=max(1, ctx // 2), cancel=cancel)
            nll_sum += res.nll * res.tokens
            counted += res.tokens
            used += 1
        if progress:
            progress(i + 1, len(docs))
    if not counted:
        raise ValueError("no document has a token to score")
    nll = nll_sum / counted
    return EvalResult(math.exp(nll), nll, counted, "documents", ctx, used)


@torch.inference_mode()
def sliding(model: Any, tokenizer: Any, docs: list[str], ctx: int = 1024,
            stride: int | None = None, max_tokens: int | None = None,
            progress: ProgressFn | None = None,
            cancel: threading.Event | None = None) -> EvalResult:
    """The earlier method: documents joined with EOS into one stream, overlapping windows."""
    from .evaluate import perplexity

    ids = text_token_ids(tokenizer, docs)
    if max_tokens:
        ids = ids[:max_tokens]
    ctx = min(ctx, model_context(model))
    stride = stride or max(1, ctx // 2)
    res = perplexity(model, ids, window=ctx, stride=stride, progress=progress, cancel=cancel)
    return EvalResult(res.perplexity, res.nll, res.tokens, "sliding", ctx,
                      max(1, math.ceil(max(len(ids) - ctx, 0) / stride) + 1))


def evaluate_texts(model: Any, tokenizer: Any, docs: list[str], method: str = "chunks",
                   ctx: int = DEFAULT_CTX, whole: str | None = None,
                   max_tokens: int | None = None, progress: ProgressFn | None = None,
                   cancel: threading.Event | None = None) -> EvalResult:
    """One entry point for the CLI, the quantization report, the wizard and the bench.
    `whole` is the text as one string for "chunks" (default: the documents joined by blank
    lines); `max_tokens` caps the work (whole chunks for "chunks")."""
    if method == "chunks":
        text = whole if whole is not None else "\n\n".join(docs)
        cap = max(1, max_tokens // min(ctx, model_context(model))) if max_tokens else None
        return chunks(model, tokenizer, text, ctx, max_chunks=cap, progress=progress,
                      cancel=cancel)
    if method == "documents":
        return documents(model, tokenizer, docs, ctx, progress=progress, cancel=cancel)
    if method == "sliding":
        return sliding(model, tokenizer, docs, ctx, max_tokens=max_tokens, progress=progress,
                       cancel=cancel)
    raise ValueError(f"unknown perplexity method {method!r}: choose one of {', '.join(METHODS)}")
