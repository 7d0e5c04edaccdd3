"""Offset compression (InsNet paper, 3.1.1-3.1.2) and the slot geometry derived from it.

Notation. A target of ``n`` tokens (``<s>`` ... ``</s>``) has final positions ``0..n-1``.
An insertion *order* is a permutation ``order`` of ``0..n-1``: step ``t`` inserts the token whose
final position is ``order[t]``; ``<s>`` and ``</s>`` come first.  Everything in this module is a
pure tensor function of ``order``, vectorised over the batch, with no Python loop over tokens.

The central object is the *rank matrix*

    rank[b, i, j] = #{k <= i : order[b, k] < order[b, j]}

i.e. for ``j <= i`` the position of token ``j`` inside the partial sequence made of the first
``i + 1`` inserted tokens.  From it:

* ``offset[i, j] = rank[i, j] - rank[i, i]``  (the paper's offset matrix, lower triangle);
* the slot of step ``t + 1``'s token in the context after step ``t``: ``rank[t, t + 1] - 1``;
* the neighbours of every slot at every step (inverse of ``rank`` row-wise).

Worked example (paper, Figure 3/4): "<s> I have a pen . </s>"... with the paper's 7 tokens
"(BOS) I have a pen . (EOS)" at positions 0..6 and order [0, 6, 2, 4, 1, 3, 5]
("(BOS) (EOS) have pen I a ."), the row of "a" (step i = 5) is [-3, 2, -1, 1, -2, 0].
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from insnet_fairseq.geometry.orders import left_to_right


def _effective_order(order: Tensor, pad_mask: Optional[Tensor]) -> Tensor:
    """Padding steps are treated as insertions to the right of every real token.

    A padded step ``t`` gets the position ``n + t``: larger than any real position, so real
    tokens' ranks, offsets and slots are untouched by padding whatever ``order`` holds there.
    """
    if pad_mask is None:
        return order
    n = order.size(-1)
    fill = n + torch.arange(n, device=order.device).expand_as(order)
    return torch.where(pad_mask, fill, order)


def rank_matrix(order: Tensor, pad_mask: Optional[Tensor] = None) -> Tensor:
    """Row-wise ranks of the inserted tokens among the first ``i + 1`` insertions.

    Args:
        order: LongTensor [batch, n]; ``order[b, t]`` is the final position of the token
            inserted at step ``t``.
        pad_mask: optional BoolTensor [batch, n], True at padded steps.

    Returns:
        LongTensor [batch, n, n]: ``rank[b, i, j] = #{k <= i : order[b, k] < order[b, j]}``.
        For ``j <= i`` this is token ``j``'s position in the partial sequence after step ``i``.
        For ``j > i`` it is where token ``j`` *would* go, i.e. ``rank[i, j] - 1`` is the slot
        index of token ``j`` in the context after step ``i``.

    Example: order [0, 6, 2, 4, 1, 3, 5], row i = 5 is [0, 5, 2, 4, 1, 3, 5].
    """
    o = _effective_order(order, pad_mask)
    # less[b, k, j] = order[k] < order[j]           [B, n(k), n(j)]
    less = (o.unsqueeze(2) < o.unsqueeze(1)).to(torch.int32)
    # inclusive prefix count over k <= i              [B, n(i), n(j)]
    return less.cumsum(dim=1).long()


def offsets_from_rank(rank: Tensor) -> Tensor:
    """``offset[b, i, j] = rank[b, i, j] - rank[b, i, i]``  ([batch, n, n] -> [batch, n, n])."""
    diag = rank.diagonal(dim1=1, dim2=2).unsqueeze(2)  # [B, n, 1]
    return rank - diag


def offset_matrix(order: Tensor, pad_mask: Optional[Tensor] = None) -> Tensor:
    """The paper's offset matrix, built by offset compression.

    Args:
        order: LongTensor [batch, n], final position of the token inserted at each step
            (padded rows allowed).
        pad_mask: optional BoolTensor [batch, n], True at padded steps.

    Returns:
        LongTensor [batch, n, n]. For ``j <= i``: position of token ``j`` minus position of
        token ``i``, both counted among the first ``i + 1`` inserted tokens. Values for
        ``j > i`` are unspecified (masked downstream). Values lie in ``[-(n-1), n-1]``.

    Example (paper): order [[0, 6, 2, 4, 1, 3, 5]] -> row 5 (the token "a") starts with
    [-3, 2, -1, 1, -2, 0].
    """
    return offsets_from_rank(rank_matrix(order, pad_mask))


def is_left_to_right(order: Tensor, pad_mask: Optional[Tensor] = None) -> bool:
    """Whether every row of ``order`` is the ``l2r`` order (``<s>``, ``</s>``, then the words left to right),
    over its real steps: the offsets then follow a fixed pattern (:func:`left_to_right_offsets`), which the
    attention computes without the general gather (one host read of a flag per batch).

    order [B, n], pad_mask [B, n] True at padded steps -> bool.
    Example: [[0, 5, 1, 2, 3, 4], [0, 3, 1, 2, 4, 5]] with the last two steps of row 2 padded -> True.
    """
    B, n = order.shape
    if pad_mask is None:
        pad_mask = torch.zeros_like(order, dtype=torch.bool)
    lengths = n - pad_mask.sum(1)  # [B]
    return bool((order.eq(left_to_right(lengths, n)) | pad_mask).all())


def left_to_right_offsets(n: int, device=None) -> Tensor:
    """The offsets of the ``l2r`` order (:func:`offset_matrix` of ``[0, n-1, 1, ..., n-2]``): for ``j <= i``,
    ``j - i`` for the words (``j >= 2``), ``-(i - 1)`` for ``<s>`` from a word (``i >= 2``; ``-i`` at ``i <= 1``)
    and ``+1`` for ``</s>`` from a word (``0`` at ``i = 1``): ``</s>`` stays at the right end. [n, n]; entries ``j > i`` are unspecified.

    Example (n = 4), lower triangle: [[0], [-1, 0], [-1, 1, 0], [-2, 1, -1, 0]] (steps <s> </s> w1 w2).
    """
    i = torch.arange(n, device=device).view(n, 1)
    j = torch.arange(n, device=device).view(1, n)
    off = j - i
    off = torch.where((j == 0) & (i >= 2), 1 - i, off)
    return torch.where((j == 1) & (i >= 2), torch.ones_like(off), off)


def slot_neighbours(rank: Tensor) -> Tuple[Tensor, Tensor]:
    """Steps of the left and right neighbour of every slot after every step.

    After step ``t`` the partial sequence holds ``t + 1`` tokens and ``t`` slots; slot ``k`` lies
    between the tokens of rank ``k`` and ``k + 1``.

    Args:
        rank: LongTensor [batch, n, n] from :func:`rank_matrix`.

    Returns:
        (left, right): LongTensors [batch, n(t), n(k)]; ``left[b, t, k]`` is the insertion step
        of the token left of slot ``k`` after step ``t``, ``right`` likewise. Entries with
        ``k >= t`` are unspecified (clamped to valid steps so they can be gathered).

    Example: order [0, 6, 2, 4], after step t = 3 the sequence is positions [0, 2, 4, 6] i.e.
    steps [0, 2, 3, 1]; slots are (0|2), (2|3), (3|1) -> left [0, 2, 3], right [2, 3, 1].
    """
    bsz, n, _ = rank.shape
    steps = torch.arange(n, device=rank.device)
    causal = steps.view(1, n) <= steps.view(n, 1)  # [n(t), n(j)] j <= t
    # step_at[b, t, r] = j such that rank[b, t, j] == r (j <= t); other columns -> dump column n
    index = torch.where(causal, rank, torch.full_like(rank, n))
    step_at = torch.zeros(bsz, n, n + 1, dtype=torch.long, device=rank.device)
    step_at.scatter_(2, index, steps.view(1, 1, n).expand(bsz, n, n))
    left = step_at[:, :, :n]
    right = step_at[:, :, 1 : n + 1]
    # slots k >= t do not exist; point them at step 0 so gathers stay in range
    valid = steps.view(1, n) < steps.view(n, 1)  # [n(t), n(k)] k < t
    return left.masked_fill(~valid, 0), right.masked_fill(~valid, 0)


def target_slots(rank: Tensor) -> Tensor:
    """Slot index, in the context after step ``t``, of the token inserted at step ``t + 1``.

    Args:
        rank: LongTensor [batch, n, n] from :func:`rank_matrix`.

    Returns:
        LongTensor [batch, n - 1]; entry ``t`` is ``rank[t, t + 1] - 1``.

    Example: order [0, 6, 2, 4, 1, 3, 5] -> [0, 0, 1, 0, 2, 4]  (for steps t = 0..5; the entry
    for t = 0 is meaningless: ``</s>`` is never predicted).
    """
    return rank[:, :-1, 1:].diagonal(dim1=1, dim2=2) - 1
