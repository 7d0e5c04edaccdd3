"""Attention for the InsNet context encoder (paper 3.1.3).

Self-attention is Transformer-XL style relative attention whose relative positions are the
insertion *offsets*:

    A[i, j] = (q_i + u) . k_j + (q_i + v) . p_{offset[i, j]},     p_r = W_kR R(r)

``offset[i, j]`` takes at most ``2S - 1`` distinct values for ``S`` keys, so ``P`` is projected
once for that range and ``(q + v) P^T`` is gathered per (i, j): the cost is two ``T x S`` score
matrices per head and nothing of size batch x T x S x d is built. Causality in insertion
order (token i sees tokens 0..i) is the caller's mask. Training on the CPU scores only the unblocked pairs, in a C++
kernel (:mod:`insnet_fairseq.modules.offset_scores`); without it, a one-pass over trajectories all in the ``l2r`` order
needs only ``S + 1`` offsets and no gather (:meth:`OffsetSelfAttention.left_to_right_bias`).
"""
import math
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from insnet_fairseq.modules import offset_scores
from insnet_fairseq.modules.kept import KeepsDerived, may_keep, weights_key
from insnet_fairseq.modules.packed_linear import Linear


def sinusoidal_offset_table(max_offset: int, dim: int) -> Tensor:
    """Sinusoidal embeddings of the offsets ``-max_offset..max_offset``.

    Returns FloatTensor [2 * max_offset + 1, dim]; row ``max_offset + r`` embeds offset ``r``.
    """
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000.0) / max(half - 1, 1)))
    r = torch.arange(-max_offset, max_offset + 1, dtype=torch.float)
    ang = r.unsqueeze(1) * freq.unsqueeze(0)  # [R, half]
    table = torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(len(r), 1)], dim=1)
    return table


def per_head_scores(q: Tensor, p: Tensor) -> Tensor:
    """Every query against every row of its head's table: q [B, H, T, Dh], p [H, R, Dh] -> [B, H, T, R], the values of
    ``q @ p.transpose(-2, -1)``, by one bmm over the heads with the B x T queries as its rows. The broadcast product
    copies p once a sentence (B x H x R x Dh floats) and multiplies B x H small matrices; this copies the queries
    (B x H x T x Dh, T <= R) and multiplies H larger ones, much cheaper at a large batch (a decoding step at batch 64,
    T = 3, R = 41). One sentence: no copy at all (4 op calls). The result is a view (heads first in memory).
    Example: B = 64, H = 4, T = 3, R = 41 -> one [4, 192, 64] @ [4, 64, 41] product, viewed as [64, 4, 3, 41]."""
    B, H, T, Dh = q.shape
    if B == 1:
        return torch.bmm(q[0], p.transpose(1, 2)).unsqueeze(0)
    rows = q.transpose(0, 1).reshape(H, B * T, Dh)  # [H, B * T, Dh]
    return torch.bmm(rows, p.transpose(1, 2)).view(H, B, T, -1).transpose(0, 1)  # [B, H, T, R]


