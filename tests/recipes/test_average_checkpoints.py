"""recipes/average_checkpoints.py: the mean of each floating-point parameter, the newest run state kept, every
checkpoint of a save directory counted once, different models refused with the file named."""
import os
import shutil
import subprocess
import sys

import torch

from conftest import ROOT


def save(path, updates, w, steps=None, extra=None):
    model = {"w": torch.tensor(w), "steps": torch.tensor(steps if steps is not None else updates)}
    model.update(extra or {})
    torch.save({"model": model, "optimizer_history": [{"num_updates": updates}], "extra_state": {"u": updates}}, path)


def average(*args):
    return subprocess.run([sys.executable, "recipes/average_checkpoints.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_a_save_directory_is_averaged_once_per_checkpoint(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    save(run / "checkpoint_9_1000.pt", 1000, [1.0, 2.0])
    save(run / "checkpoint_last.pt", 1166, [3.0, 6.0])
    shutil.copy(run / "checkpoint_last.pt", run / "checkpoint_best.pt")  # the last was the best: counted once
    save(run / "checkpoint_10_1166.pt", 1166, [3.0, 6.0], extra=None)  # the last's weights, saved with
    state = torch.load(run / "checkpoint_10_1166.pt")  # other training state: counted once too
    state["extra_state"] = {"u": 1166, "train_iterator": "elsewhere"}
    torch.save(state, run / "checkpoint_10_1166.pt")
    save(run / "checkpoint_avg.pt", 1, [100.0, 100.0])  # an earlier average is not an input
    save(run / "checkpoint_60min.pt", 1, [100.0, 100.0])  # nor a snapshot of another run's base
    out = average("--inputs", str(run), "--output", str(run / "checkpoint_avg.pt"))
    assert out.returncode == 0, out.stderr
    assert "averaged 2 checkpoints (updates 1000, 1166)" in out.stdout
    state = torch.load(run / "checkpoint_avg.pt")
    assert torch.equal(state["model"]["w"], torch.tensor([2.0, 4.0]))
    assert int(state["model"]["steps"]) == 1166  # integer buffers and the run state: the newest input's
    assert state["extra_state"] == {"u": 1166} and state["optimizer_history"][-1]["num_updates"] == 1166


def test_files_in_any_order_keep_the_newest_state(tmp_path):
    for name, u, w in (("b.pt", 300, [0.0]), ("a.pt", 100, [3.0]), ("c.pt", 200, [6.0])):
        save(tmp_path / name, u, w)
    out = average("--inputs", *(str(tmp_path / n) for n in ("b.pt", "a.pt", "c.pt")), "--output",
                  str(tmp_path / "avg.pt"))
    assert out.returncode == 0, out.stderr
    state = torch.load(tmp_path / "avg.pt")
    assert torch.equal(state["model"]["w"], torch.tensor([3.0])) and state["extra_state"] == {"u": 300}


def test_different_models_and_missing_inputs_are_refused(tmp_path):
    save(tmp_path / "a.pt", 1, [1.0, 2.0])
    save(tmp_path / "b.pt", 2, [1.0, 2.0, 3.0])
    save(tmp_path / "c.pt", 3, [1.0, 2.0], extra={"head": torch.zeros(1)})
    out = average("--inputs", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--output", str(tmp_path / "x.pt"))
    assert out.returncode != 0 and "parameter w has shape (3,)" in out.stderr and "Traceback" not in out.stderr
    out = average("--inputs", str(tmp_path / "a.pt"), str(tmp_path / "c.pt"), "--output", str(tmp_path / "x.pt"))
    assert out.returncode != 0 and "are different models (parameters ['head'])" in out.stderr
    out = average("--inputs", str(tmp_path / "nothing.pt"), "--output", str(tmp_path / "x.pt"))
    assert out.returncode != 0 and "--inputs" in out.stderr and "nothing.pt" in out.stderr
    assert not os.path.exists(tmp_path / "x.pt")


def test_tied_parameters_stay_one_tensor(tmp_path):
    for name, u, w in (("a.pt", 1, [1.0, 1.0]), ("b.pt", 2, [3.0, 5.0])):
        emb = torch.tensor(w)
        torch.save({"model": {"encoder.embed": emb, "decoder.embed": emb, "decoder.out": emb},
                    "optimizer_history": [{"num_updates": u}]}, tmp_path / name)
    out = average("--inputs", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--output", str(tmp_path / "avg.pt"))
    assert out.returncode == 0, out.stderr
    model = torch.load(tmp_path / "avg.pt")["model"]
    assert torch.equal(model["decoder.out"], torch.tensor([2.0, 3.0]))
    assert model["encoder.embed"].data_ptr() == model["decoder.embed"].data_ptr() == model["decoder.out"].data_ptr()


def test_equal_copies_of_tied_parameters_become_one_tensor(tmp_path):
    """A GPU run's checkpoint holds tied parameters as separate equal copies: the average (and the float16 transfer
    copy) stores them once, while a parameter of the same shape with other values stays its own."""
    for name, u, w in (("a.pt", 1, [1.0, 1.0]), ("b.pt", 2, [3.0, 5.0])):
        emb = torch.tensor(w)
        torch.save({"model": {"encoder.embed": emb.clone(), "decoder.embed": emb.clone(), "decoder.out": emb.clone(),
                              "decoder.bias": emb + 1},
                    "optimizer_history": [{"num_updates": u}]}, tmp_path / name)
    for flags in ([], ["--transfer"]):
        out = average("--inputs", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--output", str(tmp_path / "avg.pt"),
                      *flags)
        assert out.returncode == 0, out.stderr
        model = torch.load(tmp_path / "avg.pt")["model"]
        assert model["encoder.embed"].data_ptr() == model["decoder.embed"].data_ptr() == model["decoder.out"].data_ptr()
        assert model["decoder.bias"].data_ptr() != model["decoder.out"].data_ptr()
        assert model["decoder.out"].tolist() == [2.0, 3.0] and model["decoder.bias"].tolist() == [3.0, 4.0]


def test_reuse_keeps_an_average_newer_than_its_inputs(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    save(run / "checkpoint_last.pt", 2, [4.0])
    save(run / "checkpoint_1_1.pt", 1, [2.0])
    for name in ("checkpoint_last.pt", "checkpoint_1_1.pt"):  # clearly older than the average, whatever the clock
        os.utime(run / name, (os.path.getmtime(run / name) - 100,) * 2)
    avg = run / "checkpoint_avg.pt"
    args = ("--inputs", str(run), "--output", str(avg), "--reuse")
    assert average(*args).returncode == 0 and torch.load(avg)["model"]["w"].item() == 3.0
    out = average(*args)
    assert out.returncode == 0 and "kept" in out.stdout  # nothing newer: not remade
    save(run / "checkpoint_last.pt", 3, [8.0])  # the run went on
    os.utime(run / "checkpoint_last.pt", (os.path.getmtime(avg) + 10,) * 2)
    out = average(*args)
    assert out.returncode == 0 and "averaged 2 checkpoints (updates 1, 3)" in out.stdout
    assert torch.load(avg)["model"]["w"].item() == 5.0


def test_transfer_copy_is_float16_keeps_ties_and_drops_the_optimizer_state(tmp_path):
    """--transfer on one checkpoint: float16 parameters (the original's, rounded), ties kept, integer buffers and the
    run state as they were, no optimizer state and no task training state (recipes/inference_checkpoint.py --half)."""
    emb = torch.tensor([1.0, 1.0 / 3.0])
    torch.save({"model": {"encoder.embed": emb, "decoder.out": emb, "steps": torch.tensor(7)},
                "optimizer_history": [{"num_updates": 7}], "last_optimizer_state": {"state": {0: torch.zeros(2)}},
                "extra_state": {"train_iterator": {"epoch": 2}, "InsertionTranslationTask": {"layers": [1, 2]}}},
               tmp_path / "a.pt")
    out = average("--inputs", str(tmp_path / "a.pt"), "--output", str(tmp_path / "small.pt"), "--transfer")
    assert out.returncode == 0 and "(float16, no optimizer state)" in out.stdout, out.stderr
    state = torch.load(tmp_path / "small.pt")
    model = state["model"]
    assert "last_optimizer_state" not in state and state["optimizer_history"][-1]["num_updates"] == 7
    assert state["extra_state"] == {"train_iterator": {"epoch": 2}}
    assert model["encoder.embed"].dtype == torch.float16 and model["steps"].dtype == torch.int64
    assert model["encoder.embed"].data_ptr() == model["decoder.out"].data_ptr()
    assert torch.equal(model["decoder.out"].float(), emb.half().float()) and not torch.equal(emb.half().float(), emb)
