"""The shipped demo model and the code that builds it."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from npu_console.engine.demo import chat, corpus
from npu_console.engine.paths import CALIB_DIR

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ("The function returns", "Return a new list", "This module provides")


@pytest.fixture(scope="module")
def demo(demo_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(demo_model_dir, local_files_only=True)
    model.eval()
    return model, tok


def test_folder_is_a_small_float32_llama_with_gqa(demo_model_dir):
    from safetensors import safe_open

    config = json.loads((demo_model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["num_key_value_heads"] < config["num_attention_heads"]
    assert config["tie_word_embeddings"] is True
    assert config["max_position_embeddings"] == 1024
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (demo_model_dir / name).is_file(), name
    total = sum(p.stat().st_size for p in demo_model_dir.rglob("*") if p.is_file())
    assert total <= 25 * 1024 * 1024
    with safe_open(demo_model_dir / "model.safetensors", "pt") as f:
        names = f.keys()  # safe_open is not iterable itself
        dtypes = {f.get_slice(k).get_dtype() for k in names}
    assert dtypes == {"F32"}


def test_tokenizer_special_tokens_and_chat_template_config(demo_model_dir, demo):
    _, tok = demo
    assert tok.bos_token == chat.BOS and tok.eos_token == chat.EOS and tok.pad_token == chat.PAD
    cfg = json.loads((demo_model_dir / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == chat.CHAT_TEMPLATE
    gen = json.loads((demo_model_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.eos_token_id
    assert gen["bos_token_id"] == tok.bos_token_id


@pytest.mark.parametrize("text", ["naïve café 中文", "Return a new list.\n\tTabs, émoji 🙂 and ß"])
def test_tokenizer_round_trips_any_text(demo, text):
    _, tok = demo
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.unk_token_id is None or tok.unk_token_id not in ids


def test_chat_template_renders_markers_as_single_tokens(demo):
    _, tok = demo
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What does os.getcwd do?"},
        {"role": "assistant", "content": "Return the current directory."},
        {"role": "user", "content": "And os.sep?"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # Training samples were built with chat.render; inference must see the identical layout.
    assert text == chat.render(messages, add_generation_prompt=True)
    assert text.startswith(chat.BOS) and text.endswith(chat.ASSISTANT + "\n")
    ids = tok(text, add_special_tokens=False).input_ids
    for marker in (chat.SYSTEM, chat.USER, chat.ASSISTANT, chat.EOS):
        assert tok.convert_tokens_to_ids(marker) in ids
    assert ids.count(tok.convert_tokens_to_ids(chat.USER)) == 2


def _vocabulary() -> set[str]:
    text = (CALIB_DIR / "calibration.txt").read_text(encoding="utf-8")
    return {w.lower() for w in re.findall(r"[A-Za-z]+", text)}


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_continuation_is_mostly_real_words(demo, prompt):
    model, tok = demo
    enc = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=32, do_sample=False)
    text = tok.decode(out[0, enc.input_ids.shape[1]:], skip_special_tokens=True)
    words = text.split()
    assert len(words) >= 3, text  # it may end its sentence with eos early
    wordlike = [w for w in words if re.fullmatch(r"[(`'\"]*[A-Za-z]+[)`'\".,;:]*", w)]
    assert len(wordlike) >= 0.7 * len(words), text
    known = _vocabulary()
    found = [w for w in wordlike if re.sub(r"[^A-Za-z]", "", w).lower() in known]
    assert len(found) >= 0.8 * len(wordlike), text


@pytest.mark.slow
@pytest.mark.quality
def test_heldout_perplexity_matches_the_model_card(demo, demo_model_dir):
    from npu_console.engine.demo.train import _encode_documents, heldout_loss

    model, tok = demo
    # heldout_demo.txt is the whole held-out split, one document per blank-line-separated block,
    # so the card's number can be recomputed from shipped files alone.
    docs = (CALIB_DIR / "heldout_demo.txt").read_text(encoding="utf-8").strip("\n").split("\n\n")
    stream = torch.tensor([t for d in _encode_documents(tok.backend_tokenizer, docs) for t in d])
    recorded = json.loads((demo_model_dir / "training_result.json").read_text())
    loss, tokens = heldout_loss(model, stream, recorded["settings"]["seq_len"])
    assert tokens == recorded["heldout_tokens"]
    assert math.exp(loss) == pytest.approx(recorded["heldout_ppl"], rel=0.01)
    # Uniform guessing over the vocabulary is ~4096; the model must have learned the prose.
    assert math.exp(loss) < 150
    assert f"{recorded['heldout_ppl']:.2f}" in (demo_model_dir / "README.md").read_text()


def test_calibration_texts_are_shipped_prose():
    calib = (CALIB_DIR / "calibration.txt").read_text(encoding="utf-8")
    heldout = (CALIB_DIR / "heldout_demo.txt").read_text(encoding="utf-8")
    assert 200_000 <= len(calib.encode()) <= 400_000
    assert 5_000 <= len(heldout.encode()) <= 400_000
    assert (CALIB_DIR / "README.md").is_file()
    # The held-out split must not leak into the calibration (training-distribution) sample.
    held_docs = [d for d in heldout.split("\n\n") if len(d) > 80]
    assert held_docs and not any(d in calib for d in held_docs)


# --- corpus collection, on a small synthetic stdlib tree -------------------------------------

_MODULE = '''"""Tools for frobnicating widgets.

