"""benchmarks/frontier.py on tiny checkpoints: every column, the baseline's zero difference, the plot."""
import csv
import os
import subprocess
import sys

import pytest

from conftest import ENV, ROOT, run

COLUMNS = ["system", "sacrebleu", "diff_low", "diff_high", "passes_per_token", "positions_per_token", "ms_b1", "ms_b64"]


@pytest.mark.slow  # a whole benchmark run: five systems decoded and timed
def test_frontier_writes_every_column(small_data, raw_corpus, tiny_checkpoint, ar_checkpoint, tmp_path):
    ins = "--task insertion_translation --max-insertion-steps 6"
    systems = tmp_path / "systems.tsv"
    systems.write_text(
        f"AR+KD greedy\t{ar_checkpoint}\t--beam 1 --max-len-a 0 --max-len-b 8\n"
        f"AR+KD beam 2\t{ar_checkpoint}\t--beam 2 --max-len-a 0 --max-len-b 8\n"
        f"InsNet sequential\t{tiny_checkpoint}\t{ins} --insertion-mode sequential\n"
        f"InsNet-Dinic 1 candidate\t{tiny_checkpoint}\t{ins} --insertion-mode parallel\n"
        f"InsNet 2 candidates + MBR\t{tiny_checkpoint}\t{ins} --insertion-mode parallel --insertion-candidates 2 "
        "--insertion-candidates-mbr 1\n")
    out = tmp_path / "frontier"
    res = run([sys.executable, os.path.join(ROOT, "benchmarks", "frontier.py"), "--data", small_data,
               "--systems", str(systems), "--raw-ref", os.path.join(raw_corpus, "test.de"),
               "--baseline", "AR+KD greedy", "--max-sentences", "5", "--bootstrap", "50", "--device", "cpu",
               "--out", str(out)], timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    with open(f"{out}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["system"] for r in rows] == ["AR+KD greedy", "AR+KD beam 2", "InsNet sequential",
                                           "InsNet-Dinic 1 candidate", "InsNet 2 candidates + MBR"]
    for r in rows:
        for c in COLUMNS[1:]:
            float(r[c])  # every column is a number
        assert float(r["diff_low"]) <= float(r["diff"]) <= float(r["diff_high"]), r
        assert float(r["ms_b1"]) > 0 and float(r["ms_b64"]) > 0
    assert {r["device"] for r in rows} == {"cpu"} and {r["threads"] for r in rows} == {"1"}
    base = rows[0]
    assert float(base["diff"]) == float(base["diff_low"]) == float(base["diff_high"]) == 0.0
    passes = {r["system"]: (float(r["passes_per_token"]), float(r["calls_per_token"])) for r in rows}
    # greedy AR and sequential InsNet: one row a call, one call per output token and one more (</s>; the initial pass)
    for name in ("AR+KD greedy", "InsNet sequential"):
        assert passes[name][0] == passes[name][1] > 1.0, (name, passes[name])
    # AR greedy: one position a call; InsNet: <s> </s> first, then the words of each step
    positions = {r["system"]: float(r["positions_per_token"]) for r in rows}
    assert positions["AR+KD greedy"] == passes["AR+KD greedy"][0]
    assert positions["InsNet sequential"] > passes["InsNet sequential"][0]
    # a beam of 2 runs 2 rows every step (rounding: 3 decimals)
    assert abs(passes["AR+KD beam 2"][0] - 2 * passes["AR+KD beam 2"][1]) <= 0.002
    # 2 candidates run 2 rows a step while both are unfinished
    p, c = passes["InsNet 2 candidates + MBR"]
    assert c < p <= 2 * c + 0.002
    assert os.path.getsize(f"{out}.png") > 10_000
    assert "AR+KD greedy" in res.stdout and "95% paired-bootstrap interval" in res.stdout
    os.remove(f"{out}.png")  # --replot draws it again from the csv alone
    res = run([sys.executable, os.path.join(ROOT, "benchmarks", "frontier.py"), "--replot", "--out", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert os.path.getsize(f"{out}.png") > 10_000


def test_frontier_refuses_a_missing_checkpoint(small_data, raw_corpus, tmp_path):
    systems = tmp_path / "systems.tsv"
    systems.write_text("AR\t/nonexistent/checkpoint.pt\t--beam 1\n")
    res = run([sys.executable, os.path.join(ROOT, "benchmarks", "frontier.py"), "--data", small_data,
               "--systems", str(systems), "--raw-ref", os.path.join(raw_corpus, "test.de"), "--baseline", "AR",
               "--out", str(tmp_path / "f")])
    assert res.returncode != 0
    assert "systems.tsv:1: checkpoint /nonexistent/checkpoint.pt of system 'AR' does not exist" in res.stderr
    assert "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "frontier.py"), "--data", small_data,
                          "--systems", str(systems), "--raw-ref", os.path.join(raw_corpus, "test.de"), "--baseline",
                          "AR", "--device", "cuda", "--out", str(tmp_path / "f")], cwd=ROOT, capture_output=True,
                         text=True, env=dict(ENV, CUDA_VISIBLE_DEVICES=""))  # as on a machine without a GPU
    assert res.returncode != 0 and "--device cuda: torch finds no GPU" in res.stderr and "Traceback" not in res.stderr
    res = run([sys.executable, os.path.join(ROOT, "benchmarks", "frontier.py"), "--out", str(tmp_path / "f")])
    assert res.returncode != 0 and "required: --data, --systems, --raw-ref, --baseline" in res.stderr
    res = run([sys.executable, os.path.join(ROOT, "benchmarks", "frontier.py"), "--replot", "--out", str(tmp_path / "f")])
    assert res.returncode != 0 and "f.csv not found" in res.stderr and "Traceback" not in res.stderr


def test_linear_kernels_times_every_system_both_ways(small_data, tiny_checkpoint, ar_checkpoint, tmp_path, capsys):
    """benchmarks/linear_kernels.py: a row per system and batch size, both times, their ratio, and the share of
    sentences decoded the same both ways. Run in this process, where every product of the tiny models packs
    (conftest's every_product_packed), so that the packed and F.linear decodings really differ in their products and
    their outputs agree. The ratio is checked against the printed times within their rounding (2 decimals), whatever
    the times are."""
    from benchmarks import linear_kernels

    systems = tmp_path / "systems.tsv"
    systems.write_text(f"AR greedy\t{ar_checkpoint}\t--beam 1 --max-len-a 0 --max-len-b 8\n"
                       f"InsNet parallel\t{tiny_checkpoint}\t--task insertion_translation --max-insertion-steps 6 "
                       "--insertion-mode parallel\n")
    linear_kernels.main(["--data", small_data, "--systems", str(systems), "--subset", "test", "--max-sentences", "6",
                         "--batch-sizes", "1", "3", "--rounds", "1"])
    out = capsys.readouterr().out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith(("| AR", "| InsNet"))]
    assert [(r[0], r[1]) for r in rows] == [("| AR greedy", "1"), ("| InsNet parallel", "1"), ("| AR greedy", "3"),
                                            ("| InsNet parallel", "3")], out
    for r in rows:
        stock, packed, ratio = float(r[2]), float(r[3]), float(r[4])
        assert stock > 0 and packed > 0
        assert (packed - 0.005) / (stock + 0.005) - 0.0005 <= ratio <= (packed + 0.005) / (stock - 0.005) + 0.0005, r
        assert r[5] == "100.0% |", r


