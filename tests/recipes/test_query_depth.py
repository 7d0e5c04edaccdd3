"""experiments/query_depth.sh on the small corpus, a few updates a run: the runs it trains (the l2r base, InsNet-Dinic
with the slot query stream in every layer and in the last layer only), the systems it decodes, its refusals."""
import csv
import subprocess

import torch

from conftest import ENV, ROOT


def query_depth(ck, out, small_data, raw_corpus, **env):
    return subprocess.run(["bash", "experiments/query_depth.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200, env={**ENV, "CK": str(ck), "OUT": str(out), "DATA": small_data,
                                             "MULTI30K_DIR": raw_corpus, "BASE_UPDATES": "2", "FT_UPDATES": "2",
                                             "MAX_SENTENCES": "4", **env})


def test_query_depth_trains_both_streams_from_one_base_and_scores_them_on_valid(small_data, raw_corpus, tmp_path):
    ck, out = tmp_path / "ck", tmp_path / "query_depth"
    p = query_depth(ck, out, small_data, raw_corpus, MULTI30K_DIR=str(tmp_path))
    assert p.returncode == 2 and f"no valid.de in {tmp_path}" in p.stderr, p.stderr[-2000:]
    p = query_depth(ck, out, small_data, raw_corpus, DATA=str(tmp_path / "nope"))
    assert p.returncode == 2 and "nope missing: run make multi30k first" in p.stderr, p.stderr[-2000:]
    p = query_depth(ck, out, small_data, raw_corpus)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    layers = {}
    for run in ("l2r", "dinic", "dinic_qtop"):
        assert (ck / run / "done").exists(), run
        state = torch.load(ck / run / "checkpoint_last.pt", map_location="cpu", weights_only=False)
        args = state["cfg"]["model"]
        layers[run] = (args.slot_query_stream, args.slot_query_layers)
    assert layers == {"l2r": (False, 0), "dinic": (True, 0), "dinic_qtop": (True, 1)}
    with open(f"{out}.csv", newline="") as f:
        rows = {r["system"]: r for r in csv.DictReader(f)}
    full, top = "InsNet-Dinic, slot queries in every layer", "InsNet-Dinic, slot queries in the last layer"
    assert list(rows) == [full, top]
    assert float(rows[full]["diff"]) == 0.0
    for r in rows.values():
        assert float(r["passes_per_token"]) > 0 and float(r["ms_b1"]) > 0 and float(r["ms_b64"]) > 0, r
        assert r["device"] == "cpu" and r["threads"] == "1"
    assert "valid, 4 sentences" in out.with_suffix(".txt").read_text()
    saved = {run: (ck / run / "checkpoint_last.pt").stat().st_mtime_ns for run in layers}
    p = query_depth(ck, out, small_data, raw_corpus)  # every run done: nothing trains again
    assert p.returncode == 0, p.stderr[-2000:]
    assert {run: (ck / run / "checkpoint_last.pt").stat().st_mtime_ns for run in layers} == saved
