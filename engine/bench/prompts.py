"""Prompts for benchmarks: random text of a given token length, or a dataset file.

Random prompts differ from their first word on, so no prefix cache can serve one from another.
With a local tokenizer the text is made from random token ids and trimmed until it encodes to
exactly the asked length. Without one (a remote server whose tokenizer we do not have) the text
is random common words, and the number of words per token is calibrated against the server's
own usage count of a probe prompt.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# common English words: short, tokenized to about one token each by most BPE vocabularies
_WORD_TEXT = (
    "the of and to in is was that for on with as he she it they his her at by from this had not "
    "are but or have an one all were we when there can been has more if no out so said what up "
    "its about into than them only other new some could time these two may then do first any my "
    "now such like our over man me even most made after also did many before must through back "
    "years where much your way well down should because each just those people how too little "
    "state good very make world still own see men work long get here between both life being "
    "under never day same another know while last might us great old year off come since against "
    "go came right used take three small house big tree cat dog bird sun moon star water fire "
    "stone road park town river sea boat car ball book cake milk bread apple happy sad kind brave "
    "quiet loud warm cold green blue red yellow play run jump walk look find help love want need "
    "think feel laugh smile friend mother father sister brother girl boy"
)
_WORDS = tuple(_WORD_TEXT.split())


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class BenchPrompt:
    text: str
    prompt_len: int  # our count (exact with a tokenizer, estimated without)
    output_len: int


def random_word_text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, n_words)))


def random_word_prompts(n: int, input_len: int, output_len: int, seed: int,
                        tokens_per_word: float = 1.0) -> list[BenchPrompt]:
    rng = random.Random(seed)
    words = max(1, round(input_len / max(tokens_per_word, 1e-6)))
    return [BenchPrompt(random_word_text(rng, words), input_len, output_len) for _ in range(n)]


def random_token_prompts(tokenizer: Any, n: int, input_len: int, output_len: int,
                         seed: int) -> list[BenchPrompt]:
    """Text decoded from random token ids, re-encoded and trimmed to exactly `input_len`."""
    rng = random.Random(seed)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    # only tokens that decode to clean text on their own: byte-fallback pieces turn into
    # U+FFFD and re-encode as several tokens, so the length would never settle
    vocab = []
    for i in range(len(tokenizer)):
        if i in special:
            continue
        piece = tokenizer.decode([i])
        if piece.strip() and "\ufffd" not in piece and piece.isprintable():
            vocab.append(i)
    if not vocab:
        raise DatasetError("the tokenizer has no printable tokens to build prompts from")
    out = []
    for _ in range(n):
        ids = [rng.choice(vocab) for _ in range(input_len)]
        # decode/encode is not a round trip (merges across boundaries): fix the length after
        for _attempt in range(8):
            text = tokenizer.decode(ids)
            enc = tokenizer.encode(text, add_special_tokens=False)
            if len(enc) == input_len:
                break
            ids = enc[:input_len] if len(enc) > input_len else enc + [
                rng.choice(vocab) for _ in range(input_len - len(enc))]
        out.append(BenchPrompt(text, input_len, output_len))
    return out


def load_dataset(path: str | Path, n: int, output_len: int, seed: int) -> list[BenchPrompt]:
    """Prompts from a .txt file (one per line) or .jsonl (objects with a "prompt" field, and
    optionally "output_len" / "max_tokens"). Lines are shuffled with `seed` and reused in turn
    when the file has fewer than `n`."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: no such file")
    rows: list[tuple[str, int]] = []
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise DatasetError(f"{p}: not UTF-8 text") from None
    if p.suffix.lower() == ".jsonl":
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{p}:{no}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                raise DatasetError(f"{p}:{no}: expected an object with a string \"prompt\"")
            out_len = obj.get("output_len", obj.get("max_tokens", output_len))
            if not isinstance(out_len, int) or out_len < 1:
                raise DatasetError(f"{p}:{no}: output_len must be a positive integer")
            rows.append((obj["prompt"], out_len))
    else:
        rows = [(line, output_len) for line in lines if line.strip()]
    if not rows:
        raise DatasetError(f"{p}: no prompts in the file")
    rng = random.Random(seed)
    rng.shuffle(rows)
    picked = [rows[i % len(rows)] for i in range(n)]
    # a rough length (about 4 characters a token); the server's usage replaces it
    return [BenchPrompt(text, max(1, len(text) // 4), out) for text, out in picked]
