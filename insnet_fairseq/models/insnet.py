"""The InsNet model: fairseq's Transformer source encoder + the insertion context encoder
(:mod:`insnet_fairseq.modules.decoder`) + slot heads (:mod:`insnet_fairseq.modules.slots`), registered as
``insnet`` with the architectures ``insnet_base``, ``insnet_big_paper`` and ``insnet_small``; and the same decoder
without a source, ``insnet_lm`` (``insnet_lm_base``, ``insnet_lm_big_paper``, ``insnet_lm_small``), for the task
``insertion_lm`` (see :class:`InsNetLMModel`).

Ablations (paper Table 6), flags of both: ``--offset-clip 1`` (InsNet-truncated: offsets clipped to
[-1, 1]) and ``--no-global-slot`` (InsNet-noglobal: no ``h_t`` in the slot representation).

Model protocol used by the criterion and the generator:

* ``forward(src_tokens, src_lengths, target, order)`` -> named loss terms of a whole insertion
  trajectory, computed in one pass of the context encoder (``token``, ``position``,
  ``termination``; each a dict of logits / target / mask);
* ``forward_encoder`` / ``decoder.encode_source`` / ``decoder.context`` for step-wise decoding.
"""
import logging
import os
from typing import Dict, Optional

import torch
from fairseq import hub_utils
from fairseq.models import (
    FairseqDecoder,
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    register_model,
    register_model_architecture,
)
from fairseq.models.transformer import Embedding, TransformerEncoder, TransformerModel
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from torch import Tensor, nn

from insnet_fairseq import checkpoint_safety
from insnet_fairseq.errors import CheckpointError
from insnet_fairseq.geometry.gaps import gap_targets
from insnet_fairseq.geometry.layers import encoding_order, sequential_layers
from insnet_fairseq.geometry.masks import causal_mask, slot_query_geometry
from insnet_fairseq.geometry.offsets import is_left_to_right, offsets_from_rank, rank_matrix, slot_neighbours
from insnet_fairseq.models.task_fit import check_task_fits
from insnet_fairseq.modules.decoder import InsNetContextEncoder
from insnet_fairseq.modules.packed_linear import pack_linears
from insnet_fairseq.modules.slots import SlotHeads

logger = logging.getLogger(__name__)


def untied_query_weights(state_dict: Dict[str, Tensor], prefix: str, query_layers: nn.ModuleList) -> Dict[str, Tensor]:
    """``PREFIX.query_layers.i.NAME`` for every parameter of ``query_layers``, copied from the tokens' layer
    ``PREFIX.layers.i.NAME`` of ``state_dict``; W_qkv gives its query third (the query layers have no keys).
    Example: ``query_layers.0.self_attn.qkv_proj.weight`` [D, D] = ``layers.0.self_attn.qkv_proj.weight[:D]``."""
    out = {}
    for key, param in query_layers.state_dict().items():
        source = state_dict[f"{prefix}.layers.{key}"]
        out[f"{prefix}.query_layers.{key}"] = source[: param.size(0)].clone()  # (equal sizes: all of it)
    return out


