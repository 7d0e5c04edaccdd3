"""InDIGO from the command line: --arch indigo_small trains with insnet_loss through fairseq-train and decodes through
fairseq-generate; searched adaptive orders; the refused combinations. (The model: tests/unit/test_indigo.py.)"""
import pytest
import json

from conftest import generate_cmd, run, train_cmd


@pytest.mark.slow
def test_fairseq_train_and_generate_indigo(small_data, tmp_path):
    """--arch indigo_small trains with insnet_loss through fairseq-train (random order) and decodes every
    test sentence through fairseq-generate; layered training is refused."""
    save = str(tmp_path / "indigo")
    cmd = [c if c != "insnet_small" else "indigo_small" for c in train_cmd(small_data, save, "--max-update", "6",
                                                                            "--insertion-order", "random")]
    out = run(cmd)
    assert out.returncode == 0, out.stderr[-3000:]
    gen = run(generate_cmd(small_data, save + "/checkpoint_last.pt"))
    assert gen.returncode == 0, gen.stderr[-3000:]
    hyps = [line for line in gen.stdout.splitlines() if line.startswith("H-")]
    assert len(hyps) == 300  # the test split of small_data
    bad = run([c if c != "insnet_small" else "indigo_small" for c in train_cmd(small_data, str(tmp_path / "x"),
                                                                             "--max-update", "1", "--dinic-tau", "1")])
    assert bad.returncode != 0 and "InDIGO inserts one word per step" in bad.stderr
    assert "Traceback" not in bad.stderr  # one line (tasks/cli_errors.py)
    # searched adaptive orders (bootstrapped from the random-order model above), beam 2: twice the sentences
    sao = run(cmd + ["--searched-order-beam", "2", "--max-update", "8", "--log-format", "json"])
    assert sao.returncode == 0, sao.stderr[-3000:]
    rows = [json.loads(line[line.index("{"):]) for line in (sao.stdout + sao.stderr).splitlines()
            if "train_inner" in line and "{" in line]
    assert rows and all(float(r["bsz"]) % 2 == 0 for r in rows)
    insnet = run(train_cmd(small_data, str(tmp_path / "y"), "--max-update", "1", "--searched-order-beam", "2"))
    assert insnet.returncode != 0 and "train it with --arch indigo_*" in insnet.stderr
