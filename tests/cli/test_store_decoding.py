"""recipes/store_decoding.py: decoding settings stored with a checkpoint are what fairseq-generate decodes with when
the flag is not given; a flag given wins; bad settings and other models' checkpoints are refused in one line."""
import os
import shutil
import sys

import pytest

from conftest import ROOT, generate_cmd, run  # noqa: F401  (fixtures small_data, tiny_checkpoint, ar_checkpoint)


def store(*args):
    return run([sys.executable, os.path.join(ROOT, "recipes", "store_decoding.py"), *args], timeout=300)


def hypotheses(out):
    assert out.returncode == 0, out.stderr[-3000:]
    return sorted(line for line in out.stdout.splitlines() if line.startswith("H-"))


@pytest.mark.slow
def test_stored_settings_are_the_defaults_and_a_given_flag_wins(small_data, tiny_checkpoint, tmp_path):
    ckpt = str(tmp_path / "model.pt")
    shutil.copy(tiny_checkpoint, ckpt)
    res = store(ckpt, "--insertion-mode", "parallel", "--no-skip-repeats", "--stop-check-prob", "0.5")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "{'parallel': {'stop_check_prob': 0.5, 'skip_repeats': False}}" in store(ckpt, "--show").stdout

    def generate(path, *flags):
        return hypotheses(run(generate_cmd(small_data, path, "--insertion-mode", "parallel", *flags), timeout=600))

    stored = generate(ckpt)
    assert stored == generate(tiny_checkpoint, "--no-skip-repeats", "--stop-check-prob", "0.5")
    assert stored != generate(tiny_checkpoint)  # the settings change the outputs: the check above can fail
    assert generate(ckpt, "--skip-repeats", "--stop-check-prob", "0.75") == generate(tiny_checkpoint)
    seq = hypotheses(run(generate_cmd(small_data, ckpt), timeout=600))  # sequential: parallel's settings not read
    assert seq == hypotheses(run(generate_cmd(small_data, tiny_checkpoint), timeout=600))
    assert store(ckpt, "--clear").returncode == 0 and "no stored decoding settings" in store(ckpt, "--show").stdout


def test_bad_settings_and_other_models_are_refused(tiny_checkpoint, ar_checkpoint, tmp_path):
    ckpt = str(tmp_path / "model.pt")
    shutil.copy(tiny_checkpoint, ckpt)
    for args, message in [(("--insertion-mode", "parallel", "--stop-check-prob", "1.5"),
                           "--stop-check-prob must be in [0, 1), got 1.5"),
                          (("--stop-check-prob", "0.5"), "--insertion-mode is required"),
                          (("--insertion-mode", "parallel"), "nothing to store")]:
        res = store(ckpt, *args)
        assert res.returncode != 0 and message in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert "no stored decoding settings" in store(ckpt, "--show").stdout  # nothing was written
    res = store(ar_checkpoint, "--show")
    assert res.returncode != 0 and "--arch transformer" in res.stderr
    res = store(str(tmp_path / "missing.pt"), "--show")
    assert res.returncode != 0 and "not found" in res.stderr
