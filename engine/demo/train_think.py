"""Train the reasoning demo model: `python -m npu_console.engine.demo.train_think --out assets/models/demo-think`.

A second tiny model made the way the demo model is (engine.demo.train): a Llama trained from
scratch on CPU with a fixed seed and step count. Its data are synthetic chats whose replies think
in a `<think>` block before answering (engine.demo.think_data), so the engine's reasoning parser,
the API's reasoning_content and the chat page's Thinking block are tested on a model that really
emits the tags. The loss covers the replies only. After training, the saved folder is loaded into
the real engine and every reply to a set of prompts (task-like and free text) is checked under
greedy decoding: the result goes into training_result.json and the model card.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import think_data
from .chat import ASSISTANT, BOS, EOS, PAD, SYSTEM, USER
from .think_chat import CHAT_TEMPLATE, THINK_CLOSE, THINK_OPEN, render
from .tokenizer import train_tokenizer
from .train import _build_model, _hardware, _lr_at, _optimizer


@dataclass(frozen=True)
class ThinkSettings:
    vocab_size: int = 1024
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 320
    seq_len: int = 256
    batch_size: int = 16
    steps: int = 540
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.1
    seed: int = 4321
    threads: int = 2
    conversations: int = 40000
    eval_prompts: int = 200
    eval_max_tokens: int = 200


@dataclass
class ThinkResult:
    settings: ThinkSettings
    params: int
    train_tokens: int
    tokens_seen: int
    final_loss: float
    wall_s: float
    train_s: float
    open_tag_tokens: list[str]  # how the tokenizer splits `<think>`
    close_tag_tokens: list[str]
    eval_total: int
    eval_well_formed: int  # <think> ... </think> answer, then end of sequence
    eval_closed: int  # at least the block closed (the answer may be cut by max tokens)
    eval_examples: list[dict] = field(default_factory=list)
    python: str = platform.python_version()
    torch: str = torch.__version__
    hardware: str = ""
    command: str = ""
    load_avg: float = 0.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m npu_console.engine.demo.train_think",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="model folder to (re)write")
    for name, value in asdict(ThinkSettings()).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    return p


def _stream(tok, convs: list[list[dict]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of every conversation end to end, and labels that are -100 outside replies.

    The prompt part and the reply are tokenized apart, exactly as the engine sees them: the
    prompt ends with the assistant marker and the model writes the reply from there."""
    prompts = [render(c[:-1], add_generation_prompt=True) for c in convs]
    replies = [c[-1]["content"] + EOS + "\n" for c in convs]
    p_ids = tok.encode_batch(prompts, add_special_tokens=False)
    r_ids = tok.encode_batch(replies, add_special_tokens=False)
    ids: list[int] = []
    labels: list[int] = []
    for p, r in zip(p_ids, r_ids):
        ids += p.ids + r.ids
        labels += [-100] * len(p.ids) + r.ids
    return torch.tensor(ids), torch.tensor(labels)


