"""A --slot-objective gap model from the command line: fairseq-train on sampled trajectories, fairseq-generate with
--insertion-mode parallel (its slots' end-of-slot, no other flag), the threshold stored with the model."""
import os
import shutil
import sys

import pytest

# fixtures of conftest: small_data, gap_checkpoint, tiny_checkpoint
from conftest import GAP, ROOT, generate_cmd, run, train_cmd  # noqa: F401


def generate_parallel(data, path, *flags):
    """The hypotheses of fairseq-generate --insertion-mode parallel with ``flags``."""
    return hypotheses(run(generate_cmd(data, path, "--insertion-mode", "parallel", *flags), timeout=600))


def stored_copy(path, dest, *flags) -> str:
    """A copy ``dest`` of the checkpoint ``path`` with the parallel decoding ``flags`` stored (store_decoding.py)."""
    shutil.copy(path, dest)
    res = run([sys.executable, os.path.join(ROOT, "recipes", "store_decoding.py"), dest, "--insertion-mode",
               "parallel", *flags], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return dest


def hypotheses(out):
    """fairseq-generate's hypotheses, sorted by sample id: "H-i<TAB>tokens". The score is left out: cached and uncached
    decoding sum in different orders, so their scores agree to float rounding only (see scored_hypotheses)."""
    return [(i, tokens) for i, _, tokens in scored_hypotheses(out)]


def scored_hypotheses(out):
    """(id, score, tokens) of each of fairseq-generate's hypotheses, sorted by id."""
    assert out.returncode == 0, out.stderr[-3000:]
    rows = (line.split("\t") for line in out.stdout.splitlines() if line.startswith("H-"))
    return sorted((r[0], float(r[1]), r[2] if len(r) > 2 else "") for r in rows)


def test_a_gap_model_trains_decodes_and_stores_its_threshold(small_data, gap_checkpoint, tmp_path):
    default = scored_hypotheses(run(generate_cmd(small_data, gap_checkpoint, "--insertion-mode", "parallel"),
                                    timeout=600))
    uncached = scored_hypotheses(run(generate_cmd(small_data, gap_checkpoint, "--insertion-mode", "parallel",
                                                  "--no-insertion-cache"), timeout=600))
    assert len(default) > 0 and [(i, t) for i, _, t in uncached] == [(i, t) for i, _, t in default]
    assert [u[1] for u in uncached] == pytest.approx([d[1] for d in default], abs=1e-5)
    ckpt = stored_copy(gap_checkpoint, str(tmp_path / "model.pt"), "--end-of-slot", "0.9")
    assert generate_parallel(small_data, ckpt) == generate_parallel(small_data, gap_checkpoint, "--end-of-slot", "0.9")


def test_a_gap_model_with_the_query_stream_trains_and_decodes_and_beam_is_refused_in_one_line(small_data,
                                                                                              gap_checkpoint, tmp_path):
    out = run(train_cmd(small_data, str(tmp_path), *GAP, "--slot-query-stream", "--max-update", "2"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    ckpt = os.path.join(str(tmp_path), "checkpoint_last.pt")
    cached = hypotheses(run(generate_cmd(small_data, ckpt, "--insertion-mode", "parallel"), timeout=600))
    assert len(cached) > 0 and cached == hypotheses(run(generate_cmd(
        small_data, ckpt, "--insertion-mode", "parallel", "--no-insertion-cache"), timeout=600))
    out = run(generate_cmd(small_data, gap_checkpoint, "--insertion-beam", "2"), timeout=600)
    assert out.returncode != 0 and "drop --insertion-beam" in out.stderr and "Traceback" not in out.stderr


def test_a_gap_model_fine_tunes_from_an_l2r_checkpoint(small_data, tiny_checkpoint, tmp_path):
    """--finetune-from-model of the paper's objective's checkpoint (l2r) into a gap model: it trains, says which heads
    it dropped and which it started anew, and decodes with --insertion-mode parallel."""
    save = str(tmp_path / "ft")
    out = run(train_cmd(small_data, save, *GAP, "--max-update", "2", "--finetune-from-model", tiny_checkpoint),
              timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "position and termination heads are dropped" in out.stdout + out.stderr
    assert len(hypotheses(run(generate_cmd(small_data, os.path.join(save, "checkpoint_last.pt"),
                                           "--insertion-mode", "parallel"), timeout=600))) > 0


def test_on_policy_training_runs_and_is_refused_without_sampled_trajectories(small_data, tmp_path):
    """--on-policy 1: every training sentence begins with the model's own decoding; the run trains and its
    validation (offline trajectories) runs. Without --layerization sampled it is refused in one line."""
    out = run(train_cmd(small_data, str(tmp_path / "op"), *GAP, "--on-policy", "1", "--on-policy-steps", "2",
                        "--max-update", "3"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"train_slot_token_nll"' in out.stdout
    out = run(train_cmd(small_data, str(tmp_path / "no"), "--slot-objective", "gap", "--on-policy", "0.5",
                        "--max-update", "1"), timeout=600)
    assert out.returncode != 0 and "use it with --layerization sampled" in out.stderr and "Traceback" not in out.stderr


def test_sampled_slot_training_runs_and_is_refused_where_it_cannot_apply(small_data, tmp_path):
    """--gap-slot-rate 0.5 --gap-slots every with the slot query stream trains (each pass scores a drawn half of
    every slot of every layer end). A rate outside (0, 1], a sequential layering, or a model without the end-of-slot
    objective is refused in one line."""
    out = run(train_cmd(small_data, str(tmp_path / "rate"), *GAP, "--slot-query-stream", "--gap-slot-rate", "0.5",
                        "--gap-slots", "every", "--max-update", "2"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"train_slot_done_nll"' in out.stdout
    for save, flags, message in (("zero", [*GAP, "--gap-slot-rate", "0"], "--gap-slot-rate must be in (0, 1]"),
                                 ("seq", ["--slot-objective", "gap", "--gap-slot-rate", "0.5"],
                                  "give it with --layerization sampled"),
                                 ("pos", ["--layerization", "sampled", "--gap-slot-rate", "0.5"],
                                  "train it with --slot-objective gap")):
        out = run(train_cmd(small_data, str(tmp_path / save), *flags, "--max-update", "1"), timeout=600)
        assert out.returncode != 0 and message in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]


def test_a_last_word_model_fine_tunes_from_a_gap_checkpoint_logs_its_term_and_stores_its_threshold(
        small_data, gap_checkpoint, tmp_path):
    """--last-word-head from a gap checkpoint without it: the head starts anew (said), its term slot_last is logged,
    the model decodes with --insertion-mode parallel alone (cached as uncached), --last-word 1 and a stored --last-word
    are taken; without --slot-objective gap the flag is refused in one line."""
    save = str(tmp_path / "last")
    out = run(train_cmd(small_data, save, *GAP, "--last-word-head", "--max-update", "2", "--finetune-from-model",
                        gap_checkpoint), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "has no last-word head" in out.stdout + out.stderr and '"train_slot_last_nll"' in out.stdout
    ckpt = os.path.join(save, "checkpoint_last.pt")

    default = generate_parallel(small_data, ckpt)
    assert len(default) > 0 and generate_parallel(small_data, ckpt, "--no-insertion-cache") == default
    assert len(generate_parallel(small_data, ckpt, "--last-word", "1")) == len(default)
    stored = stored_copy(ckpt, str(tmp_path / "stored.pt"), "--last-word", "0.9")
    assert generate_parallel(small_data, stored) == generate_parallel(small_data, ckpt, "--last-word", "0.9")
    out = run(train_cmd(small_data, str(tmp_path / "pos"), "--last-word-head", "--max-update", "1"), timeout=600)
    assert out.returncode != 0 and "--last-word-head needs --slot-objective gap" in out.stderr
    assert "Traceback" not in out.stderr
