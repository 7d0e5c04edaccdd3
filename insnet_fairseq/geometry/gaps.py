"""Gap geometry of layered trajectories: sampled layerings and the end-of-slot targets of every slot.

A layering (:mod:`insnet_fairseq.geometry.layers`) gives every position a layer; after layer ``l`` the context holds
the tokens of layers ``<= l`` and its slots are the gaps between neighbours in final-position order. A slot between
context tokens at final positions ``a < b`` misses the words ``y[a + 1 .. b - 1]``:

* :func:`sample_layers` draws a layering: layer ``l + 1`` takes, in each open gap, one word drawn around the gap's
  centre, or (with probability ``skip``) none, so that training sees unbalanced gaps and off-centre splits;
* :func:`gap_targets` lists every slot of every layer end with its target: the missing words of its gap, each
  weighted ``exp(-|i - (a + b) / 2| / T)`` and normalised over the gap (the Insertion Transformer's soft binary-tree
  targets), or end-of-slot where the gap is empty (``b = a + 1``);
* :func:`asked_slots` keeps the slots parallel decoding asks (``--gap-slots asked``): every open slot, and a done slot
  at the layer end where it first appears only, since decoding shuts a slot once it says done;
* :func:`sample_slots` draws which of those slots a training pass scores (``--gap-slot-rate``), each weighted by the
  inverse of its probability, so that the slot queries' cost falls and the loss stays an unbiased estimate.

All are pure tensor functions of layers and lengths; they loop over layers (a few per sentence), never over
tokens.
"""
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from insnet_fairseq.geometry.layers import PAD_LAYER, num_layers
from insnet_fairseq.geometry.orders import positions


def context_neighbours(in_ctx: Tensor):
    """Nearest context positions around every position.

    in_ctx bool [..., n] (True where a position is in the context) -> (left, right) LongTensors [..., n]:
    ``left[i]`` the largest context position ``<= i`` (-1: none), ``right[i]`` the smallest ``>= i`` (n: none).

    Example: in_ctx [T, F, F, T, F, T] -> left [0, 0, 0, 3, 3, 5], right [0, 3, 3, 3, 5, 5].
    """
    n = in_ctx.size(-1)
    pos = torch.arange(n, device=in_ctx.device)
    left = torch.where(in_ctx, pos, torch.full_like(pos, -1)).cummax(-1).values
    right = torch.where(in_ctx, pos, torch.full_like(pos, n)).flip(-1).cummin(-1).values.flip(-1)
    return left, right


def sample_layers(lengths: Tensor, n: int, generator: Optional[torch.Generator] = None, spread: float = 1.0,
                  skip: float = 0.0, start: Optional[Tensor] = None) -> Tensor:
    """A layered trajectory drawn gap by gap: layer ``l + 1`` inserts into each open gap ``(a, b)`` of the context
    after layer ``l`` one word ``i``, drawn with probability proportional to ``exp(-|i - (a + b) / 2| / spread)``, or,
    with probability ``skip``, no word (the gap waits a layer); a draw where every gap of a sentence waits makes it no
    layer.

    ``spread`` 0 takes the middle word of every gap (the left one of two), never skipping: the balanced binary tree's
    layers (:func:`insnet_fairseq.geometry.layers.uniform_layers` with ``binary``). Draws use ``generator`` (on the
    CPU), so equal seeds give equal layerings.

    lengths [B] (``<s>`` and ``</s>`` included), n >= max(lengths) -> layers [B, n] by position: 0 for ``<s>`` and
    ``</s>``, 1.. for words, ``PAD_LAYER`` for padding. ``start`` [B, n] (optional): a layering begun elsewhere (a
    decoded canvas, :func:`insnet_fairseq.geometry.alignment.merge_canvas`), -1 where a word is still to be laid out;
    its layers are kept and the drawn ones follow its last.

    Example: len 7 (words 1..5), spread 0 -> [0, 2, 3, 1, 2, 3, 0]: the middle 3, then 1 and 4, then 2 and 5.
    """
    B = len(lengths)
    device = lengths.device
    pos = positions(B, n, device)
    last = (lengths - 1).unsqueeze(1)  # [B, 1]
    pad = pos > last
    if start is None:
        layers = torch.zeros(B, n, dtype=torch.long, device=device).masked_fill(pad, PAD_LAYER)
        placed = (pos == 0) | (pos >= last)  # <s>, </s> (layer 0) and padding
    else:
        layers = start.masked_fill(pad, PAD_LAYER)
        placed = layers.ge(0)
    count = layers.masked_fill(pad, 0).clamp_min(0).max(1, keepdim=True).values  # [B, 1] layers so far
    draws = 0
    while not bool(placed.all()):
        draws += 1
        left, right = context_neighbours(placed & ~pad)  # [B, n] each open position's gap
        distance = (pos.float() - (left + right).float() / 2).abs()
        if spread > 0:
            u = torch.rand(B, n, generator=generator).clamp_min(1e-20).to(device)
            key = -distance / spread - torch.log(-torch.log(u))  # Gumbel-max: one draw per gap
        else:
            key = -distance - pos.float() * 1e-3  # the middle, the left one of two
        key = key.masked_fill(placed, float("-inf"))
        best = torch.full((B, n), float("-inf"), device=device).scatter_reduce(1, left.clamp_min(0), key, "amax")
        pick = ~placed & key.eq(best.gather(1, left.clamp_min(0)))
        if skip > 0 and draws <= n:  # (past n draws every gap takes its word: the loop ends)
            wait = (torch.rand(B, n, generator=generator).to(device) < skip).gather(1, left.clamp_min(0))
            pick = pick & ~wait
        count = count + pick.any(1, keepdim=True).long()  # a draw where every gap waits makes no layer
        layers = torch.where(pick, count.expand(B, n), layers)
        placed = placed | pick
    return layers