def _save(model, tok, out: Path) -> None:
    from transformers import GenerationConfig, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=model.config.eos_token_id,
        pad_token_id=model.config.pad_token_id, max_new_tokens=256, do_sample=False)
    model.save_pretrained(out, safe_serialization=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[SYSTEM, USER, ASSISTANT], model_max_length=1024,
        chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["add_bos_token"] = True
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def well_formed(text: str) -> bool:
    """`<think>` + newline, some reasoning, newline + `</think>`, a blank line, an answer."""
    if not text.startswith(THINK_OPEN + "\n") or text.count(THINK_OPEN) != 1:
        return False
    head, sep, answer = text.partition("\n" + THINK_CLOSE + "\n\n")
    return bool(sep) and bool(head[len(THINK_OPEN) + 1:].strip()) and bool(answer.strip()) \
        and THINK_CLOSE not in answer


def evaluate(folder: Path, s: ThinkSettings) -> tuple[int, int, list[dict]]:
    """Greedy replies of the real engine to s.eval_prompts prompts, as raw text (the rendered
    template as a text prompt, so no parser touches the output): (well formed and ended by
    the end-of-sequence token, closed the block, a few examples)."""
    from ..runtime import EngineConfig, LocalEngine
    from ..runtime.types import GenerationRequest, SamplingParams

    prompts = think_data.eval_prompts(s.eval_prompts, s.seed + 1)
    ok = closed = 0
    examples = []
    with LocalEngine(EngineConfig(max_running=16, num_threads=s.threads)) as engine:
        engine.load(folder, name="eval").result()
        params = SamplingParams(max_tokens=s.eval_max_tokens, temperature=0.0)
        handles = [engine.submit(GenerationRequest(
            prompt=render([{"role": "user", "content": q}], add_generation_prompt=True),
            add_special_tokens=False, params=params)) for q in prompts]
        for q, h in zip(prompts, handles):
            c = h.result(600)
            good = well_formed(c.text) and c.finish.finish_reason == "stop"
            ok += good
            closed += THINK_CLOSE in c.text
            if len(examples) < 8 or not good and len(examples) < 12:
                examples.append({"prompt": q, "reply": c.text, "finish": c.finish.finish_reason,
                                 "well_formed": good})
    return ok, closed, examples


def train(s: ThinkSettings, out: Path) -> int:
    t0 = time.monotonic()
    torch.set_num_threads(s.threads)
    random.seed(s.seed)
    torch.manual_seed(s.seed)
    convs = think_data.conversations(s.conversations, s.seed)
    # the tags stay out of the tokenizer's training text, so no merge covers a whole tag
    texts = [render(c).replace(THINK_OPEN, "").replace(THINK_CLOSE, "") for c in convs]
    tok = train_tokenizer(texts, s.vocab_size)
    open_toks = tok.encode(THINK_OPEN, add_special_tokens=False).tokens
    close_toks = tok.encode(THINK_CLOSE, add_special_tokens=False).tokens
    ids, labels = _stream(tok, convs)
    print(f"[think] {len(convs)} conversations, {len(ids)} tokens; <think> = {open_toks}, "
          f"</think> = {close_toks}", flush=True)
    model = _build_model(tok, s)
    params = sum(p.numel() for p in model.parameters())
    opt = _optimizer(model, s)
    n_blocks = len(ids) // s.seq_len
    blocks = ids[: n_blocks * s.seq_len].view(n_blocks, s.seq_len)
    block_labels = labels[: n_blocks * s.seq_len].view(n_blocks, s.seq_len)
    gen = torch.Generator().manual_seed(s.seed)
    order, cursor = torch.randperm(n_blocks, generator=gen), 0
    loss_ema = None
    model.train()
    t_train = time.monotonic()
    try:
        for step in range(s.steps):
            if cursor + s.batch_size > n_blocks:
                order, cursor = torch.randperm(n_blocks, generator=gen), 0
            pick = order[cursor:cursor + s.batch_size]
            cursor += s.batch_size
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, s)
            loss = model(input_ids=blocks[pick], labels=block_labels[pick]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            value = float(loss.detach())
            loss_ema = value if loss_ema is None else 0.95 * loss_ema + 0.05 * value
            if step % 25 == 0 or step == s.steps - 1:
                el = time.monotonic() - t_train
                print(f"[think] step {step + 1}/{s.steps} loss {value:.3f} (ema {loss_ema:.3f}) "
                      f"elapsed {el:.0f}s eta {el / (step + 1) * (s.steps - step - 1):.0f}s",
                      flush=True)
    except KeyboardInterrupt:
        print("\n[think] interrupted; nothing written", flush=True)
        return 130
    train_s = time.monotonic() - t_train
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _save(model, tok, tmp)
    ok, closed, examples = evaluate(tmp, s)
    print(f"[think] greedy: {ok}/{s.eval_prompts} well formed, {closed} closed the block",
          flush=True)
    result = ThinkResult(
        settings=s, params=params, train_tokens=len(ids),
        tokens_seen=s.steps * s.batch_size * s.seq_len, final_loss=loss_ema or math.nan,
        wall_s=time.monotonic() - t0, train_s=train_s, open_tag_tokens=open_toks,
        close_tag_tokens=close_toks, eval_total=s.eval_prompts, eval_well_formed=ok,
        eval_closed=closed, eval_examples=examples, hardware=_hardware(),
        command=" ".join(["python -m npu_console.engine.demo.train_think", *sys.argv[1:]]),
        load_avg=os.getloadavg()[0])
    from .think_card import write_card

    (tmp / "training_result.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    write_card(tmp, result)
    for path in tmp.iterdir():
        path.chmod(0o644)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"[think] wrote {out} in {result.wall_s / 60:.1f} min", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    s = ThinkSettings(**{k: getattr(args, k) for k in asdict(ThinkSettings())})
    return train(s, args.out)


if __name__ == "__main__":
    sys.exit(main())
