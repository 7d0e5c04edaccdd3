"""Several candidates per sentence (``--insertion-candidates K``, ``--insertion-candidates-finish M``): the length
beam of mask-predict and the noisy parallel decoding of Gu et al. 2018, with the model as its own judge.

Each sentence is decoded K times side by side (K consecutive rows of the batch), candidate j taking the j-th most
probable word(s) at the first step (with sampling: K samples), and the candidates are output best first by mean
log-probability per insertion (``--nbest``: the first N), or by the judge's score (:class:`~.rerank.Judge`), or by
minimum Bayes risk (:func:`~.mbr.mbr_ranks`). The first word is the hardest guess of a layered model (a binary or
anchored order starts from a sentence's middle word), and every later step builds on it. The K candidates cost one
batch K times as wide, not more steps: a sentence reports the most steps any of its candidates took. With M < K a
sentence stops once M of its candidates have finished; the others are dropped unfinished (a candidate that needs
far more steps than its siblings is mostly one gone astray), so it reports the step its M-th candidate finished.
"""
from typing import List, Optional

import torch
from torch import Tensor


class Candidates:
    """The candidates of one decoding group of ``sentences`` sentences (see the module docstring): the greedy loop's
    row policy (:class:`~insnet_fairseq.decoding.greedy.RowPolicy`)."""

    def __init__(self, options, sentences: int, device):
        self.K, self.sampling = options.candidates, options.sampling
        M = options.candidates_finish
        self.finish = M if 0 < M < self.K else 0  # 0: wait for all K
        self.n_finished = torch.zeros(sentences, dtype=torch.long, device=device)  # [G] finished candidates

    def first_ranks(self, ids: Tensor) -> Optional[Tensor]:
        """[B] the rank of the word each row takes at the first step (candidate j: its j-th best), None when each
        takes its best (one candidate, or sampled ones). ``ids`` [B]: the decoded rows."""
        return ids % self.K if self.K > 1 and not self.sampling else None

    def cut(self, stop: Tensor, ids: Tensor) -> Tensor:
        """bool [B]: the rows dropped unfinished now, their sentence's M-th candidate having finished (``stop``
        [B]: the rows finishing at this step; ``ids`` [B]: their decoded rows)."""
        cut = torch.zeros_like(stop)
        if self.finish and bool(stop.any()):
            group = ids // self.K  # [B] each row's sentence
            self.n_finished.index_add_(0, group[stop], torch.ones_like(group[stop]))
            cut = ~stop & (self.n_finished[group] >= self.finish)
        return cut

    @staticmethod
    def ranked(hyps: List[dict], order: Optional[List[int]] = None) -> List[dict]:
        """A sentence's candidates, best first by score (the model's mean log-probability per insertion, or the
        judge's), or in ``order`` (--insertion-candidates-mbr); each reports the most steps any candidate took, as
        they decode side by side, and its own as ``candidate_steps``.
        Example: scores -0.9 (5 steps) and -0.4 (7 steps) -> [(-0.4, 7 steps), (-0.9, 7 steps, candidate_steps 5)]."""
        steps = max(h["steps"] for h in hyps)
        ranked = sorted(hyps, key=lambda h: -h["score"]) if order is None else [hyps[i] for i in order]
        return [dict(h, steps=steps, candidate_steps=h["steps"]) for h in ranked]
