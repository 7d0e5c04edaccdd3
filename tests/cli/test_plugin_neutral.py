"""Importing the plugin changes nothing for a model it does not define: fairseq's ``transformer`` trains and decodes
the same in a process with ``--user-dir insnet_fairseq`` as in one without it, except where a named fix of a bug
of the pinned fairseq applies:

* ``checkpoint_safety``: fairseq 0.12 cannot load its own checkpoints under torch >= 2.6 (``torch.load``'s
  ``weights_only=True`` default refuses ``argparse.Namespace``); the plugin registers the allowlist. The process
  without the plugin decodes with torch's own switch for the old default, ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, so
  it decodes at all.
* ``fairseq_fixes/batching``: ``data_utils.batch_by_size`` drops the last sentences of a split (300 test sentences
  at ``--batch-size 16`` are batched as 16 x 18 + 8). Without the plugin those sentences are never translated; with
  it they are. Every sentence both decode is decoded the same.

Training is run where fairseq's batching covers the training split (``--required-batch-size-multiple 1``, checked
here against the unpatched function), so no fix applies: the losses of every update and the saved weights are
identical. (At the default multiple of 8 the batching fix applies to training too: it adds the dropped sentences
as one more batch, so the epoch's shuffled batch order, and with it every loss, differs.)
"""
import json
import os
import subprocess

import numpy as np
import torch
from fairseq.data import data_utils

from conftest import AR_TINY, BIN, ENV, N_LINES, ROOT  # noqa: F401  (fixture small_data)

UPDATES = 6


def train(data, save, plugin):
    cmd = [os.path.join(BIN, "fairseq-train"), data, *(["--user-dir", "insnet_fairseq"] if plugin else []),
           "--task", "translation", *AR_TINY, "--share-all-embeddings", "--criterion", "label_smoothed_cross_entropy",
           "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "512",
           "--required-batch-size-multiple", "1", "--max-update", str(UPDATES), "--disable-validation",
           "--save-dir", save, "--no-epoch-checkpoints", "--num-workers", "0", "--log-format", "json", "--log-interval", "1", "--seed", "3"]
    out = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    rows = [json.loads(line[line.index("{"):]) for line in log.splitlines() if "train_inner" in line and "{" in line]
    return [(r["num_updates"], r["loss"], r["nll_loss"]) for r in rows], os.path.join(save, "checkpoint_last.pt")


def generate(data, ckpt, plugin):
    """{sample id: (score, hypothesis)} of fairseq-generate's beam search over the test split."""
    cmd = [os.path.join(BIN, "fairseq-generate"), data, *(["--user-dir", "insnet_fairseq"] if plugin else []),
           "--task", "translation", "--path", ckpt, "--gen-subset", "test", "--beam", "2", "--batch-size", "16",
           "--max-len-b", "20"]
    env = ENV if plugin else dict(ENV, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    hyps = {}
    for line in out.stdout.splitlines():
        if line.startswith("H-"):
            key, score, text = line.split("\t")
            hyps[int(key[2:])] = (score, text)
    return hyps


def unpatched_batches_cover(data, split, **kwargs) -> bool:
    """Whether fairseq's own ``batch_by_size`` (the function the batching fix wraps) covers ``split`` of ``data``."""
    from fairseq.data import Dictionary
    from fairseq.tasks.translation import load_langpair_dataset

    d = Dictionary.load(os.path.join(data, "dict.en.txt"))
    ds = load_langpair_dataset(data, split, "en", d, "de", d, combine=False, dataset_impl=None, upsample_primary=1,
                               left_pad_source=True, left_pad_target=False, max_source_positions=1024,
                               max_target_positions=1024)
    indices = ds.ordered_indices()
    vec = ds.num_tokens_vec(indices).astype(np.int64)
    batches = data_utils.batch_by_size.__wrapped__(indices, ds.num_tokens, num_tokens_vec=vec, **kwargs)
    return sum(len(b) for b in batches) == len(ds)


def test_fairseq_transformer_trains_and_decodes_as_without_the_plugin(small_data, tmp_path):
    assert unpatched_batches_cover(small_data, "train", max_tokens=512, required_batch_size_multiple=1)
    assert not unpatched_batches_cover(small_data, "train", max_tokens=512, required_batch_size_multiple=8)
    plain_losses, plain_ckpt = train(small_data, str(tmp_path / "plain"), plugin=False)
    ours_losses, ours_ckpt = train(small_data, str(tmp_path / "plugin"), plugin=True)
    assert len(plain_losses) == UPDATES and ours_losses == plain_losses
    plain_state, ours_state = torch.load(plain_ckpt, map_location="cpu"), torch.load(ours_ckpt, map_location="cpu")
    assert plain_state.keys() == ours_state.keys() and ours_state["task_state"] == plain_state["task_state"]
    plain_w, ours_w = plain_state["model"], ours_state["model"]
    assert plain_w.keys() == ours_w.keys() and all(torch.equal(plain_w[k], ours_w[k]) for k in plain_w)

    plain, ours = generate(small_data, plain_ckpt, plugin=False), generate(small_data, ours_ckpt, plugin=True)
    assert sorted(ours) == list(range(N_LINES))  # every test sentence (the batching fix)
    assert all(plain[i] == ours[i] for i in plain)  # decoded the same
    # what the plugin adds is exactly what fairseq's batching drops: the test split as fairseq-generate batches it
    assert not unpatched_batches_cover(small_data, "test", max_sentences=16, required_batch_size_multiple=8)
    assert 0 < N_LINES - len(plain) < 16, len(plain)  # the last, incomplete batch is what fairseq left out
