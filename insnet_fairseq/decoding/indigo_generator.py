"""InDIGO decoding (paper Algorithm 1, greedy): each step predicts the next word from the last
inserted token's state, stops when it is ``<eod>``, else points at the slot (the more likely of
each slot's two keys summed, eq. 11) and inserts the word there.

Everything else is :class:`~insnet_fairseq.decoding.generator.InsertionGenerator`'s: the immutable
per-step state, the cached context encoding of the new token, caps, constrained starts, batching
and output. Only the step and the stop rule differ (:class:`IndigoSteps`, the steps it decodes with).
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.state import DecoderState, Picks
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.errors import FlagError


class IndigoSteps(InsertionSteps):
    """InDIGO's step and stop rule; the rest of :class:`~insnet_fairseq.decoding.step.InsertionSteps`."""

    @staticmethod
    def word_lprobs(decoder, state: DecoderState) -> Tensor:
        """log p(next word | h_last) [B, V + 1] (index V: <eod>)."""
        return F.log_softmax(decoder.heads.word_logits(state.last_hidden).float(), -1)

    def termination_logit(self, decoder, state: DecoderState) -> Tensor:
        """Stop when <eod> is the most likely next word: [B] > 0 exactly then (greedy decoding). The
        distribution is kept for :meth:`step`, which follows on the same state (rows that go on)."""
        lp = self.word_lprobs(decoder, state)
        self._last_lprobs = (state, lp)
        words = lp[:, :-1].clone()
        words[:, self.banned_on(lp.device)] = float("-inf")
        return lp[:, -1] - words.max(-1).values

    def step(self, decoder, state: DecoderState, source_kv, source_pad, max_len, one_word=None,
             word_rank=None, forced=None, encode=True) -> DecoderState:
        """The most likely word (not <eod>: the sentence did not stop), then its most likely slot (one word per
        step always: ``one_word`` changes nothing; ``forced`` is always None: --stop-check-prob is refused, so
        ``encode`` is always True)."""
        heads = decoder.heads
        seen, lp = getattr(self, "_last_lprobs", (None, None))
        if seen is state:  # no row stopped: the stop test's distribution of this very state
            self._last_lprobs = (None, None)
        else:  # rows stopped (the state was re-selected) or called directly
            lp = self.word_lprobs(decoder, state)  # [B, V + 1]
        tokens, _ = self.choose_tokens(lp[:, :-1])  # [B] (special symbols banned)
        tok_lprobs = lp.gather(1, tokens.unsqueeze(1)).squeeze(1)
        h = state.hidden
        B, S, _ = h.shape
        left_key, right_key = heads.pointer_logits(state.last_hidden.unsqueeze(1), tokens.unsqueeze(1), h)  # [B, 1, S]
        by_pos = state.sequence_order()  # [B, S]
        left, right = by_pos[:, :-1].unsqueeze(1), by_pos[:, 1:].unsqueeze(1)  # [B, 1, K]
        slot_logits = heads.slot_logits(left_key, right_key, left, right).squeeze(1).float()  # [B, K]
        slot_ok = torch.arange(S - 1, device=h.device).unsqueeze(0) < (state.lengths - 1).unsqueeze(1)
        pos_lprobs = F.log_softmax(slot_logits.masked_fill(~slot_ok, float("-inf")), -1)
        picks = Picks.one_per_row(pos_lprobs.argmax(-1), S - 1)  # one slot a row (not F.one_hot: its range check reads)
        return self.insert(decoder, state, picks.mask, tokens, tok_lprobs + picks.take(pos_lprobs), source_kv,
                           source_pad, picks)


class IndigoGenerator(InsertionGenerator):
    """:class:`~insnet_fairseq.decoding.generator.InsertionGenerator` with :class:`IndigoSteps`, refusing the options
    of InsNet's decoding."""

    steps_class = IndigoSteps

    def __init__(self, tgt_dict, options: DecodingOptions = DecodingOptions()):
        o = options
        if o.mode != "sequential":
            raise FlagError("InDIGO inserts one word per step: decode --arch indigo_* with --insertion-mode sequential")
        if o.sampling:
            raise FlagError("InDIGO decoding is greedy here: --sampling is not supported for --arch indigo_*")
        for name, on in (("--skip-repeats", o.skip_repeats), ("--min-token-prob", o.min_token_prob > 0),
                         ("--stop-threshold", o.stop_threshold != 0.5), ("--stop-check-prob", o.stop_check_prob > 0)):
            if on:
                raise FlagError(f"{name} applies to InsNet's parallel decoding, not to --arch indigo_*")
        if o.candidates != 1:
            raise FlagError("--insertion-candidates applies to InsNet decoding, not to --arch indigo_*")
        if o.beam != 1:
            raise FlagError("--insertion-beam applies to InsNet decoding (its factorisation), not to --arch indigo_*")
        super().__init__(tgt_dict, options)