class OffsetIndex(NamedTuple):
    """A pass's offsets and mask in the form every layer's offset term reads them
    (:meth:`OffsetSelfAttention.offset_bias`), so that a pass prepares them once and not once a layer (decoding: a
    batch-1 step costs about its number of op calls).

    index: [B, H, T, S] offset + M, the column of P (offsets -M..M) that query i reads for key j (a view of
    [B, 1, T, S] expanded over the H heads); M: P's range; blocked: bool [B or 1, 1, T, S] (True: blocked) or None.
    Example: offsets [[[-1, 1, 0]]] (T = 1, S = 3), 2 heads -> M 2, index [[[[1, 3, 2]], [[1, 3, 2]]]].
    """

    index: Tensor
    M: int
    blocked: Optional[Tensor]

    @staticmethod
    def of(offsets: Tensor, attn_mask: Optional[Tensor], rel_table: Tensor, heads: int,
           batch: Optional[int] = None) -> "OffsetIndex":
        """offsets [B or 1, T, S] (any value where blocked), attn_mask [T, S] or [B, T, S] (True: blocked) or None,
        rel_table [2M' + 1, Dr] (see :meth:`shifted`); ``batch``: B where the offsets are one row for all (None:
        theirs)."""
        B, T, S = offsets.shape
        shifted, M = OffsetIndex.shifted(offsets, rel_table)
        blocked = None
        if attn_mask is not None:
            blocked = (attn_mask if attn_mask.dim() == 3 else attn_mask.unsqueeze(0)).unsqueeze(1)
        return OffsetIndex(shifted.unsqueeze(1).expand(B if batch is None else batch, heads, T, S), M, blocked)

    @staticmethod
    def shifted(offsets: Tensor, rel_table: Tensor) -> Tuple[Tensor, int]:
        """offsets [..., S] -> (offsets + M, clamped to 0..2M: the columns of P; M), M = min(S - 1, the table's
        range): the offsets lie in [-(S-1), S-1], and the table bounds them only where S counts decoding holes
        (blocked). Example: offsets [-3, 2, 0, 1] with a table of offsets -1..1 -> ([0, 2, 1, 2], 1)."""
        S = offsets.size(-1)
        M = min(S - 1, (rel_table.size(0) - 1) // 2)
        return (offsets.clamp(-M, M) if M < S - 1 else offsets) + M, M

    def rows(self, start: int, stop: Optional[int] = None) -> "OffsetIndex":
        """The queries ``start:stop`` only (a fused pass's tokens or its slot queries)."""
        blocked = None if self.blocked is None else self.blocked[:, :, start:stop]
        return OffsetIndex(self.index[:, :, start:stop], self.M, blocked)


class _LeftToRightSkew(torch.autograd.Function):
    """:meth:`OffsetSelfAttention.left_to_right_bias`'s placement of the scores: by_offset [B, H, T, S + 1] (column c:
    offset c - (S - 1), T = S), mask [B or 1, 1, T, S] (True: blocked), scaling -> bias [B, H, T, S], the scores
    times ``scaling`` (after the product, as the gather: the same values), -inf where blocked.
    Row i's entry j is ``by_offset[i, S - 1 + j - i]`` (flat: ``S - 1 + i * S + j``: a view), except ``<s>``
    (j = 0: offset ``1 - i`` from a word, i >= 2) and ``</s>`` (j = 1: offset +1 from a word). One copy forward and
    one backward (autograd through the view and two in-place column writes made three)."""

    @staticmethod
    def _skewed(x: Tensor) -> Tensor:
        """[B, H, T, S + 1] -> its [B, H, T, S] view with row i shifted left by i (T = S)."""
        B, H, T, S1 = x.shape
        S = S1 - 1
        return x.view(B, H, T * S1)[:, :, S - 1 : S - 1 + T * S].view(B, H, T, S)

    @staticmethod
    def forward(ctx, by_offset: Tensor, mask: Tensor, scaling: float) -> Tensor:
        S = by_offset.size(-1) - 1
        skewed = _LeftToRightSkew._skewed(by_offset)  # [B, H, T, S]: offset j - i
        bias = (skewed * scaling).contiguous()
        if S > 1:
            word = torch.arange(S, device=bias.device) >= 2  # [T]: rows of words (after <s> and </s>)
            bias[..., 0] = torch.where(word, skewed[..., 1], skewed[..., 0]) * scaling  # <s>: 1 - i from a word
            bias[..., 1] = torch.where(word, by_offset[..., S], skewed[..., 1]) * scaling  # </s>: +1 from a word
        ctx.save_for_backward(mask)
        ctx.scaling = scaling
        return bias.masked_fill_(mask, float("-inf"))

    @staticmethod
    def backward(ctx, grad: Tensor):
        (mask,) = ctx.saved_tensors
        B, H, T, S = grad.shape
        out = grad.new_empty(B, H, T, S + 1)
        flat = out.view(B, H, T * (S + 1))
        flat[:, :, : S - 1].zero_()
        flat[:, :, S - 1 + T * S :].zero_()
        skewed = _LeftToRightSkew._skewed(out)  # where the forward read each entry
        torch.mul(grad, ctx.scaling, out=skewed)
        skewed.masked_fill_(mask, 0.0)  # (blocked: no gradient)
        if S > 1:
            word = torch.arange(S, device=grad.device) >= 2
            g_bos, g_eos = skewed[..., 0].clone(), skewed[..., 1].clone()  # [B, H, T]
            skewed[..., 0] = torch.where(word, 0.0, g_bos)
            skewed[..., 1] = torch.where(word, g_bos, g_eos)
            out[..., S] = torch.where(word, g_eos, 0.0)  # offset +1: </s> from a word; else only blocked entries
        return out, None, None


class OffsetSelfAttention(KeepsDerived):
    """Multi-head self-attention with insertion-offset relative positions.

    Shapes: B batch, T queries (new tokens), S keys (cached + new tokens), H heads,
    D model dim, Dh = D / H, R = 2S - 1 distinct offsets.
    """

    kept_stores = ("_kept_offsets",)  # dropped in training mode (KeepsDerived)

    def __init__(self, embed_dim: int, num_heads: int, rel_dim: int, dropout: float = 0.0, keys: bool = True):
        """``keys=False``: queries only (an untied slot query stream, :meth:`query`): ``qkv_proj`` holds just W_q,
        the keys and values are another layer's."""
        super().__init__()
        assert embed_dim % num_heads == 0, "embed_dim must be divisible by num_heads"
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.qkv_proj = Linear(embed_dim, (3 if keys else 1) * embed_dim)
        self.r_proj = Linear(rel_dim, embed_dim, bias=False)  # W_kR
        self.out_proj = Linear(embed_dim, embed_dim)
        self.u = nn.Parameter(torch.zeros(num_heads, self.head_dim))  # content bias
        self.v = nn.Parameter(torch.zeros(num_heads, self.head_dim))  # position bias
        self.dropout = dropout
        self.naive = False  # test oracle switch, see reference.naive_attention()
        self.offset_kernel = True  # CPU training: the offset term of the unblocked pairs only (modules/offset_scores.py)
        self._kept_offsets = None  # decoding: (key, M, P [H, 2M + 1, Dh]), see project_offsets
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.qkv_proj.weight, gain=1 / math.sqrt(2))
        nn.init.zeros_(self.qkv_proj.bias)
        nn.init.xavier_uniform_(self.r_proj.weight)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    def project_offsets(self, rel_table: Tensor, max_offset: int) -> Tensor:
        """P for the offsets ``-max_offset..max_offset``.

        rel_table: [2M + 1, Dr], row M + r embeds offset r (M >= max_offset).
        Returns [H, 2 * max_offset + 1, Dh].

        Without gradients and outside training (decoding: one call per layer and step, S growing by a
        token or a few) P is kept for a range of offsets (at least 32, doubled when outgrown) and sliced,
        until the module goes back to training mode (:class:`~insnet_fairseq.modules.kept.KeepsDerived`), the
        table or ``W_kR`` changes in place (their tensors' version counters: a checkpoint load) or a larger range is
        asked for. A pass compiled by ``torch.compile``
        (``--compile-decoder``) projects the range it needs instead: the kept copy is keyed by data pointers,
        which a compiled graph cannot compare.
        """
        center = (rel_table.size(0) - 1) // 2
        if not may_keep(self):
            return self._project(rel_table[center - max_offset : center + max_offset + 1])
        key = weights_key(rel_table, self.r_proj.weight)
        kept = getattr(self, "_kept_offsets", None)
        if kept is None or kept[0] != key or kept[1] < max_offset:
            m = min(center, max(max_offset, 32, 2 * kept[1] if kept is not None and kept[0] == key else 0))
            kept = self._kept_offsets = (key, m, self._project(rel_table[center - m : center + m + 1]))
        m = kept[1]
        return kept[2][:, m - max_offset : m + max_offset + 1]  # [H, R, Dh]

    def _project(self, rows: Tensor) -> Tensor:
        """rows [R, Dr] of the offset table -> W_kR rows per head [H, R, Dh]."""
        return self.r_proj(rows).view(-1, self.num_heads, self.head_dim).transpose(0, 1)

    def forward(
        self,
        x: Tensor,
        offsets: Tensor,
        rel_table: Tensor,
        attn_mask: Tensor,
        past: Optional[Tuple[Tensor, Tensor]] = None,
        left_to_right: bool = False,
        index: Optional[OffsetIndex] = None,
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """
        Args:
            x: [B, T, D] states of the new tokens (in insertion order).
            offsets: [B, T, S] offset of key j seen from query i (any value where masked).
            rel_table: [2M + 1, Dr] offset embeddings, M >= S - 1.
            attn_mask: bool [T, S] or [B, T, S], True where query i may NOT attend key j; None: nothing blocked
                (a decoding step of one new token at batch 1).
            past: optional (k, v), each [B, H, S - T, Dh], of the tokens inserted before, or a preallocated
                cache slot whose ``extend(k, v)`` writes the new keys/values in place and returns all S
                (:class:`insnet_fairseq.decoding.cache.KVWriter`).
            left_to_right: the rows are whole ``l2r`` trajectories (one-pass training, no ``past``): ``offsets`` is
                then known and not read (:meth:`left_to_right_bias`).
            index: ``offsets`` and ``attn_mask`` as :class:`OffsetIndex` (prepared once for every layer of a pass),
                or None: prepared here where needed.

        Returns:
            out [B, T, D] and the (k, v) of all S keys, each [B, H, S, Dh], for caching.
        """
        if self.naive and past is None:
            return self.naive_forward(x, offsets, rel_table, attn_mask)
        B, T, D = x.shape
        H, Dh = self.num_heads, self.head_dim
        q, k, v = self.qkv_proj(x).view(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, T, Dh]
        if past is not None and hasattr(past, "extend"):  # a preallocated cache: written in place
            k, v = past.extend(k, v)  # [B, H, S, Dh] each
        elif past is not None:
            k = torch.cat([past[0], k], dim=2)  # [B, H, S, Dh]
            v = torch.cat([past[1], v], dim=2)  # [B, H, S, Dh]
        return self._attend(q, k, v, offsets, rel_table, attn_mask, left_to_right, index), (k, v)

    def query(self, x: Tensor, kv: Tuple[Tensor, Tensor], offsets: Tensor, rel_table: Tensor, attn_mask: Tensor,
              index: Optional[OffsetIndex] = None) -> Tensor:
        """Queries that read the tokens' keys/values but add none of their own (the slot query stream).

        x: [B, T, D] query states; kv: (k, v), each [B, H, S, Dh], of the tokens (a layer's cache);
        offsets [B, T, S]; attn_mask bool [B, T, S], True = blocked; index: as in :meth:`forward`. Returns [B, T, D].
        """
        B, T, D = x.shape
        q = self.qkv_proj.rows(x, 0, D).view(B, T, self.num_heads, self.head_dim)  # [B, T, H, Dh]: W_qkv's query third
        if self.naive:
            return self._naive_attend(q, kv[0].transpose(1, 2), kv[1].transpose(1, 2), offsets, rel_table, attn_mask)
        return self._attend(q.transpose(1, 2), kv[0], kv[1], offsets, rel_table, attn_mask, index=index)

    def joint(self, x: Tensor, n_tokens: int, offsets: Tensor, rel_table: Tensor, attn_mask: Tensor,
              past, index: Optional[OffsetIndex] = None) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """:meth:`forward` for the first ``n_tokens`` rows of ``x`` (new tokens) and :meth:`query` for the rest
        (slot queries, which read the new tokens too), in one attention call: a decoding step's pass
        (``--fuse-slot-queries``) makes one call per layer where the two streams made two.

        x [B, T + Q, D]; offsets [B, T + Q, S]; attn_mask bool [B, T + Q, S]; past and index as in :meth:`forward`.
        Returns out [B, T + Q, D] and the (k, v) of all S keys, each [B, H, S, Dh].
        Example: T = 2 new tokens and Q = 3 queries over S = 6 keys: one [B, H, 5, 6] score matrix, 2 new keys.
        """
        T = n_tokens
        if self.naive:  # the test oracle: the two streams one after the other
            out, kv = self.forward(x[:, :T], offsets[:, :T], rel_table, attn_mask[:, :T], past)
            return torch.cat([out, self.query(x[:, T:], kv, offsets[:, T:], rel_table, attn_mask[:, T:])], 1), kv
        B, N, D = x.shape
        H, Dh = self.num_heads, self.head_dim
        q = self.qkv_proj.rows(x, 0, D).view(B, N, H, Dh).transpose(1, 2)  # [B, H, T + Q, Dh]
        kv = self.qkv_proj.rows(x[:, :T], D, 3 * D)  # [B, T, 2D]: W_qkv's key and value thirds
        k, v = kv.view(B, T, 2, H, Dh).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, T, Dh]
        if hasattr(past, "extend"):  # a preallocated cache: written in place
            k, v = past.extend(k, v)  # [B, H, S, Dh] each
        elif past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # [B, H, S, Dh]
        return self._attend(q, k, v, offsets, rel_table, attn_mask, index=index), (k, v)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, rel_table: Tensor, attn_mask: Tensor,
                left_to_right: bool = False, index: Optional[OffsetIndex] = None) -> Tensor:
        """q [B, H, T, Dh], k/v [B, H, S, Dh], offsets [B, T, S], mask [T, S] or [B, T, S] (or None) -> [B, T, D]."""
        bias = self.offset_bias(q, offsets, rel_table, attn_mask, k.size(2), left_to_right, index)
        return self.content_attend(q, k, v, bias)

    def offset_bias(self, q: Tensor, offsets: Tensor, rel_table: Tensor, attn_mask: Optional[Tensor], S: int,
                    left_to_right: bool = False, index: Optional[OffsetIndex] = None) -> Tensor:
        """The offset term of the scores, scaled, -inf where ``attn_mask`` blocks: (q + v) . p_offset[i, j] * scaling.
        q [B, H, T, Dh], offsets [B, T, S], mask [T, S] or [B, T, S] (or None) -> [B, H, T, S].
        Example: T = S = 3 (one pass over 3 tokens): P is projected for the 5 offsets -2..2, [B, H, 3, 5] scores are
        gathered to [B, H, 3, 3].

        ``left_to_right`` (a one-pass over trajectories all in the ``l2r`` order, T = S): the offsets are
        :func:`~insnet_fairseq.geometry.offsets.left_to_right_offsets` and ``offsets`` is not read; see
        :meth:`left_to_right_bias` (where the kernel does not apply).

        Where gradients are taken on the CPU (training), only the unblocked pairs are scored, by
        :func:`~insnet_fairseq.modules.offset_scores.offset_scores` (C++; same values), unless ``offset_kernel`` is
        False or the kernel is not built. ``index``: ``offsets`` and ``attn_mask`` as :class:`OffsetIndex`, prepared
        once a pass (the dense gather only; None: prepared here)."""
        B, H, T, Dh = q.shape
        qv = q + self.v.view(1, H, 1, Dh)  # [B, H, T, Dh]
        kernel = self.offset_kernel and offset_scores.applies(qv)
        if (not kernel and left_to_right and T == S and attn_mask is not None
                and (rel_table.size(0) - 1) // 2 >= max(S - 1, 1)):
            return self.left_to_right_bias(qv, rel_table, attn_mask)
        if kernel:  # only the unblocked pairs' products, no [B, H, T, R]
            shifted, M = OffsetIndex.shifted(offsets, rel_table)
            p = self.project_offsets(rel_table, M)  # [H, R, Dh], R = 2M + 1 <= 2S - 1
            return offset_scores.offset_scores(qv, p, shifted, attn_mask, self.scaling)

        index = index or OffsetIndex.of(offsets, attn_mask, rel_table, H, B)
        p = self.project_offsets(rel_table, index.M)  # [H, R, Dh], R = 2M + 1 <= 2S - 1
        by_offset = per_head_scores(qv, p)  # [B, H, T, R]
        # gather's backward needs only the index and mul's only the scalar, so the product is masked in place
        bias = by_offset.gather(-1, index.index) * self.scaling  # [B, H, T, S]
        if index.blocked is not None:
            bias.masked_fill_(index.blocked, float("-inf"))
        return bias

    def left_to_right_bias(self, qv: Tensor, rel_table: Tensor, attn_mask: Tensor) -> Tensor:
        """:meth:`offset_bias` of a one-pass over ``l2r`` trajectories, without the gather: a word's offset to the
        words before it is ``j - i``, so the scores against the S + 1 offsets ``-(S-1)..+1`` ([B, H, T, S + 1],
        half the general 2S - 1) are skewed into place by a view, Transformer-XL's relative shift: read row-major,
        row i's entry j sits ``S - 1 + j - i`` into row i, i.e. at ``S - 1 + i * S + j`` of the flat rows. ``<s>``
        (column 0) and ``</s>`` (column 1, at the right end: offset +1) are then written from the same scores.
        qv [B, H, T, Dh] (the queries plus ``v``) with T = S, attn_mask [T, S] or [B, T, S] (True: blocked)
        -> [B, H, T, S].
        Example: T = S = 4 (<s> </s> w1 w2): row 3 (w2) reads offsets [-3, -2, -1, 0] by the view, then <s> -> -2
        and </s> -> +1, as :func:`~insnet_fairseq.geometry.offsets.left_to_right_offsets`' row [-2, 1, -1, 0]."""
        S = qv.size(2)
        M = max(S - 1, 1)
        p = self.project_offsets(rel_table, M)[:, M - (S - 1) : M + 2]  # [H, S + 1, Dh]: offsets -(S-1)..+1
        by_offset = qv @ p.transpose(-2, -1)  # [B, H, T, S + 1]; column c: offset c - (S-1)
        mask = attn_mask if attn_mask.dim() == 3 else attn_mask.unsqueeze(0)
        return _LeftToRightSkew.apply(by_offset, mask.unsqueeze(1), self.scaling)  # [B, H, T, S]

    def content_attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], is_causal: bool = False) -> Tensor:
        """softmax((q + u) k^T * scaling + bias) v, dropout on the weights, then the output projection: one fused
        kernel, as the AR model's. q [B, H, T, Dh], k/v [B, H, S, Dh], bias [B, H, T, S] (the offset term, -inf where
        blocked) or None with ``is_causal`` (the offset term left out: benchmarks/train_throughput.py's diagnostic)
        -> [B, T, D]."""
        B, H, T, Dh = q.shape
        out = F.scaled_dot_product_attention(q + self.u.view(1, H, 1, Dh), k, v, attn_mask=bias, is_causal=is_causal,
                                             dropout_p=self.dropout if self.training else 0.0,
                                             scale=self.scaling)  # [B, H, T, Dh]
        out = out.transpose(1, 2).reshape(B, T, H * Dh)  # [B, T, D]
        return self.out_proj(out)

    def naive_forward(self, x: Tensor, offsets: Tensor, rel_table: Tensor, attn_mask: Tensor):
        """Test oracle: the same attention with P materialised as [B, T, S, H, Dh] (S = T).
        Returns (out [B, T, D], (k, v) each [B, H, S, Dh])."""
        B, T, D = x.shape
        q, k, v = self.qkv_proj(x).view(B, T, 3, self.num_heads, self.head_dim).unbind(2)  # each [B, T, H, Dh]
        out = self._naive_attend(q, k, v, offsets, rel_table, attn_mask)
        return out, (k.transpose(1, 2), v.transpose(1, 2))

    def _naive_attend(self, q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, rel_table: Tensor, attn_mask: Tensor):
        """q [B, T, H, Dh], k/v [B, S, H, Dh], offsets [B, T, S] -> [B, T, D], P materialised."""
        B, T, H, Dh = q.shape
        S = k.size(1)
        center = (rel_table.size(0) - 1) // 2
        pos = self.r_proj(rel_table[offsets + center]).view(B, T, S, H, Dh)  # [B, T, S, H, Dh]
        content = torch.einsum("bihd,bjhd->bhij", q + self.u, k)
        position = torch.einsum("bihd,bijhd->bhij", q + self.v, pos)
        scores = (content + position) * self.scaling
        mask = attn_mask if attn_mask.dim() == 3 else attn_mask.unsqueeze(0)
        scores = scores.masked_fill(mask.unsqueeze(1), float("-inf"))
        out = torch.einsum("bhij,bjhd->bihd", torch.softmax(scores, dim=-1), v)
        return self.out_proj(out.reshape(B, T, H * Dh))


