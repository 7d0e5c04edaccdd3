#!/usr/bin/env python
"""What the offset term costs one self-attention layer in training, by length, side by side in one run.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/offset_term_cost.py [--lengths 16 64 128 256] [--rounds 7]

For each length L (batches of ``--max-tokens`` / L sentences of L tokens, a random insertion order, the causal mask of
one-pass training), forward + backward of one layer's self-attention (d 256, 4 heads, dropout 0.1, as the results
tables' models), three ways, interleaved over rounds (median):

* ``InsNet``: :class:`~insnet_fairseq.modules.attention.OffsetSelfAttention` as trained;
* ``no offset term``: the same layer with the offset term left out (``train_throughput.drop_offset_term``: plain causal
  attention through the layer's own ``content_attend``);
* ``offset term``: :meth:`~insnet_fairseq.modules.attention.OffsetSelfAttention.offset_bias` alone (the [B, H, L, 2L - 1]
  offset scores, their gather to [B, H, L, L], the scaling and the mask), with the gradient it receives in the layer;

and the same layer and term on the ``l2r`` order (the default ``--insertion-order``), where the dense term is
:meth:`~insnet_fairseq.modules.attention.OffsetSelfAttention.left_to_right_bias`: [B, H, L, L + 1] scores skewed by a
view, no gather. Each InsNet figure is given twice: the dense path (the gather, or the l2r view) and the C++ kernel
that training takes on the CPU (:mod:`insnet_fairseq.modules.offset_scores`: the unblocked pairs only).

Prints milliseconds and the layer's cost against the layer without the term: the share of a training step that
``train_throughput.py --without-offset-term`` attributes to the offsets, located in one layer.
"""
import argparse
import statistics
import sys
import time

import torch

from benchmarks.train_throughput import drop_offset_term
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.modules import offset_scores
from insnet_fairseq.modules.attention import OffsetSelfAttention, sinusoidal_offset_table
from insnet_fairseq.geometry.offsets import offset_matrix

D, HEADS = 256, 4


def layer_inputs(length: int, max_tokens: int, seed: int = 0, policy: str = "random"):
    """(x [B, L, D] requiring grad, offsets [B, L, L] of a ``policy`` order, causal mask [L, L], offset table) for
    B = max_tokens // L sentences of L tokens."""
    g = torch.Generator().manual_seed(seed)
    B = max(1, max_tokens // length)
    order = make_order(policy, torch.full((B,), length), length, g)
    x = torch.randn(B, length, D, generator=g).requires_grad_()
    mask = torch.ones(length, length, dtype=torch.bool).triu(1)
    return x, offset_matrix(order), mask, sinusoidal_offset_table(length + 1, D)


def layers(seed: int = 0):
    """(InsNet's self-attention layer, the same weights without the offset term), both in training mode."""
    torch.manual_seed(seed)
    full = OffsetSelfAttention(D, HEADS, D, dropout=0.1).train()
    plain = drop_offset_term(OffsetSelfAttention(D, HEADS, D, dropout=0.1).train())
    plain.load_state_dict(full.state_dict())
    return full, plain


def timed(fn, rounds_out: list):
    start = time.perf_counter()
    fn()
    rounds_out.append((time.perf_counter() - start) * 1000)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 128, 256])
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    full, plain = layers()
    if not offset_scores.available():
        sys.exit("the offset-score kernel is not built: run `make install`")
    print(f"{torch.get_num_threads()} thread(s), torch {torch.__version__}, one self-attention layer (d {D}, {HEADS} "
          f"heads), forward + backward, median of {args.rounds} rounds\n")
    print("| length | batch | no offset term ms | random order: layer ms, gather / kernel | offset term alone ms, "
          "gather / kernel | layer / no offset term, gather / kernel | l2r order: layer ms, view / kernel | offset "
          "term alone ms, view / kernel | layer / no offset term, view / kernel |")
    print("|---|---|---|---|---|---|---|---|---|")
    for length in args.lengths:
        x, offsets, mask, table = layer_inputs(length, args.max_tokens)
        l2r_offsets = layer_inputs(length, args.max_tokens, policy="l2r")[1]
        B = x.size(0)
        grad_out = torch.randn(B, length, D)
        q = torch.randn(B, HEADS, length, D // HEADS).requires_grad_()
        grad_bias = torch.randn(B, HEADS, length, length).masked_fill(mask, 0.0)  # blocked scores get no gradient

        def attention(att, offsets=offsets, l2r=False, kernel=True):
            att.offset_kernel = kernel
            out, _ = att(x, offsets, table, mask, left_to_right=l2r)
            out.backward(grad_out)

        def term_alone(offsets=offsets, l2r=False, kernel=True):
            full.offset_kernel = kernel
            full.offset_bias(q, offsets, table, mask, length, l2r).backward(grad_bias)

        runs = {"plain": lambda: attention(plain),
                "full": lambda: attention(full, kernel=False), "full_k": lambda: attention(full),
                "term": lambda: term_alone(kernel=False), "term_k": term_alone,
                "full_l2r": lambda: attention(full, l2r_offsets, True, kernel=False),
                "full_l2r_k": lambda: attention(full, l2r_offsets, True),
                "term_l2r": lambda: term_alone(l2r_offsets, True, kernel=False),
                "term_l2r_k": lambda: term_alone(l2r_offsets, True)}
        times = {k: [] for k in runs}
        for fn in runs.values():  # warm-up
            fn()
        for _ in range(args.rounds):
            for k, fn in runs.items():  # interleaved: the machine's load falls on all of them alike
                timed(fn, times[k])
        ms = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {length} | {B} | {ms['plain']:.1f} | {ms['full']:.1f} / {ms['full_k']:.1f} | "
              f"{ms['term']:.1f} / {ms['term_k']:.1f} | {ms['full'] / ms['plain']:.2f}x / "
              f"{ms['full_k'] / ms['plain']:.2f}x | {ms['full_l2r']:.1f} / {ms['full_l2r_k']:.1f} | "
              f"{ms['term_l2r']:.1f} / {ms['term_l2r_k']:.1f} | {ms['full_l2r'] / ms['plain']:.2f}x / "
              f"{ms['full_l2r_k'] / ms['plain']:.2f}x |", flush=True)

if __name__ == "__main__":
    main()
