"""Fixes to fairseq installed by importing insnet_fairseq."""
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


def test_training_that_stops_mid_epoch_exits_cleanly(tmp_path):
    """fairseq's prefetch thread (--data-buffer-size) inside torch at interpreter exit aborts the process
    ("terminate called without an active exception", SIGABRT) after a successful run; with the fix it is
    stopped and joined first (fairseq_fixes/clean_exit.py). Unfixed (argument "plain"), this script aborted 8 times in 8."""
    script = tmp_path / "prefetch_then_exit.py"
    script.write_text(PREFETCH_THEN_EXIT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for _ in range(5):
        out = subprocess.run([sys.executable, str(script), "fixed"], env=env, capture_output=True, text=True,
                             timeout=300)
        assert (out.returncode, out.stdout) == (0, "done training\n"), out.stderr[-2000:]
