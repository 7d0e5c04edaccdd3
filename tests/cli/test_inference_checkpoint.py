"""recipes/inference_checkpoint.py: a decoding-only copy decodes what its training checkpoint decodes (fp32, token for
token), is smaller, keeps the stored decoding settings and tied weights; --half stores the weights rounded to fp16;
a missing or foreign file is refused in one line."""
import pytest
import os
import shutil
import sys

import torch

from conftest import ROOT, generate_cmd, run  # noqa: F401  (fixtures small_data, tiny_checkpoint, ar_checkpoint)


def strip(*args):
    return run([sys.executable, os.path.join(ROOT, "recipes", "inference_checkpoint.py"), *args], timeout=300)


def hypotheses(out):
    assert out.returncode == 0, out.stderr[-3000:]
    lines = sorted(line for line in out.stdout.splitlines() if line.startswith("H-"))
    assert lines
    return lines


def load(path):
    return torch.load(path, map_location="cpu")


@pytest.mark.slow
def test_decoding_copy_decodes_the_same_and_keeps_tied_weights(small_data, tiny_checkpoint, ar_checkpoint, tmp_path):
    for ckpt in (tiny_checkpoint, ar_checkpoint):
        full, small, half = load(ckpt), str(tmp_path / "small.pt"), str(tmp_path / "half.pt")
        assert "last_optimizer_state" in full
        for out, extra in ((small, ()), (half, ("--half",))):
            res = strip(ckpt, out, *extra)
            assert res.returncode == 0 and "MB" in res.stdout, res.stderr[-3000:]
        assert os.path.getsize(half) < os.path.getsize(small) < os.path.getsize(ckpt)
        s, h = load(small), load(half)
        assert "last_optimizer_state" not in s and set(s["extra_state"]) <= {"train_iterator", "val_loss", "best",
                                                                          "previous_training_time", "metrics"}
        for name, w in full["model"].items():
            assert torch.equal(s["model"][name], w), name
            if w.is_floating_point():
                assert h["model"][name].dtype == torch.float16 and torch.equal(h["model"][name], w.half()), name
        # the tied embeddings stay one tensor: written once
        tied = [n for n in full["model"] if n.endswith("embed_tokens.weight")]
        assert len(tied) >= 2
        assert len({h["model"][n].untyped_storage().data_ptr() for n in tied}) == 1
    decode = lambda path: hypotheses(run(generate_cmd(small_data, path, "--insertion-mode", "parallel"),  # noqa: E731
                                         timeout=600))
    strip(tiny_checkpoint, small)
    strip(tiny_checkpoint, half, "--half")
    assert decode(small) == decode(tiny_checkpoint)
    assert decode(half)  # loads into the fp32 model and decodes


def test_stored_decoding_settings_travel(tiny_checkpoint, tmp_path):
    ckpt, out = str(tmp_path / "model.pt"), str(tmp_path / "small.pt")
    store = [sys.executable, os.path.join(ROOT, "recipes", "store_decoding.py")]
    shutil.copy(tiny_checkpoint, ckpt)
    assert run([*store, ckpt, "--insertion-mode", "parallel", "--stop-check-prob", "0.5"]).returncode == 0
    assert strip(ckpt, out, "--half").returncode == 0
    assert "{'parallel': {'stop_check_prob': 0.5}}" in run([*store, out, "--show"]).stdout


def test_missing_and_foreign_files_are_refused(tmp_path):
    res = strip(str(tmp_path / "missing.pt"), str(tmp_path / "out.pt"))
    assert res.returncode != 0 and "missing.pt does not exist" in res.stderr and "Traceback" not in res.stderr
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n")
    res = strip(str(text), str(tmp_path / "out.pt"))
    assert res.returncode != 0 and "notes.txt is not a readable checkpoint" in res.stderr
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    res = strip(str(tmp_path / "other.pt"), str(tmp_path / "out.pt"))
    assert res.returncode != 0 and "no model weights" in res.stderr and "Traceback" not in res.stderr
    assert not os.path.exists(tmp_path / "out.pt")
