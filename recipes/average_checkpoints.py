#!/usr/bin/env python
"""Average the parameters of checkpoints of one training run into one checkpoint (as fairseq's
``scripts/average_checkpoints.py``, which the fairseq wheel does not install).

    python recipes/average_checkpoints.py --inputs checkpoints/t120_ar --output checkpoints/t120_ar/checkpoint_avg.pt
    python recipes/average_checkpoints.py --inputs a.pt b.pt c.pt --output avg.pt
    python recipes/average_checkpoints.py --inputs SAVE_DIR --output SAVE_DIR/checkpoint_avg.pt --reuse  # remade only
                                                                  # when a checkpoint is newer than the average
    python recipes/average_checkpoints.py --inputs avg.pt --output small.pt --transfer  # float16, for decoding only

A directory stands for every checkpoint the run kept there (``checkpoint_last.pt``, ``checkpoint_best.pt`` and the
``--save-interval-updates`` ones, ``checkpoint_E_U.pt``; never an earlier average), each model state counted once even
when two files hold it (``checkpoint_best.pt`` is a copy of the last one when the last was the best, and
``checkpoint_last.pt`` holds the weights of the interval checkpoint saved at the same update, with other training
state).
Floating-point parameters are averaged in float32 and stored in their own dtype. Integer buffers, the
configuration, the optimizer history and the training state are the newest input's (by update, so a resumed run
continues from it), and parameters tied in it (``--share-all-embeddings``) stay one tensor, also where a GPU run
saved them as equal copies (:func:`retie`). ``--transfer`` writes the
average as ``recipes/inference_checkpoint.py --half`` does: a small copy to decode on another machine,
floating-point parameters in float16 (fairseq loads them into the model's float32 parameters), without the optimizer
state or the task's training state (so it decodes, but cannot resume training). Checkpoints of different
models are refused, naming the file and the parameter. The average is written atomically (fairseq's
``torch_persistent_save``).

Example: parameters w = [1, 2] (update 1000) and w = [3, 6] (update 1166) -> w = [2, 4], with update 1166's state.
"""
import argparse
import glob
import hashlib
import os
import re
import sys
from typing import Dict, List, Tuple

import torch
from fairseq import checkpoint_utils

from insnet_fairseq import checkpoint_safety
from insnet_fairseq.errors import CheckpointError
from recipes.inference_checkpoint import inference_state


def run_checkpoints(directory: str) -> List[str]:
    """The checkpoints a run kept in ``directory``: last, best and the interval/epoch ones (no averages), the last
    first (of two files with the same weights the first is kept: the run's own last state, to resume from)."""
    first = {"checkpoint_last.pt": 0, "checkpoint_best.pt": 1}
    names = sorted(glob.glob(os.path.join(directory, "checkpoint*.pt")),
                   key=lambda n: (first.get(os.path.basename(n), 2), n))
    kept = [n for n in names if re.fullmatch(r"checkpoint(_last|_best|\d+|_\d+_\d+)\.pt", os.path.basename(n))]
    if not kept:
        sys.exit(f"average_checkpoints.py: no checkpoint*.pt in {directory}")
    return kept


def load_distinct(paths: List[str]) -> Tuple[List[str], List[dict]]:
    """The states of ``paths`` without those whose model state (every tensor of ``model``, its name, dtype, shape and
    values) an earlier one already has: best = last, or the last and the interval checkpoint of its update, whose
    training state differs. -> (the paths kept, their states)."""
    seen, kept, states = set(), [], []
    for p in paths:
        try:
            state = checkpoint_safety.load(p)
        except CheckpointError as e:
            sys.exit(f"average_checkpoints.py: {e}")
        digest = model_digest(state["model"])
        if digest not in seen:
            seen.add(digest)
            kept.append(p)
            states.append(state)
    return kept, states


