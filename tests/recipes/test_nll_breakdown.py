"""experiments/nll_breakdown.py: gap sizes and tree depths of insertion trajectories, against their
definitions (a naive loop over the partial sequences)."""

import torch

from insnet_fairseq.geometry.layers import sequential_layers, trajectory, uniform_layers
from insnet_fairseq.geometry.orders import make_order


from experiments.nll_breakdown import gaps_and_depths


def naive(order, context, L):
    """Walk the trajectory: the slot's neighbours among the context's positions."""
    gaps, depths = [0, 0], {order[0]: 0, order[1]: 0}
    for t in range(2, L):
        ctx = order[: context[t] + 1]
        p = order[t]
        left, right = max(q for q in ctx if q < p), min(q for q in ctx if q > p)
        gaps.append(right - left - 1)
        depths[p] = 1 + max(depths[left], depths[right])
    return gaps, [depths[p] for p in order[:L]]


def test_paper_example():
    order = torch.tensor([[0, 6, 2, 4, 1, 3, 5]])
    context = trajectory(sequential_layers(order, torch.tensor([7])))[1]
    gap, depth = gaps_and_depths(order, context, torch.tensor([7]))
    assert gap.tolist() == [[0, 0, 5, 3, 1, 1, 1]] and depth.tolist() == [[0, 0, 1, 2, 2, 3, 3]]


def test_against_naive_walk_sequential_and_layered():
    lengths = torch.tensor([9, 3, 14, 6, 11])
    n = int(lengths.max())
    cases = [trajectory(sequential_layers(make_order(p, lengths, n, torch.Generator().manual_seed(1)), lengths))
             for p in ("l2r", "random", "binary")]
    cases += [trajectory(uniform_layers(lengths, n, p)) for p in ("binary", "anchored")]
    for order, context in cases:
        gap, depth = gaps_and_depths(order, context, lengths)
        for b, L in enumerate(lengths.tolist()):
            g, d = naive(order[b].tolist(), context[b].tolist(), L)
            assert gap[b, :L].tolist() == g and depth[b, :L].tolist() == d
    l2r = trajectory(sequential_layers(make_order("l2r", lengths, n), lengths))
    assert gaps_and_depths(*l2r, lengths)[1][2, 2:14].tolist() == list(range(1, 13))  # l2r: depth = position
