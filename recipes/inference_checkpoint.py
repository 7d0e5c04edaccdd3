#!/usr/bin/env python
"""A checkpoint for decoding only: the model's weights, its configuration and the decoding settings stored with it
(recipes/store_decoding.py), without the optimizer state that makes a training checkpoint three times as large, nor
the task's training state (InsNet-Dinic's stored layers of the training set).

    python recipes/inference_checkpoint.py checkpoints/dinic/checkpoint_avg.pt dinic.pt
    python recipes/inference_checkpoint.py checkpoints/dinic/checkpoint_avg.pt dinic.pt --half

``--half`` stores the floating-point weights in half precision (half the size again): fairseq loads them back into
the model's fp32 parameters, so decoding runs in fp32 on weights rounded to 11 significant bits. Tied weights
(``--share-all-embeddings``) stay one tensor in the file. The output loads wherever the input does
(``fairseq-generate --path``, ``benchmarks/frontier.py``); it cannot resume training (``--restore-file`` needs the
optimizer state). Written atomically with fairseq's ``torch_persistent_save``.

Example: the frontier's InsNet-Dinic (13.3M parameters, 8.3M of them stored: the embeddings are tied) goes from
107 MB to 33 MB, 17 MB with ``--half``.
"""
import argparse
import os
import sys

import torch
from fairseq.checkpoint_utils import torch_persistent_save

from insnet_fairseq import checkpoint_safety
from insnet_fairseq.errors import CheckpointError

KEEP = ("args", "cfg", "model", "criterion", "optimizer_history", "task_state", "extra_state", "dictionaries")
EXTRA_KEEP = ("train_iterator", "val_loss", "best", "previous_training_time", "metrics")  # fairseq's own, all small


def inference_state(state: dict, half: bool = False) -> dict:
    """``state`` without its optimizer state (``KEEP``'s keys only) and with fairseq's own ``extra_state`` only (the
    task's state, saved there under its class name, is training data), the weights in fp16 where ``half``.

    Tensors that share storage (tied embeddings) keep sharing it: each storage is converted once. Non-float tensors
    (counts, buffers of integers) are kept as they are.

    Example: {"model": {"w": fp32 [2, 3], "v": the same tensor}, "last_optimizer_state": {...}} with half ->
    {"model": {"w": fp16 [2, 3], "v": that fp16 tensor}}.
    """
    out = {k: state[k] for k in KEEP if k in state}
    if isinstance(out.get("extra_state"), dict):
        out["extra_state"] = {k: v for k, v in out["extra_state"].items() if k in EXTRA_KEEP}
    if half:
        done = {}  # storage pointer -> its fp16 copy
        model = {}
        for name, t in state["model"].items():
            if torch.is_tensor(t) and t.is_floating_point():
                key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
                if key not in done:
                    done[key] = t.half()
                model[name] = done[key]
            else:
                model[name] = t
        out["model"] = model
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="a fairseq checkpoint (checkpoint_last.pt, an average, ...)")
    p.add_argument("output")
    p.add_argument("--half", action="store_true", help="weights stored in fp16 (loaded back into fp32)")
    args = p.parse_args(argv)
    if not os.path.isfile(args.input):
        sys.exit(f"inference_checkpoint.py: {args.input} does not exist")
    try:
        state = checkpoint_safety.load(args.input)
    except CheckpointError as e:  # a global outside the allowlist
        sys.exit(f"inference_checkpoint.py: {e}")
    except Exception as e:  # not a torch file
        sys.exit(f"inference_checkpoint.py: {args.input} is not a readable checkpoint ({type(e).__name__}: {e})")
    if not isinstance(state, dict) or "model" not in state:
        sys.exit(f"inference_checkpoint.py: {args.input} has no model weights (no 'model' entry): not a fairseq "
                 "checkpoint")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    torch_persistent_save(inference_state(state, args.half), args.output)
    size, before = os.path.getsize(args.output) / 1e6, os.path.getsize(args.input) / 1e6
    print(f"{args.output}: {size:.1f} MB (from {before:.1f} MB){', weights in fp16' if args.half else ''}")


if __name__ == "__main__":
    main()
