"""One insertion step of iterative insertion decoding (paper 3.2-3.3, 4.1), on an immutable :class:`DecoderState`.

:class:`InsertionSteps` holds what a step does, for the loops of
:class:`~insnet_fairseq.decoding.generator.InsertionGenerator` (:func:`~insnet_fairseq.decoding.greedy.decode_greedy`,
:class:`~insnet_fairseq.decoding.beam.BeamSearch`, :func:`~insnet_fairseq.decoding.gaps.decode_gaps`) to drive: encode the
start (:meth:`~InsertionSteps.initial_state`), score every slot from the tokens' cached parts
(:meth:`~InsertionSteps.slot_distribution`), choose slots and words (:meth:`~InsertionSteps.choose_slots`,
:meth:`~InsertionSteps.token_logits`, :meth:`~InsertionSteps.choose_tokens`, then the word rules the options switch
on, :mod:`insnet_fairseq.decoding.word_rules`), and insert them (:meth:`~InsertionSteps.insert`: the new tokens'
positions and offsets, one decoder pass over them with the cache written in place, or a full re-encoding without the
cache). A step returns a new state. What it reads is given to its constructor: the target dictionary, the
:class:`~insnet_fairseq.decoding.core_options.CoreOptions`, and the decoder passes it runs (:class:`Passes`: eager, or
the extras' compiled ones, :class:`~insnet_fairseq.decoding.compiled.CompiledPasses`).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from insnet_fairseq.decoding.cache import ColumnStore, layer_names
from insnet_fairseq.decoding.core_options import CoreOptions
from insnet_fairseq.decoding.sampling import sample
from insnet_fairseq.decoding.state import HOLE, DecoderState, Phrases, Picks, compact, group_offsets
from insnet_fairseq.decoding.stopping import Forced
from insnet_fairseq.decoding.word_rules import StepWords, word_rules
from insnet_fairseq.geometry.offsets import offsets_from_rank, rank_matrix

ENCODE_CHUNK = 1 << 22  # rows x S x S elements per full encoding pass (see InsertionSteps._encode_all)


def top_p_slots(pos_lprobs: Tensor, p: float, room: Optional[Tensor] = None) -> Tensor:
    """The slots in the top ``p`` of each sentence's position mass: pos_lprobs [B, K] (-inf: closed) -> bool [B, K],
    the most probable slots whose mass before them is below ``p``, at least the best one, at most ``room`` [B] per
    sentence (None: no limit). Example: probabilities [0.5, 0.3, 0.15, 0.05], p 0.9 -> [T, T, T, F]; room 2 ->
    [T, T, F, F]."""
    probs, idx = pos_lprobs.exp().sort(dim=-1, descending=True)  # [B, K]
    mass_before = probs.cumsum(-1) - probs
    rank = torch.arange(probs.size(1), device=probs.device).unsqueeze(0)
    take = ((mass_before < p) | (rank == 0)) & (probs > 0)
    if room is not None:
        take = take & (rank < room.unsqueeze(1))
    return torch.zeros_like(take).scatter(1, idx, take)


def auto_fuses(rows: int, on_gpu: bool, every_slot: bool = False) -> bool:
    """The default of ``fuse_slot_queries`` (neither flag): fuse a step of ``rows`` rows on a GPU always, on a CPU
    only at one row, or always where the next step reads ``every_slot``'s query anyway (an end-of-slot model scores
    every live slot). Fusing computes every slot's query in the step's pass, where two passes compute the chosen
    slots' only: fewer launches, more arithmetic (none where every slot's query is read). A CPU step is bound by its
    arithmetic once a batch is large, a GPU step by its launches (both measured: results/README.md).

    Example: auto_fuses(1, False), auto_fuses(64, True) and auto_fuses(64, False, every_slot=True) are True;
    auto_fuses(64, False) is False.
    """
    return on_gpu or rows == 1 or every_slot


class Passes:
    """The context encoder's passes that a cached step runs: the module's own (eager), and whether a step also computes
    the next step's slot queries in its pass (``fuse``: on, off, or auto: :func:`auto_fuses`)."""

    # True: a pass writes none of its inputs (CUDA graphs), and returns every cached column: the step writes the new ones
    functional = False

    def __init__(self, fuse: str = "auto"):
        self.fuse = fuse

    def get(self, decoder, name: str):
        """The pass ``name`` (``forward``: new tokens; ``forward_with_queries``: new tokens and the next step's slot
        queries) of ``decoder``'s context encoder."""
        return getattr(decoder.context, name)

    def fuses(self, rows: int, on_gpu: bool, every_slot: bool = False) -> bool:
        """Whether a step of ``rows`` rows computes the next step's slot queries in its own pass (``every_slot``: the
        next step reads every live slot's query, :func:`auto_fuses`)."""
        return self.fuse == "on" or (self.fuse == "auto" and auto_fuses(rows, on_gpu, every_slot))