class CrossAttention(nn.Module):
    """Attention from decoder states to the source encoder; keys/values can be projected once.

    Shapes: B batch, T queries, L source length, H heads, D model dim, Dh = D / H.
    """

    def __init__(self, embed_dim: int, num_heads: int, source_dim: int, dropout: float = 0.0, keys: bool = True):
        """``keys=False``: no ``kv_proj`` (an untied slot query stream reads the tokens' layer's source keys/values)."""
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = Linear(embed_dim, embed_dim)
        self.kv_proj = Linear(source_dim, 2 * embed_dim) if keys else None
        self.out_proj = Linear(embed_dim, embed_dim)
        self.dropout = dropout
        for lin in filter(None, (self.q_proj, self.kv_proj, self.out_proj)):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def project_source(self, source: Tensor) -> Tuple[Tensor, Tensor]:
        """source [B, L, Ds] -> (k, v), each [B, H, L, Dh]."""
        B, L, _ = source.shape
        k, v = self.kv_proj(source).view(B, L, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return k, v

    def forward(self, x: Tensor, kv: Tuple[Tensor, Tensor], source_padding_mask: Optional[Tensor]) -> Tensor:
        """x [B, T, D], kv from :meth:`project_source`, mask [B, L] True at padding -> [B, T, D]."""
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, Dh]
        mask = None
        if source_padding_mask is not None:
            mask = ~source_padding_mask.view(B, 1, 1, -1)  # True = attend, [B, 1, 1, L]
        out = F.scaled_dot_product_attention(
            q, kv[0], kv[1], attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )  # [B, H, T, Dh]
        return self.out_proj(out.transpose(1, 2).reshape(B, T, D))
