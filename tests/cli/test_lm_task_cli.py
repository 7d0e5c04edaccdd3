"""Task ``insertion_lm`` from the command line, on the English side of the generated corpus (lm_data):
fairseq-train, fairseq-generate starting from the keywords and scored by recipes/evaluate_lm.py, fairseq-interactive
with keyword lines, and text infilling (recipes/prepare_infill.py, fairseq-generate / -interactive --infill,
recipes/evaluate_infill.py). (The task, its data and its decoding in-process: tests/unit/test_lm_task.py.)"""
import os
import sys

import pytest

from conftest import BIN, LM, TINY_LM, copy_data, lm_task, run
from conftest import LM_LINES as N
from insnet_fairseq.errors import DataError

from recipes import evaluate_lm


def in_order(keywords, words) -> bool:
    """``keywords`` occur in ``words`` in their order (a subsequence)."""
    return evaluate_lm.lcs(keywords, words) == len(keywords)


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


@pytest.fixture(scope="module")
def lm_checkpoint(lm_data, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("lm_ckpt"))
    out = run([os.path.join(BIN, "fairseq-train"), lm_data, *LM, "--criterion", "insnet_loss", *TINY_LM,
               "--share-all-embeddings", "--optimizer", "adam", "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt",
               "--warmup-updates", "10", "--max-tokens", "512", "--save-dir", save, "--no-epoch-checkpoints",
               "--log-format", "simple", "--log-interval", "5", "--num-workers", "0", "--seed", "3",
               "--max-update", "20", "--insertion-order", "binary", "--disable-validation"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return os.path.join(save, "checkpoint_last.pt")


def test_generate_starts_from_the_keywords_and_scores(lm_data, lm_checkpoint):
    out = run([os.path.join(BIN, "fairseq-generate"), lm_data, *LM, "--path", lm_checkpoint, "--gen-subset", "test",
               "--batch-size", "64", "--max-insertion-steps", "6", "--print-step"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [l.split("\t") for l in out.stdout.splitlines()]
    sources = {int(r[0][2:]): r[1] for r in rows if r[0].startswith("S-")}
    hyps = {int(r[0][2:]): r[2] for r in rows if r[0].startswith("H-")}
    keywords = lines(f"{lm_data}/test.keywords")
    assert sorted(hyps) == list(range(N)) and sources == dict(enumerate(keywords))  # the source side: the keywords
    assert all(in_order(keywords[i].split(), hyps[i].split()) for i in range(N))
    # the paper's decoding (tau 1: parallel, 70% of the slot mass, top-3 sampling), scored by recipes/evaluate_lm.py
    score = run([sys.executable, "recipes/evaluate_lm.py", "--data", lm_data, "--path", lm_checkpoint,
                 "--paper-sampling", "1", "--nll", "--name", "tiny", "--", *LM, "--max-insertion-steps", "6"], timeout=600)
    assert score.returncode == 0, score.stderr[-3000:]
    row = dict(kv.rsplit(" ", 1) for kv in score.stdout.strip().splitlines()[-1].split(": ", 1)[1].split(", "))
    assert row["kw_coverage"] == "100.0" and row["kw_sentences"] == "100.0"
    assert 0 < float(row["steps"]) <= 6 and float(row["termination_nll"]) > 0 and float(row["token_nll"]) > 0
    # a missing keyword file: one line naming it, no traceback
    moved = f"{lm_data}/test.keywords.moved"
    os.rename(f"{lm_data}/test.keywords", moved)
    try:
        missing = run([os.path.join(BIN, "fairseq-generate"), lm_data, *LM, "--path", lm_checkpoint,
                       "--gen-subset", "test", "--max-insertion-steps", "2"], timeout=600)
    finally:
        os.rename(moved, f"{lm_data}/test.keywords")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert f"fairseq-generate: error: {lm_data}/test.keywords not found" in missing.stderr


def test_interactive_lines_are_keywords(lm_data, lm_checkpoint):
    out = run([os.path.join(BIN, "fairseq-interactive"), lm_data, *LM, "--path", lm_checkpoint,
               "--max-insertion-steps", "3", "--insertion-mode", "parallel"],
              input="man hat\n\nzzzqqq dog\ndog\n", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    hyps = [l.split("\t") for l in out.stdout.splitlines() if l.startswith("H-")]
    assert [h[0] for h in hyps] == ["H-0", "H-1", "H-2", "H-3"]  # one output per line, in order
    assert in_order(["man", "hat"], hyps[0][2].split()) and in_order(["dog"], hyps[3][2].split())
    assert hyps[1][2] != "" and hyps[2][2] == ""  # an empty line: no keywords; an unknown keyword: refused
    assert "input line 3 (sample id 2): keyword(s) not in the dictionary" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_infilling_from_the_command_line(lm_data, lm_checkpoint, tmp_path):
    """Text infilling: prepare_infill.py's templates, fairseq-generate --infill, scored by
    evaluate_infill.py (every output keeps its template), interactive templates, and a bad template word."""
    made = run([sys.executable, "recipes/prepare_infill.py", "--data", lm_data, "--splits", "test"], timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "test.template.r30b2: 300 templates" in made.stdout
    score = run([sys.executable, "recipes/evaluate_infill.py", "--data", lm_data, "--path", lm_checkpoint,
                 "--settings", "r30b2", "anchors", "--csv", str(tmp_path / "infill.csv"), "--",
                 "--max-insertion-steps", "4", "--insertion-mode", "parallel"], timeout=600)
    assert score.returncode == 0, score.stderr[-3000:]
    rows = [dict(kv.split("=", 1) for kv in line.split("  ")) for line in score.stdout.strip().splitlines()]
    assert [r["setting"] for r in rows] == ["r30b2", "anchors"]
    for r in rows:
        assert r["kept"] == "100.0" and 0 < float(r["steps"]) <= 4 and float(r["filled"]) > 0
    assert 25 < float(rows[0]["masked"]) < 35 and float(rows[1]["masked"]) > 50
    out = run([os.path.join(BIN, "fairseq-interactive"), lm_data, *LM, "--path", lm_checkpoint, "--infill",
               "--max-insertion-steps", "3"], input="a man __m__ hat .\na man .\n__m__ zzzqqq __m__\n",
              timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    hyps = [l.split("\t") for l in out.stdout.splitlines() if l.startswith("H-")]
    assert [h[0] for h in hyps] == ["H-0", "H-1", "H-2"]
    words = hyps[0][2].split()
    assert words[:2] == ["a", "man"] and words[-2:] == ["hat", "."]
    assert hyps[1][2] == "a man ."  # no blank: the template itself
    assert "<unk>" in hyps[2][2].split()  # an unknown template word is kept, as <unk>, with a warning
    assert "its template has no blank" in out.stderr
    assert "input line 3 (sample id 2): template word(s) not in the dictionary" in out.stderr
    data = copy_data(lm_data, str(tmp_path / "bin"))
    with open(os.path.join(data, "test.template"), "w") as f:
        f.write("a __m__ dog\n" * 5 + "a </s> __m__\n" + "a __m__\n" * (N - 6))
    with pytest.raises(DataError, match=r"test.template:6: template word '</s>' is not a word of the dictionary"):
        lm_task(data, infill=True).load_dataset("test")
