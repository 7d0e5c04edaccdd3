"""Decoding of a model trained with ``--slot-objective gap``: every slot says whether its gap is done.

Each step scores every slot of every sentence by q(done | e_slot), from the tokens' cached halves of the slot
representation (:meth:`~insnet_fairseq.modules.slots.SlotHeads.step_gap_logits`), and fills every slot whose
q(done) is below ``--end-of-slot`` with its most probable word (sequential mode: only the slot least likely done),
all in one step, encoded left to right as training's layers are. A sentence stops when every slot says done, after
the pass that encoded its last words, or at its step or length cap, with a warning. This is the objective's own rule:
no position distribution, no q(stop), no stop check and no repeat rule.
"""
import dataclasses
import logging
import math
from typing import List, Optional

import torch
from torch import Tensor

from insnet_fairseq.decoding.state import DecoderState, compact
from insnet_fairseq.decoding.step import InsertionSteps

logger = logging.getLogger(__name__)


def is_gap_model(decoder) -> bool:
    """Whether ``decoder`` was trained with ``--slot-objective gap`` (its heads have an end-of-slot head)."""
    return getattr(getattr(decoder, "heads", None), "objective", None) == "gap"


def slot_done_logits(decoder, state: DecoderState, source_kv=None, source_pad=None, shut: Optional[Tensor] = None,
                     last: bool = False):
    """Every slot's end-of-slot logit: ((left, right) [B, K] steps of each slot's neighbours, logits [B, K] float),
    K = S - 1; slots beyond a sentence's length, closed slots (inside a constraint phrase, outside an infilling
    template's blanks: ``state.open_right``) and the slots right of the ``shut`` columns (bool [B, S]: done for good,
    :class:`Shut`) get +inf (done). With the slot query stream every live slot's query is the one the pass that made
    ``state`` computed (fused decoding), or is computed here from the cache and the source's ``source_kv``,
    ``source_pad``. With ``last`` (a ``--last-word-head`` model) also every slot's q(last) logit, from the same slot
    representations: (slots, logits, last logits [B, K] float)."""
    by_pos = state.sequence_order()  # [B, S]
    left, right = by_pos[:, :-1], by_pos[:, 1:]  # slot k between ranks k and k + 1
    exists = InsertionSteps.live_slots(state.lengths, by_pos, shut)  # [B, K]
    if state.open_right is not None:
        exists = exists & state.open_right.gather(1, left)  # [B, K] the left token's slot is open
    a, b = state.parts
    z = with_slot_queries(decoder, state, source_kv, source_pad, shut).slot_queries  # [B, K, D] or None
    logits, last_logits = decoder.heads.step_gap_logits(a, b, state.last_hidden, left, right, z, last)  # [B, K]
    out = (left, right), logits.masked_fill(~exists, float("inf"))
    return (*out, last_logits) if last else out


def has_last_word_head(decoder) -> bool:
    """Whether ``decoder`` was trained with ``--last-word-head`` (its heads say which slot misses one word only)."""
    return getattr(getattr(decoder, "heads", None), "last_proj", None) is not None


def with_slot_queries(decoder, state: DecoderState, source_kv, source_pad,
                      shut: Optional[Tensor] = None) -> DecoderState:
    """``state`` with every slot's query (``--slot-query-stream``; slot k's at the offsets its word will have,
    :meth:`~insnet_fairseq.decoding.step.InsertionSteps.query_geometry`), read from the cache and the source's
    ``source_kv``, ``source_pad``; only the live slots' (zeros at the others) where ``shut`` (bool [B, S]) says which
    slots are done for good (:meth:`~insnet_fairseq.decoding.step.InsertionSteps.live_slots`); ``state`` itself where
    the pass that made it computed them (fused decoding) or the model has no stream. Both heads of a step then read the
    same queries."""
    if decoder.context.slot_query is None or state.slot_queries is not None:
        return state
    B, S = state.positions.shape
    live = None
    slot_of = torch.arange(S - 1, device=state.positions.device).unsqueeze(0).expand(B, S - 1)
    if shut is not None:
        live = InsertionSteps.live_slots(state.lengths, state.sequence_order(), shut)
        slot_of, z_real = InsertionSteps.packed_live(live)
    offsets, blocked = InsertionSteps.query_geometry(state.positions, state.real, slot_of)
    z = decoder.context.query_stream(offsets, blocked, state.cache, source_kv, source_pad)  # [B, G, D]
    if live is not None:
        z = InsertionSteps.at_slots(z, live, z_real)  # [B, S - 1, D]
    return dataclasses.replace(state, slot_queries=z)


