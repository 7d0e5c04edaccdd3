"""The hypotheses of insertion decoding: what a decoded row outputs, its history, and the warnings of a cut output.

:class:`Output` is shared by every decoding of :class:`~insnet_fairseq.decoding.generator.InsertionGenerator`
(the greedy loop, beam search, end-of-slot decoding): a finished row's tokens and scores left to right, with
``--retain-iter-history``'s partial outputs, and one warning for a sentence stopped by ``--max-insertion-steps`` or the
model's length limit before the model stopped it.
"""
import logging
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from insnet_fairseq.decoding.state import DecoderState

logger = logging.getLogger(__name__)


def sample_id(sample, b: int) -> int:
    """The sample id of batch row ``b`` (the row itself where the sample has no ids)."""
    return int(sample["id"][b]) if sample.get("id") is not None else b


class Output:
    """Hypotheses over ``eos``, with every partial output kept when ``retain_history``; ``max_steps``: the step cap
    given (--max-insertion-steps, 0: the default cap, which is not warned about)."""

    def __init__(self, eos: int, retain_history: bool = False, max_steps: int = 0):
        self.eos, self.retain_history, self.max_steps = eos, retain_history, max_steps

    def record(self, history, state: DecoderState, ids: Tensor) -> None:
        """--retain-iter-history: every sentence's partial output after this step, with one device-to-host
        copy for the batch (not one per sentence)."""
        if not self.retain_history:
            return
        order = state.sequence_order()  # [B, S] insertion index of each token, left to right, holes last
        seq, order = state.tokens.gather(1, order).cpu(), order.cpu()
        lengths, rows = state.lengths.cpu().tolist(), ids.cpu().tolist()
        for row, b in enumerate(rows):  # "inserted": each token's insertion index (<s>, </s>: 0, 1; given tokens next)
            history[b].append({"tokens": seq[row, 1 : lengths[row]], "inserted": order[row, 1 : lengths[row]]})

    def finish_rows(self, sample, decoder, state: DecoderState, stop: Tensor, done: Tensor, ids: Tensor,
                    owner: List[int], hyps: List[Optional[dict]], history) -> None:
        """The hypotheses of the rows ``stop`` (bool [B]; ``done``: those the model stopped, the others at a cap),
        with a warning for a row cut by the model's length limit, or by ``--max-insertion-steps``."""
        at_limit = ~done & (state.lengths >= decoder.max_target_positions)  # [B]
        self.warn_step_cap(sample, state, stop & ~done & ~at_limit, ids, owner)
        stopped = stop.nonzero().view(-1)
        ids, at_limit = ids[stopped].tolist(), at_limit[stopped].tolist()
        for i, limited, (tokens, scores, steps) in zip(ids, at_limit, self.sequences(state, stopped)):
            hyps[i] = self.finalize(tokens, scores, steps, history[i])
            if limited:  # cut by the model's limit, not by the model: say so
                logger.warning(f"sample id {sample_id(sample, owner[i])}: output reached the model's limit of "
                               f"{decoder.max_target_positions - 2} words before the model stopped "
                               "(train with a larger --max-target-positions for longer outputs)")

    def warn_step_cap(self, sample, state: DecoderState, capped: Tensor, ids: Tensor, owner: List[int]) -> None:
        """:meth:`warn_at_cap` for the rows ``capped`` (bool [B], stopped before the model stopped) that reached
        ``--max-insertion-steps``, a sentence's candidates once."""
        n = self.max_steps
        if n <= 0 or not bool(capped.any()):
            return
        rows = (capped & (state.steps >= n)).nonzero().view(-1).tolist()
        self.warn_at_cap(sample, sorted({owner[int(ids[row])] for row in rows}))

    def warn_at_cap(self, sample, batch_rows: List[int]) -> None:
        """One warning per sentence of ``batch_rows`` stopped by ``--max-insertion-steps``: a cap small enough to cut
        outputs is warned about, not refused (no value is wrong for every sentence). The default cap (0: 2 x source
        length + 10) is not warned about."""
        n = self.max_steps
        if n <= 0:
            return
        for b in batch_rows:
            logger.warning(f"sample id {sample_id(sample, b)}: stopped at the step cap (--max-insertion-steps {n}) "
                           "before the model stopped: its output may be cut short")

    @staticmethod
    def sequences(state: DecoderState, rows: Tensor) -> List[Tuple[Tensor, Tensor, int]]:
        """Each of ``rows``' (LongTensor [R]) tokens [n] and scores [n], left to right (``<s>`` ... ``</s>``), and its
        steps, on the CPU: one sort, two gathers and three copies from the device for all of them (not a few op calls
        and reads a sentence). Example: a row with positions [0, 2, 1, HOLE] (``<s> </s> a``, a hole) and length 3
        -> tokens ``<s> a </s>``."""
        order = state.positions[rows].argsort(1)  # [R, S] holes (HOLE) last
        tokens, scores = state.tokens[rows].gather(1, order), state.scores[rows].gather(1, order)  # [R, S]
        tokens, scores = tokens.cpu(), scores.cpu()
        lengths, steps = torch.stack([state.lengths[rows], state.steps[rows]]).tolist()
        return [(tokens[r, :n], scores[r, :n], k) for r, (n, k) in enumerate(zip(lengths, steps))]

    @staticmethod
    def hypothesis(tokens: Tensor, scores: Tensor, steps: int, history) -> dict:
        inserted = scores[:-1]
        return {
            "tokens": tokens, "positional_scores": scores, "alignment": None, "steps": steps, "history": history,
            "score": float(inserted.mean()) if len(inserted) else 0.0,
        }

    def finalize(self, tokens: Tensor, scores: Tensor, steps: int, history) -> dict:
        """The hypothesis of ``tokens`` [n] (``<s>`` ... ``</s>``, left to right) and their ``scores`` [n]."""
        return self.hypothesis(tokens[1:].cpu(), scores[1:].cpu(), steps, history)

    def fixed(self, tokens: Sequence[int]) -> dict:
        """The hypothesis of a sentence that is not decoded: ``tokens`` (maybe none), then ``</s>``."""
        return self.hypothesis(torch.tensor(list(tokens) + [self.eos]), torch.zeros(len(tokens) + 1), 0, [])
