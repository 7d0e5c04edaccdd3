"""The greedy (or sampled) decoding loop: step the rows of a decoding group until each stops.

Before each step the loop asks when rows stop (:class:`~insnet_fairseq.decoding.stopping.Stopping`: the termination
head, ``--min-length-ratio``; :class:`~insnet_fairseq.decoding.stopping.StopCheck`: ``--stop-check-prob``, whose words
a stopping row inserts in one last step), outputs the rows that stop (:class:`~insnet_fairseq.decoding.output.Output`),
and keeps the others: the rows and everything that travels with them (:class:`Live`) are selected in one place, once
per step. A row held back by ``--min-length-ratio`` inserts one word per step (its best slot).

Several rows of one sentence (``--insertion-candidates``) enter through a small protocol, :class:`RowPolicy`: the
rank of each row's first word, and the rows dropped when their sentence has enough finished rows. The default,
:class:`OneRow`, is one row a sentence.
"""
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from insnet_fairseq.decoding.output import Output
from insnet_fairseq.decoding.state import DecoderState
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.decoding.stopping import Forced, StopCheck, Stopping


@dataclass(frozen=True)
class Rows:
    """The rows of a decoding group still decoding, and what leaves the batch with them: ``ids`` [B] (each row's
    index among the group's decoded rows), its step cap ``cap`` [B], length cap ``max_len`` [B] and minimum length
    ``min_len`` [B] (tokens, ``<s>`` and ``</s>`` included; None: no minimum), its source's keys/values
    ``source_kv`` (per layer (k, v) [B, H, L, Dh]) and padding ``source_pad`` [B, L] (or None)."""

    ids: Tensor
    cap: Tensor
    max_len: Tensor
    min_len: Optional[Tensor]
    source_kv: List[Tuple[Tensor, Tensor]]
    source_pad: Optional[Tensor]

    def select(self, keep: Tensor) -> "Rows":
        """Keep the rows ``keep`` (LongTensor)."""
        return Rows(self.ids[keep], self.cap[keep], self.max_len[keep],
                    None if self.min_len is None else self.min_len[keep],
                    [(k[keep], v[keep]) for k, v in self.source_kv],
                    None if self.source_pad is None else self.source_pad[keep])


class OneRow:
    """The :class:`RowPolicy` of one row a sentence: every row takes its best words and waits for no other."""

    finish = 0  # M of a sentence's rows finished stop the others (0: each row runs until it stops)

    def first_ranks(self, ids: Tensor) -> Optional[Tensor]:
        """[B] the rank of the word each row takes at the first step; None: each its best."""
        return None

    def cut(self, stop: Tensor, ids: Tensor) -> Tensor:
        """bool [B]: the rows dropped unfinished now (``stop``: the rows finishing at this step)."""
        return torch.zeros_like(stop)


RowPolicy = OneRow  # the protocol: finish, first_ranks(ids), cut(stop, ids)


@dataclass
class Live:
    """The rows still decoding and what travels with them: their ``state``, :class:`Rows`, the stop check's memory
    of rows in their last step, the rows held back by ``--min-length-ratio`` (``held`` bool [B] or None), the stop
    check's words to insert (``forced``), and each row's first word rank (``first_rank`` [B] or None)."""

    state: DecoderState
    rows: Rows
    stop_check: StopCheck
    held: Optional[Tensor] = None
    forced: Optional[Forced] = None
    first_rank: Optional[Tensor] = None

    def select(self, keep: Tensor) -> None:
        """Keep the rows ``keep`` (LongTensor) of everything."""
        self.state, self.rows = self.state.select(keep), self.rows.select(keep)
        self.held = None if self.held is None else self.held[keep]
        self.forced = None if self.forced is None else self.forced.select(keep)
        self.first_rank = None if self.first_rank is None else self.first_rank[keep]
        self.stop_check.select(keep)


def decode_greedy(steps: InsertionSteps, output: Output, decoder, sample, state: DecoderState, rows: Rows,
                  owner: List[int], policy: RowPolicy = OneRow()) -> List[Optional[dict]]:
    """Step the decoded ``rows`` (of batch rows ``owner``) until each stops: the hypothesis of each decoded row (None:
    dropped unfinished by ``policy``)."""
    o = steps.options
    device = state.tokens.device
    stopping = Stopping(o)  # --stop-threshold, --min-length-ratio
    stop_check = StopCheck(o.stop_check_prob, len(owner), device, o.stop_check_top_p)  # --stop-check-prob
    live = Live(state, rows, stop_check, first_rank=policy.first_ranks(rows.ids))
    history = {i: [] for i in range(len(owner))}
    hyps: List[Optional[dict]] = [None] * len(owner)
    output.record(history, state, rows.ids)
    while True:
        state, rows = live.state, live.rows
        done, live.held = stopping(steps.termination_logit(decoder, state), state.lengths, rows.min_len)
        done, live.forced = stop_check(steps, decoder, state, rows.source_kv, rows.source_pad, done)
        stop = done | (state.steps >= rows.cap) | (state.lengths >= rows.max_len)
        go_on = ~stop & ~policy.cut(stop, rows.ids)  # the rows that stop or are dropped unfinished leave
        if bool(stop.any()):
            output.finish_rows(sample, decoder, state, stop, done, rows.ids, owner, hyps, history)
        if live.forced is not None:  # the rows ending on the stop check's words: placed, without a pass, and done
            ending = live.forced.slots.any(1) & go_on  # [B]
            some, everyone = torch.stack([ending.any(), (ending | ~go_on).all()]).tolist()  # one read
            # now, where no other row's fate hangs on when they finish (--insertion-candidates-finish)
            if some and (policy.finish == 0 or everyone):
                e = ending.nonzero().view(-1)
                whole = len(e) == len(ending)
                sub = rows if whole else rows.select(e)
                placed = steps.step(decoder, state if whole else state.select(e), sub.source_kv, sub.source_pad,
                                    sub.max_len, forced=live.forced if whole else live.forced.select(e), encode=False)
                output.record(history, placed, sub.ids)
                every = torch.ones_like(e, dtype=torch.bool)
                output.finish_rows(sample, decoder, placed, every, every, sub.ids, owner, hyps, history)
                go_on, live.forced = go_on & ~ending, None
        keep = go_on.nonzero().view(-1)
        if len(keep) == 0:
            return hyps
        if len(keep) < len(go_on):
            live.select(keep)
        live.state = steps.step(decoder, live.state, live.rows.source_kv, live.rows.source_pad, live.rows.max_len,
                                one_word=live.held, word_rank=live.first_rank, forced=live.forced)
        live.first_rank = None
        output.record(history, live.state, live.rows.ids)
