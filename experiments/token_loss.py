#!/usr/bin/env python
"""The token loss, forward + backward: fairseq's ``label_smoothed_nll_loss`` over ``log_softmax`` (autograd)
against ``insnet_fairseq.tasks.token_loss.smoothed_nll`` (closed-form backward), side by side on the same logits.

    python experiments/token_loss.py [--rows 3000 4080] [--vocab 9808] [--rounds 5] [--threads 1]

``--rows``: target tokens per batch (Multi30k batches of max-tokens 4096 hold about 3,000; the synthetic
length-256 batches 4,080). Prints the median milliseconds of each and the ratio, at label smoothing 0 and 0.1.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

from insnet_fairseq.tasks.token_loss import smoothed_nll


def fairseq_loss(logits, target, eps):
    return label_smoothed_nll_loss(F.log_softmax(logits.float(), -1), target, eps, reduce=True)[0]


def one_pass_loss(logits, target, eps):
    return smoothed_nll(logits, target, eps)[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[3000, 4080])
    p.add_argument("--vocab", type=int, default=9808, help="the Multi30k En-De joint dictionary's size")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"cpu x{torch.get_num_threads()} threads, torch {torch.__version__}, vocab {args.vocab}")
    print("| rows | label smoothing | fairseq ms | one-pass ms | fairseq / one-pass |")
    print("|---|---|---|---|---|")
    g = torch.Generator().manual_seed(0)
    for n in args.rows:
        target = torch.randint(0, args.vocab, (n,), generator=g)
        base = torch.randn(n, args.vocab, generator=g)
        for eps in (0.0, 0.1):
            times = {"fairseq": [], "one-pass": []}
            for _ in range(args.rounds):  # interleaved
                for name, fn in (("fairseq", fairseq_loss), ("one-pass", one_pass_loss)):
                    logits = base.clone().requires_grad_()
                    t0 = time.perf_counter()
                    fn(logits, target, eps).backward()
                    times[name].append(time.perf_counter() - t0)
            f, o = (statistics.median(times[k]) * 1e3 for k in ("fairseq", "one-pass"))
            print(f"| {n} | {eps} | {f:.1f} | {o:.1f} | {f / o:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
