"""The decoder state of iterative insertion decoding, and the geometry of one step's insertions.

:class:`DecoderState` is immutable: a step makes a new one (whose per-token tensors are views of a
:class:`~insnet_fairseq.decoding.cache.ColumnStore`'s buffers in cached decoding). :func:`group_offsets`
gives the offset rows of the tokens one parallel step inserts, encoded left to right (the rule training
follows, :func:`insnet_fairseq.geometry.layers.encoding_order`); :func:`compact` packs each sentence's
chosen slots left to right, holes where a sentence inserts fewer tokens than the widest.
"""
import dataclasses
import functools
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from insnet_fairseq.decoding.cache import ColumnStore, column_dim, layer_names

HOLE = 1 << 30  # position of a hole: right of everything


@dataclasses.dataclass(frozen=True)
class Phrases:
    """Constraint phrases kept whole words: columns 2 .. ``end`` - 1 of every state hold the phrases' tokens (the
    constrained start; a phrase's inner slots are closed, see ``DecoderState.open_right``), and a word that joins the
    word after it (``joins_next``, bool [V]: subword-nmt's ``x@@``) is never inserted right before a phrase, where it
    would glue itself to the phrase's first word."""

    end: int
    joins_next: Tensor  # [V] bool

    def mask_logits(self, logits: Tensor, right: Tensor) -> Tensor:
        """logits [N, V] of N slots whose right neighbours are the columns ``right`` [N] -> the same, with the joining
        words at -inf in the slots right before a phrase. Example: end 4, right [1, 2], joins_next [F, T]: row 1 (left
        of column 2, a phrase's first token) loses word 1; row 0 (left of ``</s>``) keeps every word."""
        before = (right >= 2) & (right < self.end)  # [N]
        return logits.masked_fill(before.unsqueeze(1) & self.joins_next.unsqueeze(0), float("-inf"))


