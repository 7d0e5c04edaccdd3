#!/usr/bin/env python
"""Token and position NLL of an InsNet checkpoint on a split, broken down by gap size and tree depth.

    python experiments/nll_breakdown.py --data data-bin/multi30k_en_de --path ckpt.pt [--subset valid]
        [--insertion-order binary] [--layerization uniform] [--csv out.csv]

Every target word is scored where its trajectory inserts it (the checkpoint's training order and
layering, or the ones given): its *gap* is the number of reference words between its slot's two
neighbours, itself included (1: the slot's last missing word; a binary order's first word has
the whole sentence), and its *depth* is 1 + the deeper of its two neighbours (<s>, </s>: 0), the
level of the insertion tree (l2r: the word's position; a balanced binary order: about log2 n).
A model whose slots see stale neighbour states shows it as token NLL growing with depth; one that
cannot infer gap lengths shows position NLL growing with gap size. Prints one row per bucket
(words, token NLL, position NLL, in nats per word).
"""
import argparse
import csv
import os
import sys

import torch
import torch.nn.functional as F

GAP_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 1 << 20))
DEPTH_BUCKETS = tuple((d, d) for d in range(1, 9)) + ((9, 1 << 20),)


def bucket_name(lo, hi):
    return str(lo) if lo == hi else (f"{lo}+" if hi >= 1 << 20 else f"{lo}-{hi}")


def gaps_and_depths(order, context, lengths):
    """Per step (insertion order): the gap size and tree depth of its slot.

    order, context [B, n] (context[t]: last step of the context step t inserts into), lengths [B]
    -> (gap [B, n], depth [B, n]); steps 0, 1 (<s>, </s>) get gap 0 and depth 0.
    Example: "I have a pen ." inserted [0, 6, 2, 4, 1, 3, 5] (sequential) -> gaps [0, 0, 5, 3, 1, 1, 1],
    depths [0, 0, 1, 2, 2, 3, 3].
    """
    B, n = order.shape
    steps = torch.arange(n)
    pos = order  # final position of each step's token
    seen = steps.view(1, 1, n) <= context.unsqueeze(2)  # [B, n(t), n(j)]: j in t's context
    seen &= steps.view(1, 1, n) < lengths.view(B, 1, 1)
    p_t, p_j = pos.unsqueeze(2), pos.unsqueeze(1)
    big = n + 1
    left = torch.where(seen & (p_j < p_t), p_j, torch.full_like(p_j, -1)).max(2)  # values, step index
    right = torch.where(seen & (p_j > p_t), p_j, torch.full_like(p_j, big)).min(2)
    gap = (right.values - left.values - 1).masked_fill(steps.unsqueeze(0) < 2, 0)
    depth = torch.zeros(B, n, dtype=torch.long)
    rows = torch.arange(B)
    for t in range(2, n):  # depth of t needs its neighbours' depths (earlier steps): one pass
        d = 1 + torch.maximum(depth[rows, left.indices[:, t]], depth[rows, right.indices[:, t]])
        depth[:, t] = torch.where(t < lengths, d, torch.zeros_like(d))
    return gap, depth


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--path", required=True, help="InsNet checkpoint")
    p.add_argument("--subset", default="valid")
    p.add_argument("--insertion-order", help="score along this order (default: the checkpoint's)")
    p.add_argument("--layerization", help="sequential|uniform|dinic (default: the checkpoint's)")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--csv", help="append the rows to this CSV file")
    args = p.parse_args()
    if not os.path.isfile(args.path):
        sys.exit(f"nll_breakdown: checkpoint {args.path} does not exist")

    import insnet_fairseq  # noqa: F401  (registers the task)
    from insnet_fairseq.tasks import checkpoint_checks
    from insnet_fairseq.geometry.layers import trajectory, sequential_layers

    overrides = {"data": args.data}
    if args.insertion_order:
        overrides["insertion_order"] = args.insertion_order
    if args.layerization:
        overrides["layerization"] = args.layerization
    models, cfg, task = checkpoint_checks.load_model_ensemble_and_task([args.path], arg_overrides=overrides)
    model = models[0].eval()
    task.load_dataset(args.subset)
    itr = task.get_batch_iterator(task.dataset(args.subset), max_tokens=args.max_tokens,
                                  max_positions=model.max_positions(), ignore_invalid_inputs=True).next_epoch_itr(
        shuffle=False)
    sums = {}  # (kind, bucket) -> [words, token nll, position nll]
    with torch.no_grad():
        for sample in itr:
            task.layer_batch(sample, model)  # validation layering (no-op when sequential)
            net = sample["net_input"]
            out = model(**net)
            lengths = net["target"].ne(task.tgt_dict.pad()).sum(1)
            order = net["order"]
            context = net.get("context")
            if context is None:
                context = trajectory(sequential_layers(order, lengths))[1]
            gap, depth = gaps_and_depths(order, context, lengths)
            mask = out["position"]["mask"]  # [B, T] real steps 2..len-1
            tok_nll = -F.log_softmax(out["token"]["logits"].float(), -1).gather(
                1, out["token"]["target"].unsqueeze(1)).squeeze(1)  # [N], same order as mask
            pos_nll = -F.log_softmax(out["position"]["logits"].float(), -1).gather(
                2, out["position"]["target"].unsqueeze(2)).squeeze(2)[mask]
            for kind, value, buckets in (("gap", gap[:, 2:][mask], GAP_BUCKETS),
                                         ("depth", depth[:, 2:][mask], DEPTH_BUCKETS)):
                for lo, hi in buckets:
                    sel = (value >= lo) & (value <= hi)
                    acc = sums.setdefault((kind, bucket_name(lo, hi)), [0, 0.0, 0.0])
                    acc[0] += int(sel.sum())
                    acc[1] += float(tok_nll[sel].sum())
                    acc[2] += float(pos_nll[sel].sum())
    rows = [{"checkpoint": args.path, "by": kind, "bucket": name, "words": w,
             "token_nll": round(t / w, 4), "position_nll": round(q / w, 4)}
            for (kind, name), (w, t, q) in sums.items() if w > 0]
    print(f"{'by':<6} {'bucket':<7} {'words':>7} {'token NLL':>10} {'position NLL':>13}")
    for r in rows:
        print(f"{r['by']:<6} {r['bucket']:<7} {r['words']:>7} {r['token_nll']:>10.3f} {r['position_nll']:>13.3f}")
    if args.csv:
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            if new:
                w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
