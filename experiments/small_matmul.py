#!/usr/bin/env python
"""What a decoder matrix product costs with 1 row against 2-8 rows, side by side: the per-call cost of a batch-1
decoding step's linear layers.

An autoregressive step at batch 1 multiplies one row by each weight (a matrix-vector product); a parallel InsNet step
multiplies one row per word it inserts (2-4). If a product of 2-4 rows costs several times one of 1 row, a parallel
step's layers cost that much more than an AR step's, however few the rows (the target: a step at most 1.0x an AR step).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/small_matmul.py [--rows 1 2 3 4 8] [--rounds 7] [--calls 50]

Times ``F.linear(x [M, d_in], W [d_out, d_in], b)`` for the model's shapes (d = 256, FFN 1024, vocabulary 9,808),
interleaved over rounds (median), and prints each M's time against M = 1's.

``--transposed`` adds a second table: the same product as ``torch.addmm(b, x, W_t)`` with ``W_t`` = W transposed and
stored contiguous ([d_in, d_out], a copy made once), timed in the same rounds, and its time against ``F.linear``'s
at each M (below 1: a decoding-time transposed copy of the weights would be cheaper; the outputs agree to rounding).
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = {"attention projection 256 -> 256": (256, 256), "FFN 256 -> 1024": (256, 1024),
          "FFN 1024 -> 256": (1024, 256), "vocabulary 256 -> 9808": (256, 9808)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=50, help="calls per timing")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--transposed", action="store_true",
                   help="also time addmm on a contiguous transposed copy of W, against F.linear, at each M")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    print(f"{torch.get_num_threads()} thread(s), torch {torch.__version__}, median of {args.rounds} rounds of "
          f"{args.calls} calls\n")
    print("| product | " + " | ".join(f"M = {m} (ms)" for m in args.rows) + " | " +
          " | ".join(f"M = {m} / M = 1" for m in args.rows if m != 1) + " |")
    print("|---|" + "---|" * (2 * len(args.rows) - (1 in args.rows)))
    transposed = []
    for name, (d_in, d_out) in SHAPES.items():
        w, b = torch.randn(d_out, d_in, generator=g), torch.randn(d_out, generator=g)
        w_t = w.t().contiguous()  # [d_in, d_out]
        products = {"linear": lambda x: F.linear(x, w, b)}
        if args.transposed:
            products["transposed"] = lambda x: torch.addmm(b, x, w_t)
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
        if args.transposed:
            transposed.append(f"| {name} | " + " | ".join(f"{ms['transposed', m]:.3f}" for m in args.rows) + " | " +
                              " | ".join(f"{ms['transposed', m] / ms['linear', m]:.2f}x" for m in args.rows) + " |")
    if transposed:
        print("\n`torch.addmm(b, x, W_t)`, W_t contiguous, against `F.linear(x, W, b)` at the same M:\n")
        print("| product | " + " | ".join(f"M = {m} (ms)" for m in args.rows) + " | " +
              " | ".join(f"M = {m}: W_t / linear" for m in args.rows) + " |")
        print("|---|" + "---|" * (2 * len(args.rows)))
        print("\n".join(transposed))

if __name__ == "__main__":
    main()