@dataclasses.dataclass(frozen=True)
class DecoderState:
    """Immutable per-step state of a batch of partial sequences (B sentences, S tokens)."""

    tokens: Tensor  # [B, S] tokens in insertion order (pad at holes)
    positions: Tensor  # [B, S] index of each token in the current partial sequence (HOLE at holes)
    real: Tensor  # [B, S] bool, False at holes
    hidden: Tensor  # [B, S, D] last-layer states
    cache: List[Tuple[Tensor, Tensor]]  # per layer self-attention (k, v), each [B, H, S, Dh]
    last: Tensor  # [B] index of the most recently inserted token (the global vector)
    scores: Tensor  # [B, S] log-prob of each insertion (0 for initial tokens)
    steps: Tensor  # [B] insertion steps taken
    open_right: Optional[Tensor] = None  # [B, S] bool: the slot right of the token takes words (None: all do)
    parts: Optional[Tuple[Tensor, Tensor]] = None  # (f_l(h) [B, S, Dl], f_r(h) [B, S, Dr]); None: heads without them
    store: Optional[ColumnStore] = None  # the buffers the per-token tensors above are views of (cached decoding)
    slot_queries: Optional[Tensor] = None  # [B, S - 1, D] every slot's query (fused --slot-query-stream decoding)
    phrases: Optional[Phrases] = None  # constraint phrases kept whole (None: no constraint)

    def columns(self) -> Dict[str, Tensor]:
        """The per-token tensors that only ever grow by new columns (all but ``positions``), by name."""
        out = dict(tokens=self.tokens, real=self.real, scores=self.scores, hidden=self.hidden)
        if self.open_right is not None:
            out["open_right"] = self.open_right
        if self.parts is not None:
            out["part_l"], out["part_r"] = self.parts
        for (k, v), (kn, vn) in zip(self.cache, layer_names(len(self.cache))):
            out[kn], out[vn] = k, v
        return out

    @staticmethod
    def from_store(store: ColumnStore, size: int, positions: Tensor, last: Tensor, steps: Tensor,
                   slot_queries: Optional[Tensor] = None, phrases: Optional[Phrases] = None) -> "DecoderState":
        """The state whose per-token tensors are the first ``size`` columns of ``store``'s buffers."""
        v = store.views(size)
        n_layers = sum(column_dim(name) == 2 for name in v) // 2
        return DecoderState(
            tokens=v["tokens"], positions=positions, real=v["real"], hidden=v["hidden"],
            cache=[(v[kn], v[vn]) for kn, vn in layer_names(n_layers)], last=last, scores=v["scores"], steps=steps,
            open_right=v.get("open_right"), parts=(v["part_l"], v["part_r"]) if "part_l" in v else None, store=store,
            slot_queries=slot_queries, phrases=phrases,
        )

    def select(self, keep: Tensor) -> "DecoderState":
        """Keep the sentences ``keep`` (LongTensor of batch rows)."""
        if self.store is not None:
            size = self.tokens.size(1)
            return DecoderState.from_store(self.store.select(keep, size), size, self.positions[keep], self.last[keep],
                                           self.steps[keep],
                                           None if self.slot_queries is None else self.slot_queries[keep], self.phrases)
        return DecoderState(
            tokens=self.tokens[keep], positions=self.positions[keep], real=self.real[keep],
            hidden=self.hidden[keep], cache=[(k[keep], v[keep]) for k, v in self.cache],
            last=self.last[keep], scores=self.scores[keep], steps=self.steps[keep],
            open_right=None if self.open_right is None else self.open_right[keep],
            parts=None if self.parts is None else (self.parts[0][keep], self.parts[1][keep]), phrases=self.phrases,
        )

    @functools.cached_property
    def lengths(self) -> Tensor:
        """[B] tokens of each partial sequence (``<s>`` and ``</s>`` included); computed once per state (a
        decoding step asks for it several times, and at batch 1 a step costs about its number of op calls)."""
        return self.real.sum(1)

    @functools.cached_property
    def last_hidden(self) -> Tensor:
        """[B, D] the last-layer state of each sentence's most recent token (the global vector h_t of its
        slots and of q(stop)); computed once per state."""
        return self.hidden[torch.arange(self.hidden.size(0), device=self.hidden.device), self.last]

    @functools.cached_property
    def _order(self) -> Tensor:
        return self.positions.argsort(dim=1)

    def sequence_order(self) -> Tensor:
        """[B, S] insertion indices sorted by position (real tokens first, left to right); computed once per state."""
        return self._order

    def neighbour_tokens(self, chosen) -> Tuple[Tensor, Tensor]:
        """The tokens left and right of each chosen slot: ``chosen`` bool [B, K] with N True, or its :class:`Picks`
        -> ([N], [N]), row-major. Example: "<s> a b </s>", slots 0 and 2 -> ([<s>, b], [a, </s>])."""
        picks = chosen if isinstance(chosen, Picks) else Picks.of(chosen)
        seq = self.tokens.gather(1, self.sequence_order())  # [B, S] tokens left to right
        return picks.take(seq[:, :-1]), picks.take(seq[:, 1:])


def group_offsets(positions: Tensor, group_positions: Tensor, group_real: Tensor) -> Tensor:
    """Offset rows of tokens inserted in one step, encoded left to right.

    Args:
        positions: [B, S] positions of all tokens (old and new) in the new partial sequence.
        group_positions: [B, G] positions of the new tokens, ascending (HOLE at holes).
        group_real: [B, G] bool.

    Returns:
        [B, G, S] offset of key j seen from new token m, counted among the old tokens and the
        new tokens 0..m (new tokens right of m in the group are not there yet):
        ``rank = pos[j] - #{m' > m : pos[m'] < pos[j]}``, ``offset = rank - pos[m]``.

    Example: "<s> a </s>" (inserted <s>, </s>, a) gets x and y in one step -> "<s> x a y </s>",
    positions (insertion order <s>, </s>, a, x, y) = [0, 4, 2, 1, 3]. The row of x (y not there
    yet: "<s> x a </s>") is [-1, 2, 1, 0, *]; the row of y is [-3, 1, -1, -2, 0].
    """
    S = positions.size(1)
    if group_positions.size(1) == 1:  # one new token a sentence (every sequential step): no later new token
        return (positions.unsqueeze(1) - group_positions.unsqueeze(2)).clamp(-(S - 1), S - 1)
    less = (group_positions.unsqueeze(2) < positions.unsqueeze(1)) & group_real.unsqueeze(2)  # [B, G, S]
    later = less.flip(1).cumsum(1).flip(1) - less.long()  # sum over m' > m
    rank = positions.unsqueeze(1) - later
    return (rank - group_positions.unsqueeze(2)).clamp(-(S - 1), S - 1)