class InsNetDecoder(FairseqDecoder):
    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.context = InsNetContextEncoder(args, embed_tokens)
        tied = embed_tokens if args.share_decoder_input_output_embed else None
        self.heads = SlotHeads(args.decoder_embed_dim, len(dictionary), tied,
                               slot_query=getattr(args, "slot_query_stream", False),
                               global_vector=not getattr(args, "no_global_slot", False),
                               objective=getattr(args, "slot_objective", "position"),
                               last_word=getattr(args, "last_word_head", False))
        self.max_target_positions = args.max_target_positions
        self.termination_every_step = getattr(args, "termination_every_step", False)

    def upgrade_state_dict_named(self, state_dict, name):
        """A checkpoint without the slot query stream (e.g. ``--finetune-from-model`` of an l2r model
        into a ``--slot-query-stream`` one) starts the stream's parameters from their initial values; one
        without untied query layers (``--untied-slot-queries``) starts them as copies of the tokens' layers, so
        that the model computes what the checkpoint's did. A checkpoint of the position objective (the paper's,
        e.g. an l2r model) fine-tuned into ``--slot-objective gap`` drops its position and termination heads, which
        a gap model does not have, and starts the end-of-slot head from its initial values; one without the
        last-word head (``--last-word-head``) starts it from its initial values."""
        if self.context.slot_query is not None and f"{name}.context.slot_query" not in state_dict:
            new = {f"{name}.context.slot_query": self.context.slot_query}
            new.update({f"{name}.heads.query_norm.{k}": v for k, v in self.heads.query_norm.state_dict().items()})
            logger.info(f"the checkpoint has no slot query stream: {', '.join(new)} start from their initial values")
            state_dict.update({k: v.detach().clone() for k, v in new.items()})
        heads = f"{name}.heads"
        if self.heads.objective == "gap" and f"{heads}.done_proj.weight" not in state_dict \
                and f"{heads}.position_proj.weight" in state_dict:  # a position-objective checkpoint, e.g. l2r
            dropped = [k for k in state_dict if k.startswith((f"{heads}.position_proj.", f"{heads}.termination_proj."))]
            for k in dropped:
                del state_dict[k]
            state_dict.update({f"{heads}.done_proj.{k}": v.detach().clone()
                               for k, v in self.heads.done_proj.state_dict().items()})
            logger.info(f"the checkpoint has the position objective: its position and termination heads are dropped, "
                        f"the end-of-slot head {heads}.done_proj starts from its initial values")
        if getattr(self.heads, "last_proj", None) is not None and f"{heads}.last_proj.weight" not in state_dict:
            state_dict.update({f"{heads}.last_proj.{k}": v.detach().clone()
                               for k, v in self.heads.last_proj.state_dict().items()})
            logger.info(f"the checkpoint has no last-word head: {heads}.last_proj starts from its initial values")
        if self.context.query_layers is not None and not any(k.startswith(f"{name}.context.query_layers.")
                                                              for k in state_dict):
            logger.info("the checkpoint has no untied slot query layers: they start as copies of the tokens' layers")
            state_dict.update(untied_query_weights(state_dict, f"{name}.context", self.context.query_layers))
        return state_dict

    def encode_source(self, encoder_out: Dict):
        """fairseq encoder output -> (per-layer cross-attention k/v, source padding mask [B, L] or None).

        Without cross-attention (``insnet_lm``) every layer gets the encoder's empty [B, 0, 0]
        states as its k/v: nothing reads them, but they select rows like real ones."""
        states = encoder_out["encoder_out"][0].transpose(0, 1)  # [L, B, C] -> [B, L, C]
        masks = encoder_out["encoder_padding_mask"]
        padding = masks[0] if len(masks) > 0 else None
        if not self.context.cross_attention:
            return [(states, states)] * len(self.context.layers), padding
        return self.context.project_source(states), padding

    def encode_trajectory(self, target: Tensor, order: Tensor, encoder_out: Dict):
        """The single pass of the context encoder over whole trajectories (see :meth:`forward`).

        target, order [B, n] -> (h [B, n, D] last-layer states in insertion order, per-layer (k, v),
        rank [B, n, n] (:func:`~insnet_fairseq.geometry.offsets.rank_matrix`), tokens [B, n] in
        insertion order, lengths [B], and :meth:`encode_source`'s (k/v, padding) of the source)."""
        n = target.size(1)
        lengths = target.ne(self.padding_idx).sum(1)  # [B]
        steps = torch.arange(n, device=target.device)
        step_pad = steps.unsqueeze(0) >= lengths.unsqueeze(1)  # [B, n] padding is inserted last
        rank = rank_matrix(order, step_pad)  # [B, n, n]
        tokens = target.gather(1, order)  # [B, n] tokens in insertion order
        source_kv, source_pad = self.encode_source(encoder_out)
        h, kv = self.context(tokens, offsets_from_rank(rank), causal_mask(n, target.device), source_kv, source_pad,
                             left_to_right=is_left_to_right(order, step_pad))
        return h, kv, rank, tokens, lengths, source_kv, source_pad

    def forward(
        self, target: Tensor, order: Tensor, encoder_out: Dict, context: Optional[Tensor] = None,
        return_states: bool = False,
    ) -> Dict[str, Dict[str, Tensor]]:
        """One pass over whole insertion trajectories, sequential or layered (InsNet-Dinic).

        Args:
            target: [B, n] ``<s> y </s>`` in final-position order, right-padded.
            order: [B, n] final position inserted at each step (padded steps after real ones).
            encoder_out: fairseq encoder output.
            context: optional [B, n] (see :mod:`insnet_fairseq.geometry.layers`): ``context[b, t]`` is the last step
                of the context that step ``t``'s token is inserted into (``t - 1`` when sequential,
                the default). In a layered trajectory every token of a layer shares its context
                (the earlier layers), so the layer's tokens are predicted in parallel: token and
                position terms at their slots in that context, whose last token is the global
                vector, and one termination term per layer (at each context and the last step; with
                ``--termination-every-step`` one after every token, as in sequential training).
                The context encoding is the same single pass over ``order`` either way.

        Returns named terms (T = n - 2 prediction steps t = 1..n-2, K = n - 2 slots):
            token: logits [N, V] and target [N] for the N real steps (``position.mask``), and ``neighbours``: the
                tokens left and right of each one's slot in its context ([2, N]: row 0 left, row 1 right)
            position: logits [B, T, K] (-inf at slots that do not exist), target [B, T], mask
            termination: logits [B, n - 1] for t = 1..n-1, target (1 at the last step), mask
        and with ``return_states`` also ``states``: :meth:`encode_trajectory`'s tensors of this pass.
        """
        B, n = target.shape
        device = target.device
        steps = torch.arange(n, device=device)
        h, kv, rank, tokens, lengths, source_kv, source_pad = self.encode_trajectory(target, order, encoder_out)

        T = n - 2
        pred = steps[1 : n - 1]  # [T] sequential contexts t = 1..n-2
        ctx = pred.expand(B, T) if context is None else context[:, 2:].clamp(1, n - 2)  # [B, T] per token
        step_valid = pred.unsqueeze(0) < (lengths - 1).unsqueeze(1)  # [B, T]: token step t + 1 <= len - 1
        left_all, right_all = slot_neighbours(rank)  # [B, n, n]
        left, right = left_all[:, 1 : n - 1, :T], right_all[:, 1 : n - 1, :T]  # [B, T, K]

        pos_logits = self.heads.position_logits(h, pred, left, right)  # [B, T(context), K]
        if context is not None:  # row of each token's context                    [B, T(token), K]
            pos_logits = pos_logits.gather(1, (ctx - 1).unsqueeze(2).expand(-1, -1, T))
        slot_exists = steps[:T].view(1, 1, T) < ctx.unsqueeze(2)  # [B, T, K]: k < context
        pos_logits = pos_logits.masked_fill(~slot_exists, float("-inf"))
        # slot of token t + 1 in its context: rank[ctx, t + 1] - 1                   [B, T]
        slot = rank[:, :, 2:].gather(1, ctx.unsqueeze(1)).squeeze(1) - 1
        slot = torch.minimum(slot.clamp_min(0), ctx - 1)  # in range on padded steps
        row = lambda m: m.gather(1, ctx.unsqueeze(2).expand(-1, -1, n))  # noqa: E731  [B, T, n]
        left_t = row(left_all).gather(2, slot.unsqueeze(2)).squeeze(2)  # [B, T]
        right_t = row(right_all).gather(2, slot.unsqueeze(2)).squeeze(2)  # [B, T]
        e = self.heads.target_slot_repr(h, ctx, left_t, right_t)  # [B, T, D]
        z = None
        if self.context.slot_query is not None:  # --slot-query-stream: one query per predicted token
            geometry = slot_query_geometry(row(rank), steps[2:].expand(B, T), ctx)
            z = self.context.query_stream(*geometry, kv, source_kv, source_pad)

        term_steps = steps[1:]  # [n - 1]
        is_last = term_steps.unsqueeze(0) == (lengths - 1).unsqueeze(1)  # [B, n - 1]
        term_mask = term_steps.unsqueeze(0) <= (lengths - 1).unsqueeze(1)
        if context is not None and not self.termination_every_step:  # one per layer: at every context, and the end
            layer_end = torch.zeros(B, n, dtype=torch.bool, device=device)
            layer_end.scatter_(1, torch.where(step_valid, ctx, torch.zeros_like(ctx)), True)
            term_mask = term_mask & (layer_end[:, 1:] | is_last)
        out = {
            # only real steps reach the vocabulary projection: [N, V], N = sum(len - 2)
            "token": {
                "logits": self.heads.token_logits(e[step_valid], None if z is None else z[step_valid]),
                "target": tokens[:, 2:][step_valid],
                # the words left and right of each token's slot in its context, [2, N] (--repeat-penalty)
                "neighbours": torch.stack([tokens.gather(1, left_t)[step_valid], tokens.gather(1, right_t)[step_valid]]),
            },
            "position": {"logits": pos_logits, "target": slot, "mask": step_valid},
            "termination": {
                "logits": self.heads.termination_logit(h[:, 1:]),
                "target": is_last.to(h.dtype),
                "mask": term_mask,
            },
        }
        if return_states:  # the pass's context states (:meth:`encode_trajectory`): --dinic-lagged's promotions
            out["states"] = (h, kv, rank, tokens, lengths, source_kv, source_pad)
        return out

    def forward_gaps(self, target: Tensor, layers: Tensor, encoder_out: Dict, foreign: Optional[Tensor] = None,
                     slot_weight: Optional[Tensor] = None) -> Dict[str, Dict[str, Tensor]]:
        """One pass over whole layered trajectories, scored by the end-of-slot objective (``--slot-objective gap``).

        Args:
            target: [B, n] ``<s> y </s>`` in final-position order, right-padded.
            layers: [B, n] the layering, by position (:mod:`insnet_fairseq.geometry.layers`); its encoding order
                (:func:`~insnet_fairseq.geometry.layers.encoding_order`) is the pass's insertion order.
            foreign: [B, n] bool or None: words of a decoded canvas the reference lacks (``--on-policy``), never
                missing from a gap and not counted as target words.
            slot_weight: [B, L, n] or None: the slots to score and their weights
                (:func:`~insnet_fairseq.geometry.gaps.sample_slots`, ``--gap-slot-rate``); None: every slot, weight 1.

        After every layer l the context holds the tokens of layers <= l, a prefix of that order, so each of its
        slots is scored from states of this one pass: ``e = LN(concat(f_l(h_left), f_r(h_right)) + h_g)``, h_g the
        context's last token (:func:`~insnet_fairseq.geometry.gaps.gap_targets` lists the slots and the words each
        misses). Returns ``{"gap": terms}`` with S slots, S_open of them missing words, P missing words:
            done_logits [S], done [S] bool (the end-of-slot target);
            token_logits [S_open, V] (the slots that miss words only: no vocabulary product at a done slot);
            pair_slot [P] (row of token_logits), pair_target [P] (the word), distance [P] (its distance to its gap's
            centre: :func:`~insnet_fairseq.geometry.gaps.gap_weights`); slot_weight [S] or None; words: the batch's
            target words (0-dim); with ``--last-word-head`` last_logits [S_open] (q(last) of the slots that miss
            words: the target is that a slot misses exactly one).
        """
        order = encoding_order(layers)
        h, kv, rank, _, lengths, source_kv, source_pad = self.encode_trajectory(target, order, encoder_out)
        t = gap_targets(layers, lengths, foreign, slot_weight)
        step_of = order.argsort(1)  # [B, n] final position -> step
        glob = t.context_last[t.row, t.end]  # [S] the step of each slot's global vector
        left_step = step_of[t.row, t.left]
        e = self.heads.slot_repr(h[t.row, left_step], h[t.row, step_of[t.row, t.right]], h[t.row, glob])  # [S, D]
        z = None
        if self.context.slot_query is not None:  # --slot-query-stream: a query at every slot of every layer end
            z = self.gap_slot_queries(rank, t.row, glob, left_step, kv, source_kv, source_pad)  # [S, D]
        open_slots = ~t.done
        open_row = open_slots.long().cumsum(0) - 1  # [S] row of an open slot among the open ones
        last = {}
        if getattr(self.heads, "last_proj", None) is not None:  # --last-word-head
            last["last_logits"] = self.heads.last_logit(e[open_slots], None if z is None else z[open_slots])
        return {"gap": {**last,
            "done_logits": self.heads.done_logit(e, z), "done": t.done,
            "token_logits": self.heads.token_logits(e[open_slots], None if z is None else z[open_slots]),
            "pair_slot": open_row[t.slot], "pair_target": target[t.row[t.slot], t.word],
            "distance": t.distance, "slot_weight": t.weight,
            "words": (lengths - 2 - (0 if foreign is None else foreign.sum(1))).clamp_min(0).sum(),
        }}

    def gap_slot_queries(self, rank: Tensor, row: Tensor, ctx: Tensor, left_step: Tensor, kv, source_kv,
                         source_pad) -> Tensor:
        """The slot query of each of S slots (``--slot-query-stream`` with ``--slot-objective gap``): it reads its
        context, the tokens of steps <= ``ctx`` [S], at the offsets a word inserted there would see, right of the
        token of step ``left_step`` [S]; ``row`` [S] its sentence, ``rank`` [B, n, n] the pass's rank matrix, ``kv``
        its keys/values. The slots of a sentence are batched as its queries. -> z [S, D]."""
        B, n = rank.shape[:2]
        counts = torch.bincount(row, minlength=B)
        Q = int(counts.max()) if row.numel() else 0
        within = torch.arange(row.numel(), device=row.device) - (counts.cumsum(0) - counts)[row]  # [S]
        context_rank = rank[row, ctx]  # [S, n] where each token is, or would go, in the slot's context
        p = context_rank.gather(1, left_step.unsqueeze(1)) + 1  # [S, 1] the word's rank once inserted
        offsets = torch.zeros(B, Q, n, dtype=torch.long, device=rank.device)
        offsets[row, within] = (context_rank - p + (context_rank >= p).long()).clamp(-(n - 1), n - 1)
        blocked = torch.ones(B, Q, n, dtype=torch.bool, device=rank.device)
        blocked[:, :, 0] = False  # a padding query reads <s> (its output is never used)
        blocked[row, within] = torch.arange(n, device=rank.device).unsqueeze(0) > ctx.unsqueeze(1)
        return self.context.query_stream(offsets, blocked, kv, source_kv, source_pad)[row, within]

    def max_positions(self):
        return self.max_target_positions - 1  # <s> is prepended to fairseq's target

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        raise NotImplementedError("InsNet scores slots, not next tokens: use the insertion generator")


