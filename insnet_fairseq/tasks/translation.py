"""Task ``insertion_translation``: fairseq bitext, batched as insertion trajectories."""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import torch

from fairseq import utils
from fairseq.distributed import utils as distributed_utils
from fairseq.dataclass import ChoiceEnum
from omegaconf import II
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from insnet_fairseq.data.dataset import InsertionPairDataset
from insnet_fairseq.decoding.flags import (COMPILE_MODES, MODES, check_beam_flags, check_decoding_flags,
                                          check_verify_flags)
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.inputs import screen_lines
from insnet_fairseq.decoding.rerank import JUDGE_ORDERS
from insnet_fairseq.data.layerization import (LAYERIZATIONS, PAD_LAYER, compact, delay_last_words, layerize,
                                              num_layers, promotions_from_states, sequential_layers,
                                              token_logprobs_by_step, trajectory, uniform_layers)
from insnet_fairseq.data.orders import (DEFAULT_ANCHOR_DEPTH, GIVEN_POLICIES, LEVEL_POLICIES, ORDER_POLICIES,
                                       TREE_POLICIES)
from insnet_fairseq.data.searched_order import search_orders

logger = logging.getLogger(__name__)

DEFAULT_ORDER = "l2r"  # chosen by the Multi30k comparison in the README


