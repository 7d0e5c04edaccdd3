"""Fixes to fairseq installed by importing insnet_fairseq: each test shows the bug in the unpatched library (the
function the fix wraps, or a process without the plugin), then the fix."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import insnet_fairseq  # noqa: F401
from fairseq.data import data_utils


@pytest.mark.parametrize("max_tokens,max_sentences", [(None, 16), (1000, None), (4096, None), (None, 100)])
def test_batching_covers_every_sentence(max_tokens, max_sentences):
    indices = np.arange(300)
    sizes = np.random.RandomState(0).randint(5, 60, 300)
    raw = data_utils.batch_by_size.__wrapped__(indices, lambda i: sizes[i], max_tokens=max_tokens,
                                                 max_sentences=max_sentences, required_batch_size_multiple=8,
                                                 num_tokens_vec=sizes)
    assert sum(len(b) for b in raw) < 300  # the fairseq behaviour being fixed
    fixed = data_utils.batch_by_size(indices, lambda i: sizes[i], max_tokens=max_tokens,
                                     max_sentences=max_sentences, required_batch_size_multiple=8, num_tokens_vec=sizes)
    assert sorted(np.concatenate(fixed).tolist()) == list(range(300))


@pytest.mark.parametrize("tau", [0.5, 1.0, 3.0, None])
def test_insertion_transformer_targets_with_label_tau(tau):
    """InsT's binary-tree loss (--label-tau): float32 targets, one distribution per slot that gets words,
    centred on the gap's middle word (Stern et al. 2019); fairseq's own scorer returns float64 (the bug)."""
    from fairseq.models.nat import insertion_transformer as it

    pad, unk, V = 1, 3, 20
    prev = torch.tensor([[0, 2, pad, pad, pad, pad], [0, 5, 2, pad, pad, pad]])  # <s> </s>; <s> a </s>
    tgt = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 5, 9, 2, pad, pad]])  # 4 words into one slot; 1 into the second
    if tau is not None:
        assert isinstance(it.neg_scorer.__call__.__wrapped__(it.neg_scorer, 0, 4, tau), np.floating)
    labels = it._get_ins_targets(prev, tgt, pad, unk, V, tau=tau)  # [B, T - 1, V]
    assert labels.dtype == torch.float32 and labels.shape == (2, 5, V)
    slot = labels[0, 0]  # the only slot of sentence 0 gets 5 6 7 8
    assert torch.allclose(slot.sum(), torch.tensor(1.0)) and set(slot.nonzero().flatten().tolist()) == {5, 6, 7, 8}
    if tau is None:
        assert torch.allclose(slot[[5, 6, 7, 8]], torch.full((4,), 0.25))
    else:  # more weight on the middle words than on the ends
        assert slot[6] > slot[5] and slot[7] > slot[8]
    assert labels[1, 1, 9] == 1 and labels[1, 0, pad] == 1  # <s> | a | 9 </s>: the empty slot's label is <pad>


PREFETCH_THEN_EXIT = """
import sys
import torch
if sys.argv[1] == "fixed":
    import insnet_fairseq  # noqa: F401
from fairseq.data import iterators

class Batches:  # each batch costs torch work (released GIL), as collating does
    def __len__(self):
        return 1000
    def __iter__(self):
        x = torch.randn(300, 300)
        for _ in range(1000):
            for _ in range(20):
                x = torch.tanh(x @ x)
            yield x

itr = iterators.BufferedIterator(10, Batches())
next(itr)  # training stops mid-epoch (--max-update): the prefetch thread is still collating
print("done training", flush=True)
"""


@pytest.mark.slow
def test_training_that_stops_mid_epoch_exits_cleanly(tmp_path):
    """fairseq's prefetch thread (--data-buffer-size) inside torch at interpreter exit aborts the process
    ("terminate called without an active exception", SIGABRT) after a successful run; with the fix it is
    stopped and joined first (fairseq_fixes/clean_exit.py). Unfixed (argument "plain"), this script aborted 8 times in 8."""
    script = tmp_path / "prefetch_then_exit.py"
    script.write_text(PREFETCH_THEN_EXIT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    plain = [subprocess.run([sys.executable, str(script), "plain"], env=env, capture_output=True, text=True,
                            timeout=300) for _ in range(3)]
    assert any(out.returncode != 0 and "terminate called" in out.stderr for out in plain)  # the bug (a race)
    for _ in range(5):
        out = subprocess.run([sys.executable, str(script), "fixed"], env=env, capture_output=True, text=True,
                             timeout=300)
        assert (out.returncode, out.stdout) == (0, "done training\n"), out.stderr[-2000:]


def test_insertion_transformer_targets_fail_without_the_fix(monkeypatch):
    from fairseq.models.nat import insertion_transformer as it

    cls = type(it.neg_scorer)
    monkeypatch.setattr(cls, "__call__", cls.__call__.__wrapped__)
    prev = torch.tensor([[0, 2, 1, 1]])
    tgt = torch.tensor([[0, 5, 6, 2]])
    with pytest.raises(RuntimeError, match="dtype"):
        it._get_ins_targets(prev, tgt, 1, 3, 20, tau=1.0)


NUMPY_COMPAT = """
import sys
import torch
if sys.argv[1] == "fixed":
    import insnet_fairseq  # noqa: F401
