"""recipes/train_packed.py, the fairseq-train every recipe trains through, on a run it resumes."""
import os
import sys

# fixtures of conftest: small_data
from conftest import GAP, ROOT, run, train_cmd  # noqa: F401


def test_a_finished_run_is_not_trained_again_by_the_recipes_trainer(small_data, tmp_path):
    """fairseq-train resumes a run that has reached --max-update and trains one update more (fairseq_cli/train.py
    checks max_update only after a step); recipes/train_packed.py, which every recipe trains through, leaves it."""
    from insnet_fairseq import checkpoint_safety

    def updates(save):
        return checkpoint_safety.load(os.path.join(save, "checkpoint_last.pt"))["optimizer_history"][-1]["num_updates"]

    cmd = train_cmd(small_data, str(tmp_path / "run"), *GAP, "--max-update", "2")
    for _ in range(2):
        out = run(cmd, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
    assert updates(str(tmp_path / "run")) == 3  # the bug: plain fairseq-train moved the finished run
    packed = [sys.executable, os.path.join(ROOT, "recipes", "train_packed.py"), *cmd[1:]]
    packed[packed.index("--max-update") + 1] = "3"
    out = run(packed, timeout=600)
    assert out.returncode == 0 and "has trained 3 updates, its --max-update: nothing to train" in out.stdout, \
        out.stderr[-3000:]
    assert updates(str(tmp_path / "run")) == 3