@dataclass
class InsertionTranslationConfig(TranslationConfig):
    insertion_order: ChoiceEnum(list(ORDER_POLICIES)) = field(
        default=DEFAULT_ORDER,
        metadata={
            "help": "insertion order of training targets: l2r (left to right), r2l (right to left), random "
            "(uniform permutation), binary (middle word of every gap first, level by level), anchored (the "
            "top --anchor-depth binary levels, then every gap left to right, all gaps in parallel), keywords "
            "(insertion_lm: the sentence's keywords first, then every gap left to right, all gaps in parallel), "
            "dependency (insertion_lm: level by level down the sentence's binarised dependency parse, {split}.deps); "
            "<s> and </s> always come first"
        },
    )
    anchor_depth: int = field(
        default=DEFAULT_ANCHOR_DEPTH,
        metadata={"help": "--insertion-order anchored: binary-tree levels inserted before the gaps fill left to "
                  "right (0: l2r; 2: 3 anchors, 4 gaps filled in parallel)"},
    )
    insertion_mode: ChoiceEnum(list(MODES)) = field(
        default="sequential",
        metadata={"help": "decoding: sequential (one token per step, at the best slot) or parallel "
                  "(every slot in the top --slot-top-p of the position distribution mass)"},
    )
    slot_top_p: float = field(
        default=0.7, metadata={"help": "parallel decoding: probability mass of the slots filled per step"}
    )
    max_insertion_steps: int = field(
        default=0, metadata={"help": "step cap per sentence; 0: 2 * source length + 10 (outputs are also "
                             "capped at 2 * source length + 10 tokens)"}
    )
    skip_repeats: bool = field(
        default=False,
        metadata={"help": "do not insert a token equal to a neighbour of its slot (the slot stays open): removes "
                  "the duplicated words of parallel decoding"},
    )
    replace_repeats: bool = field(
        default=False,
        metadata={"help": "a token equal to a neighbour of its slot is replaced by the slot's best token that is "
                  "neither neighbour (instead of --skip-repeats' leaving the slot open)"},
    )
    min_token_prob: float = field(
        default=0.0,
        metadata={"help": "parallel decoding: leave a slot open for a later step when its token's probability is "
                  "below this (every step keeps each sentence's most likely insertion); 0: off"},
    )
    stop_threshold: float = field(
        default=0.5,
        metadata={"help": "a sentence stops when the termination head's q(stop) exceeds this (higher: longer outputs)"},
    )
    stop_check_prob: float = field(
        default=0.0,
        metadata={"help": "a sentence that the termination head stops gets one more step, inserting the best words of "
                  "the open slots that have at least this probability and repeat neither neighbour (the stop head "
                  "of a layered model stops with words missing); 0: off"},
    )
    min_length_ratio: float = field(
        default=0.0,
        metadata={"help": "a sentence does not stop (whatever q(stop) says) before it has this many words per "
                  "source word (without </s>); while held back it inserts one word per step; 0: off"},
    )
    dedupe: bool = field(
        default=False,
        metadata={"help": "drop every output token equal to its left neighbour once a sentence is finished"},
    )
    insertion_candidates: int = field(
        default=1,
        metadata={"help": "decode K candidates of every sentence side by side, whose first step's words are their "
                  "K most probable (with --sampling: K samples), and output the one of highest mean log-probability "
                  "per insertion (the model's own score); 1: off"},
    )
    insertion_candidates_finish: int = field(
        default=0,
        metadata={"help": "with --insertion-candidates K: a sentence stops once M of its K candidates have finished, "
                  "dropping the others unfinished, and reports the steps its M-th took; 0: wait for all K"},
    )
    insertion_candidates_mbr: float = field(
        default=0.0,
        metadata={"help": "with --insertion-candidates K: output the candidates best first by minimum Bayes risk, their "
                  "expected BLEU+1 against the sentence's candidates, each weighted by softmax(score / T) (the judge's "
                  "score with --iter-decode-with-external-reranker, else the model's own); inf: uniform weights; "
                  "0: off (best score first)"},
    )
    channel_weight: float = field(
        default=0.0,
        metadata={"help": "with --iter-decode-with-external-reranker: the judge's score adds this weight x the "
                  "source's mean log-probability given the candidate under a target -> source autoregressive "
                  "model, passed third: --path INSNET.pt:AR.pt:REV.pt (noisy-channel reranking); 0: off"},
    )
    judge_order: ChoiceEnum(list(JUDGE_ORDERS)) = field(
        default="l2r",
        metadata={"help": "with --iter-decode-with-external-reranker and an InsNet judge (--path INSNET.pt:JUDGE.pt, "
                  "JUDGE an insnet_* checkpoint): the trajectory it scores each candidate along: l2r, or the "
                  "InsNet-uniform layering of the anchored or binary order (a layered model, e.g. the parallel model "
                  "itself, judged along the levels it was trained on, with --anchor-depth)"},
    )
    insertion_verify: bool = field(
        default=False,
        metadata={"help": "InsNet drafts verified by an autoregressive model, passed last (--path INSNET.pt:AR.pt): "
                  "each draft is accepted up to the first word that is not the AR model's greedy word, which is "
                  "taken instead, and InsNet drafts again after it (blockwise parallel / speculative decoding); the "
                  "output is the AR model's greedy output (at --verify-tolerance 0); steps count drafting steps and "
                  "verification passes"},
    )
    verify_tolerance: float = field(
        default=0.0,
        metadata={"help": "with --insertion-verify: also accept a draft word whose AR log-probability is within this "
                  "many nats of the greedy word's (0: greedy words only)"},
    )
    verify_redraft: str = field(
        default="suffix",
        metadata={"help": "with --insertion-verify: a new draft starts from the accepted words, the correction and "
                  "the old draft's words after it (suffix), or from the accepted words and the correction alone "
                  "(fresh)"},
    )
    insertion_beam: int = field(
        default=1,
        metadata={"help": "beam search over sequential insertions (--insertion-mode sequential): each hypothesis "
                  "extends its B best slots x B best words, or stops; finished hypotheses ranked by log-probability "
                  "(termination, slots, words) / (steps + 1) ** --lenpen; all B are output (--nbest). 1: greedy. "
                  "fairseq's --beam is not read (its default, 5, would change every decoding)"},
    )
    fuse_slot_queries: bool = field(
        default=False,
        metadata={"help": "--slot-query-stream models: each cached decoding step computes the next step's slot queries "
                  "(every slot's) in its own pass: one decoder pass per step instead of two, the same outputs "
                  "(faster at batch 1, slower at large batches: every slot's query is computed)"},
    )
    compile_decoder: ChoiceEnum(list(COMPILE_MODES)) = field(
        default="off",
        metadata={"help": "cached decoding: each step's decoder pass through torch.compile (dynamic shapes) in this "
                  "mode: fewer, fused kernels where a step is bound by the host (a GPU at batch 1); compiled on first "
                  "use (a minute or more), the same outputs within float rounding. off: eager"},
    )
    no_insertion_cache: bool = field(
        default=False, metadata={"help": "re-encode the whole partial sequence every step (for checks and timing)"}
    )
    layerization: Optional[ChoiceEnum(list(LAYERIZATIONS))] = field(
        default=None,
        metadata={"help": "training trajectories: sequential (one token per step), dinic (InsNet-Dinic layers "
                  "learned under --dinic-tau) or uniform (the levels of --insertion-order anchored, else the balanced "
                  "binary tree's, about log2(n) layers); "
                  "default: dinic when --dinic-tau is given, else sequential"},
    )
    dinic_tau: Optional[float] = field(
        default=None,
        metadata={"help": "InsNet-Dinic tolerance in nats: promote a token one layer up when its log-likelihood "
                  "drops by at most tau (-inf: sequential; the paper uses 2.0 for MT, 10/3/1/0.3 for generation)"},
    )
    dinic_interval: int = field(
        default=1, metadata={"help": "re-layer a batch every N updates (1: every batch); between, sentences keep "
                             "their last layering, which later ones continue from"},
    )
    dinic_max_rounds: int = field(
        default=0, metadata={"help": "at most this many promotion rounds per layerization (0: until nothing moves)"}
    )
    dinic_ladder: bool = field(
        default=False, metadata={"help": "lay out a sentence seen for the first time by reaching the fixpoint at "
                                 "0, 0.3, 1, 3, 10 (those below --dinic-tau) before --dinic-tau: the number of layers "
                                 "then never grows with tau, at about three times the promotion rounds"},
    )
    dinic_lagged: bool = field(
        default=False, metadata={"help": "InsNet-Dinic without a layering pass: a training batch trains on its "
                                 "sentences' stored layerings (sequential at first), and one promotion round computed "
                                 "from that training pass's own context states (dropout on) updates them for the next "
                                 "visit, so a layering advances one round per epoch; validation layers as without it"},
    )
    dinic_lagged_warm: bool = field(
        default=False, metadata={"help": "with --dinic-lagged: a sentence seen for the first time is laid out by the "
                                 "layering pass (to the fixpoint, or --dinic-max-rounds rounds) before it trains, so "
                                 "that training starts on Dinic layerings instead of climbing to them one round per "
                                 "epoch; later visits are lagged"},
    )
    late_words: float = field(
        default=0.0, metadata={"help": "layered training (--layerization uniform, --dinic-tau): each word of a "
                               "sentence's last layer moves, with this probability, to a new layer after it, so "
                               "that q(stop) sees partial outputs that look finished but miss words (the state "
                               "where parallel decoding stops too early); 0: off"},
    )
    searched_order_beam: int = field(
        default=0, metadata={"help": "InDIGO's searched adaptive order (--arch indigo_*): each batch's orders are "
                             "found by beam search under the current model, K per sentence, and the batch is trained on "
                             "all K (0: the --insertion-order orders); bootstrap from a model trained with a fixed order"},
    )
    seed: int = II("common.seed")


