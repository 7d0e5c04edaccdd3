"""fairseq's Levenshtein Transformer started from its source words: the LevT baseline of lexically
constrained generation (InsNet paper, section 4.1, Table 2), registered as ``levenshtein_transformer_keywords``
(model and architecture).

Trained exactly as fairseq's ``levenshtein_transformer`` (``--task translation_lev --noise random_delete``) on
the keywords -> sentence bitext (``data-bin/lm_multi30k-ar``: the keywords are the source). Two things differ,
both at decoding only:

* **start**: fairseq's generator starts every LevT from ``<s> </s>``; this model starts from ``<s> keywords </s>``,
  the source without its padding (:func:`source_as_start`). Training already covers this start: LevT's
  ``random_delete`` noise trains its insertion heads from random subsequences of the target, and the keywords
  are one.
* **kept keywords** (on by default, ``--delete-source-words`` turns it off): the deletion head never deletes a
  word that occurs in the sentence's source (:func:`forbid_deleting`), so every keyword stays, in order (LevT
  only inserts around kept words, never reorders). A word the model inserted that equals a keyword is kept
  too: after insertions a token no longer says whether it came from the start.

The source reaches the deletion head through the encoder output: :meth:`forward_encoder` stores it under
fairseq's ``src_tokens`` key, which fairseq's ``reorder_encoder_out`` subsets with the batch (LevT decodes the
sentences that can still delete or insert, a subset). Training calls the encoder directly, whose output has
no ``src_tokens``, so training and validation losses are LevT's.
"""
import torch
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.nat.levenshtein_transformer import (LevenshteinTransformerDecoder, LevenshteinTransformerModel,
                                                        levenshtein_base_architecture)
from fairseq.modules.transformer_sentence_encoder import init_bert_params
from torch import Tensor

from insnet_fairseq.modules.packed_linear import pack_linears


def source_as_start(src_tokens: Tensor, pad: int, bos: int, eos: int) -> Tensor:
    """Source batch (fairseq's left-padded ``words </s>``) -> LevT's first output ``<s> words </s>``, right-padded.

    Shapes: ``src_tokens`` (B, S) -> (B, S + 1).
    Example (pad 1, bos 0, eos 2): ``[[1, 7, 8, 2], [5, 6, 9, 2]]`` -> ``[[0, 7, 8, 2, 1], [0, 5, 6, 9, 2]]``.
    """
    right = utils.convert_padding_direction(src_tokens, pad, left_to_right=True)  # (B, S): words </s> pad...
    return torch.cat([right.new_full((right.size(0), 1), bos), right], dim=1)


def forbid_deleting(del_logits: Tensor, tokens: Tensor, src_tokens: Tensor, special: Tensor) -> Tensor:
    """Deletion scores with "delete" (class 1) made impossible for every token that is a word of its source.

    Shapes: ``del_logits`` (B, T, 2) (log-probabilities or logits; class 0 keep, 1 delete), ``tokens`` (B, T),
    ``src_tokens`` (B, S), ``special`` (K,) the ids that are never source words (pad, bos, eos).
    Example: tokens ``[[0, 5, 9, 2]]``, source ``[[5, 2]]``, special ``[0, 1, 2]``: position 1 (word 5) can no
    longer be deleted; positions 0 and 3 stay as they were (fairseq's LevT never deletes ``<s>``/``</s>``).
    """
    src_words = src_tokens.masked_fill(torch.isin(src_tokens, special), -1)  # (B, S): -1 never matches a token
    keep = (tokens.unsqueeze(-1) == src_words.unsqueeze(1)).any(-1)  # (B, T)
    out = del_logits.clone()
    out[..., 1] = out[..., 1].masked_fill(keep, float("-inf"))
    return out


class KeywordsLevTDecoder(LevenshteinTransformerDecoder):
    """LevT's decoder whose deletion head, at decoding, keeps the source words (see the module docstring)."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self.keep_source_words = not getattr(args, "delete_source_words", False)
        self.register_buffer("special_ids", torch.tensor([dictionary.pad(), dictionary.bos(), dictionary.eos()]),
                             persistent=False)

    def forward_word_del(self, normalize, encoder_out, prev_output_tokens, **unused):
        scores, attn = super().forward_word_del(normalize=normalize, encoder_out=encoder_out,
                                               prev_output_tokens=prev_output_tokens, **unused)
        src = encoder_out.get("src_tokens", []) if encoder_out is not None else []
        if self.keep_source_words and len(src) > 0:
            scores = forbid_deleting(scores, prev_output_tokens, src[0], self.special_ids)
        return scores, attn


@register_model("levenshtein_transformer_keywords")
class KeywordsLevenshteinTransformer(LevenshteinTransformerModel):
    @staticmethod
    def add_args(parser):
        LevenshteinTransformerModel.add_args(parser)
        parser.add_argument("--delete-source-words", action="store_true",
                            help="let the deletion head delete the source words (the keywords) it started from")

    @classmethod
    def build_model(cls, args, task):
        """fairseq's, on the package's linear layers (modules/packed_linear.py), as InsNet's."""
        return pack_linears(super().build_model(args, task))

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        decoder = KeywordsLevTDecoder(args, tgt_dict, embed_tokens)
        if getattr(args, "apply_bert_init", False):
            decoder.apply(init_bert_params)
        return decoder

    def forward_encoder(self, encoder_inputs):
        encoder_out = self.encoder(*encoder_inputs)
        encoder_out["src_tokens"] = [encoder_inputs[0]]  # (B, S): read by the deletion head, subset with the batch
        return encoder_out

    def initialize_output_tokens(self, encoder_out, src_tokens):
        out = super().initialize_output_tokens(encoder_out, src_tokens)
        tokens = source_as_start(src_tokens, self.pad, self.bos, self.eos)  # (B, S + 1)
        return out._replace(output_tokens=tokens,
                            output_scores=tokens.new_zeros(tokens.size()).type_as(out.output_scores))


@register_model_architecture("levenshtein_transformer_keywords", "levenshtein_transformer_keywords")
def levenshtein_keywords_architecture(args):
    levenshtein_base_architecture(args)
    args.delete_source_words = getattr(args, "delete_source_words", False)
