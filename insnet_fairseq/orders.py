"""Insertion orders for training targets.

Every policy returns ``order`` [batch, n]: ``order[b, t]`` is the final position of the token
inserted at step ``t``. ``<s>`` (position 0) and ``</s>`` (position ``len - 1``) always come first;
padded steps (``t >= len``) hold ``t`` so padding stays to the right of every real token.
All policies are vectorised over the batch (the binary-tree policy loops over tree depth,
about log2(n) iterations, never over tokens).
"""
from typing import Optional

import torch
from torch import Tensor

ORDER_POLICIES = ("l2r", "random", "binary")


def _order_from_keys(keys: Tensor, lengths: Tensor) -> Tensor:
    """Sort positions by ``keys`` after forcing <s>, </s> first and padding last.

    Args:
        keys: FloatTensor [batch, n], smaller key = inserted earlier (ties: left first).
        lengths: LongTensor [batch], number of real tokens including <s> and </s>.
    """
    bsz, n = keys.shape
    pos = torch.arange(n, device=keys.device).unsqueeze(0).expand(bsz, n)
    last = (lengths - 1).unsqueeze(1)
    keys = keys.float()
    big = float(keys.abs().max()) + n + 1  # beyond every real key

    keys = torch.where(pos == 0, torch.full_like(keys, -2 * big), keys)
    keys = torch.where(pos == last, torch.full_like(keys, -big), keys)
    keys = torch.where(pos > last, big + pos.float(), keys)
    # stable sort keeps left-to-right among equal keys
    return torch.sort(keys, dim=1, stable=True).indices


def left_to_right(lengths: Tensor, n: int) -> Tensor:
    """<s>, </s>, then words left to right.  lengths [batch] -> order [batch, n]."""
    keys = torch.arange(n, device=lengths.device).float().unsqueeze(0).expand(len(lengths), n)
    return _order_from_keys(keys, lengths)


def uniform_random(lengths: Tensor, n: int, generator: Optional[torch.Generator] = None) -> Tensor:
    """<s>, </s>, then a uniformly random permutation of the words."""
    keys = torch.rand(len(lengths), n, generator=generator).to(lengths.device)
    return _order_from_keys(keys, lengths)


def tree_depth(lengths: Tensor, n: int) -> Tensor:
    """Depth of every position in the balanced binary tree over the gap (0, len - 1).

    Depth 0 is the middle word of the whole gap, depth 1 the middles of the two halves, ...
    The middle of a gap (lo, hi) is ``(lo + hi) // 2`` (left-middle for even gaps).

    Returns LongTensor [batch, n]; <s>, </s> and padding get depth -1.

    Example: len 7 (positions 0..6, words 1..5): middle 3; then 1 and 4; then 2 and 5
    -> depths [-1, 1, 2, 0, 1, 2, -1] (the gap (3, 6) holds words 4, 5; its left-middle is 4).
    """
    bsz = len(lengths)
    device = lengths.device
    pos = torch.arange(n, device=device).unsqueeze(0).expand(bsz, n)
    last = (lengths - 1).unsqueeze(1)
    real = (pos > 0) & (pos < last)
    lo = torch.zeros_like(pos)
    hi = last.expand(bsz, n).clone()
    depth = torch.full_like(pos, -1)
    level = 0
    pending = real.clone()
    while bool(pending.any()):
        mid = (lo + hi) // 2
        hit = pending & (pos == mid)
        depth = torch.where(hit, torch.full_like(depth, level), depth)
        pending = pending & ~hit
        go_left = pos < mid
        hi = torch.where(pending & go_left, mid, hi)
        lo = torch.where(pending & ~go_left, mid, lo)
        level += 1
    return depth


def balanced_binary(lengths: Tensor, n: int) -> Tensor:
    """<s>, </s>, then the middle word of every gap, level by level, left to right."""
    return _order_from_keys(tree_depth(lengths, n).float() * n + torch.arange(n, device=lengths.device), lengths)


def make_order(policy: str, lengths: Tensor, n: int, generator: Optional[torch.Generator] = None) -> Tensor:
    """Dispatch on the ``--insertion-order`` flag value."""
    if policy == "l2r":
        return left_to_right(lengths, n)
    if policy == "random":
        return uniform_random(lengths, n, generator)
    if policy == "binary":
        return balanced_binary(lengths, n)
    raise ValueError(f"--insertion-order: unknown policy {policy!r}; choose one of {ORDER_POLICIES}")
