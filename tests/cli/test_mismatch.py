"""Checkpoint and dictionary mismatches (insnet_fairseq/tasks/checkpoint_checks.py): each is refused
with one line naming the file, never a traceback, a bare unpickling error or silent garbage."""
import os
import shutil

import pytest
import torch

from conftest import generate_cmd, run, train_cmd

from fairseq.data import Dictionary
from insnet_fairseq.errors import CheckpointError
from insnet_fairseq.tasks import checkpoint_checks

def altered_data(small_data, dest, how):
    """A copy of the data-bin whose dictionaries are reordered or truncated (binarised files unchanged)."""
    shutil.copytree(small_data, dest)
    for lang in ("en", "de"):
        path = os.path.join(dest, f"dict.{lang}.txt")
        with open(path, encoding="utf-8") as f:
            rows = f.readlines()
        rows = rows[::-1] if how == "reordered" else rows[:-20]
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(rows)
    return str(dest)


def one_line_error(out, *needles):
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    line = next((l for l in out.stderr.splitlines() if ": error: checkpoint " in l), None)
    assert line, out.stderr[-3000:]
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def load(path, data):
    """What the recipes (show_trajectory, nll_breakdown, benchmarks) call."""
    return checkpoint_checks.load_model_ensemble_and_task([str(path)], arg_overrides={"data": data})


def test_new_checkpoints_record_their_dictionaries(small_data, tiny_checkpoint):
    """Through fairseq's hook: the task's state_dict, saved as the checkpoint's task_state."""
    state = torch.load(tiny_checkpoint, map_location="cpu")
    assert "dictionaries" not in state
    for role, lang in (("source", "en"), ("target", "de")):
        saved = state["task_state"]["dictionaries"][role]
        d = Dictionary.load(os.path.join(small_data, f"dict.{lang}.txt"))
        assert saved["file"] == os.path.join(small_data, f"dict.{lang}.txt")
        assert saved["size"] == len(d) == state["model"]["encoder.embed_tokens.weight"].shape[0]
    models, _, task = load(tiny_checkpoint, small_data)  # the right data loads
    assert len(models) == 1 and len(task.target_dictionary) == state["task_state"]["dictionaries"]["target"]["size"]


def test_baseline_checkpoint_with_insertion_task(small_data, ar_checkpoint):
    out = run(generate_cmd(small_data, ar_checkpoint), timeout=300)
    one_line_error(out, f"checkpoint {ar_checkpoint} is a fairseq TransformerModel (--arch transformer, trained with "
                        "--task translation)", "decode it with --task translation")


def test_same_size_dictionary_in_another_order(small_data, tiny_checkpoint, tmp_path):
    data = altered_data(small_data, tmp_path / "bin", "reordered")
    out = run(generate_cmd(data, tiny_checkpoint), timeout=300)
    size = len(Dictionary.load(os.path.join(data, "dict.de.txt")))
    one_line_error(out, f"checkpoint {tiny_checkpoint} was trained with other dictionaries",
                   f"target dictionary {data}/dict.de.txt: the same {size:,} types in a different order",
                   f"(trained with {small_data}/dict.de.txt)")


def test_truncated_dictionary(small_data, tiny_checkpoint, tmp_path):
    data = altered_data(small_data, tmp_path / "bin", "truncated")
    with pytest.raises(CheckpointError) as e:
        load(tiny_checkpoint, data)
    n = len(Dictionary.load(os.path.join(small_data, "dict.de.txt")))
    assert f"checkpoint {tiny_checkpoint} was trained with other dictionaries" in str(e.value)
    assert f"source dictionary {data}/dict.en.txt: {n:,} types in the checkpoint's, {n - 20:,} in this one" in str(e.value)
    assert "size mismatch" not in str(e.value)


def test_fingerprint_at_the_top_level_is_still_read(small_data, tiny_checkpoint, tmp_path):
    """Checkpoints saved before the task's state_dict held the fingerprint kept it at the top level."""
    state = torch.load(tiny_checkpoint, map_location="cpu")
    state["dictionaries"] = state["task_state"].pop("dictionaries")
    old = tmp_path / "top_level.pt"
    torch.save(state, old)
    assert len(load(old, small_data)[0]) == 1
    with pytest.raises(CheckpointError) as e:
        load(old, altered_data(small_data, tmp_path / "bin", "reordered"))
    assert f"checkpoint {old} was trained with other dictionaries" in str(e.value) and "different order" in str(e.value)