@dataclasses.dataclass(frozen=True)
class Shut:
    """The slots of a decoding that said done: ``cols`` bool [B, S], the slot right of each state column (None: no slot
    is shut, every slot is scored at every step, ``--reopen-done-slots``). The objective's targets never reopen a done
    gap: a gap whose words are all there is done at every later layer of every trajectory. So a slot whose q(done)
    reached ``--end-of-slot`` keeps its two neighbours, is never scored again, and no step computes its query.

    Example: "<s> a </s>" (columns <s>, </s>, a) where the slot right of "a" said done: cols [F, F, T]; a step that
    fills the slot left of "a" with "b" adds column [F]: [F, F, T, F].
    """

    cols: Optional[Tensor]

    @staticmethod
    def start(state: DecoderState, reopen: bool) -> "Shut":
        """No slot shut yet, for the columns of ``state`` (``reopen``: every slot stays scored)."""
        return Shut(None if reopen else torch.zeros_like(state.real))

    def close(self, slots, done_logits: Tensor, threshold: float, closes: Optional[Tensor] = None) -> "Shut":
        """Shut the slots whose q(done) reached ``threshold``: ``slots`` (left [B, K], right) and ``done_logits``
        [B, K] from :func:`slot_done_logits` (+inf where a slot does not exist: the column left of it, </s> or a hole,
        opens no slot anyway); and the slots ``closes`` (bool [B, K] or None) that take their gap's last word
        (``--last-word``): the slot left of that word, which the left token's column opens once it is inserted (the
        one right of it: :meth:`grown`)."""
        if self.cols is None:
            return self
        done = done_logits >= math.log(threshold / (1 - threshold))  # [B, K]
        if closes is not None:
            done = done | closes
        return Shut(self.cols | torch.zeros_like(self.cols).scatter_(1, slots[0], done))

    def select(self, keep: Tensor) -> "Shut":
        """The rows ``keep`` (LongTensor)."""
        return self if self.cols is None else Shut(self.cols[keep])

    def grown(self, state: DecoderState, new: Optional[Tensor] = None) -> "Shut":
        """The same slots, for ``state``'s columns: its new tokens' slots are live, but where ``new`` (bool [B, G], the
        new columns: :func:`closing_columns`) says a word was its gap's last."""
        if self.cols is None:
            return self
        B, S = self.cols.shape
        grow = self.cols.new_zeros(B, state.tokens.size(1) - S) if new is None else new
        return Shut(torch.cat([self.cols, grow], 1))


def closing_columns(chosen: Tensor, closes: Tensor, picks=None) -> Tensor:
    """The new columns of a step that fills ``chosen`` (bool [B, K]), in the order the step appends them (left to
    right, :func:`~insnet_fairseq.decoding.state.compact`), marked where their slot ``closes`` (bool [B, K]): its
    word was its gap's last, so the slot right of the word is done. -> bool [B, G].

    Example: chosen [[T, F, T]], closes [[F, F, T]] -> [[F, T]].
    """
    slot_of, real, _ = compact(chosen, picks)
    return closes.gather(1, slot_of) & real


def open_slots(done_logits: Tensor, threshold: float, room: Tensor, one_per_row: bool = False) -> Tensor:
    """The slots to fill: q(done) < ``threshold``, at most ``room`` [B] a row (the least likely done first), one a row
    with ``one_per_row``. done_logits [B, K] -> bool [B, K].

    Example: q(done) [0.1, 0.9, 0.3], threshold 0.5 -> [T, F, T]; room 1 -> [T, F, F].
    """
    want = done_logits < math.log(threshold / (1 - threshold))  # [B, K]
    order = done_logits.argsort(1)  # least likely done first
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(order.size(1), device=order.device).expand_as(order))
    limit = torch.ones_like(room) if one_per_row else room
    return want & (rank < limit.unsqueeze(1))