class DataError(ValueError):
    """Bad or missing data, with the file or directory it concerns."""


def data_paths(data: str, task_name: str, how: str):
    """The task's data directories (``DATA``, ``:``-separated), each checked to exist; ``how`` says
    how to make one (the directory is appended)."""
    paths = utils.split_paths(data) if data else []
    if not paths:
        raise DataError(f"{task_name} needs a data directory (the positional DATA argument)")
    for path in paths:
        if not os.path.isdir(path):
            raise DataError(f"data directory {path!r} does not exist: binarise the corpus first ({how} {path})")
    return paths


@register_task("insertion_translation", dataclass=InsertionTranslationConfig)
class InsertionTranslationTask(TranslationTask):
    cfg: InsertionTranslationConfig

    @classmethod
    def setup_task(cls, cfg: InsertionTranslationConfig, **kwargs):
        paths = data_paths(cfg.data, "insertion_translation", "e.g. `make multi30k`, or fairseq-preprocess --destdir")
        task = super().setup_task(cfg, **kwargs)
        if task.src_dict.bos() != task.tgt_dict.bos():
            raise DataError(f"{paths[0]}: source and target dictionaries disagree on <s>")
        return task

    has_keywords = False  # insertion_lm: its source side holds each sentence's keywords

    def __init__(self, cfg: InsertionTranslationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        mode, tau = cfg.layerization, cfg.dinic_tau
        if mode is None:
            mode = "dinic" if tau is not None else "sequential"
        if mode == "dinic" and tau is None:
            tau = 2.0
        if mode != "dinic" and tau is not None:
            raise ValueError(f"--dinic-tau {tau} only applies to --layerization dinic, not {mode}")
        check_decoding_flags(cfg.insertion_mode, cfg.slot_top_p, cfg.max_insertion_steps, cfg.min_token_prob,
                             cfg.stop_threshold, cfg.stop_check_prob)
        check_beam_flags(cfg.insertion_beam, cfg.insertion_mode, candidates=cfg.insertion_candidates,
                         skip_repeats=cfg.skip_repeats, replace_repeats=cfg.replace_repeats,
                         stop_check_prob=cfg.stop_check_prob, min_token_prob=cfg.min_token_prob)
        check_verify_flags(cfg.insertion_verify, cfg.verify_tolerance, cfg.insertion_candidates, cfg.insertion_beam,
                           redraft=cfg.verify_redraft)
        if cfg.anchor_depth < 0:
            raise ValueError(f"--anchor-depth must be >= 0, got {cfg.anchor_depth}")
        if cfg.searched_order_beam < 0:
            raise ValueError(f"--searched-order-beam must be >= 0, got {cfg.searched_order_beam}")
        if cfg.dinic_interval < 1:
            raise ValueError(f"--dinic-interval must be >= 1, got {cfg.dinic_interval}")
        if not 0.0 <= cfg.late_words < 1.0:
            raise ValueError(f"--late-words must be in [0, 1), got {cfg.late_words}")
        if cfg.late_words > 0 and mode == "sequential":
            raise ValueError("--late-words delays words of the last layer of a layered trajectory: use it with "
                             "--layerization uniform or --dinic-tau")
        if cfg.dinic_lagged and mode != "dinic":
            raise ValueError(f"--dinic-lagged promotes tokens of InsNet-Dinic layerings: use it with --dinic-tau, not "
                             f"--layerization {mode}")
        if cfg.dinic_lagged_warm and not cfg.dinic_lagged:
            raise ValueError("--dinic-lagged-warm lays out a sentence's first visit of --dinic-lagged training: use it "
                             "with --dinic-lagged")
        if cfg.dinic_lagged and cfg.late_words > 0:
            raise ValueError("--dinic-lagged promotes from the layering the training pass encoded, and --late-words "
                             "changes it: use one of them")
        if cfg.insertion_order in GIVEN_POLICIES and not self.has_keywords:
            raise ValueError(f"--insertion-order {cfg.insertion_order} trains on each sentence's keywords: use it with "
                             "--task insertion_lm")
        if cfg.insertion_order in TREE_POLICIES and not self.has_keywords:
            raise ValueError(f"--insertion-order {cfg.insertion_order} trains on each sentence's dependency parse "
                             "({split}.deps, English): use it with --task insertion_lm")
        if mode == "dinic" and cfg.insertion_order in ("l2r", "r2l"):
            logger.warning(f"--layerization dinic with --insertion-order {cfg.insertion_order}: no token of a "
                           "one-directional trajectory can be promoted (every earlier slot is taken); train with "
                           "anchored, binary or random")
        self.layerization, self.dinic_tau = mode, tau
        self.layer_stores = {}  # split -> [sentences, width] the last layering of each sentence (-1: none)
        self.decode_tally = [0, 0, 0, 0]  # sentences, insertion steps, output words, verification passes so far
        # raw-text decoding (fairseq-interactive, the hub interface): lines refused by the input
        # screening ({sample id: reason}) and the sample ids of the next batch (see interactive_fix)
        self.refused_inputs = {}
        self.pending_sample_ids = None

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        dataset = self.datasets[split]
        data_path = utils.split_paths(self.cfg.data)[0]
        for lang, sizes in ((self.cfg.source_lang, dataset.src_sizes), (self.cfg.target_lang, dataset.tgt_sizes)):
            if sizes is None:
                continue
            empty = (sizes <= 1).nonzero()[0]  # only </s>: an empty line before binarisation
            if len(empty):
                lines = ", ".join(str(i + 1) for i in empty[:10])
                path = os.path.join(data_path, f"{split}.{self.cfg.source_lang}-{self.cfg.target_lang}.{lang}")
                raise DataError(
                    f"{path}: {len(empty)} empty sentence(s), line(s) {lines}"
                    f"{' ...' if len(empty) > 10 else ''}; an insertion model needs at least one "
                    "token per target: remove empty lines (from both sides) before fairseq-preprocess"
                )
        self.datasets[split] = InsertionPairDataset(
            dataset, self.cfg.insertion_order, self.tgt_dict.bos(), seed=self.cfg.seed,
            anchor_depth=self.cfg.anchor_depth,
        )

    # -- layered (parallel) training: InsNet-Dinic / InsNet-uniform ----------------------------------
    # The last layering of every sentence is kept by sample id, one store for training and one for
    # validation; a sentence seen again continues from it (a few promotion rounds instead of the
    # climb from the sequential layering). Both travel with the checkpoint (fairseq's extra_state),
    # so a resumed InsNet-Dinic run continues from its layerings instead of restarting from sequential.
    def _store(self, split, ids, n):
        """The store of ``split`` ([sentences, width], -1: none), grown to hold sentences ``ids`` and width ``n``."""
        store = self.layer_stores.get(split, torch.full((0, 0), -1, dtype=torch.int32))
        N, W = store.shape
        if int(ids.max()) >= N or n > W:
            grown = torch.full((max(N, int(ids.max()) + 1), max(W, n)), -1, dtype=torch.int32)
            grown[:N, :W] = store
            self.layer_stores[split] = store = grown
        return store

    def _stored_layers(self, split, ids, lengths, n):
        """The stored layerings of sentences ``ids`` [B] of ``lengths`` [B], [B, n], or None where a
        sentence has none (never laid out, or stored with another length: a layering is valid
        for any sentence of its length, so a store shared by two subsets only costs rounds)."""
        stored = self._store(split, ids, n)[ids.cpu()].long().to(lengths.device)  # [B, W]
        known = stored[:, 0].eq(0) & stored.ge(0).logical_and(stored.lt(PAD_LAYER)).sum(1).eq(lengths)
        beyond = torch.arange(n, device=lengths.device).unsqueeze(0) >= lengths.unsqueeze(1)
        return stored[:, :n].masked_fill(beyond, PAD_LAYER), known  # this batch may be padded wider

    def _keep_layers(self, split, ids, layers):
        """Store the layerings [B, n] of sentences ``ids`` [B] (every data-parallel worker's)."""
        for ids, rows in self._gather_layers(ids.cpu(), layers.int().cpu()):
            self._store(split, ids, rows.size(1))[ids, : rows.size(1)] = rows

    def layer_batch(self, sample, model, update_num=None):
        """Replace the batch's sequential trajectories by layered ones (no-op when sequential).
        ``update_num`` None: a validation batch. Returns the layering [B, n] whose promotions the
        training pass is to compute (--dinic-lagged), else None."""
        if self.layerization == "sequential" or sample is None or "target" not in sample.get("net_input", {}):
            return None
        lagged = None
        net_input = sample["net_input"]
        target, order = net_input["target"], net_input["order"]
        lengths = target.ne(self.tgt_dict.pad()).sum(1)
        if self.layerization == "uniform":
            policy = self.cfg.insertion_order if self.cfg.insertion_order in LEVEL_POLICIES else "binary"
            layers = uniform_layers(lengths, target.size(1), policy, self.cfg.anchor_depth, sample.get("given"),
                                    sample.get("levels"))
        else:
            split = "valid" if update_num is None else "train"
            stored, known = self._stored_layers(split, sample["id"], lengths, target.size(1))
            start = None
            if bool(known.any()):
                start = torch.where(known.unsqueeze(1), stored, sequential_layers(order, lengths))
            due = update_num is None or update_num % self.cfg.dinic_interval == 0
            if due and not (self.cfg.dinic_lagged and update_num is not None):
                layers, _ = layerize(model, net_input["src_tokens"], net_input["src_lengths"], target, order,
                                     self.dinic_tau, start=start, max_rounds=self.cfg.dinic_max_rounds,
                                     ladder=self.cfg.dinic_ladder)
            else:
                layers = start if start is not None else sequential_layers(order, lengths)
                if self.cfg.dinic_lagged_warm and update_num is not None and not bool(known.all()):
                    new = (~known).nonzero().squeeze(1)  # first visits: the layering pass, those rows alone
                    fresh, _ = layerize(model, net_input["src_tokens"][new], net_input["src_lengths"][new],
                                        target[new], order[new], self.dinic_tau, max_rounds=self.cfg.dinic_max_rounds,
                                        ladder=self.cfg.dinic_ladder)
                    layers = layers.index_copy(0, new, fresh.to(layers.dtype))
                lagged = layers if due else None
            self._keep_layers(split, sample["id"], layers)
        if self.cfg.late_words > 0 and update_num is not None:  # --late-words: training batches only
            g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + int(update_num))
            u = torch.rand(layers.shape, generator=g).to(layers.device)
            layers = delay_last_words(layers, u, self.cfg.late_words)
        net_input["order"], net_input["context"] = trajectory(layers)
        sample["layers"] = num_layers(layers)
        return lagged

    def promote_lagged(self, sample, model, layers, net_output):
        """--dinic-lagged: one promotion round of the training batch's ``layers`` [B, n] from its training
        pass (``net_output``: its context states, and its token log-probabilities as the words' scores at
        their slots now; heads in eval mode for the scores one layer up, no gradient), stored for the
        sentences' next visit."""
        h, kv, rank, tokens, lengths, source_kv, source_pad = net_output["states"]
        current = token_logprobs_by_step(net_output["token"], lengths, layers.size(1))
        detach = lambda pairs: [(k.detach(), v.detach()) for k, v in pairs]  # noqa: E731
        was_training = model.training
        model.eval()
        try:
            up = promotions_from_states(model.decoder, layers, h.detach(), detach(kv), rank, tokens, lengths,
                                        detach(source_kv), source_pad, self.dinic_tau, current=current)
        finally:
            model.train(was_training)
        self._keep_layers("train", sample["id"], compact(layers - up.long()))

    @staticmethod
    def _gather_layers(ids, layers):
        """[(ids [B], layers [B, n])] of every data-parallel worker (this one's alone when training is
        not distributed), so that every worker's store holds every sentence's last layering: a
        sentence laid out by one worker in one epoch continues from it on another in the next."""
        world = distributed_utils.get_data_parallel_world_size() if torch.distributed.is_initialized() else 1
        if world == 1:
            return [(ids, layers)]
        parts = [None] * world
        torch.distributed.all_gather_object(parts, (ids, layers), group=distributed_utils.get_data_parallel_group())
        return parts

    def get_checkpoint_dict(self):
        return {type(self).__name__: {f"layer_store{'' if k == 'train' else '_' + k}": v
                                      for k, v in self.layer_stores.items()}}

    def set_checkpoint_dict(self, state):
        for split in ("train", "valid"):
            store = state.get("layer_store" if split == "train" else f"layer_store_{split}")
            if store is not None and store.numel():
                self.layer_stores[split] = store.to(torch.int32)
                name = "training" if split == "train" else "validation"
                logger.info(f"restored the layerings of {int(store[:, 0].eq(0).sum())} {name} sentences")

    def order_batch(self, sample, model):
        """--searched-order-beam K: replace the batch's orders by the K best under the model (InDIGO's SAO,
        :func:`insnet_fairseq.data.searched_order.search_orders`; dropout as the model is set, on in
        training as in the paper), every sentence repeated K times."""
        beam = self.cfg.searched_order_beam
        if beam == 0 or sample is None or "target" not in sample.get("net_input", {}):
            return
        ni = sample["net_input"]
        orders = search_orders(model, ni["src_tokens"], ni["src_lengths"], ni["target"], beam)
        repeat = lambda x: x.repeat_interleave(beam, 0)  # noqa: E731
        for key in ("src_tokens", "src_lengths", "target"):
            ni[key] = repeat(ni[key])
        ni["order"] = orders
        for key in ("target", "id"):
            if sample.get(key) is not None:
                sample[key] = repeat(sample[key])
        sample["ntokens"] = sample["ntokens"] * beam
        sample["nsentences"] = sample["nsentences"] * beam

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        self.order_batch(sample, model)
        lagged = self.layer_batch(sample, model, update_num)
        if lagged is None or ignore_grad:
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        captured = []  # --dinic-lagged: the training pass's output, with its states
        handle = model.register_forward_hook(lambda module, inputs, output: captured.append(output))
        sample["net_input"]["return_states"] = True
        try:
            result = super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        finally:
            handle.remove()
            del sample["net_input"]["return_states"]
        self.promote_lagged(sample, model, lagged, captured[-1])
        return result

    def valid_step(self, sample, model, criterion):
        self.order_batch(sample, model)
        self.layer_batch(sample, model)
        return super().valid_step(sample, model, criterion)

    def screen_inference_lines(self, lines, first_id, encode_fn, max_positions, constrained=False, max_tokens=None):
        """Check raw lines ``first_id``, ... before batching (:func:`insnet_fairseq.decoding.inputs.screen_lines`): returns the lines
        to batch; refused ones become empty and are remembered, to be answered with an empty output."""
        lines, self.refused_inputs = screen_lines(lines, first_id, encode_fn, self.source_dictionary,
                                                  self.target_dictionary, max_positions, constrained, max_tokens)
        return lines

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        ids, self.pending_sample_ids = getattr(self, "pending_sample_ids", None), None
        if sample.get("id") is None and ids is not None and len(ids) == sample["net_input"]["src_tokens"].size(0):
            sample = {**sample, "id": ids}  # fairseq-interactive's samples come without their ids
        refused_inputs = getattr(self, "refused_inputs", None)
        if refused_inputs and isinstance(generator, InsertionGenerator) and sample.get("id") is not None:
            refused = [int(i) in refused_inputs for i in sample["id"].tolist()]
            if any(refused):
                return self._decode_accepted(generator, models, sample, refused, prefix_tokens, constraints)
        hyps = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        if isinstance(generator, InsertionGenerator):  # running average of decoding steps, in the log
            tally = self.decode_tally
            tally[0] += len(hyps)
            tally[1] += sum(h[0]["steps"] for h in hyps)
            tally[2] += sum(len(h[0]["tokens"]) - 1 for h in hyps)
            verify = ""
            if generator.verifying:  # --insertion-verify: the steps are drafting steps + verification passes
                tally[3] += sum(h[0]["verify_passes"] for h in hyps)
                verify = f" ({tally[3] / max(tally[2], 1):.3f} of them verification passes)"
            logger.info(f"insertion decoding ({generator.mode}): {tally[0]} sentences, "
                        f"{tally[1] / max(tally[0], 1):.2f} steps/sentence, {tally[1] / max(tally[2], 1):.3f} "
                        f"steps/token{verify}")
        return hyps

    def _decode_accepted(self, generator, models, sample, refused, prefix_tokens, constraints):
        """Decode the rows not refused by the input screening; refused rows get an empty hypothesis
        (their reason was logged when they were screened)."""
        src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        hyps = [[generator.fixed_hypothesis([])] for _ in refused]
        keep = [b for b, r in enumerate(refused) if not r]
        if keep:
            rows = torch.tensor(keep, device=src_tokens.device)
            accepted = {"id": sample["id"][rows.to(sample["id"].device)],
                        "net_input": {"src_tokens": src_tokens[rows], "src_lengths": src_lengths[rows]}}
            out = self.inference_step(generator, models, accepted, prefix_tokens=prefix_tokens,
                                      constraints=None if constraints is None else constraints[rows])
            for b, h in zip(keep, out):
                hyps[b] = h
        return hyps

    def build_generator(self, models, args, **unused):
        from insnet_fairseq.models.insnet import InsNetLMModel, InsNetModel

        # --iter-decode-with-external-reranker: the last model is the autoregressive judge (checked by the generator)
        judged = models
        if getattr(args, "iter_decode_with_external_reranker", False):  # the judge (and its channel model) last
            judged = models[: -2 if self.cfg.channel_weight > 0 else -1]
        elif self.cfg.insertion_verify:  # the verifier last (checked by decoding/verify.py)
            judged = models[:-1]
        for model in judged:
            if not isinstance(model, InsNetModel) or isinstance(model, InsNetLMModel):
                raise ValueError(
                    f"--task insertion_translation decodes InsNet models (--arch insnet_*), not {type(model).__name__}; "
                    "decode fairseq's baselines with their own task (translation, translation_lev), or pass an "
                    "autoregressive one last, as the judge of --insertion-candidates, with "
                    "--iter-decode-with-external-reranker"
                )
        from insnet_fairseq.models.indigo import IndigoModel

        generator = InsertionGenerator
        if any(isinstance(model, IndigoModel) for model in models):
            from insnet_fairseq.decoding.indigo_generator import IndigoGenerator as generator
        return generator(self.target_dictionary, **self.generator_options(args))

    def generator_options(self, args) -> dict:
        """The decoding options of :class:`InsertionGenerator` read from the task's flags and fairseq's generation
        flags (``--sampling``, ``--sampling-topk``, ``--sampling-topp``, ``--temperature``, ``--retain-iter-history``); shared by every
        task that decodes with it."""
        return dict(
            mode=self.cfg.insertion_mode,
            slot_top_p=self.cfg.slot_top_p,
            max_steps=self.cfg.max_insertion_steps,
            use_cache=not self.cfg.no_insertion_cache,
            sampling=getattr(args, "sampling", False),
            sampling_topk=getattr(args, "sampling_topk", -1),
            sampling_topp=getattr(args, "sampling_topp", -1.0),
            temperature=getattr(args, "temperature", 1.0),
            retain_history=getattr(args, "retain_iter_history", False),
            skip_repeats=self.cfg.skip_repeats,
            replace_repeats=self.cfg.replace_repeats,
            min_token_prob=self.cfg.min_token_prob,
            stop_threshold=self.cfg.stop_threshold,
            stop_check_prob=self.cfg.stop_check_prob,
            min_length_ratio=self.cfg.min_length_ratio,
            dedupe=self.cfg.dedupe,
            candidates=self.cfg.insertion_candidates,
            candidates_finish=self.cfg.insertion_candidates_finish,
            fuse_slot_queries=self.cfg.fuse_slot_queries,
            compile_decoder=self.cfg.compile_decoder,
            reranking=getattr(args, "iter_decode_with_external_reranker", False),
            channel_weight=self.cfg.channel_weight,
            judge_order=self.cfg.judge_order,
            anchor_depth=self.cfg.anchor_depth,
            candidates_mbr=self.cfg.insertion_candidates_mbr,
            beam=self.cfg.insertion_beam,
            lenpen=getattr(args, "lenpen", 1.0),
            verify=self.cfg.insertion_verify,
            verify_tolerance=self.cfg.verify_tolerance,
            verify_max_len=(getattr(args, "max_len_a", 0.0), getattr(args, "max_len_b", 200)),
            verify_redraft=self.cfg.verify_redraft,
        )