def test_older_checkpoint_without_fingerprint(small_data, tiny_checkpoint, tmp_path):
    state = torch.load(tiny_checkpoint, map_location="cpu")
    del state["task_state"]["dictionaries"]
    old = tmp_path / "old.pt"
    torch.save(state, old)
    models, _, _ = load(old, small_data)  # still loads
    assert len(models) == 1
    with pytest.raises(CheckpointError) as e:
        load(old, altered_data(small_data, tmp_path / "bin", "truncated"))
    assert f"checkpoint {old} was trained with other dictionaries" in str(e.value)
    assert "the checkpoint's embedding (encoder.embed_tokens.weight) has" in str(e.value)


def test_unreadable_files(small_data, tiny_checkpoint, tmp_path):
    cases = {}
    (tmp_path / "empty.pt").write_bytes(b"")
    cases["empty.pt"] = "is empty (0 bytes), not a checkpoint"
    (tmp_path / "notes.pt").write_text("these are not the weights you are looking for\n")
    cases["notes.pt"] = "cannot be read by torch.load: not a checkpoint, or a damaged or truncated one"
    blob = open(tiny_checkpoint, "rb").read()
    (tmp_path / "cut.pt").write_bytes(blob[: len(blob) // 2])
    cases["cut.pt"] = "cannot be read by torch.load"
    torch.save({"weight": torch.ones(3)}, tmp_path / "weights.pt")
    cases["weights.pt"] = "is a torch file but not a fairseq checkpoint: its keys are weight, not 'model' and 'cfg'"
    torch.save(torch.ones(3), tmp_path / "tensor.pt")
    cases["tensor.pt"] = "holds a Tensor, not a fairseq checkpoint"
    (tmp_path / "dir.pt").mkdir()
    cases["dir.pt"] = "is a directory"
    cases["missing.pt"] = "does not exist"
    for name, message in cases.items():
        with pytest.raises(CheckpointError) as e:
            load(tmp_path / name, small_data)
        assert str(e.value).startswith(f"checkpoint {tmp_path / name} "), str(e.value)
        assert message in str(e.value), str(e.value)
    # from the command line: one line, no traceback
    out = run(generate_cmd(small_data, str(tmp_path / "cut.pt")), timeout=300)
    one_line_error(out, f"checkpoint {tmp_path / 'cut.pt'} ", "cannot be read by torch.load")


def test_resume_from_another_architecture(small_data, ar_checkpoint, tiny_checkpoint, tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    shutil.copy(ar_checkpoint, save / "checkpoint_last.pt")
    out = run(train_cmd(small_data, str(save), "--max-update", "1"), timeout=300)
    one_line_error(out, f"checkpoint {save / 'checkpoint_last.pt'} holds a model of class TransformerModel "
                        "(--arch transformer), but this run trains InsNetModel (--arch insnet_small)")
    # same model class, other dimensions (--finetune-from-model takes the same path)
    out = run(train_cmd(small_data, str(tmp_path / "ft"), "--max-update", "1", "--finetune-from-model", tiny_checkpoint,
                        "--encoder-embed-dim", "32"), timeout=300)
    line = one_line_error(out, f"checkpoint {tiny_checkpoint} does not fit the model being trained")
    assert "encoder.embed_tokens.weight: [" in line and ", 64] in the checkpoint, [" in line and ", 32] in the model" in line


def test_finetune_with_another_dictionary_order(small_data, tiny_checkpoint, tmp_path):
    data = altered_data(small_data, tmp_path / "bin", "reordered")
    out = run(train_cmd(data, str(tmp_path / "ft"), "--max-update", "1", "--finetune-from-model", tiny_checkpoint),
              timeout=300)
    one_line_error(out, f"checkpoint {tiny_checkpoint} was trained with other dictionaries",
                   f"{data}/dict.de.txt: the same")