@dataclass(frozen=True)
class GapTargets:
    """Every slot of every layer end of a batch of layerings, and its target (see :func:`gap_targets`).

    Slots (S of them, ordered by sentence, layer end, left position):
        row [S], end [S] (the layer end l), left [S], right [S] (final positions of the slot's neighbours),
        done [S] bool (the gap is empty: the end-of-slot target).
    Missing words (P of them, one per (layer end, word not yet inserted)):
        slot [P] (index of its slot), word [P] (its final position), distance [P] (float: ``|word - centre|``, the
        centre of its gap; :func:`gap_weights` turns it into the word's target mass).
    context_last [B, L]: the number of tokens in the context after layer l, minus 1 (the step of its global vector in
    the layered encoding order).
    weight [S] float or None: each slot's weight in the loss (:func:`sample_slots`; None: every slot weighs 1).
    """

    row: Tensor
    end: Tensor
    left: Tensor
    right: Tensor
    done: Tensor
    slot: Tensor
    word: Tensor
    distance: Tensor
    context_last: Tensor
    weight: Optional[Tensor] = None


def gap_weights(distance: Tensor, gap: Tensor, temperature: float) -> Tensor:
    """Target mass of each missing word within its gap.

    distance [P] (float, |i - centre|), gap [P] (LongTensor, the gap's index, < G), temperature T -> weight [P],
    proportional to exp(-distance / T) and summing to 1 over each gap; T = 0: the words nearest the centre share it.

    Example: one gap of words at distances [1, 0, 1], T 1 -> [0.21, 0.58, 0.21]; T 0 -> [0, 1, 0].
    """
    G = int(gap.max()) + 1 if gap.numel() else 0
    if temperature > 0:
        logit = -distance / temperature
    else:
        nearest = torch.full((G,), float("inf"), device=distance.device).scatter_reduce(0, gap, distance, "amin")
        logit = torch.where(distance <= nearest[gap] + 1e-6, 0.0, float("-inf"))
    top = torch.full((G,), float("-inf"), device=distance.device).scatter_reduce(0, gap, logit, "amax")
    w = (logit - top[gap]).exp()
    return w / torch.zeros(G, device=distance.device).scatter_add(0, gap, w)[gap]


def asked_slots(layers: Tensor) -> Tensor:
    """The slots of layerings ``layers`` [B, n] (``PAD_LAYER`` at padding) that parallel decoding asks, by (sentence,
    layer end, left neighbour's final position): every slot whose gap misses words, and a done slot (its neighbours
    adjacent, ``b = a + 1``) only at the layer end where it appears. At the next layer end the same slot is done
    still, and decoding, which shuts a slot once it says done, never asks it again.

    -> weight [B, L, n] float, L = the batch's most layers + 1: 0 at a done slot whose two neighbours were both in the
    context of the layer end before, else 1 (:func:`gap_targets` reads it at slots only; multiply it into
    :func:`sample_slots`' weight to sample among the asked slots).

    Example: "<s> a b c </s>" with layers [0, 2, 1, 2, 0]: end 1's slots (0, 2) and (2, 4) are open; end 2's four done
    slots (0, 1), (1, 2), (2, 3), (3, 4) all appear there: all asked. With layers [0, 1, 2, 3, 0] (a, then b, then c),
    end 1's slot (0, 1) is done and asked, and at ends 2 and 3 it is dropped (weight 0), as is end 3's (1, 2).
    """
    B, n = layers.shape
    m = num_layers(layers)
    L = int(m.max()) + 1 if B else 1
    ends = torch.arange(L, device=layers.device).view(1, L, 1)
    in_ctx = (layers < PAD_LAYER).unsqueeze(1) & (layers.unsqueeze(1) <= ends)  # [B, L, n]
    before = torch.cat([torch.zeros_like(in_ctx[:, :1]), in_ctx[:, :-1]], 1)  # the context of the layer end before
    right_before = torch.cat([before[..., 1:], torch.zeros_like(before[..., :1])], -1)  # a + 1 in it
    return (~(before & right_before)).float()


