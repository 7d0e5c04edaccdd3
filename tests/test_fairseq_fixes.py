"""Fixes to fairseq installed by importing insnet_fairseq."""
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


def test_checkpoint_loading_without_weights_only(tmp_path):
    import argparse

    import fairseq.checkpoint_utils as cu

    path = tmp_path / "ckpt.pt"
    torch.save({"args": argparse.Namespace(arch="insnet_small"), "model": {"w": torch.ones(2)}}, path)
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        torch.load(path)  # torch's own default is untouched
    state = cu.torch.load(str(path), map_location="cpu")  # what load_checkpoint_to_cpu calls
    assert state["args"].arch == "insnet_small"
    # (fairseq-train resume, -generate and -interactive end to end: tests/test_cli.py)
