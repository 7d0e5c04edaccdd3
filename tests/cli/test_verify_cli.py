"""fairseq-generate with InsNet drafts verified by an autoregressive model (--insertion-verify, decoding/verify.py):
the output is what the autoregressive checkpoint alone prints at beam 1. (The verification itself:
tests/unit/test_verify.py.)"""
import pytest
from conftest import generate_cmd, run


@pytest.mark.slow
def test_fairseq_generate_with_verification_outputs_the_ar_models_greedy_output(small_data, tiny_checkpoint,
                                                                                 ar_checkpoint):
    """--path INSNET.pt:AR.pt --insertion-verify: fairseq-generate prints, for every test sentence, what
    fairseq-generate of the AR checkpoint alone prints at beam 1 (same --max-len-b), and the steps split in the
    log; a bad tolerance is a one-line error naming the flag."""
    common = ["--max-len-b", "15", "--batch-size", "16", "--gen-subset", "test", "--user-dir", "insnet_fairseq"]
    out = run(generate_cmd(small_data, f"{tiny_checkpoint}:{ar_checkpoint}", "--insertion-verify",
                           "--insertion-mode", "parallel", *common), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    hyps = {l.split("\t")[0][2:]: l.split("\t")[2] for l in out.stdout.splitlines() if l.startswith("H-")}
    assert len(hyps) == 300 and "of them verification passes" in out.stderr
    cmd = generate_cmd(small_data, ar_checkpoint, *common)
    cmd[cmd.index("insertion_translation")] = "translation"
    cut = cmd.index("--max-insertion-steps")
    cmd = cmd[:cut] + cmd[cut + 2 :] + ["--beam", "1"]
    ar = run(cmd, timeout=600)
    assert ar.returncode == 0, ar.stderr[-3000:]
    ref = {l.split("\t")[0][2:]: l.split("\t")[2] for l in ar.stdout.splitlines() if l.startswith("H-")}
    assert hyps == ref
    bad = run(generate_cmd(small_data, f"{tiny_checkpoint}:{ar_checkpoint}", "--verify-tolerance", "0.5"), timeout=300)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "--verify-tolerance" in [l for l in bad.stderr.splitlines() if ": error: " in l][-1]
