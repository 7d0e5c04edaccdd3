"""When a sentence stops: the termination head with ``--stop-threshold`` and ``--min-length-ratio``
(:class:`Stopping`), and the stop check that overrules it (``--stop-check-prob``, :class:`StopCheck`).

The decoding loop asks both at every step, before the step; a sentence that stops leaves the batch.
"""
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from insnet_fairseq.decoding.state import DecoderState


class Stopping:
    """``--stop-threshold Q``: a sentence stops when q(stop | h_last) > Q, i.e. the termination logit exceeds
    logit(Q); ``--min-length-ratio R``: not before its ``min_len`` tokens (R x source words + 2); such a sentence is
    *held* and inserts one word per step (at its best slot) until then.

    Example: logits [2.0, -1.0, 3.0], Q 0.5, lengths [5, 9, 4], min_len [4, 4, 6] -> done [True, False, False],
    held [False, False, True].
    """

    def __init__(self, options):
        self.stop_logit = options.stop_logit

    def __call__(self, termination_logit: Tensor, lengths: Tensor,
                 min_len: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
        """termination_logit, lengths, min_len [B] (None: no minimum) -> (done bool [B], held bool [B], or None
        without a minimum)."""
        wants = termination_logit > self.stop_logit
        if min_len is None:
            return wants, None
        held = wants & (lengths < min_len)
        return wants & ~held, held


@dataclass(frozen=True)
class Forced:
    """The words a step must insert (the stop check's): at the ``slots`` (bool [B, K]) of each row, ``words``
    [B, K] with log-probabilities ``lprobs`` [B, K]; :meth:`InsertionSteps.step` inserts them unscored."""

    slots: Tensor
    words: Tensor
    lprobs: Tensor

    def select(self, keep: Tensor) -> "Forced":
        return Forced(self.slots[keep], self.words[keep], self.lprobs[keep])


class StopCheck:
    """``--stop-check-prob P``: a sentence that the termination head stops gets one more step, which inserts only the
    best words of its open slots that have probability >= P and repeat neither neighbour (if it has any); after that
    step it stops, whatever q(stop) says. One per decoding group: it remembers the rows in their last step
    (:meth:`select` keeps them with their rows).

    Why: q(stop | h_last) of a layered model is trained only at the ends of gold layers, and a partial sequence that
    missed a word looks finished to it ("Eine Frau spielt ein Geige ." gets q(stop) = 1.00, while the slot
    "ein _ Geige" wants "Lied" at 0.87). The position distribution alone is no judge there (it is never trained on
    finished sequences: "._</s>" got 0.78), but the token head is. The check reads the slots in the top ``top_p`` of
    the position mass (``--stop-check-top-p``, 1: every open slot), which spares computing the other slots' words and
    measured no worse than every open slot (results/README.md).
    """

    def __init__(self, prob: float, rows: int, device, top_p: float):
        self.prob, self.top_p = prob, top_p
        self.finishing = torch.zeros(rows, dtype=torch.bool, device=device)  # [B] rows in their last step

    def __call__(self, steps, decoder, state: DecoderState, source_kv, source_pad,
                 done: Tensor) -> Tuple[Tensor, Optional[Forced]]:
        """done bool [B] (the termination head's) -> (done [B] after the check, the words to insert or None);
        ``steps``: the generator (its slot and word scores)."""
        if self.prob == 0 or not bool((done | self.finishing).any()):
            return done, None
        forced = self.confident_slots(steps, decoder, state, source_kv, source_pad, done & ~self.finishing)
        sure = forced.slots.any(1)
        done = (done | self.finishing) & ~sure
        self.finishing = sure
        return done, forced

    def select(self, keep: Tensor) -> None:
        self.finishing = self.finishing[keep]

    def confident_slots(self, steps, decoder, state: DecoderState, source_kv, source_pad, rows: Tensor) -> Forced:
        """For the sentences ``rows`` (bool [B]) that the termination head would stop, the open slots whose best word
        has probability >= P and repeats neither neighbour, with those words ([B, K] each).

        Example: the slots of "<s> ein Geige . </s>" with best words (Eine 0.95, Lied 0.87, "." 0.60, Im 0.08) and
        P 0.5 -> [True, True, False, False]: "." repeats its left neighbour.
        """
        B, K = rows.size(0), state.hidden.size(1) - 1
        sure = torch.zeros(B, K, dtype=torch.bool, device=rows.device)
        words = torch.full((B, K), steps.pad, dtype=torch.long, device=rows.device)
        word_lprobs = torch.zeros(B, K, device=rows.device)
        idx = rows.nonzero().view(-1)  # [R] only those sentences are scored (a batch stops a few rows at a time)
        if len(idx) == 0:
            return Forced(sure, words, word_lprobs)
        if len(idx) < B:
            state = state.select(idx)
            source_kv = [(k[idx], v[idx]) for k, v in source_kv]
            source_pad = None if source_pad is None else source_pad[idx]
        _, open_slots, best, best_lprobs = steps.best_words(decoder, state, source_kv, source_pad,
                                                            self.top_p)  # [R, K], [N]
        left, right = state.neighbour_tokens(open_slots)
        ok = (best_lprobs >= math.log(self.prob)) & (best != left) & (best != right)  # [N]
        at = idx.unsqueeze(1).expand(-1, K)[open_slots]  # [N] batch row of each open slot
        col = open_slots.nonzero()[:, 1]  # [N] its slot
        sure[at, col], words[at, col], word_lprobs[at, col] = ok, best, best_lprobs
        return Forced(sure, words, word_lprobs)