@register_model("insnet")
class InsNetModel(FairseqEncoderDecoderModel):
    decoder_class = InsNetDecoder  # IndigoModel: the same encoders with InDIGO's heads
    # how the model judges another's candidates (--iter-decode-with-external-reranker, decoding/rerank.py):
    # "insnet", scored along a trajectory; None where it cannot judge (InDIGO, the LM); fairseq's
    # autoregressive models, without the attribute, by teacher forcing
    judge_kind = "insnet"

    def __init__(self, args, encoder, decoder):
        super().__init__(encoder, decoder)
        self.args = args
        pack_linears(self)  # fairseq's encoder inside it too: oneDNN's products on a CPU (modules/packed_linear.py)

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument(
            "--offset-embedding", choices=["sinusoidal", "learned"],
            help="embedding of insertion offsets fed to W_kR (default: sinusoidal)",
        )
        parser.add_argument(
            "--slot-query-stream", action="store_true",
            help="predict each word also from a query stream that sits at its slot and reads its whole "
            "context with offsets relative to the slot (XLNet-style two-stream attention); with --slot-objective "
            "gap, a query at every slot of every layer end, read by the token and end-of-slot heads",
        )
        parser.add_argument(
            "--untied-slot-queries", action="store_true",
            help="with --slot-query-stream: the query stream gets layers of its own (query, offset and output "
            "projections, FFN, LayerNorms) that read the tokens' keys and values; fine-tuning a checkpoint without "
            "them starts them as copies of the tokens' layers",
        )
        parser.add_argument(
            "--slot-query-layers", type=int, metavar="K",
            help="with --slot-query-stream: each slot query starts at the decoder's last K layers and reads the "
            "tokens' keys and values there only, so a query costs K layers instead of all of them (default 0: "
            "every layer)",
        )
        parser.add_argument(
            "--slot-objective", choices=["position", "gap"],
            help="what the slots learn: position (the paper: each step's word, its slot among the step's slots and "
            "q(stop)) or gap (every slot of every layer end: the words still missing in its gap, softly weighted "
            "around its centre, or end-of-slot; decoded by filling every slot that is not done; default: position)",
        )
        parser.add_argument(
            "--last-word-head", action="store_true",
            help="with --slot-objective gap: a head q(last | slot), trained on the slots that miss words, says that "
            "a slot's gap misses exactly one word; decoding then shuts the two slots of the word it takes, and a "
            "sentence whose every slot is shut ends without a pass that encodes its last words (--last-word)",
        )
        parser.add_argument(
            "--offset-clip", type=int, metavar="K",
            help="ablation InsNet-truncated (paper Table 6, K = 1): clip every insertion offset to [-K, K] "
            "before its embedding (default 0: no clipping)",
        )
        parser.add_argument(
            "--no-global-slot", action="store_true",
            help="ablation InsNet-noglobal (paper Table 6): slot representation LayerNorm(concat(f_l(h_l), "
            "f_r(h_r))) without the global vector h_t (termination still reads h_t)",
        )
        parser.add_argument(
            "--termination-every-step", action="store_true",
            help="layered training (--layerization / --dinic-tau): train the termination head after every "
            "token, as sequential training does (continue inside a layer too), not only at each layer's end: "
            "parallel decoding meets part-filled layers when it skips or misses slots",
        )

    @staticmethod
    def check_ablation_flags(args):
        if getattr(args, "untied_slot_queries", False) and not args.slot_query_stream:
            raise ValueError("--untied-slot-queries needs --slot-query-stream (the stream whose layers it unties)")
        k = args.slot_query_layers
        if k and not args.slot_query_stream:
            raise ValueError("--slot-query-layers needs --slot-query-stream (the stream whose layers it sets)")
        if not 0 <= k <= args.decoder_layers:
            raise ValueError(f"--slot-query-layers must be in [0, --decoder-layers ({args.decoder_layers})] "
                             f"(0: every layer), got {k}")
        if args.last_word_head and args.slot_objective != "gap":
            raise ValueError("--last-word-head needs --slot-objective gap (the objective whose slots it reads)")
        if 0 < k < args.decoder_layers and args.untied_slot_queries:
            raise ValueError("--slot-query-layers below --decoder-layers and --untied-slot-queries: choose one")
        if args.offset_clip < 0:
            raise ValueError(f"--offset-clip must be >= 0 (0: no clipping; 1: InsNet-truncated), got {args.offset_clip}")

    @classmethod
    def build_model(cls, args, task):
        check_task_fits(cls, args, task)
        if getattr(getattr(task, "cfg", None), "searched_order_beam", 0) and cls.decoder_class is InsNetDecoder:
            raise ValueError("--searched-order-beam is InDIGO's searched adaptive order: train it with --arch indigo_*")
        insnet_base_architecture(args)
        cls.check_ablation_flags(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary

        def embedding(dictionary, dim):
            return Embedding(len(dictionary), dim, dictionary.pad())

        if args.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError(
                    "--share-all-embeddings needs one joined dictionary, but the source dictionary "
                    f"({len(src_dict)} types) and target dictionary ({len(tgt_dict)} types) differ: "
                    "re-run fairseq-preprocess with --joined-dictionary or drop --share-all-embeddings"
                )
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise ValueError("--share-all-embeddings requires --encoder-embed-dim == --decoder-embed-dim")
            enc_emb = dec_emb = embedding(src_dict, args.encoder_embed_dim)
            args.share_decoder_input_output_embed = True
        else:
            enc_emb = embedding(src_dict, args.encoder_embed_dim)
            dec_emb = embedding(tgt_dict, args.decoder_embed_dim)
        encoder = TransformerEncoder(args, src_dict, enc_emb)
        decoder = cls.decoder_class(args, tgt_dict, dec_emb)
        return cls(args, encoder, decoder)

    def forward(self, src_tokens, src_lengths, target, order, context=None, return_states=False, layers=None,
                foreign=None, slot_weight=None, **kwargs):
        """Named loss terms of whole trajectories in one pass (:meth:`InsNetDecoder.forward`); a model trained with
        ``--slot-objective gap`` scores the layering ``layers`` [B, n] (None: ``order`` one word a layer) by its
        slots' gap targets (:meth:`InsNetDecoder.forward_gaps`; ``foreign``: an on-policy canvas's words the
        reference lacks; ``slot_weight``: the slots drawn by ``--gap-slot-rate``)."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        if getattr(self.decoder.heads, "objective", "position") == "gap":
            if layers is None:
                layers = sequential_layers(order, target.ne(self.decoder.padding_idx).sum(1))
            return self.decoder.forward_gaps(target, layers, encoder_out, foreign, slot_weight)
        if return_states:  # InsNetDecoder only (InDIGO trains sequentially, without --dinic-lagged)
            return self.decoder(target, order, encoder_out, context, return_states=True)
        return self.decoder(target, order, encoder_out, context)

    def forward_encoder(self, src_tokens, src_lengths):
        return self.encoder(src_tokens, src_lengths=src_lengths)

    def max_positions(self):
        return (self.encoder.max_positions(), self.decoder.max_positions())

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's hub loading (``kwargs`` override the checkpoint's settings, e.g.
        ``insertion_mode="parallel"``); returns an :class:`insnet_fairseq.decoding.hub.InsNetHubInterface`, whose
        ``translate(lines)`` gives one output per line, in order, whatever the lines hold. The checkpoint's task
        builds it (``hub_interface``)."""
        try:
            x = hub_utils.from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path,
                                          archive_map=cls.hub_models(), **kwargs)
        except Exception as e:  # a checkpoint weights-only loading refused: one message naming the file and class
            path = os.path.join(model_name_or_path, checkpoint_file)
            refused = checkpoint_safety.refusal(path, e) if os.path.isfile(path) else ""
            if refused:
                raise CheckpointError(refused) from e
            raise
        return x["task"].hub_interface(x["args"], x["models"])


