"""fairseq-generate with an autoregressive judge of InsNet's candidates (--iter-decode-with-external-reranker,
decoding/rerank.py): one output per test sentence with a judge, a channel model and an InsNet judge; misuse is a
one-line error naming the flag. (The judge's scores and choices: tests/unit/test_rerank.py.)"""
import pytest
from conftest import generate_cmd, run


@pytest.mark.slow
def test_fairseq_generate_with_a_judge(small_data, tiny_checkpoint, ar_checkpoint):
    """--path INSNET.pt:AR.pt --iter-decode-with-external-reranker: one output per test sentence; the AR checkpoint
    without the flag is a one-line error that names the flag."""
    cmd = generate_cmd(small_data, f"{tiny_checkpoint}:{ar_checkpoint}", "--insertion-candidates", "2",
                       "--iter-decode-with-external-reranker", "--insertion-mode", "parallel")
    out = run(cmd, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert sum(l.startswith("S-") for l in lines) == sum(l.startswith("H-") for l in lines) == 300  # the test split
    # a channel model third (the same AR checkpoint here: the plumbing, not the direction, is tested), and the judged
    # candidates ranked by minimum Bayes risk
    cmd = generate_cmd(small_data, f"{tiny_checkpoint}:{ar_checkpoint}:{ar_checkpoint}", "--insertion-candidates", "2",
                       "--iter-decode-with-external-reranker", "--channel-weight", "0.5", "--insertion-mode", "parallel",
                       "--insertion-candidates-mbr", "1")
    out = run(cmd, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert sum(l.startswith("S-") for l in lines) == sum(l.startswith("H-") for l in lines) == 300
    # an InsNet judge (the same checkpoint here: the plumbing is tested, the scores in the tests above)
    cmd = generate_cmd(small_data, f"{tiny_checkpoint}:{tiny_checkpoint}", "--insertion-candidates", "2",
                       "--iter-decode-with-external-reranker", "--insertion-mode", "parallel")
    out = run(cmd, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert sum(l.startswith("S-") for l in lines) == sum(l.startswith("H-") for l in lines) == 300
    out = run(generate_cmd(small_data, f"{tiny_checkpoint}:{ar_checkpoint}", "--insertion-candidates", "2"), timeout=300)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    error = [l for l in out.stderr.splitlines() if ": error: " in l]
    assert error and "--iter-decode-with-external-reranker" in error[0], out.stderr[-1000:]
    out = run(generate_cmd(small_data, tiny_checkpoint, "--insertion-candidates-mbr", "inf"), timeout=300)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    error = [l for l in out.stderr.splitlines() if ": error: " in l]
    assert error and "--insertion-candidates-mbr" in error[0], out.stderr[-1000:]
