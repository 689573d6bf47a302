"""Train the built-in demo model from scratch: `python -m npu_console.engine.demo.train --out assets/models/demo`.

Everything is derived from the running Python's standard library (see engine.demo.corpus), a fixed
seed and a fixed number of steps, so the same command on the same Python/torch gives the same model.
Ctrl-C stops cleanly and leaves any existing model folder untouched.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from . import card
from .chat import (
    ASSISTANT,
    BOS,
    CHAT_TEMPLATE,
    EOS,
    PAD,
    SYSTEM,
    USER,
    qa_conversation,
    render,
)
from .corpus import Corpus, collect
from .tokenizer import train_tokenizer


@dataclass(frozen=True)
class TrainSettings:
    # Sized from measured throughput on 2 CPU cores shared with other work: ~485 training tok/s
    # with passive OpenMP waits under heavy load (roughly twice that when idle). 800 steps x 1024
    # tokens (~2 epochs of the corpus) is 15-30 minutes across that range; small batches make the
    # most of few tokens.
    vocab_size: int = 4096
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 688
    seq_len: int = 256
    batch_size: int = 4
    steps: int = 800
    lr: float = 2.5e-3
    min_lr_ratio: float = 0.1
    warmup: int = 40
    weight_decay: float = 0.1
    seed: int = 1234
    threads: int = 2
    chat_fraction: float = 0.2


@dataclass
class TrainResult:
    settings: TrainSettings
    params: int
    train_tokens: int
    tokens_seen: int
    steps_done: int
    final_loss: float
    heldout_tokens: int
    heldout_loss: float
    heldout_ppl: float
    wall_s: float
    corpus_chars: int
    heldout_chars: int
    qa_pairs: int
    source_files: int
    python: str
    torch: str
    transformers: str
    hardware: str
    command: str
    train_s: float = 0.0  # the optimisation loop alone
    load_avg: float = 0.0  # 1-minute load average when training ended: how shared the CPUs were


def _settings_from_args(args: argparse.Namespace) -> TrainSettings:
    defaults = asdict(TrainSettings())
    return TrainSettings(**{k: getattr(args, k) for k in defaults})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m npu_console.engine.demo.train", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="model folder to (re)write")
    p.add_argument("--calib-dir", type=Path, default=None,
                   help="also write heldout_demo.txt and calibration.txt here")
    p.add_argument("--stdlib", type=Path, default=None,
                   help="collect docstrings from this source tree instead of the running stdlib")
    p.add_argument("--measure", type=int, default=0, metavar="N",
                   help="only time N training steps and print throughput; writes nothing")
    for name, value in asdict(TrainSettings()).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    return p


def _encode_documents(tok, texts: list[str]) -> list[list[int]]:
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    encs = tok.encode_batch(texts, add_special_tokens=False)
    return [[bos, *e.ids, eos] for e in encs]


def _training_stream(tok, corpus: Corpus, s: TrainSettings) -> torch.Tensor:
    docs = _encode_documents(tok, corpus.train)
    prose_tokens = sum(len(d) for d in docs)
    chats = [render(qa_conversation(n, a)) for n, a in corpus.qa]
    chat_ids = [e.ids for e in tok.encode_batch(chats, add_special_tokens=False)]
    # Keep chat turns to a fixed share of the stream so the model stays mainly a prose model.
    rng = random.Random(s.seed)
    rng.shuffle(chat_ids)
    budget = int(prose_tokens * s.chat_fraction / (1 - s.chat_fraction))
    picked, used = [], 0
    for ids in chat_ids:
        if used >= budget:
            break
        picked.append(ids)
        used += len(ids)
    allp = docs + picked
    rng.shuffle(allp)
    return torch.tensor([t for d in allp for t in d], dtype=torch.long)


def _lr_at(step: int, s: TrainSettings) -> float:
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    progress = (step - s.warmup) / max(1, s.steps - s.warmup)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _build_model(tok, s: TrainSettings):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tok.token_to_id(BOS),
        eos_token_id=tok.token_to_id(EOS),
        pad_token_id=tok.token_to_id(PAD),
        torch_dtype="float32",
    )
    torch.manual_seed(s.seed)
    return LlamaForCausalLM(config)


def _optimizer(model, s: TrainSettings) -> torch.optim.AdamW:
    # Norm gains are not decayed; the (tied) embedding and all projections are.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=s.lr, betas=(0.9, 0.95), eps=1e-8,
    )


@torch.no_grad()
def heldout_loss(
    model, stream: torch.Tensor, seq_len: int, batch: int = 8
) -> tuple[float, int]:
    """Mean next-token NLL over non-overlapping windows; returns (loss, tokens predicted).

    Window k predicts stream[k*seq_len + 1 : (k+1)*seq_len + 1] from the tokens before it. Full
    windows go through the model `batch` at a time (few large calls are much cheaper on a busy
    CPU than many small ones); a shorter last window is scored on its own.
    """
    model.eval()
    n_full = (len(stream) - 1) // seq_len
    total, count = 0.0, 0
    if n_full:
        inputs = stream[: n_full * seq_len].view(n_full, seq_len)
        targets = stream[1: n_full * seq_len + 1].view(n_full, seq_len)
        for i in range(0, n_full, batch):
            logits = model(input_ids=inputs[i:i + batch]).logits
            total += float(torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), targets[i:i + batch].flatten(), reduction="sum"))
            count += targets[i:i + batch].numel()
    tail = stream[n_full * seq_len:]
    if len(tail) >= 2:
        logits = model(input_ids=tail[:-1].unsqueeze(0)).logits[0]
        total += float(torch.nn.functional.cross_entropy(logits, tail[1:], reduction="sum"))
        count += len(tail) - 1
    model.train()
    return total / max(1, count), count


def _save(model, tok, out: Path) -> None:
    from transformers import GenerationConfig, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id,
        eos_token_id=model.config.eos_token_id,
        pad_token_id=model.config.pad_token_id,
        max_new_tokens=128,
        do_sample=False,
        repetition_penalty=1.2,
    )
    model.save_pretrained(out, safe_serialization=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[SYSTEM, USER, ASSISTANT],
        model_max_length=1024,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)
    # Some transformers versions keep the template only in chat_template.jinja; tokenizer_config
    # is where older loaders and other tools look, so it is written there as well.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["add_bos_token"] = True
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def _hardware() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs visible"


def train(
    s: TrainSettings, out: Path, calib_dir: Path | None, measure: int = 0, stdlib: Path | None = None
) -> int:
    import transformers

    t0 = time.monotonic()
    torch.set_num_threads(s.threads)
    random.seed(s.seed)
    torch.manual_seed(s.seed)
    print("[demo] collecting stdlib docstrings ...", flush=True)
    corpus = collect(stdlib)
    chars = sum(len(t) for t in corpus.train)
    print(f"[demo] {corpus.source_files} files, {len(corpus.train)} train docs ({chars} chars), "
          f"{len(corpus.heldout)} held-out docs, {len(corpus.qa)} Q/A pairs", flush=True)
    tok = train_tokenizer(corpus.train, s.vocab_size)
    stream = _training_stream(tok, corpus, s)
    held = torch.tensor([t for d in _encode_documents(tok, corpus.heldout) for t in d])
    print(f"[demo] tokenizer vocab {tok.get_vocab_size()}, train stream {len(stream)} tokens, "
          f"held-out {len(held)} tokens ({time.monotonic() - t0:.0f}s)", flush=True)

    model = _build_model(tok, s)
    params = sum(p.numel() for p in model.parameters())
    print(f"[demo] model {params / 1e6:.2f}M params", flush=True)
    opt = _optimizer(model, s)
    n_blocks = (len(stream) - 1) // s.seq_len
    blocks = stream[: n_blocks * s.seq_len].view(n_blocks, s.seq_len)
    gen = torch.Generator().manual_seed(s.seed)
    order = torch.randperm(n_blocks, generator=gen)
    cursor = 0
    steps = measure or s.steps
    model.train()
    loss_ema = None
    step = 0
    t_train = time.monotonic()
    try:
        for step in range(steps):
            if cursor + s.batch_size > n_blocks:
                order, cursor = torch.randperm(n_blocks, generator=gen), 0
            batch = blocks[order[cursor:cursor + s.batch_size]]
            cursor += s.batch_size
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, s)
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            value = float(loss.detach())
            loss_ema = value if loss_ema is None else 0.95 * loss_ema + 0.05 * value
            if step % 20 == 0 or step == steps - 1:
                el = time.monotonic() - t_train
                tps = (step + 1) * s.batch_size * s.seq_len / el
                eta = el / (step + 1) * (steps - step - 1)
                print(f"[demo] step {step + 1}/{steps} loss {value:.3f} (ema {loss_ema:.3f}) "
                      f"lr {_lr_at(step, s):.2e} {tps:.0f} tok/s elapsed {el:.0f}s eta {eta:.0f}s",
                      flush=True)
    except KeyboardInterrupt:
        print(f"\n[demo] interrupted at step {step}; nothing written", flush=True)
        return 130
    train_s = time.monotonic() - t_train
    if measure:
        tps = steps * s.batch_size * s.seq_len / train_s
        print(f"[demo] measured {steps} steps in {train_s:.1f}s: {tps:.0f} tok/s, "
              f"{train_s / steps:.2f} s/step; {s.steps} steps would take ~{s.steps * train_s / steps / 60:.1f} min")
        return 0

    h_loss, h_tokens = heldout_loss(model, held, s.seq_len)
    print(f"[demo] held-out loss {h_loss:.3f} ppl {math.exp(h_loss):.2f} over {h_tokens} tokens", flush=True)

    # Write next to the target and swap in at the end, so an interrupted or failed save never
    # leaves a half-written model where the console looks for one.
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _save(model, tok, tmp)
    result = TrainResult(
        settings=s, params=params, train_tokens=len(stream), tokens_seen=steps * s.batch_size * s.seq_len,
        steps_done=steps, final_loss=loss_ema or float("nan"), heldout_tokens=h_tokens,
        heldout_loss=h_loss, heldout_ppl=math.exp(h_loss), wall_s=time.monotonic() - t0,
        corpus_chars=chars, heldout_chars=sum(len(t) for t in corpus.heldout),
        qa_pairs=len(corpus.qa), source_files=corpus.source_files,
        python=platform.python_version(), torch=torch.__version__,
        transformers=transformers.__version__, hardware=_hardware(),
        command=" ".join(["python -m npu_console.engine.demo.train", *sys.argv[1:]]),
        train_s=train_s, load_avg=os.getloadavg()[0],
    )
    card.write_model_card(
        tmp, result, samples=card.sample_continuations(model, tok), chats=card.sample_chats(model, tok)
    )
    (tmp / "training_result.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    for path in tmp.iterdir():
        path.chmod(0o644)  # safetensors are written owner-only; the folder is shipped to everyone
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    if calib_dir is not None:
        card.write_calibration_texts(calib_dir, corpus)
    print(f"[demo] wrote {out} in {result.wall_s / 60:.1f} min total", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    s = _settings_from_args(args)
    if args.stdlib is not None and not args.stdlib.is_dir():
        print(f"error: --stdlib {args.stdlib} is not a directory", file=sys.stderr)
        return 2
    if s.heads % s.kv_heads or s.hidden % s.heads:
        print("error: --heads must divide --hidden and be a multiple of --kv-heads", file=sys.stderr)
        return 2
    return train(s, args.out, args.calib_dir, measure=args.measure, stdlib=args.stdlib)


if __name__ == "__main__":
    sys.exit(main())