This module provides helpers that turn a list of widgets into a report which
can be written to a file or printed.

>>> frob([1, 2])
[2, 4]
"""


def frob(items):
    """Return a new list with every item doubled, keeping the original order."""


class Report:
    """Collect widget results and format them for people to read later on."""

    def _hidden(self):
        """Return the internal cache that callers should never need to use."""

    def render(self):
        """Tools for frobnicating widgets."""
'''


def test_corpus_keeps_prose_drops_code_and_duplicates(tmp_path):
    (tmp_path / "widgets.py").write_text(_MODULE)
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_widgets.py").write_text('"""A test module that should be skipped entirely by the walker."""')
    (tmp_path / "broken.py").write_text("def (:\n")
    result = corpus.collect(tmp_path, heldout_fraction=0.0, include_topics=False)
    text = "\n".join(result.train)
    assert "This module provides helpers that turn a list of widgets into a report which can be" in text
    assert ">>>" not in text and "[2, 4]" not in text
    assert "skipped entirely" not in text
    assert result.source_files == 1
    names = [n for n, _ in result.qa]
    assert "widgets.frob" in names and "widgets.Report" in names
    assert not any("_hidden" in n for n in names)
    # The duplicate "Tools for frobnicating widgets." is too short to be prose and is dropped anyway;
    # a repeated long paragraph must appear once.
    assert text.count("Return a new list with every item doubled") == 1


def test_heldout_split_is_deterministic_and_disjoint(tmp_path):
    for i in range(40):
        (tmp_path / f"mod{i}.py").write_text(
            f'"""Module number {i} explains how the widget store keeps its records on disk."""\n'
        )
    a = corpus.collect(tmp_path, heldout_fraction=0.3, include_topics=False)
    b = corpus.collect(tmp_path, heldout_fraction=0.3, include_topics=False)
    assert a.train == b.train and a.heldout == b.heldout
    assert a.heldout and a.train
    assert not set(a.train) & set(a.heldout)


def test_qa_conversation_matches_chat_template_layout():
    messages = chat.qa_conversation("json.dumps", "Serialize an object to a JSON formatted string.")
    text = chat.render(messages)
    assert text.startswith(chat.BOS)
    assert text.endswith(f"{chat.ASSISTANT}\nSerialize an object to a JSON formatted string.{chat.EOS}\n")
    # the question is chosen by the name, not a random state: the same name, the same question;
    # across names every question form is used, with or without a system prompt
    names = [f"mod{i}.func{i}" for i in range(60)]
    convs = [chat.qa_conversation(n, "x") for n in names]
    assert convs == [chat.qa_conversation(n, "x") for n in names]
    forms = {c[-2]["content"].replace(n, "{name}").replace(n.rsplit(".", 1)[-1], "{name}")
             for n, c in zip(names, convs)}
    assert forms == set(chat._QUESTIONS)
    assert {c[0]["role"] for c in convs} == {"system", "user"}
    # render() writes what the shipped template renders, for every layout a sample can have
    import jinja2

    template = jinja2.Environment().from_string(chat.CHAT_TEMPLATE)
    for messages in convs[:8]:
        for gen in (False, True):
            assert chat.render(messages, add_generation_prompt=gen) == template.render(
                messages=messages, bos_token=chat.BOS, eos_token=chat.EOS,
                add_generation_prompt=gen)


def test_train_cli_rejects_bad_arguments_in_one_line(capsys, tmp_path):
    from npu_console.engine.demo import train

    assert train.main(["--out", str(tmp_path / "m"), "--heads", "3", "--kv-heads", "2"]) == 2
    assert train.main(["--out", str(tmp_path / "m"), "--stdlib", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error:") for line in err)
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_train_cli_builds_a_loadable_folder_end_to_end(tmp_path):
    """The real training command on a tiny source tree and a tiny model, then loaded back."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = tmp_path / "stdlib"
    src.mkdir()
    (src / "widgets.py").write_text(_MODULE)
    out, calib = tmp_path / "model", tmp_path / "calib"
    proc = subprocess.run(
        [sys.executable, "-m", "npu_console.engine.demo.train", "--out", str(out), "--calib-dir", str(calib),
         "--stdlib", str(src), "--steps", "2", "--layers", "1", "--hidden", "64", "--heads", "2",
         "--kv-heads", "1", "--intermediate", "96", "--seq-len", "64", "--vocab-size", "512"],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "step 2/2" in proc.stdout and "held-out loss" in proc.stdout
    result = json.loads((out / "training_result.json").read_text())
    assert result["steps_done"] == 2 and result["heldout_tokens"] > 0
    assert "Held-out perplexity" in (out / "README.md").read_text()
    assert not (tmp_path / "model.tmp").exists()
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert model.config.num_key_value_heads == 1 and tok.eos_token == chat.EOS
    assert (calib / "calibration.txt").stat().st_size > 0