class NoSourceEncoder(FairseqEncoder):
    """The encoder of ``insnet_lm``: no source, no parameters. Its output has fairseq's encoder keys with
    an empty source (``encoder_out`` [0, B, 0], ``encoder_padding_mask`` [B, 0]), so that everything that
    takes an encoder output (training, layerization, the generator, the reference procedures) runs
    unchanged; the decoder, built without cross-attention, never reads it."""

    def __init__(self, dictionary, max_source_positions: int = 1024):
        super().__init__(dictionary)
        self.max_source_positions = max_source_positions

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        B = src_tokens.size(0)
        return {
            "encoder_out": [src_tokens.new_zeros((0, B, 0), dtype=torch.float)],
            "encoder_padding_mask": [src_tokens.new_zeros((B, 0), dtype=torch.bool)],
        }

    def reorder_encoder_out(self, encoder_out, new_order):
        return {"encoder_out": [encoder_out["encoder_out"][0].index_select(1, new_order)],
                "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)]}

    def max_positions(self):
        return self.max_source_positions


@register_model("insnet_lm")
class InsNetLMModel(InsNetModel):
    """InsNet as a language model (task ``insertion_lm``, paper section 4.1): the InsNet decoder with
    **no source encoder** and **no cross-attention**: every layer is offset self-attention -> FFN
    (``no_cross_attention``, set by the ``insnet_lm_*`` architectures), and ``encoder`` is a
    :class:`NoSourceEncoder`, without parameters, kept so that the model has the translation
    model's interface (``forward(src_tokens, src_lengths, target, order, context)``). The source
    side of an ``insertion_lm`` batch holds the sentence's keywords (the constrained start of
    decoding), which the model never encodes. The translation model is unchanged."""

    judge_kind = None  # it has no source to judge a translation by
    language_model = True  # built for insertion_lm only (models/task_fit.py)
    @classmethod
    def build_model(cls, args, task):
        check_task_fits(cls, args, task)
        insnet_lm_base_architecture(args)
        cls.check_ablation_flags(args)
        dictionary = task.target_dictionary
        if args.share_all_embeddings:  # one dictionary: the decoder's input and output embeddings
            args.share_decoder_input_output_embed = True
        embed = Embedding(len(dictionary), args.decoder_embed_dim, dictionary.pad())
        encoder = NoSourceEncoder(dictionary, args.max_source_positions)
        return cls(args, encoder, InsNetDecoder(args, dictionary, embed))


@register_model_architecture("insnet", "insnet_base")
def insnet_base_architecture(args):
    """6+6 layers, d=512, 8 heads, FFN 2048: the standard NAT setting."""
    args.dropout = getattr(args, "dropout", 0.3)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", True)
    args.offset_embedding = getattr(args, "offset_embedding", None) or "sinusoidal"
    args.slot_query_stream = getattr(args, "slot_query_stream", False)
    args.untied_slot_queries = getattr(args, "untied_slot_queries", False)
    args.slot_query_layers = getattr(args, "slot_query_layers", None) or 0
    args.offset_clip = getattr(args, "offset_clip", None) or 0
    args.slot_objective = getattr(args, "slot_objective", None) or "position"
    args.last_word_head = getattr(args, "last_word_head", False)
    args.no_global_slot = getattr(args, "no_global_slot", False)
    args.termination_every_step = getattr(args, "termination_every_step", False)
    args.max_source_positions = getattr(args, "max_source_positions", None) or 1024
    args.max_target_positions = getattr(args, "max_target_positions", None) or 1024
    transformer_base_architecture(args)


def set_defaults(args, **values) -> None:
    """Set each of ``values`` that the flags did not set (an architecture's sizes: the command line wins)."""
    for name, value in values.items():
        setattr(args, name, getattr(args, name, value))


@register_model_architecture("insnet", "insnet_big_paper")
def insnet_big_paper(args):
    """The paper appendix's setting: 12+12 layers, d=768, 12 heads, FFN 3072, dropout 0.1."""
    set_defaults(args, encoder_layers=12, decoder_layers=12, encoder_embed_dim=768, encoder_ffn_embed_dim=3072,
                 encoder_attention_heads=12, decoder_attention_heads=12, dropout=0.1)
    insnet_base_architecture(args)


def small_size(args):
    """The CPU-sized models' shape (the results tables'), where a flag does not set it: 3+3 layers, d=256,
    4 heads, FFN 1024, dropout 0.1 (the decoder's width and FFN follow the encoder's in fairseq's defaults)."""
    set_defaults(args, encoder_layers=3, decoder_layers=3, encoder_embed_dim=256, encoder_ffn_embed_dim=1024,
                 encoder_attention_heads=4, decoder_attention_heads=4, dropout=0.1)


@register_model_architecture("insnet", "insnet_small")
def insnet_small(args):
    """CPU-sized: 3+3 layers, d=256, 4 heads, FFN 1024."""
    small_size(args)
    insnet_base_architecture(args)


def _lm_decoder(args, layers, dim, ffn, heads, dropout):
    """Decoder sizes of an ``insnet_lm_*`` architecture (command-line flags win)."""
    set_defaults(args, decoder_layers=layers, decoder_embed_dim=dim, decoder_ffn_embed_dim=ffn,
                 decoder_attention_heads=heads, dropout=dropout)
    insnet_lm_base_architecture(args)


@register_model_architecture("insnet_lm", "insnet_lm_base")
def insnet_lm_base_architecture(args):
    """InsNet language model (no source, no cross-attention): 6 layers, d=512, 8 heads, FFN 2048."""
    set_defaults(args, decoder_layers=6, decoder_embed_dim=512, decoder_ffn_embed_dim=2048, decoder_attention_heads=8)
    # the (unused) encoder sizes follow the decoder's, so that fairseq's defaults stay consistent
    set_defaults(args, encoder_embed_dim=args.decoder_embed_dim, encoder_layers=0)
    args.no_cross_attention = True
    insnet_base_architecture(args)


@register_model_architecture("insnet_lm", "insnet_lm_big_paper")
def insnet_lm_big_paper(args):
    """The paper's generation model (appendix A.1): 12 layers, d=768, 12 heads, FFN 3072, dropout 0.1."""
    _lm_decoder(args, 12, 768, 3072, 12, 0.1)


@register_model_architecture("insnet_lm", "insnet_lm_small")
def insnet_lm_small(args):
    """CPU-sized: 3 layers, d=256, 4 heads, FFN 1024 (the decoder of ``insnet_small``)."""
    _lm_decoder(args, 3, 256, 1024, 4, 0.1)
