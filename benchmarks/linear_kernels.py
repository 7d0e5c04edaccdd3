#!/usr/bin/env python
"""Decoding with packed linear layers against ``F.linear``, every system both ways, side by side in one run.

    python benchmarks/linear_kernels.py --data data-bin/multi30k_en_de --systems systems.tsv --subset valid \
        --threads 1 [--max-sentences 300] [--batch-sizes 1 64] [--rounds 2]

``systems.tsv`` as ``benchmarks/frontier.py`` reads it (NAME<TAB>CHECKPOINT<TAB>FLAGS), loaded the same way: every
model's linear layers are :class:`~insnet_fairseq.modules.packed_linear.Linear` (the autoregressive model's too).
Each batch is decoded by every system with its layers packed (oneDNN, the default) and with them switched to
``F.linear`` (:func:`~insnet_fairseq.modules.packed_linear.set_packed`), in a rotating order, after one untimed
warm-up batch each way; ``--rounds`` passes over the batches. Printed, a row per system and batch size: ms/sentence
both ways, their ratio, and the share of sentences whose outputs are the same both ways (the products agree to float
rounding, so a greedy choice may flip where two words tie).
"""
import argparse
import time
from collections import defaultdict

import torch

from benchmarks.frontier import batches, load, read_systems, synchronize
from insnet_fairseq.modules.packed_linear import set_packed


def run(system, sample, packed: bool):
    """Decode one batch with the system's layers packed or not: (seconds, the best hypothesis' tokens a sentence)."""
    for m in system.models:
        set_packed(m, packed)
    synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        hypos = system.task.inference_step(system.generator, system.models, sample)
    seconds = time.perf_counter() - start
    return seconds, [h[0]["tokens"].tolist() for h in hypos]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the fairseq data-bin every system decodes")
    p.add_argument("--systems", required=True, help="NAME<TAB>CHECKPOINT<TAB>FLAGS lines, as benchmarks/frontier.py")
    p.add_argument("--subset", default="valid", help="the split decoded (valid)")
    p.add_argument("--src", default="en", help="source language (en)")
    p.add_argument("--tgt", default="de", help="target language (de)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, the same for every system (1)")
    p.add_argument("--max-sentences", type=int, default=0, help="only the first N sentences (0: all)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64], help="each timed in turn (1 64)")
    p.add_argument("--rounds", type=int, default=2, help="passes over the batches (2)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    systems = read_systems(args.systems)
    for s in systems:
        load(s, args.data, args.subset, args.src, args.tgt)
    print(f"{torch.get_num_threads()} thread(s), torch {torch.__version__}, {args.subset}, "
          f"{args.max_sentences or 'all'} sentences, {args.rounds} round(s)\n")
    print("| system | batch | ms/sentence, F.linear | ms/sentence, packed | packed / F.linear | same outputs |")
    print("|---|---|---|---|---|---|")
    for bsz in args.batch_sizes:
        per = [batches(s, args.subset, bsz, args.max_sentences) for s in systems]
        seconds, same, total = defaultdict(float), defaultdict(int), defaultdict(int)
        for s, bs in zip(systems, per):
            for packed in (False, True):
                run(s, bs[0], packed)
        k = 2 * len(systems)
        for r in range(args.rounds):
            for i in range(len(per[0])):
                outs = {}
                for j in range(k):  # rotating order over (system, way)
                    idx = (i + j) % k
                    si, packed = idx // 2, bool(idx % 2)
                    sec, toks = run(systems[si], per[si][i], packed)
                    seconds[si, packed] += sec
                    outs[si, packed] = toks
                if r == 0:
                    for si in range(len(systems)):
                        a, b = outs[si, False], outs[si, True]
                        same[si] += sum(x == y for x, y in zip(a, b))
                        total[si] += len(a)
        for si, s in enumerate(systems):
            n = args.rounds * total[si]
            stock, packed = 1000 * seconds[si, False] / n, 1000 * seconds[si, True] / n
            print(f"| {s.name} | {bsz} | {stock:.2f} | {packed:.2f} | {packed / stock:.3f} | "
                  f"{100 * same[si] / total[si]:.1f}% |", flush=True)
    for s in systems:
        for m in s.models:
            set_packed(m, True)


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
