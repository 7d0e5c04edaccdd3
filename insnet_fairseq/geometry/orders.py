"""Insertion orders for training targets.

Every policy returns ``order`` [batch, n]: ``order[b, t]`` is the final position of the token
inserted at step ``t``. ``<s>`` (position 0) and ``</s>`` (position ``len - 1``) always come first;
padded steps (``t >= len``) hold ``t`` so padding stays to the right of every real token.
All policies are vectorised over the batch (the binary-tree policy loops over tree depth,
about log2(n) iterations, never over tokens).

Level orders (``binary``, ``anchored``, ``keywords``, ``dependency``) also give every word a
*level* (:func:`order_levels`): the order inserts level by level, left to right inside a level,
and the words of one level lie in distinct gaps of the earlier levels, so a level can be
inserted in one parallel step (InsNet-uniform layers, :func:`insnet_fairseq.geometry.layers.uniform_layers`).
"""
from typing import Optional

import torch
from torch import Tensor

ORDER_POLICIES = ("l2r", "r2l", "random", "binary", "anchored", "keywords", "dependency")
LEVEL_POLICIES = ("binary", "anchored", "keywords", "dependency")  # orders whose levels make parallel layers
GIVEN_POLICIES = ("keywords",)  # orders that need each sentence's given words (insertion_lm: its keywords)
TREE_POLICIES = ("dependency",)  # orders whose levels come with the data (insertion_lm: {split}.deps parses)
DEFAULT_ANCHOR_DEPTH = 2


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


def positions(B: int, n: int, device) -> Tensor:
    """[B, n]: the positions 0..n-1 in every row (an expanded view)."""
    return torch.arange(n, device=device).unsqueeze(0).expand(B, n)


def left_to_right(lengths: Tensor, n: int) -> Tensor:
    """<s>, </s>, then words left to right.  lengths [batch] -> order [batch, n]."""
    return _order_from_keys(positions(len(lengths), n, lengths.device).float(), lengths)


def right_to_left(lengths: Tensor, n: int) -> Tensor:
    """<s>, </s>, then words right to left: every word goes into the first slot, left of the
    word before it (positive offsets, right-neighbour path).  lengths [batch] -> order [batch, n].

    Example: len 5 -> [0, 4, 3, 2, 1].
    """
    return _order_from_keys(-positions(len(lengths), n, lengths.device).float(), lengths)


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
    return level_order(tree_depth(lengths, n), lengths)


def anchored_levels(lengths: Tensor, n: int, depth: int = DEFAULT_ANCHOR_DEPTH) -> Tensor:
    """Levels of the anchored order: the top ``depth`` levels of the balanced binary tree (the
    *anchors*, ``2**depth - 1`` words), then every gap between consecutive anchors (and <s>, </s>)
    filled left to right, all gaps at once: the r-th word of a gap is level ``depth + r``.

    ``depth`` 0 is left to right; a depth of log2(n) or more is the binary order. Between, a
    sentence of L words takes about depth + L / 2**depth levels, and every word after the
    anchors goes into the slot right of the word inserted one level before it in its gap, whose
    state is fresh (as in l2r, unlike the binary order's stale neighbours).

    lengths [B] -> levels LongTensor [B, n]; <s>, </s> and padding get -1 (as :func:`tree_depth`).

    Example: len 9 (words at positions 1..7), depth 2: anchors 4 (level 0), 2 and 6 (level 1);
    gaps (0, 2), (2, 4), (4, 6), (6, 8) fill 1, 3, 5, 7 at level 2
    -> [-1, 2, 1, 2, 0, 2, 1, 2, -1]; len 10, depth 1: anchor 4, then 1 5, 2 6, 3 7, 8
    -> [-1, 1, 2, 3, 0, 1, 2, 3, 4, -1].
    """
    pos = positions(len(lengths), n, lengths.device)
    last = (lengths - 1).unsqueeze(1)
    depth_of = tree_depth(lengths, n)
    anchor = (depth_of >= 0) & (depth_of < depth)
    fence = anchor | (pos == 0)  # words to the right of a fence count from it
    left_fence = torch.where(fence, pos, torch.zeros_like(pos)).cummax(1).values  # [B, n]
    levels = torch.where(anchor, depth_of, depth + pos - left_fence - 1)
    return levels.masked_fill((pos == 0) | (pos >= last), -1)


