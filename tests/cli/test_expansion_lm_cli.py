"""The iterative expansion LM and fairseq's autoregressive LM from the command line (fairseq-train, fairseq-generate)
on a tiny parsed corpus. (The expansion LM in-process: tests/unit/test_expansion_lm.py.)"""
import os

import pytest

from conftest import BIN, DEP_SENTENCES as SENTENCES, run, write_dependency_corpus


@pytest.fixture
def corpus(tmp_path):
    return write_dependency_corpus(tmp_path, SENTENCES * 3)


@pytest.mark.slow
def test_train_and_generate_from_the_command_line(corpus, tmp_path):
    save = str(tmp_path / "ckpt")
    out = run([os.path.join(BIN, "fairseq-train"), corpus, "--user-dir", "insnet_fairseq", "--task", "expansion_lm",
               "--arch", "expansion_lm_small", "--criterion", "expansion_lm_loss", "--embed-dim", "32", "--ffn-embed-dim",
               "64", "--layers", "2", "--attention-heads", "2", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens",
               "256", "--max-update", "4", "--save-dir", save, "--no-epoch-checkpoints", "--log-format", "simple",
               "--log-interval", "1", "--num-workers", "0", "--seed", "1"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "expansion_nll" in out.stdout + out.stderr
    gen = run([os.path.join(BIN, "fairseq-generate"), corpus, "--user-dir", "insnet_fairseq", "--task", "expansion_lm",
               "--path", os.path.join(save, "checkpoint_last.pt"), "--gen-subset", "test", "--batch-size", "8",
               "--sampling", "--sampling-topp", "0.9", "--beam", "1", "--print-step", "--seed", "2"], timeout=600)
    assert gen.returncode == 0, gen.stderr[-3000:]
    hyps = [line for line in gen.stdout.splitlines() if line.startswith("H-")]
    steps = [int(line.split("\t")[1]) for line in gen.stdout.splitlines() if line.startswith("I-")]
    assert len(hyps) == len(steps) == 3 * len(SENTENCES) and all(s >= 1 for s in steps)
    assert not any("[" in h.split("\t")[-1] for h in hyps)  # no placeholder in an output


@pytest.mark.slow
def test_autoregressive_lm_samples_from_nothing(corpus, tmp_path):
    """fairseq's language_modeling continues each test sentence; unconditional_language_modeling (the same model)
    starts from </s> alone. Trained on numpy 2 thanks to fairseq_fixes.numpy_compat."""
    save = str(tmp_path / "ckpt")
    out = run([os.path.join(BIN, "fairseq-train"), corpus, "--user-dir", "insnet_fairseq", "--task", "language_modeling",
               "--sample-break-mode", "eos", "--arch", "transformer_lm", "--decoder-layers", "1", "--decoder-embed-dim",
               "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--criterion", "cross_entropy",
               "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "256", "--max-update", "2", "--save-dir", save,
               "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "1"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    outputs = {}
    for task in ("language_modeling", "unconditional_language_modeling"):
        gen = run([os.path.join(BIN, "fairseq-generate"), corpus, "--user-dir", "insnet_fairseq", "--task", task,
                   "--sample-break-mode", "eos", "--path", os.path.join(save, "checkpoint_last.pt"), "--gen-subset", "test",
                   "--batch-size", "8", "--sampling", "--beam", "1", "--max-len-b", "12", "--seed", "2"], timeout=600)
        assert gen.returncode == 0, gen.stderr[-3000:]
        lines = gen.stdout.splitlines()
        src = {line.split("\t")[0][2:]: line.split("\t")[1] for line in lines if line.startswith("S-")}
        hyp = {line.split("\t")[0][2:]: line.split("\t")[2] for line in lines if line.startswith("H-")}
        assert len(hyp) == 3 * len(SENTENCES)
        long = [i for i in hyp if len(src[i].split()) >= 4]  # a chance match of 4+ words is negligible
        outputs[task] = (sum(hyp[i].startswith(src[i]) for i in long), len(long))
    assert outputs["language_modeling"] == (12, 12)  # every output continues its sentence
    assert outputs["unconditional_language_modeling"] == (0, 12)  # none does
