"""The LM studies' shell scripts: experiments/lm_budget.sh names its rows and refuses an unknown one;
experiments/lm_pair.sh trains each row for 2 updates on lm_data and averages its checkpoints."""
import os
import subprocess

import torch

from conftest import ENV, ROOT
from insnet_fairseq.tasks.checkpoint_checks import checkpoint_arch


def test_lm_budget_rows():
    out = subprocess.run(["bash", "experiments/lm_budget.sh", "rows"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == [
        "seq-random", "seq-binary", "seq-keywords", "dinic-10", "dinic-3", "dinic-1", "dinic-0.3", "uniform", "dependency",
        "ar", "levt", "truncated", "noglobal", "mt-insnet", "mt-truncated", "mt-noglobal", "expansion", "ar-lm"]
    out = subprocess.run(["bash", "experiments/lm_budget.sh", "train", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "unknown row 'nope'" in out.stderr
    out = subprocess.run(["bash", "experiments/lm_budget.sh", "eval-unconditional", "nope"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 2 and "unknown row 'nope'" in out.stderr


def test_lm_pair_trains_each_row_and_averages_its_checkpoints(lm_data, tmp_path):
    """experiments/lm_pair.sh on the CPU, 2 updates a run: every row
    of ROWS trains, its checkpoints are averaged into OUT/ROW_sSEED.pt (float16, no optimizer state), the summary
    names each run; ROWS=kd trains the InsNet row alone; an unknown row is refused by name."""
    def pair(rows, out):
        env = dict(ENV, ROWS=rows, SEEDS="1", UPDATES="2", AVG_LAST="1", MINUTES="10", OUT=str(out), AR_DATA=lm_data,
                   KD_DATA=lm_data, CKPT_DIR=str(tmp_path / "ckpt" / out.name), LOGS=str(tmp_path / "logs" / out.name))
        return subprocess.run(["bash", "experiments/lm_pair.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=900)

    out = pair("ar kd", tmp_path / "both")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "both")) == ["ar_s1.pt", "kd_s1.pt", "summary.txt"]
    summary = (tmp_path / "both" / "summary.txt").read_text()
    assert "ar seed 1: 2 updates" in summary and "kd seed 1: 2 updates" in summary, summary
    for name, task in (("ar_s1.pt", "translation"), ("kd_s1.pt", "insertion_lm")):
        state = torch.load(tmp_path / "both" / name, map_location="cpu")
        assert checkpoint_arch(state)[1] == task
        assert not state.get("last_optimizer_state") and all(
            t.dtype == torch.float16 for t in state["model"].values() if t.is_floating_point())
    out = pair("kd", tmp_path / "kd")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "kd")) == ["kd_s1.pt", "summary.txt"]
    out = pair("kd nope", tmp_path / "bad")
    assert out.returncode == 2 and "ROWS must list ar and/or kd, not 'nope'" in out.stderr
