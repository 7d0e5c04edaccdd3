#!/usr/bin/env python
"""The arithmetic a system spends per output word: the multiply-adds of its linear layers per output token.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/linear_work.py --data data-bin/multi30k_en_de \
        --systems SYSTEMS.tsv [--subset valid] [--max-sentences 300] [--batch-size 64]

Decodes the sentences of ``--subset`` (ids below ``--max-sentences``) with every system of a
``benchmarks/frontier.py`` systems file, at ``--batch-size``, and counts the multiply-adds of every product by a
linear layer's weight (rows x outputs x inputs: the encoder's, the decoder's, the slot heads' and the output
vocabulary's, of the AR model as of InsNet: every model's linear layers run through
:func:`insnet_fairseq.modules.packed_linear.linear`). Per output token (a word of the output, as frontier.py's
``tokens_per_sentence`` counts them) it prints the total, the share of the products by the output vocabulary, and
frontier.py's decoder positions per token. Attention's own products (scores and weighted
values, 2 x keys x d a position and layer, and InsNet's offset scores) are left out: at these lengths (about 15 keys)
2-3% of a position's linear work.

At a large batch a CPU step is bound by its arithmetic, so the ratio of two systems' counts is the ratio their
times tend to there; at batch 1 a step is bound by its op calls, and the count says little. Rows that decode
padding (InsNet's holes where a sentence inserts fewer words than the widest of its batch) are counted: they are
computed.
"""
import argparse
import contextlib
import sys

import torch

from benchmarks.frontier import batches, decode, load, read_systems
from insnet_fairseq.modules import packed_linear


@contextlib.contextmanager
def counted_products(vocab_size: int):
    """Count every product of :func:`~insnet_fairseq.modules.packed_linear.linear` while inside: yields a dict whose
    ``all`` and ``vocabulary`` (products by a weight of ``vocab_size`` rows) grow by rows x N x K a call.
    Example: x [2, 5, 256] by a 1024 x 256 weight adds 10 x 1024 x 256 = 2.6M."""
    tally = {"all": 0, "vocabulary": 0}
    original = packed_linear.linear

    def linear(x, weight, bias, owner, name="", rows=None):
        n = weight.size(0) if rows is None else len(range(*rows.indices(weight.size(0))))
        work = (x.numel() // x.size(-1)) * n * weight.size(1)
        tally["all"] += work
        if n == vocab_size:
            tally["vocabulary"] += work
        return original(x, weight, bias, owner, name, rows)

    packed_linear.linear = linear
    try:
        yield tally
    finally:
        packed_linear.linear = original


def measure(system, data: str, subset: str, src: str, tgt: str, batch_size: int, max_sentences: int) -> dict:
    """Decode ``subset`` with ``system`` (frontier.py's :class:`~benchmarks.frontier.System`, loaded here) and count:
    -> {"tokens": output words, "all" / "vocabulary": multiply-adds (:func:`counted_products`), "positions": decoder
    positions (frontier.py's pass counter, padding rows included)}."""
    load(system, data, subset, src, tgt)
    vocab_size = len(system.task.target_dictionary)  # now: scoring the outputs adds their words to the dictionary
    with counted_products(vocab_size) as tally:
        for sample in batches(system, subset, batch_size, max_sentences):
            decode(system, sample, record=True)
    tokens = sum(len(w) for w in system.words.values())
    if tokens == 0:
        sys.exit(f"linear_work.py: system '{system.name}' decoded no words")
    return dict(tokens=tokens, positions=system.positions, **tally)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--systems", required=True, help="benchmarks/frontier.py's NAME<TAB>CHECKPOINT<TAB>FLAGS lines")
    p.add_argument("--subset", default="valid")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--max-sentences", type=int, default=300, help="only the sentences of id below N (0: all)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    systems = read_systems(args.systems)
    print(f"{args.subset}, sentences of id < {args.max_sentences or 'all'}, batch {args.batch_size}: linear-layer "
          "multiply-adds per output token (M), the output vocabulary's share, decoder positions per token")
    print("| system | M multiply-adds / token | x first system | vocabulary | positions / token |")
    print("|---|---|---|---|---|")
    first = None
    for s in systems:
        m = measure(s, args.data, args.subset, args.src, args.tgt, args.batch_size, args.max_sentences)
        per_token = m["all"] / m["tokens"] / 1e6
        first = first or per_token
        print(f"| {s.name} | {per_token:.2f} | {per_token / first:.2f} | {m['vocabulary'] / m['all']:.0%} | "
              f"{m['positions'] / m['tokens']:.2f} |")


if __name__ == "__main__":
    main()