def test_linear_work_counts_every_product(small_data, tiny_checkpoint, ar_checkpoint):
    """experiments/linear_work.py: a product adds rows x N x K, a block of rows its own rows only, the vocabulary's
    products are told apart, and the count stops with its context. Decoding: the AR model multiplies by its
    vocabulary once per decoder position (fairseq's incremental step projects its last position only), exactly."""
    import torch
    from benchmarks.frontier import System
    from experiments.linear_work import counted_products, measure
    from insnet_fairseq.modules import packed_linear

    layer = packed_linear.Linear(8, 12)
    with counted_products(vocab_size=12) as tally:
        layer(torch.randn(2, 5, 8))
        layer.rows(torch.randn(3, 8), 0, 4)
    assert tally == {"all": 10 * 12 * 8 + 3 * 4 * 8, "vocabulary": 10 * 12 * 8}
    layer(torch.randn(1, 8))  # outside: not counted
    assert tally["all"] == 10 * 12 * 8 + 3 * 4 * 8 and packed_linear.linear.__name__ == "linear"

    ar = System("AR greedy", ar_checkpoint, ["--beam", "1", "--max-len-a", "0", "--max-len-b", "8"])
    m = measure(ar, small_data, "test", "en", "de", batch_size=3, max_sentences=6)
    vocab, d = ar.models[0].decoder.output_projection.weight.shape  # (the dictionary grows as outputs are scored)
    assert m["tokens"] > 0 and m["vocabulary"] == m["positions"] * vocab * d, m
    assert m["all"] > m["vocabulary"]
    ins = System("InsNet parallel", tiny_checkpoint, ["--task", "insertion_translation", "--max-insertion-steps", "6",
                                                      "--insertion-mode", "parallel"])
    m = measure(ins, small_data, "test", "en", "de", batch_size=3, max_sentences=6)
    assert m["tokens"] > 0 and 0 < m["vocabulary"] < m["all"], m


@pytest.mark.slow  # an experiment's whole profiling run, both systems at two batch sizes
def test_profile_decoding_decodes_as_a_user_gets_it(small_data, tiny_checkpoint, ar_checkpoint, tmp_path, capsys):
    """experiments/profile_decoding.py profiles the decoding a user gets: the parallel mode's defaults and the
    settings stored with the model (its stop check), the slot queries fused as the step's default decides; each
    flag given replaces its default. Both systems' steps are profiled at each batch size."""
    import shutil

    from experiments.profile_decoding import main as profile_main
    from recipes.store_decoding import main as store_main

    ckpt = str(tmp_path / "model.pt")
    shutil.copy(tiny_checkpoint, ckpt)
    store_main([ckpt, "--insertion-mode", "parallel", "--stop-check-prob", "0.5"])
    common = ["--data", small_data, "--insnet", ckpt, "--ar", ar_checkpoint, "--mode", "parallel", "--sentences", "3",
              "--batch-sizes", "1,2", "--top", "2"]
    capsys.readouterr()
    profile_main(common)
    out = capsys.readouterr().out
    assert "InsNet parallel (slot top-p 0.9, skip repeats True, stop check 0.5, slot queries fused: auto)" in out, out
    for name in ("InsNet parallel, batch 1:", "AR greedy, batch 1:", "InsNet parallel, batch 2:", "AR greedy, batch 2:"):
        assert name in out, out
    profile_main(common + ["--slot-top-p", "0.7", "--two-passes"])
    out = capsys.readouterr().out
    assert "(slot top-p 0.7, skip repeats True, stop check 0.5, slot queries fused: off)" in out, out
    profile_main(common + ["--no-skip-repeats", "--batch-sizes", "1"])
    out = capsys.readouterr().out
    assert "(slot top-p 0.9, skip repeats False, stop check 0.5, slot queries fused: auto)" in out, out
