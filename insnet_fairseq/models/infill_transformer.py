"""The text-infilling paper's self-attention baseline ("Self-attn", Zhu, Hu, Xing 2019,
"Text Infilling", section 3.2 and Appendix A), registered as ``infill_transformer``
with the architectures ``infill_transformer_small`` (3+3 layers, d=256, 4 heads, FFN 1024, shared
embeddings) and ``infill_transformer_base`` (fairseq's ``transformer_base`` sizes).

It is fairseq's ``transformer`` with one change, the positions: a token at ``(seg_id, offset_id)`` gets
the sinusoidal embedding of ``pos = seg_id * base + offset_id`` (Appendix A.2.2; ``--segment-base``,
default :data:`BASE` = 64, larger than any Multi30k sentence, so segments never overlap).

Blanks are filled one at a time, left to right, each by the decoder (``bob`` = fairseq's first decoder
token ``</s>``, ``eob`` = ``</s>``), which cross-attends to the current template: the source. The
segments are derived from the source tokens alone, so fairseq's data pipeline, ``--task translation``,
its criterion, SequenceGenerator and incremental decoding work unchanged. The source format
(written by ``recipes/prepare_infill_seq2seq.py`` and ``recipes/infill_seq2seq.py``):

* the template's segments (runs of known words, and blanks) left to right, every segment after the
  first opened by the boundary symbol :data:`BOUNDARY` (``<seg>``); an unfilled blank is the segment
  ``<seg> __m__`` (or ``__m__`` at the start), a filled one ``<seg> its words``; then fairseq's ``</s>``;
* seg ids count the ``<seg>`` tokens up to and including the token (0 for the first segment); offsets
  count from the segment's ``<seg>`` (offset 0), so words have offsets 1, 2, ... in every segment;
* the blank being filled is the first ``__m__`` of the source; the decoder's token ``t`` (``t = 0``:
  ``bob``) is at ``blank_seg * base + t``: exactly where its ``<seg>`` (``t = 0``) and its words will
  sit in the next round's source.

Example (base 64): "a man in an orange hat __m__ something ." with the blank being filled:
source ``a man in an orange hat <seg> __m__ <seg> something . </s>``, seg ids 0 0 0 0 0 0 1 1 2 2 2 2,
positions 1..6, 64, 65, 128, 129, 130, 131; the decoder reads ``</s>`` (bob) "staring at" at 64, 65, 66
and writes "staring at </s>" (eob).
"""
from typing import List, Optional

import torch
import torch.nn as nn
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase, TransformerModel
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding
from torch import Tensor

from insnet_fairseq.models.insnet import small_size
from insnet_fairseq.modules.packed_linear import pack_linears

BLANK = "__m__"  # an unfilled blank (recipes/prepare_infill.py)
BOUNDARY = "<seg>"  # opens every segment after the first
BASE = 64  # default --segment-base


def segment_positions(src_tokens: Tensor, boundary_ids, pad: int, base: int) -> Tensor:
    """Segment-aware positions ``seg_id * base + offset_id`` of the source tokens.

    Args:
        src_tokens: LongTensor [B, T], left- or right-padded with ``pad``.
        boundary_ids: the token id(s) that open a segment (``<seg>``): an int, list or LongTensor.
        pad: the padding id; base: the segment stride.

    Returns:
        LongTensor [B, T]: ``seg * base + offset`` at real tokens, -1 at padding; ``seg`` counts the
        boundaries up to and including the token, ``offset`` the real tokens since the segment's
        boundary (the boundary itself: 0; the first segment counts from a virtual boundary before
        the sentence, so its words have offsets 1, 2, ... as in every other segment).

    Example (base 10, boundary ``S``, padding ``P``): ``P a b S m S c </s>`` ->
    ``-1 1 2 10 11 20 21 22``; with the blank ``m`` filled by three words, ``a b S x y z S c </s>`` ->
    ``1 2 10 11 12 13 20 21 22``: ``c`` and ``</s>`` keep their positions whatever the blank holds.
    """
    real = src_tokens.ne(pad)
    is_boundary = torch.isin(src_tokens, torch.as_tensor(boundary_ids, device=src_tokens.device)) & real
    seg = is_boundary.long().cumsum(1)  # [B, T]
    index = real.long().cumsum(1)  # 1-based index among the real tokens
    last_boundary = torch.where(is_boundary, index, torch.zeros_like(index)).cummax(1).values
    return torch.where(real, seg * base + index - last_boundary, torch.full_like(seg, -1))


