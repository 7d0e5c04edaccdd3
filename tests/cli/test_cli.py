"""fairseq-train with --user-dir insnet_fairseq on the small generated corpus (small_data): training, resuming
after a kill mid-epoch (torch >= 2.6 checkpoints), and clear errors for bad input."""
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from conftest import BIN, ENV, ROOT, generate_cmd, run, train_cmd  # noqa: F401  (fixtures small_data, tiny_checkpoint)


def train_rows(log: str):
    """fairseq-train's json log lines (``--log-format json``) of the training updates."""
    return [json.loads(line[line.index("{"):]) for line in log.splitlines() if "train_inner" in line and "{" in line]


def losses(log: str):
    return [(int(r["num_updates"]), float(r["loss"])) for r in train_rows(log)]


def test_train_kill_mid_epoch_and_resume(small_data, tmp_path):
    save = str(tmp_path / "ckpt")
    last = os.path.join(save, "checkpoint_last.pt")
    marker = str(tmp_path / "saved")
    # the trainer holds still once its first checkpoint (update 8) is written; then SIGKILL
    log_path = tmp_path / "first.log"  # a file, not a pipe: a full pipe would block the trainer
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "cli", "train_then_hold.py"), marker,
                                 *train_cmd(small_data, save, "--save-interval-updates", "8", "--max-update", "10000")[1:]],
                                cwd=ROOT, env=ENV, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.time() + 1800  # a hang guard only: the marker comes after 8 updates, ~20 s unloaded
    while not os.path.exists(marker) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first_log = log_path.read_text()
    assert os.path.exists(marker), first_log[-3000:]
    state = torch.load(last, map_location="cpu")
    updates = state["optimizer_history"][-1]["num_updates"]
    itr = state["extra_state"]["train_iterator"]
    assert updates == 8 and itr["epoch"] == 1 and 0 < itr["iterations_in_epoch"]  # saved mid-epoch
    n_batches = int(next(l for l in first_log.splitlines() if "grouped total_num_itrs" in l).split("=")[-1])
    assert itr["iterations_in_epoch"] < n_batches

    resumed = run(train_cmd(small_data, save, "--max-update", "60"), timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    log = resumed.stdout + resumed.stderr
    assert "weights_only" not in log
    assert f"(epoch 1 @ {updates} updates)" in log  # fairseq's "Loaded checkpoint ..." line
    final = torch.load(last, map_location="cpu")
    assert final["optimizer_history"][-1]["num_updates"] == 60
    curve = losses(first_log) + losses(log)
    assert curve[0][0] == 1 and curve[-1][0] == 60
    early = sum(l for _, l in curve[:5]) / 5
    late = sum(l for _, l in curve[-5:]) / 5
    assert late < early - 1.0, (early, late)  # loss falls (bits per token)


def test_missing_data_dir_is_named(tmp_path):
    out = run(train_cmd(str(tmp_path / "nope"), str(tmp_path / "ckpt")), timeout=300)
    assert out.returncode != 0
    assert f"data directory '{tmp_path / 'nope'}' does not exist" in out.stderr


def write_raw(dir_, pairs):
    os.makedirs(dir_, exist_ok=True)
    for split in ("train", "valid", "test"):
        for i, lang in enumerate(("en", "de")):
            with open(os.path.join(dir_, f"{split}.{lang}"), "w") as f:
                f.write("".join(p[i] + "\n" for p in pairs))


def preprocess(raw, dest, joined=True):
    cmd = [os.path.join(BIN, "fairseq-preprocess"), "--source-lang", "en", "--target-lang", "de",
           "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test",
           "--destdir", dest, "--workers", "1"] + (["--joined-dictionary"] if joined else [])
    out = run(cmd, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


PAIRS = [("a man rides a horse .", "ein mann reitet ein pferd ."), ("two dogs play .", "zwei hunde spielen ."),
         ("a girl sings .", "ein mädchen singt .")] * 4


def test_empty_target_line_is_reported_with_file_and_line(tmp_path):
    pairs = list(PAIRS)
    pairs[4] = ("a cat sleeps .", "")
    write_raw(tmp_path / "raw", pairs)
    preprocess(tmp_path / "raw", str(tmp_path / "bin"))
    out = run(train_cmd(str(tmp_path / "bin"), str(tmp_path / "ckpt")), timeout=300)
    assert out.returncode != 0
    assert "train.en-de.de: 1 empty sentence(s), line(s) 5" in out.stderr


def test_share_all_embeddings_with_separate_dictionaries(tmp_path):
    write_raw(tmp_path / "raw", PAIRS)
    preprocess(tmp_path / "raw", str(tmp_path / "bin"), joined=False)
    out = run(train_cmd(str(tmp_path / "bin"), str(tmp_path / "ckpt")), timeout=300)
    assert out.returncode != 0
    assert "--share-all-embeddings needs one joined dictionary" in out.stderr
    assert "--joined-dictionary" in out.stderr


def test_over_long_sentences_are_skipped_in_train_and_refused_in_valid(tmp_path):
    pairs = PAIRS + [("a very long sentence " * 4, "ein sehr langer satz " * 4)]
    write_raw(tmp_path / "raw", pairs)
    preprocess(tmp_path / "raw", str(tmp_path / "bin"))
    base = [a for a in train_cmd(str(tmp_path / "bin"), str(tmp_path / "ckpt"), "--max-update", "2")
            if a != "--disable-validation"]
    limit = ["--max-target-positions", "12", "--max-source-positions", "12"]
    skipped = run(base + limit + ["--skip-invalid-size-inputs-valid-test"], timeout=300)
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    assert "1 samples have invalid sizes and will be skipped" in skipped.stdout + skipped.stderr
    refused = run(base + limit, timeout=300)
    assert refused.returncode != 0
    assert "--skip-invalid-size-inputs-valid-test" in refused.stdout + refused.stderr


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_fairseq_generate_prints_steps_history_and_sacrebleu(small_data, tiny_checkpoint, mode):
    out = run(generate_cmd(small_data, tiny_checkpoint, "--insertion-mode", mode, "--print-step", "--retain-iter-history",
                           "--scoring", "sacrebleu", "--remove-bpe"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    hyps = [l for l in lines if l.startswith("H-")]
    assert len(hyps) == 300  # every test sentence of the slice
    assert len([l for l in lines if l.startswith("D-")]) == 300 and len([l for l in lines if l.startswith("P-")]) == 300
    steps = {l.split("\t")[0][2:]: int(l.split("\t")[1]) for l in lines if l.startswith("I-")}
    assert len(steps) == 300 and all(0 <= s <= 5 for s in steps.values())
    history = [l for l in lines if l.startswith("E-")]
    assert len(history) == sum(steps.values()) + 300  # the start plus one line per step
    assert not any("@@" in l for l in hyps)  # --remove-bpe
    assert "BLEU = " in out.stdout + out.stderr and "Traceback" not in out.stderr
    mean = sum(steps.values()) / 300  # the log's running average ends at the printed steps' mean
    assert f"insertion decoding ({mode}): 300 sentences, {mean:.2f} steps/sentence" in out.stderr


@pytest.mark.parametrize("task", ["translation", "translation_lev"])
def test_insnet_checkpoint_with_another_task_is_named(small_data, tiny_checkpoint, task):
    """The error (the package's own, raised by its checkpoint checks) names the task to use, in one line: fairseq
    reads the package's tasks when it loads --user-dir, which sets the one-line errors (tasks/cli_errors.py)."""
    cmd = generate_cmd(small_data, tiny_checkpoint)[:-2]  # without --max-insertion-steps (not that task's flag)
    cmd[cmd.index("insertion_translation")] = task
    out = run(cmd, timeout=300)
    assert out.returncode != 0
    assert f"only the task insertion_translation trains and decodes, not --task {task}" in out.stderr
    assert "TypeError" not in out.stderr and "Traceback" not in out.stderr


def test_bad_insertion_mode_is_an_argparse_error(small_data, tiny_checkpoint):
    out = run(generate_cmd(small_data, tiny_checkpoint, "--insertion-mode", "beam"), timeout=300)
    assert out.returncode != 0
    assert "--insertion-mode" in out.stderr and "invalid choice" in out.stderr and "Traceback" not in out.stderr


def test_fairseq_flag_assertions_are_one_line(small_data, tiny_checkpoint):
    """fairseq-generate's own check of a flag combination (--sampling with the default beam 5) is one line naming
    the flags, and the same flags with --beam 1 sample."""
    out = run(generate_cmd(small_data, tiny_checkpoint, "--sampling", "--sampling-topk", "3"), timeout=300)
    assert out.returncode != 0
    assert "fairseq-generate: error: --sampling requires --nbest to be equal to --beam" in out.stderr
    assert "Traceback" not in out.stderr
    out = run(generate_cmd(small_data, tiny_checkpoint, "--sampling", "--sampling-topk", "3", "--beam", "1"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sum(line.startswith("H-") for line in out.stdout.splitlines()) == 300


def test_fairseq_generate_insertion_beam_prints_nbest_hypotheses_best_first(small_data, tiny_checkpoint):
    out = run(generate_cmd(small_data, tiny_checkpoint, "--insertion-beam", "3", "--nbest", "3", "--print-step"),
              timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    scores = {}
    for line in out.stdout.splitlines():
        if line.startswith("H-"):
            sid, score, _ = line.split("\t")
            scores.setdefault(int(sid[2:]), []).append(float(score))
    assert len(scores) == 300 and all(len(v) == 3 for v in scores.values())
    assert all(v == sorted(v, reverse=True) for v in scores.values())
    refused = run(generate_cmd(small_data, tiny_checkpoint, "--insertion-beam", "3", "--insertion-mode", "parallel"),
                  timeout=300)
    assert refused.returncode != 0
    assert "--insertion-beam 3 searches sequential insertions" in refused.stderr and "Traceback" not in refused.stderr


def test_interactive_constraints_and_empty_line(small_data, tiny_checkpoint):
    cmd = [os.path.join(BIN, "fairseq-interactive"), small_data, "--user-dir", "insnet_fairseq",
           "--task", "insertion_translation", "--path", tiny_checkpoint, "--source-lang", "en", "--target-lang", "de",
           "--constraints", "ordered", "--max-insertion-steps", "4"]
    out = run(cmd, input="a man\tein Mann\n\ntwo dogs\n", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    hyps = [l.split("\t") for l in out.stdout.splitlines() if l.startswith("H-")]
    assert [h[0] for h in hyps] == ["H-0", "H-1", "H-2"]
    words = hyps[0][2].split()
    it = iter(words)
    assert all(w in it for w in ["ein", "Mann"])  # the constraint, kept in order
    assert hyps[1][2] == ""  # the empty line: empty output and a warning, no traceback
    assert "empty source sentence" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("flags", [["--dinic-tau", "1.0", "--insertion-order", "binary"],
                                   ["--layerization", "uniform"],
                                   ["--dinic-tau", "1.0", "--insertion-order", "anchored", "--slot-query-stream"],
                                   ["--dinic-tau", "1.0", "--insertion-order", "anchored", "--slot-query-stream",
                                    "--untied-slot-queries"]])
def test_layered_training_logs_layers_per_sentence(small_data, tmp_path, flags):
    out = run(train_cmd(small_data, str(tmp_path / "ckpt"), "--max-update", "4", "--no-save", *flags))
    assert out.returncode == 0, out.stderr[-3000:]
    rows = train_rows(out.stdout + out.stderr)
    assert len(rows) == 4
    words = [float(r["wpb"]) / float(r["bsz"]) for r in rows]  # inserted words per sentence
    for r, w in zip(rows, words):
        assert 1.0 <= float(r["layers"]) < w, (r, w)  # parallel: fewer layers than words
    assert all(math.isfinite(float(r["loss"])) for r in rows)


def test_lagged_dinic_trains_sequentially_first_then_on_promoted_layerings(small_data, tmp_path):
    """--dinic-lagged through fairseq-train: the first epoch trains every sentence on its sequential layering
    (one layer per word: no layering pass before a batch), the second on the layerings its pass promoted."""
    out = run(train_cmd(small_data, str(tmp_path / "ckpt"), "--max-epoch", "2", "--no-save", "--dinic-tau", "1.0",
                        "--insertion-order", "binary", "--dinic-lagged"))
    assert out.returncode == 0, out.stderr[-3000:]
    rows = train_rows(out.stdout + out.stderr)
    by_epoch = {e: [r for r in rows if int(r["epoch"]) == e] for e in (1, 2)}
    assert by_epoch[1] and by_epoch[2] and len(rows) == len(by_epoch[1]) + len(by_epoch[2])
    for r in by_epoch[1]:
        assert abs(float(r["layers"]) - float(r["wpb"]) / float(r["bsz"])) < 0.01, r
    for r in by_epoch[2]:
        assert 1.0 <= float(r["layers"]) < float(r["wpb"]) / float(r["bsz"]), r


@pytest.mark.slow
def test_late_words_add_a_layer_in_training_only(small_data, tmp_path):
    """--late-words: the same uniform-layered updates log more layers per sentence with it (last-layer words
    moved to a new layer), and the loss stays finite."""
    def layers(*extra):
        out = run(train_cmd(small_data, str(tmp_path / "c"), "--max-update", "3", "--no-save", "--layerization",
                            "uniform", "--insertion-order", "anchored", *extra))
        assert out.returncode == 0, out.stderr[-3000:]
        rows = train_rows(out.stdout + out.stderr)
        assert len(rows) == 3 and all(math.isfinite(float(r["loss"])) for r in rows)
        return [float(r["layers"]) for r in rows]
    plain, late = layers(), layers("--late-words", "0.9")
    assert all(b > a for a, b in zip(plain, late)), (plain, late)


@pytest.mark.slow
def test_dinic_layerings_survive_a_resume(small_data, tmp_path):
    flags = ["--dinic-tau", "1.0", "--insertion-order", "binary", "--save-interval-updates", "3"]
    first = run(train_cmd(small_data, str(tmp_path / "ckpt"), "--max-update", "3", *flags))
    assert first.returncode == 0, first.stderr[-3000:]
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", map_location="cpu")
    store = state["extra_state"]["InsertionTranslationTask"]["layer_store"]
    seen = int(store[:, 0].eq(0).sum())  # sentences layered so far: <s> in layer 0
    assert seen > 0 and seen == sum(int(float(r["bsz"])) for r in train_rows(first.stdout + first.stderr))
    resumed = run(train_cmd(small_data, str(tmp_path / "ckpt"), "--max-update", "5", *flags))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"restored the layerings of {seen} training sentences" in resumed.stdout + resumed.stderr


@pytest.mark.slow
def test_bad_layerization_flags_are_refused(small_data, tmp_path):
    out = run(train_cmd(small_data, str(tmp_path / "c"), "--max-update", "1", "--layerization", "uniform",
                        "--dinic-tau", "2"))
    assert out.returncode != 0 and "--dinic-tau 2.0 only applies to --layerization dinic" in out.stderr
    out = run(train_cmd(small_data, str(tmp_path / "c"), "--max-update", "1", "--layerization", "tree"))
    assert out.returncode != 0 and "--layerization" in out.stderr and "invalid choice" in out.stderr
    out = run(train_cmd(small_data, str(tmp_path / "c"), "--max-update", "1", "--late-words", "0.5"))
    assert out.returncode != 0 and "--late-words delays words of the last layer" in out.stderr
    out = run(train_cmd(small_data, str(tmp_path / "c"), "--max-update", "1", "--untied-slot-queries"))
    assert out.returncode != 0 and "--untied-slot-queries needs --slot-query-stream" in out.stderr
    assert "Traceback" not in out.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# The slot scores' bias adds one constant to every slot's logit, which the softmax over slots cancels: its gradient
# is 0 in exact arithmetic, so what Adam sees is rounding noise of the gradient sums (their order differs between
# 1 and 2 workers), normalised into steps of +-lr. Its value says nothing about the engine; every other parameter
# has a real gradient and must match.
SHIFT_INVARIANT = "decoder.heads.position_proj.bias"


@pytest.mark.slow
def test_two_workers_equal_one_worker_with_twice_the_batch(small_data, tmp_path):
    """fairseq's distributed engine on CPU (gloo): 2 workers, spawned by fairseq or by torchrun,
    train exactly as 1 worker accumulating their 2 batches (--update-freq 2), InsNet-Dinic
    layering included, and every worker keeps every sentence's layering."""
    flags = ["--dinic-tau", "1.0", "--insertion-order", "binary", "--dropout", "0", "--max-update", "4"]
    one = run(train_cmd(small_data, str(tmp_path / "one"), *flags, "--update-freq", "2"))
    assert one.returncode == 0, one.stderr[-3000:]
    spawned = run(train_cmd(small_data, str(tmp_path / "spawn"), *flags, "--distributed-world-size", "2",
                            "--distributed-port", str(free_port())))
    assert spawned.returncode == 0, spawned.stderr[-3000:]
    cmd = train_cmd(small_data, str(tmp_path / "torchrun"), *flags, "--distributed-world-size", "2")
    launched = run([os.path.join(BIN, "torchrun"), "--nproc_per_node", "2", "--master_port", str(free_port()),
                    "-m", "fairseq_cli.train", *cmd[1:]])
    assert launched.returncode == 0, launched.stderr[-3000:]

    def state(name):
        ckpt = torch.load(tmp_path / name / "checkpoint_last.pt", map_location="cpu")
        return ckpt["model"], ckpt["extra_state"]["InsertionTranslationTask"]["layer_store"]

    ref_losses, (ref_model, ref_store) = losses(one.stdout + one.stderr), state("one")
    assert [u for u, _ in ref_losses] == [1, 2, 3, 4]
    for name, out in (("spawn", spawned), ("torchrun", launched)):
        log = out.stdout + out.stderr
        assert "training on 2 devices" in log and "--distributed-backend gloo" in log
        for (u, a), (v, b) in zip(ref_losses, losses(log), strict=True):
            assert u == v and abs(a - b) <= 1e-3 * abs(a), (name, u, a, b)  # the log prints 3 decimals
        model, store = state(name)
        assert SHIFT_INVARIANT in model
        for k in ref_model:
            if k == SHIFT_INVARIANT:
                continue
            torch.testing.assert_close(model[k], ref_model[k], atol=1e-5, rtol=1e-4, msg=lambda m, k=k: f"{name} {k}: {m}")
        assert torch.equal(store, ref_store)  # rank 0 saved the layerings of both workers' sentences
    assert int(ref_store[:, 0].eq(0).sum()) > 0


def test_checkpoint_copies_are_atomic(tmp_path, monkeypatch):
    """fairseq copies checkpoint_NN.pt to checkpoint_last.pt; a copy cut short (here: an exception
    half way, as a SIGKILL would) leaves the previous checkpoint_last.pt whole."""
    import shutil

    import insnet_fairseq  # noqa: F401  (installs the fix)
    from fairseq.file_io import PathManager

    src, dst = tmp_path / "checkpoint_1_6.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new" * 1000)
    dst.write_bytes(b"old" * 500)
    real_copy = shutil.copyfile

    def cut_short(a, b, *args, **kwargs):
        with open(b, "wb") as f:
            f.write(b"new" * 10)  # part of the file, then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copyfile", cut_short)
    with pytest.raises(KeyboardInterrupt):
        PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"old" * 500
    monkeypatch.setattr(shutil, "copyfile", real_copy)
    assert PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"new" * 1000 and not (tmp_path / "checkpoint_last.pt.tmp").exists()
