"""Writes what the demo training run produced besides weights: model card and calibration text."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .corpus import Corpus
    from .train import TrainResult

SAMPLE_PROMPTS = ("The function returns", "Return a new list", "This module provides")
CHAT_QUESTIONS = ("What does json.dumps do?", "Explain os.path.join.")

CALIBRATION_CHARS = 300_000
HELDOUT_CHARS = 200_000


def sample_continuations(model, tok, max_new_tokens: int = 40) -> list[tuple[str, str]]:
    """Greedy continuations of the card's prompts, computed with the trained weights in memory."""
    from .chat import BOS

    return [(prompt, _greedy(model, tok, [tok.token_to_id(BOS), *_ids(tok, prompt)],
                             max_new_tokens)) for prompt in SAMPLE_PROMPTS]


def sample_chats(model, tok, max_new_tokens: int = 40) -> list[tuple[str, str]]:
    """Greedy replies to a few questions, laid out exactly as the chat template renders them."""
    from .chat import render

    return [(q, _greedy(model, tok, _ids(tok, render([{"role": "user", "content": q}],
                                                     add_generation_prompt=True)),
                        max_new_tokens)) for q in CHAT_QUESTIONS]


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


@torch.no_grad()
def _greedy(model, tok, prompt_ids: list[int], max_new_tokens: int) -> str:
    from .chat import EOS

    model.eval()
    ids = torch.tensor([prompt_ids])
    gen = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
        do_sample=False, repetition_penalty=1.2, eos_token_id=tok.token_to_id(EOS),
        pad_token_id=tok.token_to_id(EOS),
    )
    return tok.decode(gen[0, ids.shape[1]:].tolist(), skip_special_tokens=True)


def write_model_card(
    folder: Path, r: TrainResult, samples: list[tuple[str, str]], chats: list[tuple[str, str]]
) -> None:
    s = r.settings
    size_mb = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e6
    rows = "\n".join(f"| `{p}` | {' '.join(c.split())} |" for p, c in samples)
    chat_rows = "\n".join(f"| {q} | {' '.join(a.split())} |" for q, a in chats)
    text = f"""---
license: psf-2.0
library_name: transformers
pipeline_tag: text-generation
---

# NPU Console demo model

A tiny Llama-architecture causal language model made by the NPU Console project so that the console,
its tests and its benchmarks work out of the box without downloading anything. **It is for demos
and tests only: it writes English-like sentences in the style of Python documentation, but it
knows almost nothing and is not a useful assistant.**

## How it was made

Exact command, run from the repository root by `packaging/train_demo_model.sh` (which also sets
`OMP_WAIT_POLICY=PASSIVE`, so that idle OpenMP workers do not spin on a shared machine):

```
{r.command}
```

- **Data**: docstrings (module, class, function) of the Python {r.python} standard library,
  collected with `ast` from {r.source_files} source files, plus the plain-text language reference
  that ships in `pydoc_data.topics`. Paragraphs that look like code, tables or doctests are
  dropped, hard-wrapped lines are joined, duplicates removed. {r.corpus_chars:,} characters of
  training text; {r.heldout_chars:,} characters (about 2%, split by a hash of each document) are held
  out. A further {s.chat_fraction:.0%} of the token stream is synthetic chat built from the same
  training docstrings ({r.qa_pairs:,} "What does `name` do?" / first-paragraph pairs) so the chat
  template produces on-topic replies.
- **Tokenizer**: byte-level BPE (`tokenizers`), vocabulary {s.vocab_size}, special tokens
  `<|pad|> <|bos|> <|eos|> <|system|> <|user|> <|assistant|>`; any Unicode text round-trips.
- **Model**: `LlamaForCausalLM`, hidden {s.hidden}, {s.layers} layers, {s.heads} attention heads,
  {s.kv_heads} key/value heads (GQA), MLP {s.intermediate}, tied embeddings, RoPE (theta 10000),
  max positions 1024, {r.params / 1e6:.2f}M parameters, float32 safetensors.
- **Training**: from scratch, seed {s.seed}, AdamW (betas 0.9/0.95, weight decay {s.weight_decay}),
  peak LR {s.lr} with {s.warmup} warm-up steps and cosine decay to {s.min_lr_ratio:.0%},
  {r.steps_done} steps of {s.batch_size} x {s.seq_len} tokens = **{r.tokens_seen:,} tokens seen**
  (the training stream is {r.train_tokens:,} tokens, so about {r.tokens_seen / r.train_tokens:.1f} epochs).
  Final training loss (EMA) {r.final_loss:.3f}.
- **Hardware / time**: {r.hardware}, {s.threads} torch threads, CPU only. Wall time
  {r.wall_s / 60:.1f} min for the whole command (corpus, tokenizer, training, evaluation, saving), of
  which {r.train_s / 60:.1f} min training at {r.tokens_seen / max(r.train_s, 1e-9):.0f} tokens/s. The
  machine was shared with other work (1-minute load average {r.load_avg:.1f} at the end), so an idle
  2-core machine is faster. Python {r.python}, torch {r.torch}, transformers {r.transformers}.
  Same command, same Python/torch: same corpus, tokenizer and step sequence (fixed seed, fixed steps).

## Evaluation

Held-out perplexity **{r.heldout_ppl:.2f}** (mean next-token loss {r.heldout_loss:.3f} nats) over
**{r.heldout_tokens:,} held-out tokens**, non-overlapping {s.seq_len}-token windows. The held-out text is
also shipped as `assets/calib/heldout_demo.txt`.

Greedy continuations (repetition penalty 1.2, 40 new tokens):

| prompt | continuation |
|---|---|
{rows}

Chat (`apply_chat_template` with `add_generation_prompt=True`, greedy):

| user | assistant |
|---|---|
{chat_rows}

## Intended use

Smoke tests, UI demos, quantization and benchmark plumbing in NPU Console. Outputs are not
factual and must not be relied on.

## License

The training text is documentation distributed with CPython under the Python Software Foundation
License; the model weights and tokenizer are released under the same PSF-2.0 terms. Folder size
about {size_mb:.1f} MB.
"""
    (folder / "README.md").write_text(text, encoding="utf-8")


def _take(texts: list[str], limit: int) -> str:
    """Whole documents, in corpus order, up to `limit` characters."""
    out, used = [], 0
    for text in texts:
        if used + len(text) + 2 > limit:
            break
        out.append(text)
        used += len(text) + 2
    return "\n\n".join(out) + "\n"


def write_calibration_texts(calib_dir: Path, corpus: Corpus) -> None:
    calib_dir.mkdir(parents=True, exist_ok=True)
    (calib_dir / "heldout_demo.txt").write_text(_take(corpus.heldout, HELDOUT_CHARS), encoding="utf-8")
    # Every 4th training document spreads the sample across the whole stdlib instead of the first
    # few packages in alphabetical order.
    (calib_dir / "calibration.txt").write_text(
        _take(corpus.train[::4], CALIBRATION_CHARS), encoding="utf-8"
    )