def model_digest(model: Dict[str, torch.Tensor]) -> bytes:
    """A hash of a model state: each entry's name, dtype, shape and bytes, in name order. Equal weights in files that
    differ elsewhere (optimizer, iterator, best score) hash the same."""
    h = hashlib.sha1()
    for name in sorted(model):
        v = model[name]
        h.update(f"{name}|{v.dtype}|{tuple(v.shape)}|".encode())
        h.update(v.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.digest()


def updates(state: dict) -> int:
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates", 0))


def average(states: List[dict], names: List[str]) -> Dict[str, torch.Tensor]:
    """The mean of every floating-point parameter of ``states`` (others: the last state's), in the parameter's own
    dtype."""
    first, first_name = states[0]["model"], names[0]
    for state, name in zip(states[1:], names[1:]):
        model = state["model"]
        if model.keys() != first.keys():
            diff = sorted(model.keys() ^ first.keys())[:3]
            sys.exit(f"average_checkpoints.py: {name} and {first_name} are different models (parameters {diff})")
        for k, v in model.items():
            if v.shape != first[k].shape:
                sys.exit(f"average_checkpoints.py: {name}: parameter {k} has shape {tuple(v.shape)}, "
                         f"{first_name} {tuple(first[k].shape)}")
    out = {k: torch.stack([s["model"][k].float() for s in states]).mean(0).to(v.dtype)
           if v.is_floating_point() else v for k, v in states[-1]["model"].items()}
    return retie(out)  # tied parameters (--share-all-embeddings) average to equal tensors: one storage in the file


def retie(params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``params`` with floating-point tensors of equal shape, dtype and values made one tensor (one storage in the
    file). A run on a GPU saves each parameter moved to the CPU on its own (fairseq's ``move_to_cpu``), so the
    parameters ``--share-all-embeddings`` ties arrive as equal copies: three [V, d] embeddings where one would do
    (a float16 transfer of the AR model: 20.2 MB instead of 14.2). Equal values everywhere are what tying makes;
    loading copies the values into the model's own (tied or not) parameters, so nothing else changes.
    Example: {"enc.embed": [1, 2], "dec.embed": [1, 2] (a copy), "dec.bias": [1, 3]} -> the two embeddings one tensor."""
    distinct = {}  # (shape, dtype) -> the distinct tensors met so far
    out = {}
    for k, v in params.items():
        if not v.is_floating_point():
            out[k] = v
            continue
        same = distinct.setdefault((tuple(v.shape), v.dtype), [])
        out[k] = next((u for u in same if torch.equal(u, v)), v)
        if out[k] is v:
            same.append(v)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inputs", nargs="+", required=True, help="checkpoint files, or one run's save directory")
    p.add_argument("--output", required=True)
    p.add_argument("--reuse", action="store_true", help="keep --output when it is newer than every input")
    p.add_argument("--transfer", action="store_true",
                   help="parameters in float16, no optimizer state: a copy to decode on another machine")
    args = p.parse_args()
    paths = []
    for x in args.inputs:
        if os.path.isdir(x):
            paths.extend(run_checkpoints(x))
        elif os.path.isfile(x):
            paths.append(x)
        else:
            sys.exit(f"average_checkpoints.py: --inputs {x}: no such file or directory")
    paths = [q for q in paths if os.path.abspath(q) != os.path.abspath(args.output)]
    if args.reuse and os.path.isfile(args.output) and all(os.path.getmtime(args.output) > os.path.getmtime(q)
                                                          for q in paths):
        print(f"{args.output} is newer than its {len(paths)} inputs: kept")
        return
    paths, states = load_distinct(paths)
    order = sorted(range(len(states)), key=lambda i: updates(states[i]))  # oldest first: the newest's state is kept
    states, paths = [states[i] for i in order], [paths[i] for i in order]
    merged = dict(states[-1])
    merged["model"] = average(states, paths)
    if args.transfer:  # recipes/inference_checkpoint.py --half of the average
        merged = inference_state(merged, half=True)
    checkpoint_utils.torch_persistent_save(merged, args.output)  # to OUTPUT.tmp, then renamed: never truncated
    print(f"averaged {len(paths)} checkpoints{' (float16, no optimizer state)' if args.transfer else ''} (updates {', '.join(str(updates(s)) for s in states)}) -> {args.output}")


if __name__ == "__main__":
    main()
