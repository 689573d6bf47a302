"""`quantize --seeds N` (issue 32): the recipe's quality as a spread over calibration seeds, and
chat evaluation records rendered through the model's template."""

from __future__ import annotations

import json

import pytest
from npu_console.cli.main import main
from npu_console.engine.quant import eval_methods as em
from npu_console.engine.quant.calib import read_texts
from npu_console.engine.quant.config import QuantError


@pytest.mark.slow
def test_seeds_report_each_seed_with_mean_worst_and_spread(stories_dir, tmp_path, capsys):
    data = tmp_path / "held.txt"
    data.write_text("Once upon a time there was a little girl named Lily. She liked to play "
                    "in the park with her dog.\n\n" * 6, encoding="utf-8")
    rc = main(["quantize", "--model", str(stories_dir), "--method", "w8a8-dynamic",
               "--out", str(tmp_path / "q"), "--eval-data", str(data), "--seeds", "2",
               "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    res = json.loads(out.out.strip().splitlines()[-1])
    seeds = res["seeds"]
    assert [r["seed"] for r in seeds["runs"]] == [0, 1]
    changes = [r["perplexity_change_pct"] for r in seeds["runs"]]
    assert seeds["worst_pct"] == pytest.approx(max(changes))
    assert seeds["mean_pct"] == pytest.approx(sum(changes) / 2)
    assert seeds["spread_pct"] == pytest.approx(max(changes) - min(changes))
    # the checkpoint written is seed 0's: its own measured change is the first run's
    assert res["perplexity_change_pct"] == pytest.approx(changes[0])
    assert "over 2 calibration seeds" in out.err
    # two seeds drew two calibrations: the runs are not one run reported twice
    assert "seed 0" in res["calibration"]


@pytest.mark.parametrize("extra", [[], ["--recipe", "plain", "--eval-data", "{data}"]])
def test_seeds_without_what_they_need_is_refused_before_loading(stories_dir, tmp_path, capsys,
                                                                extra):
    data = tmp_path / "held.txt"
    data.write_text("some text\n", encoding="utf-8")
    rc = main(["quantize", "--model", str(stories_dir), "--method", "w8a16", "--out",
               str(tmp_path / "q"), "--seeds", "3", *[e.format(data=data) for e in extra]])
    err = capsys.readouterr().err
    assert rc != 0
    assert "--seeds N" in err and "--eval-data" in err
    assert not (tmp_path / "q").exists()


def test_chat_records_render_through_the_template(tmp_path, demo_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_dir)
    f = tmp_path / "chat.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi there"},
                                          {"role": "assistant", "content": "Hello!"}]}) + "\n"
                 + json.dumps({"text": "plain record"}) + "\n", encoding="utf-8")
    docs = read_texts(f, tok)
    assert docs[1] == "plain record"
    rendered = tok.apply_chat_template([{"role": "user", "content": "Hi there"},
                                        {"role": "assistant", "content": "Hello!"}],
                                       tokenize=False)
    assert docs[0] == rendered and "Hi there" in docs[0] and "Hello!" in docs[0]
    whole, docs2 = em.read_eval_text(f, tok)
    assert docs2 == docs and "Hello!" in whole
    with pytest.raises(QuantError, match="chat template"):
        read_texts(f)  # no tokenizer: said, not crashed
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user"}]}) + "\n", encoding="utf-8")
    with pytest.raises(QuantError, match='"messages" must be a list'):
        read_texts(bad, tok)


def test_eval_cli_scores_chat_records_through_the_template(demo_model_dir, tmp_path, capsys):
    f = tmp_path / "chat.jsonl"
    turns = [{"role": "user", "content": "What is the default encoding of source files?"},
             {"role": "assistant", "content": "Python source files are read as UTF-8 unless "
                                              "a coding declaration says otherwise."}]
    f.write_text("\n".join(json.dumps({"messages": turns}) for _ in range(4)) + "\n",
                 encoding="utf-8")
    rc = main(["eval", "--model", str(demo_model_dir), "--data", str(f), "--json", "--ctx", "64"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    res = json.loads(out.out.strip().splitlines()[-1])
    assert res["tokens"] > 0 and res["perplexity"] > 1