def given_first_levels(given: Tensor, lengths: Tensor) -> Tensor:
    """Levels of the ``keywords`` order: the given words (a constrained start: the keywords of
    ``insertion_lm``) first, at level 0, then every gap between them (and <s>, </s>) filled left to
    right, all gaps at once: the r-th word of a gap is level r. Decoding starts from ``<s> keywords </s>``
    and fills the gaps as training did; sequentially the gaps fill level by level, left to right.

    given bool [B, n] (True at the given words' positions), lengths [B] -> levels LongTensor [B, n];
    <s>, </s> and padding get -1.

    Example: "<s> a man in a red hat </s>" with "man" and "hat" given ([F, F, T, F, F, F, T, F]):
    levels [-1, 1, 0, 1, 2, 3, 0, -1] ("a", "in" at level 1, "a" 2, "red" 3).
    """
    n = given.size(1)
    pos = positions(len(lengths), n, lengths.device)
    last = (lengths - 1).unsqueeze(1)
    fence = given | (pos == 0)  # words count from the fence on their left
    left_fence = torch.where(fence, pos, torch.zeros_like(pos)).cummax(1).values  # [B, n]
    levels = torch.where(given, torch.zeros_like(pos), pos - left_fence)
    return levels.masked_fill((pos == 0) | (pos >= last), -1)


def given_positions(source: Tensor, target: Tensor, pad: int, eos: int) -> Tensor:
    """Where a sentence's given words (its keywords, in sentence order) sit in it: each keyword at its first
    occurrence after the previous keyword's, as the constrained start is a subsequence of the sentence.

    source [B, K] keyword ids (padded, left or right, ``</s>`` ignored); target [B, n] ``<s> words </s>``
    -> bool [B, n]. Loops over the keyword index (K, at most a few), never over tokens. A keyword that
    is not found (a sentence whose keyword file disagrees with it) marks nothing.
    Example: keywords "man hat", target "<s> a man in a red hat </s>" -> [F, F, T, F, F, F, T, F].
    """
    B, n = target.shape
    pos = torch.arange(n, device=target.device).unsqueeze(0)  # [1, n]
    keep = source.ne(pad) & source.ne(eos)
    # the keywords of each row, left-aligned (their order kept): stable sort moves padding right
    idx = (~keep).long().sort(dim=1, stable=True).indices
    words, real = source.gather(1, idx), keep.gather(1, idx)  # [B, K]
    given = torch.zeros(B, n, dtype=torch.bool, device=target.device)
    after = torch.zeros(B, dtype=torch.long, device=target.device)  # a keyword lies right of this position
    for j in range(words.size(1)):
        hit = target.eq(words[:, j : j + 1]) & (pos > after.unsqueeze(1)) & real[:, j : j + 1]  # [B, n]
        found = hit.any(1)
        first = hit.long().argmax(1)  # first True
        given[found, first[found]] = True
        after = torch.where(found, first, after)
    return given


def order_levels(policy: str, lengths: Tensor, n: int, anchor_depth: int = DEFAULT_ANCHOR_DEPTH,
                 given: Optional[Tensor] = None, levels: Optional[Tensor] = None) -> Tensor:
    """Levels of a level order (:data:`LEVEL_POLICIES`).  lengths [B] -> [B, n], -1 at <s>, </s>, pad;
    ``given`` (bool [B, n]): the given words of the ``keywords`` order (:func:`given_positions`);
    ``levels`` (long [B, n]): the ``dependency`` order's levels, each word's depth in its sentence's
    binarised parse (:func:`insnet_fairseq.data.dependency.dependency_levels`), as the data gives them."""
    if policy in TREE_POLICIES:
        if levels is None:
            raise ValueError(f"--insertion-order {policy} needs each sentence's dependency parse (task insertion_lm "
                             "with a {split}.deps file for the split: recipes/parse_dependencies.py)")
        return levels
    if policy == "binary":
        return tree_depth(lengths, n)
    if policy == "anchored":
        return anchored_levels(lengths, n, anchor_depth)
    if policy == "keywords":
        if given is None:
            raise ValueError("--insertion-order keywords needs each sentence's keywords (task insertion_lm with a "
                             "keyword file for the split)")
        return given_first_levels(given, lengths)
    raise ValueError(f"--insertion-order {policy} has no levels; level orders: {', '.join(LEVEL_POLICIES)}")


def level_order(levels: Tensor, lengths: Tensor) -> Tensor:
    """Level by level, left to right inside a level.  levels [B, n] -> order [B, n]."""
    n = levels.size(1)
    return _order_from_keys(levels.float() * n + positions(len(lengths), n, lengths.device).float(), lengths)


def make_order(policy: str, lengths: Tensor, n: int, generator: Optional[torch.Generator] = None,
               anchor_depth: int = DEFAULT_ANCHOR_DEPTH, given: Optional[Tensor] = None,
               levels: Optional[Tensor] = None) -> Tensor:
    """Dispatch on the ``--insertion-order`` flag value (``anchor_depth``: ``--anchor-depth``; ``given``: the
    given words of the ``keywords`` order; ``levels``: those of the ``dependency`` order)."""
    if policy == "l2r":
        return left_to_right(lengths, n)
    if policy == "r2l":
        return right_to_left(lengths, n)
    if policy == "random":
        return uniform_random(lengths, n, generator)
    if policy in LEVEL_POLICIES:
        return level_order(order_levels(policy, lengths, n, anchor_depth, given, levels), lengths)
    raise ValueError(f"--insertion-order: unknown policy {policy!r}; choose one of {ORDER_POLICIES}")