def compact(chosen: Tensor, picks: Optional["Picks"] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """The chosen slots of each sentence, left to right, packed to the widest sentence's count.

    chosen bool [B, K] -> (slot_of [B, G], real bool [B, G], count [B]), G = max count; rows
    with fewer slots are filled with holes (``real`` False). Example: [[F, T, F, T], [T, F, F, F]]
    -> slot_of [[1, 3], [0, *]], real [[T, T], [T, F]], count [2, 1].
    ``picks`` (:class:`Picks` of ``chosen``): G known without reading the count back from the device.
    """
    B, K = chosen.shape
    count = chosen.sum(1)  # [B]
    G = int(count.max()) if picks is None else picks.widest
    if G == 1:  # at most one slot a sentence (every sequential step): its index, no sort
        return chosen.byte().argmax(1, keepdim=True), (count > 0).unsqueeze(1), count
    k_idx = torch.arange(K, device=chosen.device).unsqueeze(0).expand(B, K)
    slot_of = torch.where(chosen, k_idx, k_idx + K).sort(dim=1).values[:, :G] % K  # [B, G]
    real = torch.arange(G, device=chosen.device).unsqueeze(0) < count.unsqueeze(1)
    return slot_of, real, count


@dataclasses.dataclass(frozen=True)
class Picks:
    """A step's chosen slots three ways: ``mask`` bool [B, K]; ``rows``, ``cols`` LongTensor [N], row-major (the order
    of ``x[mask]``); their number ``n`` and the most in one row ``widest``, as host ints. Boolean indexing reads N back
    from the device at every use (on a GPU the host waits for the queue); a step that makes its Picks once
    (:meth:`of`: one read; :meth:`one_per_row`: none) selects by ``rows``/``cols`` (:meth:`take`) without waiting.

    Example: mask [[F, T, T], [T, F, F]] -> rows [0, 0, 1], cols [1, 2, 0], n 3, widest 2.
    """

    mask: Tensor
    rows: Tensor
    cols: Tensor
    n: int
    widest: int

    @staticmethod
    def of(mask: Tensor) -> "Picks":
        """From a mask [B, K]: N and the widest row's count in one read; the indices by a stable sort (no second read,
        as ``nonzero`` would make). One row: by ``nonzero`` (its one read; N is the widest), in three op calls where
        the sort takes a dozen (a batch-1 step costs about its number of op calls)."""
        B, K = mask.shape
        if B == 1:
            rows, cols = mask.nonzero().unbind(1)  # [N] each, row-major
            return Picks(mask, rows, cols, cols.size(0), cols.size(0))
        if B == 0:
            n = widest = 0
        else:
            count = mask.sum(1)  # [B]
            n, widest = torch.stack([count.sum(), count.max()]).tolist()  # the one read
        flat = (~mask).reshape(-1).to(torch.uint8).argsort(stable=True)[:n]  # [N] chosen entries first, row-major
        return Picks(mask, flat // K, flat % K, int(n), int(widest))

    @staticmethod
    def one_per_row(slot: Tensor, K: int) -> "Picks":
        """Every row's one chosen slot, ``slot`` [B] (sequential decoding): no read at all."""
        mask = torch.zeros(slot.size(0), K, dtype=torch.bool, device=slot.device).scatter_(1, slot.unsqueeze(1), True)
        return Picks(mask, torch.arange(slot.size(0), device=slot.device), slot, slot.size(0), 1)

    def take(self, x: Tensor) -> Tensor:
        """``x[mask]`` for x [B, K, ...] -> [N, ...]."""
        return x[self.rows, self.cols]

    def place(self, values: Tensor, fill) -> Tensor:
        """The inverse of :meth:`take`: values [N, ...] on a [B, K, ...] grid, ``fill`` elsewhere."""
        out = values.new_full((*self.mask.shape, *values.shape[1:]), fill)
        out[self.rows, self.cols] = values
        return out

