"""The InsNet context encoder: a Transformer decoder over tokens in insertion order whose
self-attention uses insertion offsets (paper 3.1.3), plus cross-attention to the source.

It is causal in insertion order, so the state of a token never changes once inserted: one
pass encodes a whole trajectory (training) and decoding can cache every layer's keys/values.

``--slot-query-stream`` adds a second stream (XLNet's two-stream attention, for slots): a query
per predicted token that sits at its slot, starts from a learned vector (it must not see the word
it predicts), and in every layer reads the keys/values of the tokens of its context, with the
offsets the word will have once inserted there. The tokens' stream is unchanged; the queries add
no keys, so one pass still encodes a whole trajectory. The queries use each layer's own weights, or with
``--untied-slot-queries`` a layer of their own that reads the same keys and values (the tokens' self-attention and
source keys/values) through its own query, offset and output projections, FFN and LayerNorms.

Two flags change what the stack sees, everywhere it runs (one-pass training, cached decoding,
layerization, the reference procedures), so that all of them stay equal:

* ``no_cross_attention`` (set by the ``insnet_lm_*`` architectures, task ``insertion_lm``): the
  layers have no cross-attention sub-layer at all (self-attention -> FFN); the source arguments
  are accepted and ignored, so the language model runs the same code as the translation model.
* ``--offset-clip K`` (the paper's InsNet-truncated ablation, K = 1): every offset is clipped to
  ``[-K, K]`` before its embedding is looked up, in the token stream and in the slot query stream.
"""
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from insnet_fairseq.modules.attention import CrossAttention, OffsetIndex, OffsetSelfAttention, sinusoidal_offset_table
from insnet_fairseq.modules.packed_linear import Linear


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout``, with no call at all where it is the identity (evaluation, p = 0): a decoding step on
    a CPU at batch 1 costs about its number of op calls."""
    return F.dropout(x, p=p, training=True) if training and p > 0 else x


class InsNetDecoderLayer(nn.Module):
    """Offset self-attention -> cross-attention -> feed-forward, each with a residual and
    LayerNorm (post-norm like fairseq's default, pre-norm with ``--decoder-normalize-before``)."""

    def __init__(self, args, rel_dim: int, cross_attention: bool = True, keys: bool = True):
        """``keys=False``: a layer of the untied slot query stream, run by :meth:`query` only: it makes no keys or
        values (no W_k, W_v in self- or cross-attention), it reads another layer's."""
        super().__init__()
        d = args.decoder_embed_dim
        self.normalize_before = args.decoder_normalize_before
        self.dropout = args.dropout
        self.activation_dropout = getattr(args, "activation_dropout", 0.0) or 0.0
        self.self_attn = OffsetSelfAttention(d, args.decoder_attention_heads, rel_dim, args.attention_dropout, keys)
        self.self_attn_norm = nn.LayerNorm(d)
        self.cross_attn = self.cross_attn_norm = None  # no source (insertion_lm): self-attention -> FFN
        if cross_attention:
            self.cross_attn = CrossAttention(d, args.decoder_attention_heads, args.encoder_embed_dim,
                                             args.attention_dropout, keys)
            self.cross_attn_norm = nn.LayerNorm(d)
        self.fc1 = Linear(d, args.decoder_ffn_embed_dim)
        self.fc2 = Linear(args.decoder_ffn_embed_dim, d)
        self.final_norm = nn.LayerNorm(d)
        self.activation = getattr(F, getattr(args, "activation_fn", "relu") or "relu")

    def _residual(self, x: Tensor, norm: nn.LayerNorm, fn) -> Tensor:
        y = fn(norm(x) if self.normalize_before else x)
        x = x + dropout(y, self.dropout, self.training)
        return x if self.normalize_before else norm(x)

    def _ffn(self, x: Tensor) -> Tensor:
        h = dropout(self.activation(self.fc1(x)), self.activation_dropout, self.training)
        return self.fc2(h)

    def forward(
        self,
        x: Tensor,
        offsets: Tensor,
        rel_table: Tensor,
        attn_mask: Tensor,
        source_kv: Tuple[Tensor, Tensor],
        source_padding_mask: Optional[Tensor],
        past: Optional[Tuple[Tensor, Tensor]] = None,
        left_to_right: bool = False,
        index: Optional[OffsetIndex] = None,
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """x [B, T, D] -> ([B, T, D], self-attention (k, v) of all S keys for caching); ``left_to_right`` and
        ``index``: see :meth:`OffsetSelfAttention.forward`."""
        x, kv = self._token_self_attention(x, offsets, rel_table, attn_mask, past, left_to_right, index)
        return self._rest(x, source_kv, source_padding_mask), kv

    def _token_self_attention(self, x: Tensor, offsets: Tensor, rel_table: Tensor, attn_mask: Tensor, past,
                              left_to_right: bool = False, index: Optional[OffsetIndex] = None):
        """The self-attention sub-layer of the tokens' stream: x [B, T, D] -> ([B, T, D], (k, v) of all S keys)."""
        kv = []

        def self_attention(y):
            out, new_kv = self.self_attn(y, offsets, rel_table, attn_mask, past, left_to_right, index)
            kv.append(new_kv)
            return out

        return self._residual(x, self.self_attn_norm, self_attention), kv[0]

    def _rest(self, x: Tensor, source_kv, source_padding_mask) -> Tensor:
        if self.cross_attn is not None:
            x = self._residual(x, self.cross_attn_norm, lambda y: self.cross_attn(y, source_kv, source_padding_mask))
        return self._residual(x, self.final_norm, self._ffn)

    def forward_with_queries(self, xq: Tensor, n_tokens: int, offsets: Tensor, rel_table: Tensor,
                             attn_mask: Tensor, source_kv: Tuple[Tensor, Tensor],
                             source_padding_mask: Optional[Tensor], past,
                             query_layer: Optional["InsNetDecoderLayer"] = None,
                             index: Optional[OffsetIndex] = None) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        """:meth:`forward` for the first ``n_tokens`` rows (new tokens) and :meth:`query` for the rest (slot
        queries that read every token, the new ones included), in one pass (cached decoding): one
        self-attention call (:meth:`OffsetSelfAttention.joint`; the tokens' keys/values join ``past``), then
        cross-attention and the FFN over both. With ``query_layer`` (an untied slot query stream) the tokens go
        through this layer and the queries through that one, reading the tokens' new keys/values.
        xq [B, T + Q, D], offsets/attn_mask [B, T + Q, S] (``index``: the same as :class:`OffsetIndex`, or None)
        -> (xq' [B, T + Q, D], (k, v) [B, H, S, Dh])."""
        T = n_tokens
        if query_layer is not None:
            x, kv = self(xq[:, :T], offsets[:, :T], rel_table, attn_mask[:, :T], source_kv, source_padding_mask,
                         past, index=None if index is None else index.rows(0, T))  # [B, T, D]
            q = query_layer.query(xq[:, T:], kv, offsets[:, T:], rel_table, attn_mask[:, T:], source_kv,
                                  source_padding_mask, None if index is None else index.rows(T))  # [B, Q, D]
            return torch.cat([x, q], 1), kv
        kv = []

        def self_attention(y):
            out, new_kv = self.self_attn.joint(y, T, offsets, rel_table, attn_mask, past, index)
            kv.append(new_kv)
            return out

        xq = self._residual(xq, self.self_attn_norm, self_attention)
        return self._rest(xq, source_kv, source_padding_mask), kv[0]

    def query(self, x: Tensor, kv: Tuple[Tensor, Tensor], offsets: Tensor, rel_table: Tensor, attn_mask: Tensor,
              source_kv: Tuple[Tensor, Tensor], source_padding_mask: Optional[Tensor],
              index: Optional[OffsetIndex] = None) -> Tensor:
        """The slot query stream through this layer: x [B, Q, D] reads the tokens' (k, v) [B, H, S, Dh] of this
        layer (or, for an untied query layer, of the tokens' layer at its depth) and its source keys/values;
        offsets / attn_mask [B, Q, S] (``index``: the same as :class:`OffsetIndex`, or None) -> [B, Q, D]."""
        x = self._residual(x, self.self_attn_norm,
                           lambda y: self.self_attn.query(y, kv, offsets, rel_table, attn_mask, index))
        return self._rest(x, source_kv, source_padding_mask)


class InsNetContextEncoder(nn.Module):
    """Token embeddings + offset embeddings + a stack of :class:`InsNetDecoderLayer`.

    ``--offset-embedding sinusoidal`` (default) uses a fixed table; ``learned`` learns one
    vector per offset value in ``[-max_target_positions, max_target_positions]``.
    ``--offset-clip K`` > 0 clips offsets to ``[-K, K]`` (:meth:`clip`); ``no_cross_attention``
    builds the layers without cross-attention (see the module docstring).
    """

    def __init__(self, args, embed_tokens: nn.Embedding):
        super().__init__()
        d = args.decoder_embed_dim
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if args.no_scale_embedding else d ** 0.5
        self.dropout = args.dropout
        self.max_offset = args.max_target_positions + 1
        rel_dim = d
        if args.offset_embedding == "learned":
            self.offset_embed = nn.Parameter(torch.randn(2 * self.max_offset + 1, rel_dim) * rel_dim ** -0.5)
        else:
            self.register_buffer(
                "offset_embed", sinusoidal_offset_table(self.max_offset, rel_dim), persistent=False
            )
        self.offset_clip = int(getattr(args, "offset_clip", 0) or 0)
        self.cross_attention = not getattr(args, "no_cross_attention", False)
        self.layers = nn.ModuleList([InsNetDecoderLayer(args, rel_dim, self.cross_attention)
                                     for _ in range(args.decoder_layers)])
        self.layer_norm = nn.LayerNorm(d) if args.decoder_normalize_before else None
        self.slot_query = None  # --slot-query-stream: the learned start of every slot query
        # --slot-query-layers K: the queries start at layer query_from = L - K (0: every layer)
        k = int(getattr(args, "slot_query_layers", 0) or 0)
        self.query_from = args.decoder_layers - k if k else 0
        self.query_layers = None  # --untied-slot-queries: the query stream's own layers (else it runs self.layers)
        if getattr(args, "slot_query_stream", False):
            self.slot_query = nn.Parameter(torch.randn(d) * d ** -0.5)
            if getattr(args, "untied_slot_queries", False):
                self.query_layers = nn.ModuleList([InsNetDecoderLayer(args, rel_dim, self.cross_attention, keys=False)
                                                   for _ in range(args.decoder_layers)])

    def query_layer(self, i: int) -> InsNetDecoderLayer:
        """The layer that runs the slot query stream at depth i: the tokens' own, or an untied query layer."""
        return self.layers[i] if self.query_layers is None else self.query_layers[i]

    def offset_index(self, offsets: Tensor, attn_mask: Optional[Tensor], batch: int) -> Optional[OffsetIndex]:
        """A pass's (clipped) offsets and mask as every layer's offset term reads them (:class:`OffsetIndex`), prepared
        once a pass where the layers gather them: without gradients (decoding, validation). None where gradients are
        taken: the layers take their own path (the C++ kernel on a CPU)."""
        if torch.is_grad_enabled():
            return None
        return OffsetIndex.of(offsets, attn_mask, self.offset_embed, self.layers[0].self_attn.num_heads, batch)

    def clip(self, offsets: Tensor) -> Tensor:
        """``--offset-clip K``: offsets clipped to ``[-K, K]`` (InsNet-truncated); unchanged when K = 0.
        Example (K = 1): the row [-3, 2, -1, 1, -2, 0] becomes [-1, 1, -1, 1, -1, 0]."""
        return offsets.clamp(-self.offset_clip, self.offset_clip) if self.offset_clip > 0 else offsets

    def project_source(self, encoder_out: Tensor) -> List[Tuple[Tensor, Tensor]]:
        """encoder_out [B, L, Ds] -> per layer cross-attention (k, v); computed once per sentence."""
        return [layer.cross_attn.project_source(encoder_out) for layer in self.layers]

    def forward(
        self,
        tokens: Tensor,
        offsets: Tensor,
        attn_mask: Tensor,
        source_kv: List[Tuple[Tensor, Tensor]],
        source_padding_mask: Optional[Tensor],
        past: Optional[List[Tuple[Tensor, Tensor]]] = None,
        left_to_right: bool = False,
    ) -> Tuple[Tensor, List[Tuple[Tensor, Tensor]]]:
        """
        Args:
            tokens: [B, T] new tokens in insertion order.
            offsets: [B, T, S] offsets of every key (past + new) seen from every new token.
            attn_mask: bool [T, S] or [B, T, S], True = blocked.
            source_kv: from :meth:`project_source`.
            past: optional per-layer (k, v) [B, H, S - T, Dh] of earlier tokens.
            left_to_right: every row is a whole trajectory in the ``l2r`` order
                (:func:`~insnet_fairseq.geometry.offsets.is_left_to_right`): the attention then computes the offset
                term without reading ``offsets`` (the same values on real steps; unclipped offsets only).

        Returns:
            h [B, T, D] last-layer states, and per-layer (k, v) [B, H, S, Dh].
        """
        x = self.embed_scale * self.embed_tokens(tokens)
        x = dropout(x, self.dropout, self.training)
        offsets = self.clip(offsets)
        left_to_right = left_to_right and self.offset_clip == 0  # (clipped offsets: the gather)
        index = None if left_to_right else self.offset_index(offsets, attn_mask, x.size(0))
        new_past = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(
                x, offsets, self.offset_embed, attn_mask, source_kv[i], source_padding_mask,
                None if past is None else past[i], left_to_right, index,
            )
            new_past.append(kv)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x, new_past

    def forward_with_queries(self, tokens: Tensor, offsets: Tensor, attn_mask: Tensor,
                             source_kv: List[Tuple[Tensor, Tensor]], source_padding_mask: Optional[Tensor], past,
                             q_offsets: Tensor, q_mask: Tensor) -> Tuple[Tensor, List[Tuple[Tensor, Tensor]], Tensor]:
        """:meth:`forward` over the new tokens and :meth:`query_stream` over queries whose context is every
        token (the new ones included), in one pass: a decoding step encodes its insertions and the next
        step's slot queries together (``--slot-query-stream``). q_offsets/q_mask [B, Q, S] as in
        :meth:`query_stream`. Returns (h [B, T, D], per-layer (k, v) [B, H, S, Dh], z [B, Q, D])."""
        B, T = tokens.shape
        Q = q_offsets.size(1)
        x = self.embed_scale * self.embed_tokens(tokens)  # [B, T, D]
        q = (self.embed_scale * self.slot_query).expand(B, Q, -1)  # [B, Q, D]
        offsets = self.clip(torch.cat([offsets, q_offsets], 1))  # [B, T + Q, S]
        mask = torch.cat([attn_mask.expand(B, T, -1), q_mask], 1)  # [B, T + Q, S]
        index = self.offset_index(offsets, mask, B)
        new_past = []
        if self.query_from:  # --slot-query-layers: the layers below the queries' run the tokens alone
            x = dropout(x, self.dropout, self.training)
            for i, layer in enumerate(self.layers[: self.query_from]):
                x, kv = layer(x, offsets[:, :T], self.offset_embed, mask[:, :T], source_kv[i], source_padding_mask,
                              None if past is None else past[i], False, None if index is None else index.rows(0, T))
                new_past.append(kv)
            q = dropout(q, self.dropout, self.training)
            xq = torch.cat([x, q], 1)
        else:
            xq = dropout(torch.cat([x, q], 1), self.dropout, self.training)  # [B, T + Q, D]: both streams, one pass
        for i in range(self.query_from, len(self.layers)):
            layer = self.layers[i]
            xq, kv = layer.forward_with_queries(xq, T, offsets, self.offset_embed, mask, source_kv[i],
                                                source_padding_mask, None if past is None else past[i],
                                                None if self.query_layers is None else self.query_layers[i], index)
            new_past.append(kv)
        if self.layer_norm is not None:
            xq = self.layer_norm(xq)
        return xq[:, :T], new_past, xq[:, T:]

    def query_stream(
        self,
        offsets: Tensor,
        attn_mask: Tensor,
        kv: List[Tuple[Tensor, Tensor]],
        source_kv: List[Tuple[Tensor, Tensor]],
        source_padding_mask: Optional[Tensor],
    ) -> Tensor:
        """Slot queries (``--slot-query-stream``): Q queries reading S tokens.

        Args:
            offsets: [B, Q, S] offset of each token from the word each query predicts, as if that
                word were inserted at the query's slot (the row it will have once inserted).
            attn_mask: bool [B, Q, S], True = blocked (tokens outside the query's context).
            kv: per layer (k, v) [B, H, S, Dh] of the tokens (:meth:`forward`'s second output).
            source_kv, source_padding_mask: as in :meth:`forward`.

        Returns z [B, Q, D]. Example: after "<s> </s>" (S = 2), the query of the first word's slot
        has offsets [-1, 1] and reads both tokens.
        """
        B, Q, _ = offsets.shape
        offsets = self.clip(offsets)
        x = (self.embed_scale * self.slot_query).expand(B, Q, -1)
        x = dropout(x, self.dropout, self.training)
        index = self.offset_index(offsets, attn_mask, B)
        for i in range(self.query_from, len(self.layers)):  # --slot-query-layers K: the last K layers only
            x = self.query_layer(i).query(x, kv[i], offsets, self.offset_embed, attn_mask, source_kv[i],
                                          source_padding_mask, index)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x
