#!/usr/bin/env python
"""What an InsNet parallel model (``--slot-objective gap``) gets wrong at each slot of gold contexts.

    python experiments/gap_slot_errors.py --data data-bin/multi30k_en_de --path ckpt.pt [--subset valid]

Every slot of every layer end of the validation trajectories (the task's sampled layering, drawn from ``--seed`` as
validation draws it) is scored by one pass, as training scores it. For the slots that still miss words, the most
probable word is counted as:

* ``missing``: one of the words its gap misses (what decoding should write there);
* ``neighbour``: the word on its left or its right (the repeated-neighbour error of decoding), and not missing;
* ``global``: the word of the context's last token (the global vector of the slot representation), neither of the
  above;

and the end-of-slot head is counted at q(done) 0.5: ``done recall`` (done slots said done) and ``open recall`` (open
slots said open). If gold contexts show few neighbour words but decoding repeats them, the error comes from contexts
training never shows; if gold contexts show them too, from the model. Prints one line per quantity.
"""
import argparse
import os
import sys

import torch


def slot_errors(target, t, gap, glob_word):
    """Counts over one batch. target [B, n]; ``t``: its :class:`~insnet_fairseq.geometry.gaps.GapTargets`; ``gap``:
    the forward pass's terms (``InsNetDecoder.forward_gaps``); glob_word [S] (the word of each slot's global token)
    -> dict of counts."""
    open_slots = ~t.done
    pred = gap["token_logits"].argmax(-1)  # [S_open]
    rows, left, right = t.row[open_slots], t.left[open_slots], t.right[open_slots]
    missing = torch.zeros_like(pred, dtype=torch.bool)
    hit = gap["pair_target"] == pred[gap["pair_slot"]]  # [P]
    missing.index_put_((gap["pair_slot"],), hit, accumulate=True)
    neighbour = ~missing & ((pred == target[rows, left]) | (pred == target[rows, right]))
    glob = ~missing & ~neighbour & (pred == glob_word[open_slots])
    said_done = gap["done_logits"] > 0
    return {"open slots": int(open_slots.sum()), "missing": int(missing.sum()), "neighbour": int(neighbour.sum()),
            "global": int(glob.sum()), "done slots": int(t.done.sum()),
            "done said done": int((said_done & t.done).sum()), "open said open": int((~said_done & ~t.done).sum())}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--path", required=True, help="InsNet parallel checkpoint (--slot-objective gap)")
    p.add_argument("--subset", default="valid")
    p.add_argument("--max-tokens", type=int, default=4096)
    args = p.parse_args()
    if not os.path.isfile(args.path):
        sys.exit(f"gap_slot_errors: checkpoint {args.path} does not exist")

    import insnet_fairseq  # noqa: F401  (registers the task)
    from insnet_fairseq.decoding.gaps import is_gap_model
    from insnet_fairseq.geometry.gaps import gap_targets
    from insnet_fairseq.geometry.layers import encoding_order
    from insnet_fairseq.tasks import checkpoint_checks

    models, _, task = checkpoint_checks.load_model_ensemble_and_task([args.path], arg_overrides={"data": args.data})
    model = models[0].eval()
    if not is_gap_model(model.decoder):
        sys.exit(f"gap_slot_errors: {args.path} is not an InsNet parallel model (--slot-objective gap)")
    task.load_dataset(args.subset)
    itr = task.get_batch_iterator(task.dataset(args.subset), max_tokens=args.max_tokens,
                                  max_positions=model.max_positions(), ignore_invalid_inputs=True).next_epoch_itr(
        shuffle=False)
    sums = {}
    with torch.no_grad():
        for sample in itr:
            task.layer_batch(sample, model)  # the validation draw of the sampled layering
            net = sample["net_input"]
            gap = model(**net)["gap"]
            target, layers = net["target"], net["layers"]
            lengths = target.ne(task.tgt_dict.pad()).sum(1)
            t = gap_targets(layers, lengths)
            order = encoding_order(layers)  # step -> final position
            glob_word = target[t.row, order[t.row, t.context_last[t.row, t.end]]]  # [S]
            for k, v in slot_errors(target, t, gap, glob_word).items():
                sums[k] = sums.get(k, 0) + v
    n_open, n_done = max(sums["open slots"], 1), max(sums["done slots"], 1)
    print(f"{args.path} on {args.subset}: {sums['open slots']} open slots, {sums['done slots']} done slots")
    for k in ("missing", "neighbour", "global"):
        print(f"  best word {k:10s} {100 * sums[k] / n_open:6.2f}% of open slots")
    print(f"  done recall          {100 * sums['done said done'] / n_done:6.2f}% of done slots said done")
    print(f"  open recall          {100 * sums['open said open'] / n_open:6.2f}% of open slots said open")


if __name__ == "__main__":
    main()