def blank_segment(src_tokens: Tensor, blank: int, boundary_ids, pad: int) -> Tensor:
    """The seg id of the first ``blank`` token of every source: [B, T] -> LongTensor [B].

    The blank being filled. A source without a blank gets 0. Example (boundary ``S``):
    ``a S m S c S m </s>`` -> 1 (the second ``m`` is segment 3, filled in a later round).
    """
    seg = torch.isin(src_tokens, torch.as_tensor(boundary_ids, device=src_tokens.device)).long().cumsum(1)
    is_blank = src_tokens.eq(blank)
    first = is_blank.long().argmax(1, keepdim=True)  # the first maximum: the first blank
    return seg.gather(1, first).squeeze(1) * is_blank.any(1).long()


def blank_positions(prev_output_tokens: Tensor, segment: Tensor, pad: int, base: int) -> Tensor:
    """Decoder positions ``segment * base + t`` (``t = 0`` at bob): [B, n], [B] -> LongTensor [B, n].

    ``t`` counts the real tokens, so padding (-1) may sit on either side.
    Example (base 10): ``bob x y`` of a blank in segment 1 -> ``10 11 12``.
    """
    real = prev_output_tokens.ne(pad)
    t = real.long().cumsum(1) - 1
    return torch.where(real, segment.unsqueeze(1) * base + t, torch.full_like(t, -1))


def sinusoids(positions: Tensor, dim: int, table: Optional[Tensor] = None) -> Tensor:
    """fairseq's sinusoidal embedding (:meth:`SinusoidalPositionalEmbedding.get_embedding`) of any integer
    positions: [B, T] -> float [B, T, dim]; zero where ``positions < 0`` (padding). ``table`` ([N, dim], rows
    0..N-1 of that embedding, on the positions' device) is used when it covers every position, else one is built.
    Example: positions [[-1, 0, 65]] -> [[zeros, row 0, row 65]]."""
    top = int(positions.max().clamp(min=0))
    if table is None or table.size(0) <= top:
        table = SinusoidalPositionalEmbedding.get_embedding(top + 1, dim).to(positions.device)
    emb = table[positions.clamp(min=0)]  # [B, T, dim]
    return emb * positions.ge(0).unsqueeze(-1)


class SegmentPositions(nn.Module):
    """Replaces fairseq's ``embed_positions`` (no parameters; ``base`` set by the model's build_model). Encoder: ``forward(src_tokens)`` ->
    :func:`segment_positions`. Decoder: ``forward(prev_output_tokens, incremental_state)`` ->
    :func:`blank_positions` of ``self.segment`` (the blank's seg id [B], set by the decoder for the
    duration of one call); both embedded by :func:`sinusoids`, [B, T, dim]."""

    def __init__(self, dim: int, boundary: int, pad: int, base: int, max_positions: int):
        super().__init__()
        self.dim, self.boundary, self.pad, self.base, self.max_positions = dim, boundary, pad, base, max_positions
        self.segment: Optional[Tensor] = None
        self.register_buffer("_float_tensor", torch.FloatTensor(1), persistent=False)  # follows .half()
        self._table: Optional[Tensor] = None  # the embedding's first rows, grown when a larger position comes

    def table(self, positions: Tensor) -> Tensor:
        """Rows 0..N-1 of the sinusoidal embedding with N > every position (doubled when outgrown): built
        once, not at every decoding step."""
        top = int(positions.max().clamp(min=0))
        if self._table is None or self._table.size(0) <= top or self._table.device != positions.device:
            size = max(top + 1, 2 * (self._table.size(0) if self._table is not None else self.base))
            self._table = SinusoidalPositionalEmbedding.get_embedding(size, self.dim).to(positions.device)
        return self._table

    def forward(self, tokens: Tensor, incremental_state=None) -> Tensor:
        if self.segment is None:
            pos = segment_positions(tokens, self.boundary, self.pad, self.base)
        else:
            pos = blank_positions(tokens, self.segment, self.pad, self.base)
        return sinusoids(pos, self.dim, self.table(pos)).to(self._float_tensor)