def sample_slots(layers: Tensor, rate: float, generator: Optional[torch.Generator] = None) -> Tensor:
    """Which slots of layerings ``layers`` [B, n] one training pass scores: each slot of each layer end, independently,
    with probability ``rate``, weighted ``1 / rate`` so that the weighted loss is an unbiased estimate of scoring
    every slot (Horvitz-Thompson). Draws use ``generator`` (on the CPU): equal seeds give equal samples.

    -> weight [B, L, n] float, L = the batch's most layers + 1: at (sentence, layer end, left neighbour's final
    position) ``1 / rate`` where that slot is drawn, 0 where not (:func:`gap_targets` reads it at slots only).

    Example: rate 0.25 -> every entry 0 or 4, about a quarter of them 4; rate 1 -> every entry 1.
    """
    B, n = layers.shape
    L = int(num_layers(layers).max()) + 1 if B else 1
    if rate >= 1:
        return torch.ones(B, L, n, device=layers.device)
    drawn = torch.rand(B, L, n, generator=generator).to(layers.device) < rate
    return drawn.float() / rate


def gap_targets(layers: Tensor, lengths: Tensor, foreign: Optional[Tensor] = None,
                weight: Optional[Tensor] = None) -> GapTargets:
    """The end-of-slot objective's slots and targets for layerings ``layers`` [B, n] (by position; ``lengths`` [B]).
    ``foreign`` [B, n] bool (optional): canvas words the reference lacks (on-policy trajectories,
    :mod:`insnet_fairseq.geometry.alignment`): in the context from their layer on, never a missing word, so a slot
    whose gap holds only foreign words not yet inserted is done. ``weight`` [B, L', n] (optional, L' >= L, from
    :func:`sample_slots`): only the slots of positive weight are listed, with their missing words, and carry it.

    For every layer end l = 0 .. m (m: the sentence's last layer; the context after m is the whole sentence, whose
    slots are all done) and every slot of that context: its neighbours, whether its gap is empty, and the words it
    misses with their distances to the gap's centre (their weights: :func:`gap_weights`).

    Example: "<s> a b c </s>" with layers [0, 2, 1, 2, 0] (b first, then a and c). Layer end 0: one slot (0, 4)
    missing a, b, c (centre 2: b weighs most); end 1: slots (0, 2) missing a and (2, 4) missing c; end 2: four
    done slots. S = 7 slots, P = 5 missing words.
    """
    B, n = layers.shape
    device = layers.device
    m = num_layers(layers)  # [B]
    L = int(m.max()) + 1
    ends = torch.arange(L, device=device).view(1, L, 1)
    real = (layers < PAD_LAYER).unsqueeze(1)  # [B, 1, n]
    live = torch.arange(L, device=device).view(1, L) <= m.view(B, 1)  # [B, L] layer ends that exist
    in_ctx = real & (layers.unsqueeze(1) <= ends) & live.unsqueeze(2)  # [B, L, n]
    left, right = context_neighbours(in_ctx)  # [B, L, n]
    pos = torch.arange(n, device=device).view(1, 1, n)
    is_slot = in_ctx & (pos < (lengths - 1).view(B, 1, 1))  # every context token but </s> opens a slot
    slot_weight = None
    if weight is not None:
        slot_weight = weight[:, :L]
        is_slot = is_slot & slot_weight.gt(0)
    slot_right = torch.cat([right[..., 1:], torch.full_like(right[..., :1], n)], -1)  # next context token right
    index = is_slot.flatten().long().cumsum(0).sub(1).view(B, L, n)  # slot number of (b, l, a)
    row, end, left_pos = is_slot.nonzero(as_tuple=True)
    missing = real & ~in_ctx & live.unsqueeze(2)  # [B, L, n] words not yet in the context
    if foreign is not None:
        missing = missing & ~foreign.unsqueeze(1)
    p_row, p_end, p_word = missing.nonzero(as_tuple=True)
    p_left, p_right = left[p_row, p_end, p_word], right[p_row, p_end, p_word]
    if weight is not None:  # the missing words of the drawn slots only
        drawn = is_slot[p_row, p_end, p_left]
        p_row, p_end, p_word, p_left, p_right = (x[drawn] for x in (p_row, p_end, p_word, p_left, p_right))
    slot = index[p_row, p_end, p_left]
    right_pos = slot_right[row, end, left_pos]
    done = torch.ones_like(row, dtype=torch.bool).index_fill(0, slot, False)  # no word missing
    return GapTargets(
        row=row, end=end, left=left_pos, right=right_pos, done=done,
        slot=slot, word=p_word, distance=(p_word.float() - (p_left + p_right).float() / 2).abs(),
        context_last=in_ctx.sum(2) - 1,
        weight=None if slot_weight is None else slot_weight[row, end, left_pos],
    )