class InsertionSteps:
    """The step of :class:`~insnet_fairseq.decoding.generator.InsertionGenerator` (its ``steps``), for the words of
    ``tgt_dict`` (``<s>``, ``</s>`` and padding are never inserted) as ``options`` say, running the decoder's
    ``passes`` (default: eager, fused as :func:`auto_fuses` says)."""

    def __init__(self, tgt_dict, options: CoreOptions, passes: Optional[Passes] = None):
        self.tgt_dict, self.options = tgt_dict, options
        self.passes = passes or Passes()
        self.bos, self.eos, self.pad = tgt_dict.bos(), tgt_dict.eos(), tgt_dict.pad()
        self.banned = torch.tensor(sorted({self.bos, self.eos, self.pad}))
        self._banned_on = {}  # device -> self.banned there
        # words that join the word after them (subword-nmt's "x@@"): never inserted right before a constraint phrase
        self.joins_next = torch.tensor([str(s).endswith("@@") for s in tgt_dict.symbols], dtype=torch.bool)
        self.word_rules = word_rules(options, self.choose_tokens)  # --skip-repeats, --min-token-prob

    def banned_on(self, device) -> Tensor:
        """:attr:`banned` on ``device``, copied there once (a copy to a GPU at every step waits for the device)."""
        key = str(device)
        if key not in self._banned_on:
            self._banned_on[key] = self.banned.to(device)
        return self._banned_on[key]

    def initial_state(self, decoder, B, device, source_kv, source_pad, initial_tokens=None, initial_order=None,
                      blanks=None, capacity: int = 16, phrases: bool = False):
        """Encode ``<s> </s>`` (+ given tokens, in their insertion order) as a trajectory; with ``blanks``
        (see :meth:`generate`) only the blanks' slots are open. ``phrases``: the given tokens are constraint phrases
        kept whole words (:class:`~insnet_fairseq.decoding.state.Phrases`; their blanks lie between phrases). With the
        cache, its buffers have room for ``capacity`` more tokens (they grow when full)."""
        if initial_tokens is None and blanks is None:  # every row "<s> </s>": no loop over the sentences
            tokens = torch.tensor([self.bos, self.eos], device=device).repeat(B, 1)  # [B, 2]
            positions = torch.tensor([0, 1], device=device).repeat(B, 1)  # [B, 2]
            return self._initial_state(decoder, tokens, positions, None, source_kv, source_pad, capacity, phrases)
        rows_tok, rows_pos, rows_open = [], [], []
        for b in range(B):
            given = list(initial_tokens[b]) if initial_tokens is not None else []
            order = list(initial_order[b]) if initial_order is not None and given else list(range(len(given)))
            if sorted(order) != list(range(len(given))):
                raise ValueError(f"initial_order[{b}] must be a permutation of 0..{len(given) - 1}")
            rows_tok.append([self.bos, self.eos] + [given[i] for i in order])
            rows_pos.append([0, len(given) + 1] + [i + 1 for i in order])
            if blanks is not None:  # token at position p (p template tokens before its right slot) opens it
                blank_at = set(blanks[b])
                rows_open.append([p in blank_at for p in rows_pos[-1]])
        S = max(len(r) for r in rows_tok)
        tokens = torch.full((B, S), self.pad, dtype=torch.long)
        positions = torch.full((B, S), HOLE, dtype=torch.long)
        for b in range(B):
            tokens[b, : len(rows_tok[b])] = torch.tensor(rows_tok[b])
            positions[b, : len(rows_pos[b])] = torch.tensor(rows_pos[b])
        open_right = None
        if blanks is not None:
            open_right = torch.zeros(B, S, dtype=torch.bool)
            for b, row in enumerate(rows_open):
                open_right[b, : len(row)] = torch.tensor(row, dtype=torch.bool)
            open_right = open_right.to(device)
        return self._initial_state(decoder, tokens.to(device), positions.to(device), open_right, source_kv, source_pad,
                                   capacity, phrases)

    def _initial_state(self, decoder, tokens, positions, open_right, source_kv, source_pad, capacity: int,
                       phrases: bool) -> DecoderState:
        """:meth:`initial_state` from the start's ``tokens`` and ``positions`` [B, S] (padding: HOLE) and its open
        slots ``open_right`` (bool [B, S] or None: all), on the device."""
        B, S = tokens.shape
        device = tokens.device
        real = tokens.ne(self.pad)
        # fused (one row): the first step's slot queries come from the same pass
        fused = self.fused(decoder, B) and B * S * S <= ENCODE_CHUNK
        hidden, cache, *z = self._encode_all(decoder, tokens, positions, real, source_kv, source_pad, queries=fused)
        whole = Phrases(S, self.joins_next.to(device)) if phrases else None
        state = DecoderState(
            tokens=tokens, positions=positions, real=real, hidden=hidden, cache=cache,
            last=real.sum(1) - 1, scores=torch.zeros(B, S, device=device),
            steps=torch.zeros(B, dtype=torch.long, device=device), open_right=open_right,
            parts=self.slot_parts(decoder, hidden), phrases=whole,
        )
        if not self.options.use_cache:
            return state
        # room for as many insertions as the longest output may take (sequential decoding: exactly enough)
        store = ColumnStore(state.columns(), S + capacity)
        return DecoderState.from_store(store, S, positions, state.last, state.steps, z[0] if z else None, whole)

    def fused(self, decoder, rows: int) -> bool:
        """Whether a step of ``rows`` decoded rows computes the next step's slot queries in its own pass (see
        :meth:`Passes.fuses`, on the device of the decoder's weights). A decoding whose rows fall to one switches at
        that step: the next step reads the queries its pass made, where a step without them runs the query stream
        itself. An end-of-slot model (``--slot-objective gap``) reads every live slot's query at every step."""
        if not (self.options.use_cache and decoder.context.slot_query is not None):
            return False
        every_slot = getattr(decoder.heads, "objective", None) == "gap"
        return self.passes.fuses(rows, decoder.context.embed_tokens.weight.is_cuda, every_slot)

    @staticmethod
    def all_slots(positions: Tensor) -> Tensor:
        """[B, S - 1]: slot k of every sentence (k = 0 .. S - 2), those beyond its length included."""
        B, S = positions.shape
        return torch.arange(S - 1, device=positions.device).unsqueeze(0).expand(B, S - 1)

    @staticmethod
    def live_slots(lengths: Tensor, order: Tensor, shut: Optional[Tensor]) -> Tensor:
        """The slots a step still scores: bool [B, K], slot k (between the tokens of ranks k and k + 1) where it exists
        (k < ``lengths`` [B] - 1) and its left token's column is not ``shut`` (bool [B, S]: the slot right of that
        token said done; None: none is); ``order`` [B, S]: the columns left to right (``positions.argsort(1)``).

        Example: "<s> a </s>" (positions [0, 2, 1], then a hole column: order [0, 2, 1, 3], length 3) with ``shut``
        [F, F, T, F] (the slot right of "a" is done) -> [T, F, F]: slot 0 is live, slot 1 is shut, slot 2 does not
        exist.
        """
        K = order.size(1) - 1
        live = torch.arange(K, device=order.device).unsqueeze(0) < (lengths - 1).unsqueeze(1)
        return live if shut is None else live & ~shut.gather(1, order[:, :-1])

    @staticmethod
    def at_slots(z: Tensor, live: Tensor, z_real: Tensor) -> Tensor:
        """The queries of the ``live`` slots (bool [B, K]), packed left to right as :func:`compact` packs them (z [B, G,
        D], ``z_real`` bool [B, G]), on the grid of every slot: [B, K, D], zeros at the other slots (whose heads'
        outputs no step reads)."""
        out = z.new_zeros(*live.shape, z.size(2))
        if live.size(0) == 1:  # one row: its live slots are the first columns of z (a batch-1 step costs its op calls)
            cols = live[0].nonzero().view(-1)
            return out.index_copy_(1, cols, z[:, : cols.numel()])
        return out.masked_scatter_(live.unsqueeze(2), z[z_real])

    @staticmethod
    def packed_live(live: Tensor) -> Tuple[Tensor, Tensor]:
        """:func:`compact` of ``live`` (bool [B, K]) with at least one column (a row with no live slot reads slot 0,
        whose query no step uses): (slot_of [B, G], real bool [B, G])."""
        if live.size(0) == 1:  # one row: its live slots by one nonzero, no sort
            slot_of = live[0].nonzero().view(1, -1)
            real = torch.ones_like(slot_of, dtype=torch.bool)
        else:
            slot_of, real, _ = compact(live)
        if slot_of.size(1) == 0:
            slot_of, real = live.new_zeros(live.size(0), 1, dtype=torch.long), live.new_zeros(live.size(0), 1)
        return slot_of, real

    @staticmethod
    def query_geometry(positions: Tensor, real: Tensor, slot_of: Tensor) -> Tuple[Tensor, Tensor]:
        """Offsets and mask of slot queries (``--slot-query-stream``): the query of slot ``slot_of[b, g]`` reads
        every token at the offset it will have from the word inserted there.

        positions [B, S] (HOLE at holes), real bool [B, S], slot_of [B, G] -> (offsets [B, G, S], blocked bool
        [B, G, S]). Example: "<s> a </s>" (positions [0, 2, 1]), slot 0 (between <s> and a): the word goes to
        position 1, so offsets [-1, 2, 1] (a and </s> move one to the right).
        """
        S = positions.size(1)
        p = (slot_of + 1).unsqueeze(2)  # [B, G, 1] the word's position once inserted
        pos = positions.unsqueeze(1)  # [B, 1, S] (HOLE at holes)
        offsets = (pos - p + (pos >= p).long()).clamp(-(S - 1), S - 1)  # [B, G, S], holes bounded
        blocked = ~real.unsqueeze(1).expand(-1, slot_of.size(1), -1)  # [B, G, S]
        return offsets, blocked

    @staticmethod
    def slot_parts(decoder, h: Tensor):
        """The tokens' halves of the slot representation (f_l(h), f_r(h)), or None for heads without them."""
        parts = getattr(decoder.heads, "parts", None)
        return None if parts is None else parts(h)

    def _encode_all(self, decoder, tokens, positions, real, source_kv, source_pad, queries: bool = False):
        """Full pass over a partial sequence in insertion order: [B, S] -> states, cache; with ``queries`` (one
        chunk only, see below) also every slot's query in the same pass (:meth:`all_slots`,
        ``forward_with_queries``): -> states, cache, z [B, S - 1, D].

        Attention over S tokens builds several [rows, H, S, 2S] tensors, so long sequences (a long
        constraint, uncached decoding of a long sentence) are encoded a few rows at a time: at most
        ``ENCODE_CHUNK`` elements of rows x S x S per pass (all rows at once below S ~ 250 for 64 rows).
        """
        B, S = tokens.shape
        rows = max(1, ENCODE_CHUNK // (S * S))
        causal = torch.ones(S, S, dtype=torch.bool, device=tokens.device).triu(1)
        if queries:
            assert rows >= B, "slot queries in the encoding pass take one chunk"
            mask = causal | ~real.unsqueeze(1)  # [B, S, S]
            q_geometry = self.query_geometry(positions, real, self.all_slots(positions))  # [B, S - 1, S] each
            return decoder.context.forward_with_queries(tokens, offsets_from_rank(rank_matrix(positions, ~real)), mask,
                                                        source_kv, source_pad, None, *q_geometry)
        parts = []
        for i in range(0, B, rows):
            r = slice(i, i + rows)
            rank = rank_matrix(positions[r], ~real[r])
            mask = causal | ~real[r].unsqueeze(1)  # [rows, S, S]
            kv = [(k[r], v[r]) for k, v in source_kv]
            parts.append(decoder.context(tokens[r], offsets_from_rank(rank), mask, kv,
                                         None if source_pad is None else source_pad[r]))
        if len(parts) == 1:
            return parts[0]
        hidden = torch.cat([h for h, _ in parts])
        cache = [(torch.cat([c[l][0] for _, c in parts]), torch.cat([c[l][1] for _, c in parts]))
                 for l in range(len(parts[0][1]))]
        return hidden, cache

    # -- one insertion step ------------------------------------------------------------------------
    def choose_slots(self, pos_lprobs: Tensor, room: Tensor) -> Tensor:
        """bool [B, K]: the slots to insert into (at least one, at most ``room`` per sentence)."""
        if self.options.mode == "sequential":  # (not F.one_hot: it checks the classes' range with a host sync)
            return torch.zeros_like(pos_lprobs, dtype=torch.bool).scatter_(1, pos_lprobs.argmax(-1, keepdim=True), True)
        return top_p_slots(pos_lprobs, self.options.slot_top_p, room)

    def insertable_lprobs(self, logits: Tensor) -> Tensor:
        """logits [N, V] -> log-probs [N, V] (float) over the words that may be inserted (not <s>, </s>, padding)."""
        logits = logits.float()
        logits[:, self.banned_on(logits.device)] = float("-inf")
        return torch.log_softmax(logits, -1)

    def best_words(self, decoder, state: DecoderState, source_kv, source_pad,
                   top_p: float = 1.0) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Every open slot's most probable word: (pos_lprobs [B, K], open bool [B, K] with N True, words [N],
        their log-probs [N]), row-major like every ``chosen`` mask (for --stop-check-prob and explanations). With
        ``top_p`` < 1 only the open slots in the top ``top_p`` of each sentence's position mass count as open
        (``--stop-check-top-p``), and only their words are computed."""
        slots, pos_lprobs = self.slot_distribution(decoder, state)
        open_slots = torch.isfinite(pos_lprobs)  # closed and beyond-the-end slots are -inf
        if top_p < 1.0:
            open_slots = top_p_slots(pos_lprobs, top_p)
        logits = self.token_logits(decoder, state, slots, open_slots, source_kv, source_pad)  # [N, V]
        word_lprobs, words = self.insertable_lprobs(logits).max(-1)
        return pos_lprobs, open_slots, words, word_lprobs

    def choose_tokens(self, logits: Tensor, rank: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """logits [N, V] -> (tokens [N], log-probs [N]); special symbols are never inserted. With ``rank``
        ([N], greedy decoding), row n takes its ``rank[n]``-th most probable token (0: the best). Sampling draws
        from softmax(log p / ``temperature``); the log-probs returned are the model's own."""
        lprobs = self.insertable_lprobs(logits)
        sampling = self.options.sampling
        if rank is not None and not sampling.on:
            tokens = lprobs.topk(int(rank.max()) + 1, dim=-1).indices.gather(1, rank.unsqueeze(1)).squeeze(1)
        elif sampling.on:
            tokens = sample(lprobs, sampling.topk, sampling.topp, temperature=sampling.temperature)
        else:  # (max, not argmax + gather: on a CPU argmax over [N, V] costs about twice max's value-and-index pass)
            best, tokens = lprobs.max(-1)
            return tokens, best
        return tokens, lprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)

    @staticmethod
    def slot_distribution(decoder, state: DecoderState) -> Tuple[Tuple[Tensor, Tensor], Tensor]:
        """Position log-probs of every slot of the partial sequences, and the slots' neighbours.

        Returns ((left, right) [B, K] steps of each slot's neighbours, pos_lprobs [B, K]), K = S - 1
        slots; slot k lies between the tokens of ranks k and k + 1 (left to right); slots beyond a
        sentence's length, and closed slots (infilling: outside the blanks), get -inf. The slots are
        scored from the tokens' cached parts (:meth:`~insnet_fairseq.modules.slots.SlotHeads.step_position_logits`).
        """
        heads = decoder.heads
        h = state.hidden
        K = h.size(1) - 1
        by_pos = state.sequence_order()  # [B, S]
        left, right = by_pos[:, :-1], by_pos[:, 1:]  # [B, K] slot k between ranks k and k + 1
        slot_ok = torch.arange(K, device=h.device).unsqueeze(0) < (state.lengths - 1).unsqueeze(1)
        if state.open_right is not None:
            slot_ok = slot_ok & state.open_right.gather(1, left)  # [B, K] the left token's slot is open
        a, b = state.parts
        logits = heads.step_position_logits(a, b, state.last_hidden, left, right)  # [B, K]
        pos_lprobs = torch.log_softmax(logits.masked_fill(~slot_ok, float("-inf")), -1)
        return (left, right), pos_lprobs

    @staticmethod
    def chosen_slot_repr(decoder, state: DecoderState, slots: Tuple[Tensor, Tensor], chosen: Tensor,
                         picks: Optional[Picks] = None) -> Tensor:
        """Slot representations [N, D] of the ``chosen`` slots (bool [B, K], N True, row-major; ``picks``: the same,
        :class:`Picks`, made here when not given)."""
        picks = picks or Picks.of(chosen)
        left, right = slots
        a, b = state.parts
        return decoder.heads.slot_repr_from_parts(a[picks.rows, picks.take(left)], b[picks.rows, picks.take(right)],
                                                  state.last_hidden[picks.rows])

    @staticmethod
    def termination_logit(decoder, state: DecoderState) -> Tensor:
        """Logit [B] of q(stop | h_last): the global vector says the partial sequence is complete."""
        return decoder.heads.termination_logit(state.last_hidden).float()

    def step(self, decoder, state: DecoderState, source_kv, source_pad, max_len,
             one_word: Optional[Tensor] = None, word_rank: Optional[Tensor] = None,
             forced: Optional[Forced] = None, encode: bool = True) -> DecoderState:
        """One insertion step; ``max_len`` (int or [B]) caps the length with <s> and </s>; the rows of
        ``one_word`` (bool [B]) insert a single word, at their best slot; row b's words are its
        ``word_rank[b]``-th most probable ones (LongTensor [B]; None: the best). ``forced``: the stop check's words
        (:class:`~insnet_fairseq.decoding.stopping.StopCheck`); a row with a forced slot inserts exactly those words
        there (as many as ``max_len`` leaves room for), which are not scored again. ``encode`` False: the words are
        placed but not encoded (see :meth:`insert`), for a step after which every row stops."""
        slots, pos_lprobs = self.slot_distribution(decoder, state)
        room = (torch.as_tensor(max_len, device=pos_lprobs.device) - state.lengths).clamp_min(1)
        if one_word is not None:
            room = room.masked_fill(one_word, 1)
        chosen = self.choose_slots(pos_lprobs, room)  # [B, K]
        f_rows = None
        if forced is not None:
            f_slots = forced.slots & (forced.slots.long().cumsum(1) <= room.unsqueeze(1))  # [B, K]
            f_rows = f_slots.any(1, keepdim=True)  # [B, 1]
            chosen = chosen & ~f_rows  # those rows' words are known: the others are chosen and scored as usual
        picks = self.picks_of(chosen, forced)  # the chosen slots by index: N read once (sequential: never)
        if picks.n > 0:
            logits = self.token_logits(decoder, state, slots, chosen, source_kv, source_pad, picks)  # [N, V]
            rank = None if word_rank is None else word_rank[picks.rows]  # [N]
            words = StepWords(chosen, picks, *self.choose_tokens(logits, rank))  # [N] words
            for rule in self.word_rules:  # --skip-repeats, --min-token-prob
                words = rule(state, words, logits, pos_lprobs)
            chosen, picks, tokens, tok_lprobs = words.chosen, words.picks, words.tokens, words.lprobs
        if f_rows is not None and bool(f_rows.any()):  # merge the forced rows' words, row-major like the others
            all_words, lprobs = forced.words.clone(), forced.lprobs.clone()  # [B, K] (rows disjoint from the chosen)
            if bool(chosen.any()):
                all_words.masked_scatter_(chosen, tokens)
                lprobs.masked_scatter_(chosen, tok_lprobs)
            chosen = chosen | f_slots
            picks = Picks.of(chosen)
            tokens, tok_lprobs = picks.take(all_words), picks.take(lprobs)
        return self.insert(decoder, state, chosen, tokens, tok_lprobs + picks.take(pos_lprobs), source_kv, source_pad,
                           picks, encode)

    def picks_of(self, chosen: Tensor, forced: Optional[Forced] = None) -> Picks:
        """The step's chosen slots (bool [B, K]) as :class:`Picks`, by which it selects where boolean indexing
        (``x[chosen]``) would make the host wait for a GPU at every use: sequential decoding (one slot a row)
        without any read of the device, otherwise with one read of the count. Example: chosen [[F, T, F], [T, F, F]]
        -> rows [0, 1], cols [1, 0]."""
        if self.options.mode == "sequential" and forced is None and not self.word_rules:
            return Picks.one_per_row(chosen.byte().argmax(1), chosen.size(1))
        return Picks.of(chosen)

    @classmethod
    def token_logits(cls, decoder, state: DecoderState, slots, chosen: Tensor, source_kv, source_pad,
                     picks: Optional[Picks] = None) -> Tensor:
        """Token logits [N, V] at the ``chosen`` slots (bool [B, K], N True, row-major; ``picks``: the same, as
        :class:`Picks`, made here when not given); ``slots``: the neighbours from :meth:`slot_distribution`.

        With ``--slot-query-stream`` each chosen slot's query reads the whole partial sequence
        from the cache, at the offsets its word will have once inserted there. With constraint phrases
        (``state.phrases``) a slot right before a phrase gets no word that would join the phrase's first word.
        """
        picks = picks or Picks.of(chosen)
        e = cls.chosen_slot_repr(decoder, state, slots, chosen, picks)  # [N, D]
        if decoder.context.slot_query is None:
            logits = decoder.heads.token_logits(e)
        elif state.slot_queries is not None:  # computed by the pass that made this state
            logits = decoder.heads.token_logits(e, picks.take(state.slot_queries))
        else:
            slot_of, _, _ = compact(chosen, picks)  # [B, G]
            offsets, blocked = cls.query_geometry(state.positions, state.real, slot_of)  # [B, G, S]
            z = decoder.context.query_stream(offsets, blocked, state.cache, source_kv, source_pad)  # [B, G, D]
            within = picks.take(chosen.long().cumsum(1) - 1)  # [N] each chosen slot's rank in its row: its column of z
            logits = decoder.heads.token_logits(e, z[picks.rows, within])
        if state.phrases is not None:
            logits = state.phrases.mask_logits(logits, picks.take(slots[1]))
        return logits

    def insert(self, decoder, state: DecoderState, chosen: Tensor, tokens: Tensor, scores: Tensor,
               source_kv, source_pad, picks: Optional[Picks] = None, encode: bool = True,
               shut: Optional[Tensor] = None, new_shut: Optional[Tensor] = None) -> DecoderState:
        """Insert ``tokens`` [N] (scores [N]) into the ``chosen`` slots (bool [B, K], N True, row-major)
        and encode them, left to right within a sentence; ``picks``: the same slots as :class:`Picks` (made here when
        not given), which spare the reads of the device that boolean indexing makes. ``shut`` (bool [B, S] or None):
        the slots right of these tokens are done for good (end-of-slot decoding), so a fused pass computes no query
        for them (:meth:`live_slots`); ``new_shut`` (bool [B, G] or None): the same for the new tokens' columns (else
        their slots are live)."""
        h = state.hidden
        B, S, D = h.shape
        picks = picks or Picks.of(chosen)
        slot_of, g_real, n_new = compact(chosen, picks)  # new tokens, left to right, [B, G]
        G = slot_of.size(1)
        if picks.n == B and picks.widest == 1:  # one new token a row: already in order
            g_tok, g_score = tokens.unsqueeze(1), scores.unsqueeze(1)  # [B, 1]
        else:
            new_tok, new_score = picks.place(tokens, self.pad), picks.place(scores.float(), 0.0)  # [B, K]
            g_tok = new_tok.gather(1, slot_of).masked_fill(~g_real, self.pad)
            g_score = new_score.gather(1, slot_of).masked_fill(~g_real, 0.0)

        # positions: an insertion at slot k shifts every token of rank > k by one
        csum = chosen.long().cumsum(1)  # [B, K]
        shift = torch.cat([csum.new_zeros(B, 1), csum], 1)  # [B, S] shift of rank r
        old_pos = state.positions
        moved = old_pos + shift.gather(1, old_pos.clamp(max=S - 1))
        old_pos = torch.where(state.real, moved, old_pos)
        g_pos = (slot_of + csum.gather(1, slot_of)).masked_fill(~g_real, HOLE)  # slot k -> k + #chosen <= k

        pos_all = torch.cat([old_pos, g_pos], 1)
        last, steps = S + n_new - 1, state.steps + 1
        if not encode:  # the words of a last step, which no later step reads: no pass, no states (hidden None)
            return DecoderState(tokens=torch.cat([state.tokens, g_tok], 1), positions=pos_all,
                                real=torch.cat([state.real, g_real], 1), hidden=None, cache=[], last=last,
                                scores=torch.cat([state.scores, g_score], 1), steps=steps)
        if self.options.use_cache:  # encode the new tokens only, appending their columns to the cache in place
            store = state.store.reserve(S, G)
            known = dict(tokens=g_tok, real=g_real, scores=g_score)
            if state.open_right is not None:
                known["open_right"] = g_real
            store.write(S, known)  # before the pass, which needs the grown real mask
            real_all = store.buffers["real"][:, : S + G]  # [B, S + G]
            offsets = group_offsets(pos_all, g_pos, g_real)  # [B, G, S + G]
            mask = ~real_all.unsqueeze(1)  # [B, 1, S + G] holes are blocked
            fused = self.fused(decoder, B)
            if B == 1 and G == 1 and not fused:  # one sentence has no holes, one new token sees every token: no mask
                mask = None
            elif G > 1:  # and a new token does not see the new tokens right of it: [B, G, S + G]
                m = torch.arange(G, device=h.device)
                later_new = m.view(1, G) > m.view(G, 1)  # new key m' > query m
                mask = mask | torch.cat([torch.zeros(G, S, dtype=torch.bool, device=h.device), later_new], 1)
            names = layer_names(len(state.cache))
            # the pass writes each layer's new keys/values into the cache in place; a functional pass (CUDA graphs:
            # Passes.functional) must write none of its inputs: it reads the cached columns and returns all S + G,
            # whose new G columns are written here, after it
            functional = self.passes.functional
            past = ([(store.buffers[kn][:, :, :S], store.buffers[vn][:, :, :S]) for kn, vn in names] if functional
                    else [store.writer(kn, vn, S) for kn, vn in names])
            z = None
            if functional:  # each step is a new replay of the CUDA graph: the last one's outputs are no longer read
                torch.compiler.cudagraph_mark_step_begin()
            if fused:  # the new tokens and every slot's query for the next step, in one pass
                slot_of, live = self.all_slots(pos_all), None  # [B, S + G - 1]
                if shut is not None:  # only the live slots' queries: a new token's slot is live
                    live = self.live_slots(real_all.sum(1), pos_all.argsort(1),
                                           torch.cat([shut, g_real.new_zeros(B, G) if new_shut is None else new_shut],
                                                     1))
                    slot_of, z_real = self.packed_live(live)
                q_geometry = self.query_geometry(pos_all, real_all, slot_of)  # [B, Q, S + G] each
                h_new, kv, z = self.passes.get(decoder, "forward_with_queries")(
                    g_tok, offsets, mask, source_kv, source_pad, past, *q_geometry)
                if live is not None:
                    z = self.at_slots(z, live, z_real)
            else:
                h_new, kv = self.passes.get(decoder, "forward")(g_tok, offsets, mask, source_kv, source_pad, past=past)
            if functional:  # kv: per layer (k, v) [B, H, S + G, Dh]; z outlives the next replay (the next step reads it)
                store.write(S, {name: t[:, :, S:] for (kn, vn), (k, v) in zip(names, kv) for name, t in ((kn, k), (vn, v))})
                z = None if z is None else z.clone()
            new = dict(hidden=h_new)
            if state.parts is not None:
                new["part_l"], new["part_r"] = self.slot_parts(decoder, h_new)
            store = store.append(S, new)
            return DecoderState.from_store(store, S + G, pos_all, last, steps, z, state.phrases)
        tokens_all = torch.cat([state.tokens, g_tok], 1)
        real_all = torch.cat([state.real, g_real], 1)
        hidden, cache = self._encode_all(decoder, tokens_all, pos_all, real_all, source_kv, source_pad)
        parts = self.slot_parts(decoder, hidden)
        return DecoderState(
            tokens=tokens_all, positions=pos_all, real=real_all, hidden=hidden, cache=cache,
            last=last, scores=torch.cat([state.scores, g_score], 1), steps=steps,
            open_right=None if state.open_right is None else torch.cat([state.open_right, g_real], 1),
            parts=parts, phrases=state.phrases,
        )
