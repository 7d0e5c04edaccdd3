"""The rules that leave some of a step's chosen insertions out: ``--skip-repeats`` (:class:`SkipRepeats`) and
``--min-token-prob`` (:class:`MinTokenProb`).

Each rule takes the step's insertions (:class:`StepWords`) and returns those it keeps;
:class:`~insnet_fairseq.decoding.step.InsertionSteps` applies the rules its options switch on
(:func:`word_rules`), in that order, between choosing the words and inserting them.
"""
import math
from dataclasses import dataclass
from typing import Callable, List, Tuple

import torch
from torch import Tensor

from insnet_fairseq.decoding.state import DecoderState, Picks


@dataclass(frozen=True)
class StepWords:
    """A step's insertions: the ``chosen`` slots (bool [B, K], N True), the same as :class:`Picks`, and their words
    ``tokens`` [N] with log-probabilities ``lprobs`` [N], row-major."""

    chosen: Tensor
    picks: Picks
    tokens: Tensor
    lprobs: Tensor

    def kept(self, keep: Tensor) -> "StepWords":
        """The insertions at the slots ``keep`` (bool [B, K], a subset of ``chosen``), with one read of N'."""
        kept = Picks.of(keep)
        return StepWords(keep, kept, kept.take(self.picks.place(self.tokens, 0)),
                         kept.take(self.picks.place(self.lprobs, 0.0)))


class SkipRepeats:
    """``--skip-repeats``: leave out the insertions that repeat a neighbour of their slot (the slot stays open for a
    later step). A sentence left with nothing keeps its slots, each with its best word that is neither neighbour
    (``choose_tokens``: the step's own choice of words, greedy or sampled).

    Example: "<s> die Kamera </s>" with "die" chosen for the slot between "die" and "Kamera" inserts nothing there;
    if that is the sentence's only slot, it gets the best word other than "die" and "Kamera".
    """

    def __init__(self, choose_tokens: Callable[[Tensor], Tuple[Tensor, Tensor]]):
        self.choose_tokens = choose_tokens

    def __call__(self, state: DecoderState, words: StepWords, logits: Tensor, pos_lprobs: Tensor) -> StepWords:
        """logits [N, V] of the chosen slots; pos_lprobs [B, K] (unused)."""
        picks, tokens, lprobs = words.picks, words.tokens, words.lprobs
        left, right = state.neighbour_tokens(picks)  # [N] neighbours of each chosen slot
        repeat = (tokens == left) | (tokens == right)  # [N]
        keep = words.chosen.clone()
        keep[picks.rows, picks.cols] = ~repeat
        stuck = (keep.sum(1) == 0)[picks.rows]  # [N] its sentence would insert nothing
        any_repeat, any_stuck = torch.stack([repeat.any(), stuck.any()]).tolist()  # one read
        if not any_repeat:  # most steps at batch 1: every insertion kept, no new Picks (and no second read)
            return words
        if any_stuck:
            logits = logits.float().scatter(1, left.unsqueeze(1), float("-inf")).scatter(1, right.unsqueeze(1),
                                                                                          float("-inf"))
            alt, alt_lprobs = self.choose_tokens(logits)
            tokens, lprobs = torch.where(stuck, alt, tokens), torch.where(stuck, alt_lprobs, lprobs)
            keep[picks.rows, picks.cols] = ~repeat | stuck
        return StepWords(words.chosen, picks, tokens, lprobs).kept(keep)


class MinTokenProb:
    """``--min-token-prob P`` (parallel decoding): leave the slots whose word has probability below P open for a later
    step, when the sentence has more context; a sentence always keeps its most likely insertion (slot and word).

    Example: chosen slots with word probabilities 0.9, 0.2, 0.6 and P 0.5 insert the first and third words; with
    probabilities 0.3 and 0.2 only the insertion of higher slot x word probability.
    """

    def __init__(self, prob: float):
        self.log_prob = math.log(prob)

    def __call__(self, state: DecoderState, words: StepWords, logits: Tensor, pos_lprobs: Tensor) -> StepWords:
        """pos_lprobs [B, K]: the step's slot log-probabilities (state, logits: unused)."""
        picks = words.picks
        row = picks.rows  # [N] sentence of each insertion
        joint = words.lprobs + picks.take(pos_lprobs)  # [N]
        best = torch.full((words.chosen.size(0),), float("-inf"), device=joint.device).scatter_reduce(
            0, row, joint, reduce="amax")  # [B]
        sure = (words.lprobs >= self.log_prob) | (joint == best[row])  # [N]
        keep = words.chosen.clone()
        keep[picks.rows, picks.cols] = sure
        return words.kept(keep)


def word_rules(options, choose_tokens) -> List[Callable[..., StepWords]]:
    """The rules ``options`` (:class:`~insnet_fairseq.decoding.core_options.CoreOptions`) switch on, in the order a
    step applies them."""
    rules = []
    if options.skip_repeats:
        rules.append(SkipRepeats(choose_tokens))
    if options.min_token_prob > 0 and options.mode == "parallel":
        rules.append(MinTokenProb(options.min_token_prob))
    return rules
