"""InDIGO (Gu, Liu, Cho 2019: "Insertion-based Decoding with automatically Inferred Generation
Order") on InsNet's machinery, registered as ``indigo`` with the
architectures ``indigo_base`` and ``indigo_small``.

What is shared with InsNet: the source encoder, the context encoder over the insertion trajectory
(one pass, causal in insertion order, cached in decoding) and its offsets. InDIGO's relative
positions are three buckets (left, self, right), which is InsNet's offset clipped to [-1, 1]
(``--offset-clip 1``, forced) with the paper's sign (:func:`relative_positions`); the offsets enter
attention in InsNet's form ``(q+u)k + (q+v)p`` (Transformer-XL), of which the paper's
``q (k + A[r])`` is the case ``u = v = 0`` (the two bias terms are kept).

What differs, the prediction (paper section 4.1), in :class:`IndigoHeads`:

* word first: ``p(y_{t+1} | H) = softmax((h_t F) W^T)`` over the vocabulary and ``<eod>``
  (end of decoding, one extra output row), with ``h_t`` the state of the last inserted token and
  ``W`` the (tied) target embeddings;
* then the pointer: query ``h_t E + W[y_{t+1}]`` against two keys per token, ``H C`` (insert left
  of it) and ``H D`` (right of it); a slot's probability is the sum of its two keys' (eq. 11),
  i.e. its logit is ``logaddexp(right key of its left neighbour, left key of its right
  neighbour)``; left of ``<s>`` and right of ``</s>`` are no slot.

The decoder returns InsNet's named terms, so ``insnet_loss`` trains it unchanged: ``token`` holds the
words and the final ``<eod>`` (index V), ``position`` the pointer's slot distribution, and
``termination`` is empty (``<eod>`` is a word here).
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqDecoder, register_model, register_model_architecture
from torch import Tensor

from insnet_fairseq.geometry.offsets import slot_neighbours
from insnet_fairseq.models.insnet import InsNetDecoder, InsNetModel, insnet_base_architecture, insnet_small
from insnet_fairseq.modules.decoder import InsNetContextEncoder


def relative_positions(offsets: Tensor) -> Tensor:
    """InDIGO's relative positions (eq. 3) from InsNet offsets: ``r[i, j] = -clip(offset[i, j], -1, 1)``.

    ``offset[i, j]`` is how far right of token i token j stands, so ``r[i, j]`` is -1 when i is left of
    j, 0 for j = i and 1 when i is right of j. Any [...] -> [...].
    Example (the paper's): "<s> </s> dream I" inserted in that order, "I" left of "dream" (final
    positions z = [0, 3, 2, 1]). The offset row of "I", inserted last, is [-1, 2, 1, 0] -> r = [1, -1,
    -1, 0] (right of <s>, left of </s> and "dream"), and ``z = sum_j max(0, r[i, j])`` (eq. 4) = 1.
    """
    return -offsets.clamp(-1, 1)


class IndigoHeads(nn.Module):
    """Word-then-pointer prediction (eqs. 8, 9, 11); see the module docstring."""

    def __init__(self, dim: int, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens  # W: the target embeddings, tied to the word output
        self.word_query = nn.Linear(dim, dim, bias=False)  # F
        self.pointer_query = nn.Linear(dim, dim, bias=False)  # E
        self.left_key = nn.Linear(dim, dim, bias=False)  # C: insert left of token j
        self.right_key = nn.Linear(dim, dim, bias=False)  # D: insert right of token j
        self.eod = nn.Parameter(torch.randn(dim) * dim ** -0.5)  # the <eod> output row
        for proj in (self.word_query, self.pointer_query, self.left_key, self.right_key):
            nn.init.xavier_uniform_(proj.weight)

    @property
    def eod_index(self) -> int:
        return self.embed_tokens.num_embeddings

    def word_logits(self, h_last: Tensor) -> Tensor:
        """h_last [..., D] -> [..., V + 1] (index V: <eod>), unnormalised."""
        q = self.word_query(h_last)
        return torch.cat([F.linear(q, self.embed_tokens.weight), (q @ self.eod).unsqueeze(-1)], dim=-1)

    def pointer_logits(self, h_last: Tensor, word: Tensor, h: Tensor):
        """Pointer logits of every key: h_last [B, T, D], word [B, T], h [B, S, D] ->
        (left [B, T, S], right [B, T, S]): insert left / right of token j."""
        q = self.pointer_query(h_last) + self.embed_tokens(word)  # [B, T, D]
        return q @ self.left_key(h).transpose(1, 2), q @ self.right_key(h).transpose(1, 2)

    @staticmethod
    def slot_logits(left_key: Tensor, right_key: Tensor, left: Tensor, right: Tensor) -> Tensor:
        """Slot logits from key logits: left_key, right_key [B, T, S]; left, right [B, T, K] the steps
        of each slot's neighbours -> [B, T, K] = logaddexp(right key of the left neighbour, left key
        of the right neighbour). Example: keys of "<s> </s>" (S = 2) and their only slot (0 | 1):
        logaddexp(right_key[..., 0], left_key[..., 1])."""
        return torch.logaddexp(right_key.gather(2, left), left_key.gather(2, right))


class IndigoDecoder(InsNetDecoder):
    """InsNet's context encoder (offsets clipped to [-1, 1]) with InDIGO's heads."""

    def __init__(self, args, dictionary, embed_tokens):
        FairseqDecoder.__init__(self, dictionary)
        self.padding_idx = dictionary.pad()
        self.context = InsNetContextEncoder(args, embed_tokens)
        self.heads = IndigoHeads(args.decoder_embed_dim, embed_tokens)
        self.max_target_positions = args.max_target_positions

    def upgrade_state_dict_named(self, state_dict, name):
        return state_dict

    def forward(
        self, target: Tensor, order: Tensor, encoder_out: Dict, context: Optional[Tensor] = None
    ) -> Dict[str, Dict[str, Tensor]]:
        """One pass over whole insertion trajectories (sequential only: InDIGO inserts one word per step).

        Args: as :meth:`InsNetDecoder.forward` (``context`` must be None).

        Returns InsNet's named terms (T = n - 2, K = n - 2):
            token: logits [N, V + 1], target [N]: after steps t = 1..len-1, the next word, then <eod>
            position: slot logits [B, T, K] of the pointer (-inf where no slot), target [B, T], mask
            termination: empty (``<eod>`` is predicted as a word)
        """
        if context is not None:
            raise ValueError("InDIGO inserts one word per step: layered training (--layerization dinic / uniform) "
                             "does not apply to --arch indigo_*")
        B, n = target.shape
        h, _, rank, tokens, lengths, _, _ = self.encode_trajectory(target, order, encoder_out)
        steps = torch.arange(n, device=target.device)
        T = n - 2
        pred = steps[1 : n - 1]  # [T] contexts t = 1..n-2 (their last token h_t), each predicting step t + 1
        step_valid = pred.unsqueeze(0) < (lengths - 1).unsqueeze(1)  # [B, T]

        # words: after steps 1..len-2 the next word, after step len-1 <eod>
        word_steps = steps[1:]  # [n - 1]
        word_mask = word_steps.unsqueeze(0) <= (lengths - 1).unsqueeze(1)  # [B, n - 1]
        is_last = word_steps.unsqueeze(0) == (lengths - 1).unsqueeze(1)
        next_word = torch.cat([tokens[:, 2:], tokens.new_full((B, 1), self.padding_idx)], 1)  # [B, n - 1]
        word_target = next_word.masked_fill(is_last, self.heads.eod_index)

        # pointer: the slot of step t + 1's word in the context after step t
        left_key, right_key = self.heads.pointer_logits(h[:, 1 : n - 1], tokens[:, 2:], h)  # [B, T, n]
        left_all, right_all = slot_neighbours(rank)  # [B, n, n]
        left, right = left_all[:, 1 : n - 1, :T], right_all[:, 1 : n - 1, :T]  # [B, T, K]
        slot_logits = self.heads.slot_logits(left_key, right_key, left, right)
        slot_exists = steps[:T].view(1, 1, T) < pred.view(1, T, 1)  # slot k exists after step t iff k < t
        slot_logits = slot_logits.masked_fill(~slot_exists, float("-inf"))
        slot = (rank[:, 1 : n - 1, 2:].diagonal(dim1=1, dim2=2) - 1).clamp_min(0)  # [B, T] rank[t, t + 1] - 1
        slot = torch.minimum(slot, pred.unsqueeze(0) - 1)
        no_term = torch.zeros(B, n - 1, dtype=torch.bool, device=target.device)
        return {
            "token": {"logits": self.heads.word_logits(h[:, 1:][word_mask]), "target": word_target[word_mask]},
            "position": {"logits": slot_logits, "target": slot, "mask": step_valid},
            "termination": {"logits": h.new_zeros(B, n - 1), "target": h.new_zeros(B, n - 1), "mask": no_term},
        }


@register_model("indigo")
class IndigoModel(InsNetModel):
    """Transformer-InDIGO on InsNet's encoder and context encoder (see the module docstring)."""

    decoder_class = IndigoDecoder
    judge_kind = None  # its heads score words and pointers, not InsNet's named terms

    @staticmethod
    def add_args(parser):
        InsNetModel.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        if getattr(task, "layerization", "sequential") != "sequential":
            raise ValueError(f"--layerization {task.layerization}: InDIGO inserts one word per step, train "
                             "--arch indigo_* with sequential trajectories (--insertion-order l2r, random, ...)")
        return super().build_model(args, task)

    @staticmethod
    def check_ablation_flags(args):
        if getattr(args, "slot_query_stream", False):
            raise ValueError("--slot-query-stream is InsNet's: InDIGO predicts the word from h_t (--arch indigo_*)")
        if args.offset_clip not in (0, 1):
            raise ValueError(f"InDIGO's relative positions are left / self / right: --offset-clip is 1, "
                             f"got {args.offset_clip}")
        args.offset_clip = 1


@register_model_architecture("indigo", "indigo_base")
def indigo_base_architecture(args):
    """6+6 layers, d=512, 8 heads, FFN 2048 (InsNet's base size); offsets clipped to [-1, 1]."""
    args.offset_clip = 1
    insnet_base_architecture(args)


@register_model_architecture("indigo", "indigo_small")
def indigo_small(args):
    """CPU-sized, as ``insnet_small``: 3+3 layers, d=256, 4 heads, FFN 1024; offsets clipped to [-1, 1]."""
    args.offset_clip = 1
    insnet_small(args)
