#!/usr/bin/env python
"""What a decoder matrix product costs with 1 row against 2-8 rows, side by side: the per-call cost of a batch-1
decoding step's linear layers.

An autoregressive step at batch 1 multiplies one row by each weight (a matrix-vector product); a parallel InsNet step
multiplies one row per word it inserts (2-4). If a product of 2-4 rows costs several times one of 1 row, a parallel
step's layers cost that much more than an AR step's, however few the rows (the target: a step at most 1.0x an AR step).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/small_matmul.py [--rows 1 2 3 4 8] [--rounds 7] [--calls 50]

Times ``F.linear(x [M, d_in], W [d_out, d_in], b)`` for the model's shapes (d = 256, FFN 1024, vocabulary 9,808),
interleaved over rounds (median), and prints each M's time against M = 1's.

``--packed`` adds a second table: the same product by a decoding :class:`~insnet_fairseq.modules.packed_linear.Linear`
(oneDNN with the weight packed once, where its rule packs; ``F.linear`` where it does not) against ``nn.Linear``, both
called as layers, as a decoding step calls them (no gradients, eval mode), timed in the same rounds, at each M (below
1: the packed layer is faster; the outputs agree to rounding); and the same layer made to pack at every M (its rule
aside: where the rule draws its line).
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from torch import nn

from insnet_fairseq.modules import packed_linear
from insnet_fairseq.modules.packed_linear import Linear

SHAPES = {"attention projection 256 -> 256": (256, 256), "FFN 256 -> 1024": (256, 1024),
          "FFN 1024 -> 256": (1024, 256), "vocabulary 256 -> 9808": (256, 9808)}


def always_packed(layer: Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` with its rule's threshold at 0: the packed product at every M."""
    saved, packed_linear.MIN_WORK = packed_linear.MIN_WORK, 0
    try:
        return layer(x)
    finally:
        packed_linear.MIN_WORK = saved


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=50, help="calls per timing")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--packed", action="store_true",
                   help="also time the decoding layer of insnet_fairseq/modules/packed_linear.py against nn.Linear, "
                        "at each M")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    print(f"{torch.get_num_threads()} thread(s), torch {torch.__version__}, median of {args.rounds} rounds of "
          f"{args.calls} calls\n")
    print("| product | " + " | ".join(f"M = {m} (ms)" for m in args.rows) + " | " +
          " | ".join(f"M = {m} / M = 1" for m in args.rows if m != 1) + " |")
    print("|---|" + "---|" * (2 * len(args.rows) - (1 in args.rows)))
    packed = []
    for name, (d_in, d_out) in SHAPES.items():
        w, b = torch.randn(d_out, d_in, generator=g), torch.randn(d_out, generator=g)
        products = {"linear": lambda x: F.linear(x, w, b)}
        if args.packed:
            stock, layer = nn.Linear(d_in, d_out).eval(), Linear(d_in, d_out).eval()
            for m in (stock, layer):
                m.weight.data, m.bias.data = w, b
            products["nn.Linear"] = torch.no_grad()(stock)
            products["packed"] = torch.no_grad()(layer)
            products["always"] = torch.no_grad()(lambda x: always_packed(layer, x))
        xs = {m: torch.randn(m, d_in, generator=g) for m in args.rows}
        times = {(k, m): [] for k in products for m in args.rows}
        for _ in range(args.rounds):
            for m, x in xs.items():  # interleaved: the machine's load falls on every M (and both products) alike
                for k, product in products.items():
                    product(x)
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        product(x)
                    times[k, m].append((time.perf_counter() - start) / args.calls * 1000)
        ms = {key: statistics.median(t) for key, t in times.items()}
        one = ms.get(("linear", 1))
        print(f"| {name} | " + " | ".join(f"{ms['linear', m]:.3f}" for m in args.rows) + " | " +
              " | ".join(f"{ms['linear', m] / one:.2f}x" if one else "" for m in args.rows if m != 1) + " |")
        if args.packed:
            packed.append(f"| {name} | " + " | ".join(f"{ms['packed', m]:.3f}" for m in args.rows) + " | " +
                          " | ".join(f"{ms['packed', m] / ms['nn.Linear', m]:.2f}x" for m in args.rows) + " | " +
                          " | ".join(f"{ms['always', m] / ms['nn.Linear', m]:.2f}x" for m in args.rows) + " |")
    if packed:
        print("\nThe decoding layer (modules/packed_linear.py: oneDNN, W packed once, where its rule packs) against "
              "`nn.Linear`, both called as layers, at the same M; then the layer packing at every M:\n")
        print("| product | " + " | ".join(f"M = {m} (ms)" for m in args.rows) + " | " +
              " | ".join(f"M = {m}: packed / nn.Linear" for m in args.rows) + " | " +
              " | ".join(f"M = {m}: always packed / nn.Linear" for m in args.rows) + " |")
        print("|---|" + "---|" * (3 * len(args.rows)))
        print("\n".join(packed))

if __name__ == "__main__":
    main()