def symbol_ids(dictionary, role: str) -> List[int]:
    """[blank id, boundary id]; a ValueError (one line) when the dictionary lacks either."""
    missing = [s for s in (BLANK, BOUNDARY) if s not in dictionary]
    if missing:
        raise ValueError(f"infill_transformer: the {role} dictionary has no {' '.join(missing)}: binarise the data "
                         "with recipes/prepare_infill_seq2seq.py")
    return [dictionary.index(BLANK), dictionary.index(BOUNDARY)]


class InfillTransformerEncoder(TransformerEncoderBase):
    """fairseq's encoder with segment-aware positions; ``encoder_out["blank_segment"]`` = [seg id [B]]."""

    def __init__(self, cfg, dictionary, embed_tokens):
        super().__init__(cfg, dictionary, embed_tokens)
        self.blank, boundary = symbol_ids(dictionary, "source")
        if self.embed_positions is not None:
            self.embed_positions = SegmentPositions(cfg.encoder.embed_dim, boundary, self.padding_idx, BASE,
                                                    cfg.max_source_positions)
        self.boundary = boundary

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None):
        out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        out["blank_segment"] = [blank_segment(src_tokens, self.blank, self.boundary, self.padding_idx)]
        return out

    def reorder_encoder_out(self, encoder_out, new_order):
        out = super().reorder_encoder_out(encoder_out, new_order)
        out["blank_segment"] = [encoder_out["blank_segment"][0].index_select(0, new_order)]
        return out


class InfillTransformerDecoder(TransformerDecoderBase):
    """fairseq's decoder; its positions are the blank's (:func:`blank_positions`), read from ``encoder_out``."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn, output_projection)
        _, boundary = symbol_ids(dictionary, "target")
        if self.embed_positions is not None:
            self.embed_positions = SegmentPositions(cfg.decoder.embed_dim, boundary, self.padding_idx, BASE,
                                                    cfg.max_target_positions)

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, full_context_alignment=False,
                         alignment_layer=None, alignment_heads=None):
        if self.embed_positions is not None:
            self.embed_positions.segment = encoder_out["blank_segment"][0]
        try:
            return super().extract_features(prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                                            alignment_layer, alignment_heads)
        finally:
            if self.embed_positions is not None:
                self.embed_positions.segment = None


@register_model("infill_transformer")
class InfillTransformerModel(TransformerModel):
    """fairseq's ``transformer`` with segment-aware positions (module docstring); ``--task translation``
    on a data-bin of ``recipes/prepare_infill_seq2seq.py``."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--segment-base", type=int, metavar="N",
                            help=f"position = seg_id * N + offset (default {BASE}; more than the longest segment)")

    @classmethod
    def build_model(cls, args, task):
        infill_base_architecture(args)
        if args.segment_base < 1:
            raise ValueError(f"infill_transformer: --segment-base must be >= 1, got {args.segment_base}")
        if args.encoder_learned_pos or args.decoder_learned_pos:
            raise ValueError("infill_transformer: positions are sinusoidal by segment; "
                             "drop --encoder-learned-pos / --decoder-learned-pos")
        model = super().build_model(args, task)
        for part in (model.encoder, model.decoder):  # set here: fairseq's config object drops unknown keys on load
            if part.embed_positions is not None:
                part.embed_positions.base = args.segment_base
        return pack_linears(model)  # the package's linear layers (modules/packed_linear.py), as InsNet's

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return InfillTransformerEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return InfillTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


@register_model_architecture("infill_transformer", "infill_transformer_base")
def infill_base_architecture(args):
    """fairseq's transformer_base (6+6 layers, d=512, 8 heads, FFN 2048) and ``--segment-base`` 64."""
    args.segment_base = getattr(args, "segment_base", BASE)
    transformer_base_architecture(args)


@register_model_architecture("infill_transformer", "infill_transformer_small")
def infill_transformer_small(args):
    """CPU-sized, as insnet_small: 3+3 layers, d=256, 4 heads, FFN 1024, dropout 0.1, all embeddings shared."""
    small_size(args)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", True)
    infill_base_architecture(args)
