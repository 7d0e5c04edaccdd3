"""experiments/anchor_source.py: the anchors it gives (the anchored order's first levels), the constrained start that
keeps them, and the table it writes on tiny checkpoints."""
import contextlib
import csv
import io
import os
import sys

import pytest
import torch

from conftest import ROOT, run
from benchmarks.frontier import System, batches, load
from experiments.anchor_source import anchors, decode, reference_words
from insnet_fairseq.geometry.orders import anchored_levels


def test_anchors_are_the_anchored_orders_first_levels_in_its_insertion_order():
    words = list(range(10, 17))  # 7 words: positions 1..7 between <s> (0) and </s> (8)
    assert anchors(words, 1) == ([13], [0])  # the middle word
    assert anchors(words, 2) == ([11, 13, 15], [1, 0, 2])  # the middle first, then the halves' middles
    assert anchors([], 2) == ([], []) and anchors([5], 3) == ([5], [0])
    for n_words in range(0, 30):  # the positions given at depth D are those the anchored order of depth D puts first
        levels = anchored_levels(torch.tensor([n_words + 2]), n_words + 2, depth=2)[0].tolist()
        words = list(range(100, 100 + n_words))
        for depth in (1, 2):
            given, order = anchors(words, depth)
            expected = [100 + p - 1 for p in range(1, n_words + 1) if levels[p] < depth]
            assert given == expected, (n_words, depth)
            assert sorted(order) == list(range(len(given)))
            inserted = [levels[given[i] - 100 + 1] for i in order]
            assert inserted == sorted(inserted), (n_words, depth)  # level by level


def is_subsequence(part, whole):
    it = iter(whole)
    return all(t in it for t in part)


def test_the_constrained_start_keeps_the_given_anchors_in_their_order(small_data, tiny_checkpoint):
    ins = System("InsNet-Dinic", tiny_checkpoint, ["--task", "insertion_translation", "--insertion-mode", "parallel",
                                                   "--max-insertion-steps", "6"])
    with contextlib.redirect_stdout(io.StringIO()):
        load(ins, small_data, "valid", "en", "de")
    samples = batches(ins, "valid", 8, max_sentences=16)
    reference = reference_words(ins, "valid")
    given = {i: anchors(reference[i], 2) for i in range(16)}
    assert sum(len(g[0]) for g in given.values()) > 16  # most sentences get three anchors
    decode(ins, samples, given)
    assert sorted(ins.words) == list(range(16))
    for i, (tokens, _) in given.items():
        assert is_subsequence(tokens, ins.words[i]), (i, tokens, ins.words[i])


def anchor_source(small_data, raw_corpus, insnet, ar, out, *extra):
    return run([sys.executable, os.path.join(ROOT, "experiments", "anchor_source.py"), "--data", small_data,
                "--insnet", *([insnet] if isinstance(insnet, str) else insnet), "--ar", ar, "--raw-ref", os.path.join(raw_corpus, "valid.de"), "--subset", "valid",
                "--bootstrap", "50", "--out", str(out), *extra], timeout=900)


def test_anchor_source_writes_each_anchor_source_against_ar_greedy(small_data, raw_corpus, tiny_checkpoint,
                                                                  ar_checkpoint, tmp_path):
    out = tmp_path / "anchor_source"
    res = anchor_source(small_data, raw_corpus, tiny_checkpoint, ar_checkpoint, out, "--max-sentences", "12",
                        "--depths", "1", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    with open(f"{out}.csv", newline="") as f:
        rows = {r["system"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["AR greedy", "InsNet-Dinic", "InsNet-Dinic, AR greedy's anchors (depth 1)",
                          "InsNet-Dinic, AR greedy's anchors (depth 2)", "InsNet-Dinic, the reference's anchors (depth 1)",
                          "InsNet-Dinic, the reference's anchors (depth 2)"]
    assert float(rows["AR greedy"]["diff"]) == 0.0
    for name, r in rows.items():
        assert float(r["diff_low"]) <= float(r["diff"]) <= float(r["diff_high"]), r
        if name != "AR greedy":
            assert float(r["steps_per_token"]) > 0 and float(r["tokens_per_sentence"]) > 0
    assert float(rows["InsNet-Dinic"]["given_per_sentence"]) == 0.0
    one, three = (float(rows[f"InsNet-Dinic, the reference's anchors (depth {d})"]["given_per_sentence"]) for d in (1, 2))
    assert 0 < one <= 1 < three <= 3
    assert "valid, 12 sentences" in res.stdout


def test_anchor_source_decodes_each_named_checkpoint_against_one_ar_greedy(small_data, raw_corpus, tiny_checkpoint,
                                                                          ar_checkpoint, tmp_path):
    out = tmp_path / "two"
    res = anchor_source(small_data, raw_corpus, [tiny_checkpoint, tiny_checkpoint], ar_checkpoint, out,
                        "--names", "A", "B", "--max-sentences", "12", "--depths", "1")
    assert res.returncode == 0, res.stderr[-3000:]
    with open(f"{out}.csv", newline="") as f:
        rows = {r["system"]: r for r in csv.DictReader(f)}
    kinds = ["", ", AR greedy's anchors (depth 1)", ", the reference's anchors (depth 1)"]
    assert list(rows) == ["AR greedy"] + [m + k for m in ("A", "B") for k in kinds]
    for k in kinds:  # the same checkpoint twice: the same outputs, so the same row
        a, b = (dict(rows[m + k], system=None) for m in ("A", "B"))
        assert a == b, k


@pytest.mark.parametrize("args, message", [
    (["--names", "A", "B"], "--names must give each of the 1 --insnet checkpoints its own name"),
    (["--depths", "0"], "--depths must be 1 or more"),
    (["--ar", "missing.pt"], "--ar missing.pt does not exist"),
])
def test_anchor_source_refuses_bad_arguments_in_one_line(small_data, raw_corpus, tiny_checkpoint, ar_checkpoint,
                                                        tmp_path, args, message):
    res = anchor_source(small_data, raw_corpus, tiny_checkpoint, ar_checkpoint, tmp_path / "x", *args)
    assert res.returncode != 0 and message in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
