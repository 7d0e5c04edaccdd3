"""Layer arithmetic of layered trajectories (InsNet-Dinic and InsNet-uniform, paper 3.3).

A *layering* gives every target position a layer: ``<s>`` and ``</s>`` are layer 0, words are in
layers 1..m, and the tokens of one layer are inserted in one parallel step, into distinct slots
of the context made by the earlier layers. Layerings are stored by final position:
``layers`` [B, n] (LongTensor; padding holds ``PAD_LAYER``).

A layering fixes the trajectory that training encodes in its single pass:

* :func:`encoding_order`: positions sorted by (layer, position): a layer's tokens are encoded
  one after another, left to right, which is the rule decoding uses for the tokens of one
  parallel step (:func:`insnet_fairseq.decoding.state.group_offsets`), so training and decoding see the same offsets;
* :func:`context_steps`: for every step, the last step of the earlier layers: the context its
  token is inserted into (``t - 1`` for a sequential trajectory). The model takes it as
  ``context`` and scores each token at its slot in that context (:class:`insnet_fairseq.models.insnet.InsNetDecoder`).

Every function here is a pure tensor function of layers, orders and lengths; the layerings that need
the model (InsNet-Dinic's promotions) are in :mod:`insnet_fairseq.training.layerization`.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from insnet_fairseq.geometry.orders import DEFAULT_ANCHOR_DEPTH, order_levels, positions

PAD_LAYER = 1 << 20


def sequential_layers(order: Tensor, lengths: Tensor) -> Tensor:
    """One word per layer, in insertion order.

    order [B, n] (an insertion order, see :mod:`insnet_fairseq.geometry.orders`), lengths [B] -> layers [B, n] by
    position.

    Example: order [0, 6, 2, 4, 1, 3, 5] ("I have a pen ." with <s>, </s>) -> layers by position
    [0, 3, 1, 4, 2, 5, 0]: "have" (position 2) is layer 1, "pen" layer 2, "I" layer 3, ...
    """
    B, n = order.shape
    steps = positions(B, n, order.device)
    by_step = (steps - 1).clamp_min(0).masked_fill(steps >= lengths.unsqueeze(1), PAD_LAYER)
    return torch.empty_like(order).scatter_(1, order, by_step)


def uniform_layers(lengths: Tensor, n: int, policy: str = "binary", anchor_depth: int = DEFAULT_ANCHOR_DEPTH,
                   given: Optional[Tensor] = None, levels: Optional[Tensor] = None) -> Tensor:
    """InsNet-uniform: layer l + 1 holds the level-l words of a level order
    (:func:`insnet_fairseq.geometry.orders.order_levels`).
    The paper's InsNet-uniform is the balanced binary tree (``binary``: every gap's middle word,
    about log2(len) layers); ``anchored`` gives depth + about len / 2**depth layers; ``keywords`` (with
    ``given``) the keywords in one layer, then one layer per word of the longest gap; ``dependency`` (with
    ``levels``) one layer per level of the binarised parse, the root first.
    lengths [B] -> layers [B, n].

    Example: len 7 (words at positions 1..5), binary -> [0, 2, 3, 1, 2, 3, 0]: the middle word 3
    first, then 1 and 4, then 2 and 5.
    """
    pos = positions(len(lengths), n, lengths.device)
    layers = order_levels(policy, lengths, n, anchor_depth, given, levels) + 1  # <s>, </s>: level -1 -> layer 0
    return layers.masked_fill(pos >= lengths.unsqueeze(1), PAD_LAYER)


def encoding_order(layers: Tensor) -> Tensor:
    """Insertion order of a layering: by layer, then left to right.  [B, n] -> order [B, n].

    Padding (``PAD_LAYER``) comes last, in position order, as in :mod:`insnet_fairseq.geometry.orders`.
    Example: layers [0, 2, 1, 2, 0] -> order [0, 4, 2, 1, 3].
    """
    n = layers.size(1)
    return (layers * n + positions(*layers.shape, layers.device)).argsort(dim=1)


def context_steps(layers: Tensor, order: Tensor) -> Tensor:
    """Last step of the context each step's token is inserted into.

    layers [B, n] (by position), order [B, n] = :func:`encoding_order` -> context [B, n]:
    ``context[t]`` = (number of tokens in layers before step t's layer) - 1, i.e. ``t - 1`` for
    one token per layer. Steps 0 and 1 (``<s>``, ``</s>``) get 0.
    Example: layers [0, 2, 1, 2, 0] (order [0, 4, 2, 1, 3]) -> [0, 0, 1, 2, 2].
    """
    by_step = layers.gather(1, order)  # [B, n] non-decreasing
    earlier = (by_step.unsqueeze(1) < by_step.unsqueeze(2)).sum(2)  # [B, n(t)]: steps in earlier layers
    return (earlier - 1).clamp_min(0)


def num_layers(layers: Tensor) -> Tensor:
    """Number of word layers per sentence (= parallel insertion steps).  [B, n] -> [B]."""
    return layers.masked_fill(layers >= PAD_LAYER, 0).max(1).values


def compact(layers: Tensor) -> Tensor:
    """Renumber layers to 0..m without gaps (drops layers left empty).  [B, n] -> [B, n]."""
    B, n = layers.shape
    real = layers < PAD_LAYER
    present = torch.zeros(B, n + 1, dtype=torch.long, device=layers.device)
    present.scatter_(1, torch.where(real, layers, torch.full_like(layers, n)), 1)
    present[:, n] = 0
    new_id = present.cumsum(1) - 1  # [B, n + 1]
    return torch.where(real, new_id.gather(1, layers.clamp(max=n)), layers)


def delay_last_words(layers: Tensor, u: Tensor, p: float) -> Tensor:
    """Move each word of a sentence's last layer, with probability ``p`` (where ``u < p``), into a new layer
    after it; the last layer keeps at least one word (its leftmost, when every word was drawn).

    Training with ``--late-words``: the partial sequence before the new layer misses words but has the look
    of a finished one (as many layers, the final word in place), so q(stop) learns to see the gaps, and the
    delayed words are scored at their slots in an otherwise finished sentence, the state where parallel
    decoding stops too early. Valid: the last layer's words have no later neighbours, so the delayed ones
    stay in distinct slots of the new layer's context.
    layers [B, n], u [B, n] uniform in [0, 1) -> layers [B, n].

    Example: layers [0, 1, 2, 1, 2, 2, 0] (words of layer 2 at positions 2, 4, 5), u at those positions 0.1,
    0.9, 0.3 and p 0.5 -> [0, 1, 3, 1, 2, 3, 0].
    """
    last = (layers == num_layers(layers).unsqueeze(1)) & (layers > 0)  # [B, n] the words of the last layer
    move = last & (u < p)
    every = move.sum(1) == last.sum(1)  # [B] every word drawn: the leftmost stays
    leftmost = last & (last.long().cumsum(1) == 1)
    return layers + (move & ~(every.unsqueeze(1) & leftmost)).long()


def trajectory(layers: Tensor) -> Tuple[Tensor, Tensor]:
    """(order, context) for the model's layered forward.  [B, n] -> ([B, n], [B, n])."""
    order = encoding_order(layers)
    return order, context_steps(layers, order)