from fairseq.data import TokenBlockDataset
blocks = TokenBlockDataset([torch.tensor([4, 5, 2]), torch.tensor([6, 2])], [3, 2], block_size=None, pad=1, eos=2,
                           break_mode="eos")
print(len(blocks))
"""


@pytest.mark.skipif(np.__version__.startswith("1."), reason="numpy 1 has np.compat: no bug to fix")
def test_language_modeling_blocks_under_numpy_2(tmp_path):
    script = tmp_path / "blocks.py"
    script.write_text(NUMPY_COMPAT)
    plain = subprocess.run([sys.executable, str(script), "plain"], capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "has no attribute 'compat'" in plain.stderr  # the bug
    fixed = subprocess.run([sys.executable, str(script), "fixed"], capture_output=True, text=True, timeout=300)
    assert fixed.returncode == 0 and fixed.stdout.split()[-1] == "2", fixed.stderr[-2000:]


def _interrupted_copy(monkeypatch):
    """shutil.copyfile that writes half of the file and then dies, as a SIGKILL in mid-copy would leave it."""
    import shutil

    def half_then_die(fsrc, fdst, *args, **kwargs):
        data = fsrc.read()
        fdst.write(data[: len(data) // 2])
        raise KeyboardInterrupt("killed mid-copy")

    monkeypatch.setattr(shutil, "_fastcopy_sendfile", half_then_die, raising=False)
    monkeypatch.setattr(shutil, "copyfileobj", half_then_die)


@pytest.mark.parametrize("fixed", [False, True])
def test_checkpoint_copy_killed_midway(tmp_path, monkeypatch, fixed):
    from fairseq.file_io import PathManager

    src, dst = tmp_path / "checkpoint_5_1000.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new" * 1000)
    dst.write_bytes(b"old" * 1000)
    copy = PathManager.copy if fixed else PathManager.copy.__wrapped__
    _interrupted_copy(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        copy(str(src), str(dst), overwrite=True)
    if fixed:
        assert dst.read_bytes() == b"old" * 1000  # the previous checkpoint, whole
    else:
        assert len(dst.read_bytes()) == 1500  # the bug: a truncated checkpoint_last.pt


@pytest.mark.skipif(torch.cuda.is_available(), reason="the bug is that of a machine without CUDA")
def test_distributed_workers_without_cuda():
    from fairseq.dataclass.configs import DistributedTrainingConfig
    from fairseq.distributed import utils as du

    cfg = DistributedTrainingConfig(distributed_world_size=2, distributed_port=12345)
    with pytest.raises(AssertionError, match="have 0 available devices"):
        du._infer_single_node_init.__wrapped__(cfg)  # the bug
    du._infer_single_node_init(cfg)
    assert cfg.distributed_init_method == "tcp://localhost:12345"


def test_interactive_input_lines(tmp_path):
    """fairseq-interactive's reader: invalid UTF-8 aborts it and a leading tab (an empty source before
    --constraints) is stripped; the fix keeps both lines."""
    path = tmp_path / "input.txt"
    path.write_bytes(b"\tein Wort\nbad \xff byte\n")
    script = ("import sys; from fairseq_cli.interactive import buffered_read; "
              "print(repr(next(buffered_read(sys.argv[1], 10))))")
    plain = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "UnicodeDecodeError" in plain.stderr  # the bug
    from insnet_fairseq.fairseq_fixes.interactive import read_lines

    assert next(read_lines(str(path), 10)) == ["\tein Wort", "bad \ufffd byte"]
    path.write_bytes(b"\tein Wort\n")
    plain = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert plain.stdout.strip() == repr(["ein Wort"])  # the bug: the tab that marked an empty source is gone