def decode_gaps(steps, output, decoder, sample, state: DecoderState, rows, owner: List[int]) -> List[Optional[dict]]:
    """Step the decoded ``rows`` (:class:`~insnet_fairseq.decoding.greedy.Rows`, of batch rows ``owner``) of a gap
    model until each stops; ``steps``: the :class:`~insnet_fairseq.decoding.step.InsertionSteps` that insert the
    words, ``output``: the :class:`~insnet_fairseq.decoding.output.Output` of the hypotheses. Returns each decoded
    row's hypothesis."""
    o = steps.options
    history = {i: [] for i in range(len(owner))}
    hyps: List[Optional[dict]] = [None] * len(owner)
    output.record(history, state, rows.ids)
    shut = Shut.start(state, o.reopen_done_slots)
    last = has_last_word_head(decoder) and o.last_word < 1 and shut.cols is not None  # --last-word
    while True:
        state = with_slot_queries(decoder, state, rows.source_kv, rows.source_pad, shut.cols)  # for both heads
        scored = slot_done_logits(decoder, state, shut=shut.cols, last=last)
        slots, done_logits = scored[:2]
        room = (rows.max_len - state.lengths).clamp_min(0)
        chosen = open_slots(done_logits, o.end_of_slot, room, o.mode == "sequential")  # [B, K]
        closes = chosen & (scored[2] >= math.log(o.last_word / (1 - o.last_word))) if last else None  # [B, K]
        done = ~chosen.any(1)
        capped = ~done & ((state.steps >= rows.cap) | (state.lengths >= rows.max_len))
        stop = done | capped
        ending = None  # rows whose every slot is done or takes its gap's last word: no more pass
        if closes is None:
            some_stop, some_end = bool(stop.any()), False
        else:
            open_after = (done_logits < math.log(o.end_of_slot / (1 - o.end_of_slot))) & ~closes  # [B, K]
            ending = ~stop & ~open_after.any(1)
            some_stop, some_end = torch.stack([stop.any(), ending.any()]).tolist()  # one read
        if some_stop or some_end:
            if some_stop and bool(capped.any()):
                warn_capped(sample, state, capped, rows, owner)
            if some_stop:
                output.finish_rows(sample, decoder, state, stop, done, rows.ids, owner, hyps, history)
            if some_end:  # their words placed without a pass (no later step reads them), and done
                e = ending.nonzero().view(-1)
                if len(e) == len(ending):  # every row (a sentence decoded alone): nothing to select
                    sub, placed = rows, fill_slots(steps, decoder, state, slots, done_logits, chosen, rows, encode=False)
                else:
                    sub = rows.select(e)
                    placed = fill_slots(steps, decoder, state.select(e), (slots[0][e], slots[1][e]), done_logits[e],
                                        chosen[e], sub, encode=False)
                output.record(history, placed, sub.ids)
                every = torch.ones_like(e, dtype=torch.bool)
                output.finish_rows(sample, decoder, placed, every, every, sub.ids, owner, hyps, history)
            keep = (~stop if ending is None else ~stop & ~ending).nonzero().view(-1)
            if len(keep) == 0:
                return hyps
            state, rows, shut = state.select(keep), rows.select(keep), shut.select(keep)
            slots, done_logits, chosen = (slots[0][keep], slots[1][keep]), done_logits[keep], chosen[keep]
            closes = None if closes is None else closes[keep]
        picks = steps.picks_of(chosen)
        new_shut = None if closes is None else closing_columns(chosen, closes, picks)
        shut = shut.close(slots, done_logits, o.end_of_slot, closes)
        state = fill_slots(steps, decoder, state, slots, done_logits, chosen, rows, shut.cols, new_shut, picks)
        shut = shut.grown(state, new_shut)
        output.record(history, state, rows.ids)


def fill_slots(steps, decoder, state: DecoderState, slots, done_logits: Tensor, chosen: Tensor, rows,
               shut: Optional[Tensor] = None, new_shut: Optional[Tensor] = None, picks=None,
               encode: bool = True) -> DecoderState:
    """One step: the ``chosen`` slots (bool [B, K]; ``slots``, ``done_logits`` from :func:`slot_done_logits`) each take
    their best word, inserted and encoded by ``steps`` (:class:`~insnet_fairseq.decoding.step.InsertionSteps`) with
    the source of ``rows``; a word's score is log p(word) + log q(not done). ``shut``: :attr:`Shut.cols` (a fused
    pass computes the next step's queries at the live slots only), ``new_shut``: the new columns whose right slot is
    done (:func:`closing_columns`); ``picks``: the :class:`~insnet_fairseq.decoding.state.Picks` of ``chosen`` (made
    here when not given); ``encode`` False: the words are placed without a pass (a last step). Returns the next
    state."""
    picks = picks or steps.picks_of(chosen)
    logits = steps.token_logits(decoder, state, slots, chosen, rows.source_kv, rows.source_pad, picks)  # [N, V]
    tokens, lprobs = steps.choose_tokens(logits)
    scores = lprobs + torch.nn.functional.logsigmoid(-picks.take(done_logits))
    return steps.insert(decoder, state, chosen, tokens, scores, rows.source_kv, rows.source_pad, picks, encode=encode,
                        shut=shut, new_shut=new_shut)


def warn_capped(sample, state: DecoderState, capped: Tensor, rows, owner: List[int]) -> None:
    """One warning per sentence of ``capped`` (bool [B]) stopped by its step or length cap with slots still open."""
    for row in capped.nonzero().view(-1).tolist():
        b = owner[int(rows.ids[row])]
        sid = int(sample["id"][b]) if sample.get("id") is not None else b
        logger.warning(f"sample id {sid}: stopped at its cap ({int(state.steps[row])} steps, "
                       f"{int(state.lengths[row]) - 2} words; --max-insertion-steps) with slots still open: its "
                       "output may miss words")
