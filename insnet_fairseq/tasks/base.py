"""What every insertion task shares: the options of orders, layered training and decoding
(:class:`InsertionConfig`) and the task behind them (:class:`InsertionTask`): layered (InsNet-Dinic and
InsNet-uniform) and searched-order training batches, raw-line screening, and the decoding log.

``insertion_translation`` (:mod:`insnet_fairseq.tasks.translation`) and ``insertion_lm``
(:mod:`insnet_fairseq.tasks.lm`) are both this task, each with its own data and generator.
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import torch

from fairseq import utils
from fairseq.distributed import utils as distributed_utils
from fairseq.dataclass import ChoiceEnum
from omegaconf import II
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from insnet_fairseq.decoding.core_options import CoreOptions
from insnet_fairseq.decoding.gaps import is_gap_model
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.hub import InsNetHubInterface
from insnet_fairseq.decoding.inputs import check_bpe_files, screen_lines
from insnet_fairseq.data import preprocessing
from insnet_fairseq.decoding.options import DecodingFlags, DecodingOptions, check_unreadable_source, stored_decoding
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.errors import DataError, FlagError
from insnet_fairseq.fairseq_fixes.interactive import running as interactive_running
from insnet_fairseq.geometry.gaps import asked_slots, sample_layers, sample_slots
from insnet_fairseq.geometry.layers import (PAD_LAYER, compact, delay_last_words, num_layers, sequential_layers,
                                            trajectory, uniform_layers)
from insnet_fairseq.geometry.orders import (DEFAULT_ANCHOR_DEPTH, GIVEN_POLICIES, LEVEL_POLICIES, ORDER_POLICIES,
                                            TREE_POLICIES)
from insnet_fairseq.tasks.checkpoint_checks import CheckedCheckpoints
from insnet_fairseq.tasks.cli_errors import use_one_line_errors
from insnet_fairseq.training.layerization import LAYERIZATIONS, layerize, promotions_from_states, token_logprobs_by_step
from insnet_fairseq.training.on_policy import on_policy_trajectories
from insnet_fairseq.training.searched_order import search_orders

logger = logging.getLogger(__name__)

DEFAULT_ORDER = "l2r"  # the best order of sequential models on Multi30k (docs/design_choices.md)


@dataclass
class InsertionConfig(TranslationConfig, DecodingFlags):
    """The options of every insertion task: insertion orders, layered training, and the decoding flags
    (:class:`~insnet_fairseq.decoding.options.DecodingFlags`)."""

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
    input_preprocessing: ChoiceEnum(["data", "none"]) = field(
        default="data",
        metadata={"help": "raw text of fairseq-interactive and the hub interface. data: tokenised and BPE-split as "
                  "DATA/preprocessing.json records how the training text was (recipes/prepare_bitext.py writes it); "
                  "a --tokenizer or --bpe that differs from it is used, with a warning. none: only what "
                  "--tokenizer/--bpe ask (lines given as the model reads them)"},
    )
    anchor_depth: int = field(
        default=DEFAULT_ANCHOR_DEPTH,
        metadata={"help": "--insertion-order anchored: binary-tree levels inserted before the gaps fill left to "
                  "right (0: l2r; 2: 3 anchors, 4 gaps filled in parallel)"},
    )
    layerization: Optional[ChoiceEnum(list(LAYERIZATIONS))] = field(
        default=None,
        metadata={"help": "training trajectories: sequential (one token per step), dinic (InsNet-Dinic layers "
                  "learned under --dinic-tau), uniform (the levels of --insertion-order anchored, else the balanced "
                  "binary tree's, about log2(n) layers) or sampled (drawn afresh for every batch: each gap's next "
                  "word around its centre, --trajectory-spread, or none, --gap-skip); "
                  "default: dinic when --dinic-tau is given, else sequential"},
    )
    trajectory_spread: float = field(
        default=1.0, metadata={"help": "--layerization sampled: a gap's next word is drawn with probability "
                               "proportional to exp(-distance to the gap's centre / SPREAD), in words (0: the middle "
                               "word, the balanced binary tree)"},
    )
    gap_skip: float = field(
        default=0.1, metadata={"help": "--layerization sampled: the probability that an open gap takes no word in a "
                               "layer, so that training sees gaps that lag behind the others"},
    )
    gap_slot_rate: float = field(
        default=1.0, metadata={"help": "--slot-objective gap: the probability that a training pass scores a slot "
                               "that --gap-slots keeps, each scored slot weighted by 1 / RATE (an unbiased estimate "
                               "of scoring them all), so that the slot query stream's cost falls with RATE; "
                               "validation scores them all (1: all)"},
    )
    gap_slots: ChoiceEnum(["every", "asked"]) = field(
        default="asked", metadata={"help": "--slot-objective gap: the slots each layer end scores: those parallel "
                                   "decoding asks (asked): every slot that misses words, and a done slot only at the "
                                   "layer end where it appears (decoding shuts a slot once it says done and never asks "
                                   "it again); or every slot of its context (every), a done one at every layer end "
                                   "after; in training and validation"},
    )
    on_policy: float = field(
        default=0.0, metadata={"help": "--layerization sampled, --slot-objective gap: the probability that a training "
                               "sentence's trajectory begins with the model's own parallel decoding, "
                               "--on-policy-steps steps at most (no gradient), its canvas's targets recomputed "
                               "against the reference and its wrong words kept as words no gap misses (0: off)"},
    )
    on_policy_steps: int = field(
        default=4, metadata={"help": "--on-policy: a chosen sentence is decoded for k steps, k drawn uniformly from "
                             "1 .. this many (fewer where every slot is done sooner)"},
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
                               "where parallel decoding stops too early); with --dinic-lagged the moved words keep "
                               "their stored layer; 0: off"},
    )
    searched_order_beam: int = field(
        default=0, metadata={"help": "InDIGO's searched adaptive order (--arch indigo_*): each batch's orders are "
                             "found by beam search under the current model, K per sentence, and the batch is trained on "
                             "all K (0: the --insertion-order orders); bootstrap from a model trained with a fixed order"},
    )
    seed: int = II("common.seed")


def data_paths(data: str, task_name: str, how: str):
    """The task's data directories (``DATA``, ``:``-separated), each checked to exist; ``how`` says
    how to make one (the directory is appended)."""
    paths = utils.split_paths(data) if data else []
    if not paths:
        raise DataError(f"{task_name} needs a data directory (the positional DATA argument)")
    for path in paths:
        if os.path.isfile(path):
            raise DataError(f"data directory {path!r} is a file, not a directory: DATA is the directory "
                            f"fairseq-preprocess wrote ({how} {path})")
        if not os.path.isdir(path):
            raise DataError(f"data directory {path!r} does not exist: binarise the corpus first ({how} {path})")
    return paths


def warn_not_recorded(given: str, what: str, recorded: str, done: str, leave_out: str) -> None:
    """Warn that the command line's ``given`` tokeniser or BPE is not ``what`` the data recorded (``recorded``): raw
    text is ``done`` as the command line asks. Example: ``leave_out`` "--bpe to split" ends the line "leave out --bpe
    to split it as training saw it"."""
    logger.warning(f"{given} is not {what} ({recorded}): raw text is {done} as the command line asks, and may not "
                   f"match the model's vocabulary; leave out {leave_out} it as training saw it")


class InsertionTask(CheckedCheckpoints, TranslationTask):
    """The task of :class:`InsertionConfig`'s options; ``insertion_translation`` and ``insertion_lm`` add their
    data (``setup_task``, ``load_dataset``) and their generator (``build_generator``)."""

    cfg: InsertionConfig

    has_keywords = False  # insertion_lm: its source side holds each sentence's keywords

    @classmethod
    def add_args(cls, parser):
        """fairseq's, after setting the one-line errors (:mod:`~insnet_fairseq.tasks.cli_errors`): a command line
        parses a task's flags only when the user picked that task, before any of fairseq's own checks run."""
        use_one_line_errors()
        super().add_args(parser)

    def __init__(self, cfg: InsertionConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        mode, tau = cfg.layerization, cfg.dinic_tau
        if mode is None:
            mode = "dinic" if tau is not None else "sequential"
        if mode == "dinic" and tau is None:
            tau = 2.0
        if mode != "dinic" and tau is not None:
            raise ValueError(f"--dinic-tau {tau} only applies to --layerization dinic, not {mode}")
        DecodingOptions.from_args(cfg)  # the decoding flags, checked before a model loads
        if cfg.trajectory_spread < 0:
            raise ValueError(f"--trajectory-spread must be >= 0, got {cfg.trajectory_spread}")
        if not 0.0 <= cfg.gap_skip < 1.0:
            raise ValueError(f"--gap-skip must be in [0, 1), got {cfg.gap_skip}")
        if not 0.0 < cfg.gap_slot_rate <= 1.0:
            raise ValueError(f"--gap-slot-rate must be in (0, 1], got {cfg.gap_slot_rate}")
        if cfg.gap_slot_rate < 1 and mode == "sequential":
            raise ValueError("--gap-slot-rate samples the slots of layered trajectories: give it with --layerization "
                             "sampled, uniform or dinic (and --slot-objective gap)")
        if not 0.0 <= cfg.on_policy <= 1.0:
            raise ValueError(f"--on-policy must be in [0, 1], got {cfg.on_policy}")
        if cfg.on_policy > 0 and mode != "sampled":
            raise ValueError(f"--on-policy begins sampled trajectories with the model's own decoding: use it with "
                             f"--layerization sampled (and --slot-objective gap), not --layerization {mode}")
        if cfg.on_policy_steps < 1:
            raise ValueError(f"--on-policy-steps must be >= 1, got {cfg.on_policy_steps}")
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
        self.rollout_steps = None  # --on-policy: the decoding core's step its rollouts take (made on first use)
        self.decode_tally = [0, 0, 0, 0]  # sentences, insertion steps, output words, verification passes so far
        # raw-text decoding (fairseq-interactive, the hub interface): lines refused by the input
        # screening ({sample id: reason}) and the sample ids of the next batch (fairseq_fixes/interactive.py)
        self.refused_inputs = {}
        self.pending_sample_ids = None

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
        elif self.layerization == "sampled":  # afresh for every training batch; validation's the same each time
            seed = self.cfg.seed if update_num is None else self.cfg.seed * 1_000_003 + int(update_num) + 1
            generator = torch.Generator().manual_seed(seed)
            if self.cfg.on_policy > 0 and update_num is not None:  # training batches only: validation stays comparable
                target, layers, net_input["foreign"] = self.on_policy_batch(sample, model, generator)
                net_input["target"] = target
            else:
                layers = sample_layers(lengths, target.size(1), generator, self.cfg.trajectory_spread,
                                       self.cfg.gap_skip)
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
            if lagged is not None:  # the trajectory encoded: --dinic-lagged promotes the stored one from its states
                sample["encoded_layers"] = layers
        net_input["order"], net_input["context"] = trajectory(layers)
        if is_gap_model(getattr(model, "decoder", None)):
            net_input["layers"] = layers  # --slot-objective gap scores the layering's slots itself
            weight = asked_slots(layers) if self.cfg.gap_slots == "asked" else None
            if self.cfg.gap_slot_rate < 1 and update_num is not None:  # training batches: a sample of the slots
                g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + int(update_num) + 2)
                drawn = sample_slots(layers, self.cfg.gap_slot_rate, g)
                weight = drawn if weight is None else drawn * weight
            if weight is not None:
                net_input["slot_weight"] = weight
        elif self.cfg.gap_slot_rate < 1:
            raise ValueError("--gap-slot-rate samples the end-of-slot objective's slots: train it with "
                             "--slot-objective gap")
        sample["layers"] = num_layers(layers)
        return lagged

    def length_cap(self):
        """(a, b): decoding's output-length cap, a x source length + b words (CoreOptions.length_cap)."""
        return CoreOptions().length_cap

    def on_policy_batch(self, sample, model, generator):
        """--on-policy: the batch's trajectories, each sentence's begun with probability P by the model's own parallel
        decoding (:func:`insnet_fairseq.training.on_policy.on_policy_trajectories`): (target, layers, foreign)."""
        if not is_gap_model(getattr(model, "decoder", None)):
            raise ValueError("--on-policy recomputes end-of-slot targets: train it with --slot-objective gap")
        if self.rollout_steps is None:
            self.rollout_steps = InsertionSteps(self.tgt_dict, CoreOptions(mode="parallel"))
        ni = sample["net_input"]
        B, device = ni["target"].size(0), ni["target"].device
        chosen = (torch.rand(B, generator=generator) < self.cfg.on_policy).to(device)
        k = torch.randint(1, self.cfg.on_policy_steps + 1, (B,), generator=generator).to(device)
        lengths = ni["target"].ne(self.tgt_dict.pad()).sum(1)
        # canvases within decoding's length cap, and short enough that the reference and every canvas word fit the
        # decoder's positions
        a, b = self.length_cap()
        cap = (ni["src_lengths"].float() * a + b).long() + 2
        max_len = torch.minimum(cap, model.decoder.max_target_positions - lengths + 2).clamp_min(2)
        return on_policy_trajectories(model, self.rollout_steps, ni["src_tokens"], ni["src_lengths"], ni["target"],
                                      chosen, k, max_len, generator, self.cfg.trajectory_spread, self.cfg.gap_skip)

    def promote_lagged(self, sample, model, layers, net_output):
        """--dinic-lagged: one promotion round of the training batch's ``layers`` [B, n] from its training
        pass (``net_output``: its context states, and its token log-probabilities as the words' scores at
        their slots now; heads in eval mode for the scores one layer up, no gradient), stored for the
        sentences' next visit.

        With ``--late-words`` the pass encoded ``sample["encoded_layers"]``, the stored layering with some words of
        its last layer moved to a new one. The other words' promotions are the stored layering's: a word of layer l
        moves up into the context of layers 0 .. l - 2, which lie before every moved word in the encoding order (the
        same states), and its score now is taken in the same context at the same slot. The moved words stay
        where they are this round (their score now was taken in the new layer's context)."""
        encoded = sample.get("encoded_layers", layers)
        h, kv, rank, tokens, lengths, source_kv, source_pad = net_output["states"]
        current = token_logprobs_by_step(net_output["token"], lengths, layers.size(1))
        detach = lambda pairs: [(k.detach(), v.detach()) for k, v in pairs]  # noqa: E731
        was_training = model.training
        model.eval()
        try:
            up = promotions_from_states(model.decoder, encoded, h.detach(), detach(kv), rank, tokens, lengths,
                                        detach(source_kv), source_pad, self.dinic_tau, current=current)
        finally:
            model.train(was_training)
        up = up & encoded.eq(layers)  # the moved words (--late-words) stay
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
        :func:`insnet_fairseq.training.searched_order.search_orders`; dropout as the model is set, on in
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

    def screen_inference_lines(self, lines, first_id, encode_fn, max_positions, constrained=False, max_tokens=None,
                               unreadable_source=None):
        """Check raw lines ``first_id``, ... before batching (:func:`insnet_fairseq.decoding.inputs.screen_lines`): returns the lines
        to batch; refused ones become empty and are remembered, to be answered with an empty output.
        ``unreadable_source``: a source all ``<unk>`` is translated or refused (default: ``--unreadable-source``);
        a task whose source is keywords checks its words itself."""
        unreadable = unreadable_source or str(getattr(self.cfg, "unreadable_source", "translate"))
        check_unreadable_source(unreadable)
        lines, self.refused_inputs = screen_lines(lines, first_id, encode_fn, self.source_dictionary,
                                                  self.target_dictionary, max_positions, constrained, max_tokens,
                                                  unreadable=None if self.has_keywords else unreadable,
                                                  encode_target_fn=self.target_encoder(encode_fn))
        return lines

    # -- raw text tokenised as the training data was (data/preprocessing.py) -------------------------------------
    def _preprocessing(self, raw_text):
        """The data's recorded preprocessing, when raw text is to be tokenised by it: fairseq-interactive and the hub
        (``raw_text``; None: whether fairseq-interactive is the program), ``--input-preprocessing data``."""
        if raw_text is None:
            raw_text = interactive_running()
        if not raw_text or str(getattr(self.cfg, "input_preprocessing", "data")) != "data":
            return None
        return preprocessing.read(getattr(self.cfg, "data", None))

    def build_tokenizer(self, args, raw_text=None):
        """fairseq's tokenizer, or, for raw text when the data records how it was tokenised, that tokenisation.
        A ``--tokenizer`` that differs from the record is used, with a warning naming both."""
        settings = self._preprocessing(raw_text)
        name = getattr(args, "_name", None) or getattr(args, "tokenizer", None) if args is not None else None
        if settings is None:
            tokenizer = super().build_tokenizer(args)
        elif name is None or (name == "moses" and getattr(args, "moses_no_escape", False)
                              and getattr(args, "moses_no_dash_splits", False)):
            tokenizer = preprocessing.PreparedTokenizer(settings)
            logger.info(f"raw text tokenised as the training data was: {preprocessing.describe_tokenizer(settings)}")
        else:
            given = f"--tokenizer {name}" + ("" if name != "moses" else " (" + ", ".join(
                w for w, off in (("escaping & \" '", "moses_no_escape"), ("splitting dashes", "moses_no_dash_splits"))
                if not getattr(args, off, False)) + ")")
            warn_not_recorded(given, "how the training data was tokenised", preprocessing.describe_tokenizer(settings),
                              "tokenised", "--tokenizer to tokenise")
            tokenizer = super().build_tokenizer(args)
        self._raw_tokenizer = tokenizer if settings is not None else None
        return tokenizer

    def build_bpe(self, args, raw_text=None):
        """fairseq's BPE (a missing ``--bpe-codes`` refused in one line naming the flag and the file), or, for raw
        text when the data records its BPE, that BPE with each side's vocabulary filter. Other codes or another BPE
        than the record's are used, with a warning naming both."""
        settings = self._preprocessing(raw_text)
        check_bpe_files(args)
        name = getattr(args, "_name", None) or getattr(args, "bpe", None) if args is not None else None
        if settings is None:
            bpe = super().build_bpe(args)
        else:
            recorded = os.path.join(settings["dir"], settings["bpe"]["codes"])
            codes = getattr(args, "bpe_codes", None)
            same = name is None or (name == "subword_nmt" and isinstance(codes, str) and os.path.isfile(codes)
                                    and preprocessing.file_digest(codes) == preprocessing.file_digest(recorded))
            if same:
                bpe = preprocessing.PreparedBPE(settings)
                logger.info(f"raw text BPE-split as the training data was: {recorded}, with each side's vocabulary")
            else:
                warn_not_recorded(f"--bpe {name}" + (f" --bpe-codes {codes}" if codes else ""),
                                  "the BPE of the training data", f"{recorded}, {settings['file']}", "split",
                                  "--bpe to split")
                bpe = super().build_bpe(args)
        self._raw_bpe = bpe if settings is not None else None
        return bpe

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq's, the sources encoded as sources: fairseq-interactive hands this task the constraint phrases'
        (target) encoder (fairseq_fixes/interactive.py keeps the source one in ``interactive_source_encode``)."""
        return super().get_interactive_tokens_and_lengths(lines, getattr(self, "interactive_source_encode", None)
                                                          or encode_fn)

    def target_encoder(self, encode_fn):
        """Constraint phrases are target text: where the recorded preprocessing is in use, its target side (the
        target language's tokeniser and BPE vocabulary), else ``encode_fn``."""
        tok, bpe = getattr(self, "_raw_tokenizer", None), getattr(self, "_raw_bpe", None)
        if tok is None and bpe is None:
            return encode_fn

        def encode_target(text):
            if tok is not None:
                text = getattr(tok, "encode_target", tok.encode)(text)
            if bpe is not None:
                text = getattr(bpe, "encode_target", bpe.encode)(text)
            return text

        return encode_target

    def get_batch_iterator(self, dataset, max_tokens=None, max_sentences=None, *args, **kwargs):
        """fairseq's, with ``--batch-size 0`` refused (fairseq reads it as no limit)."""
        if max_sentences is not None and max_sentences < 1:
            raise FlagError(f"--batch-size must be >= 1 (or left out: as many sentences as --max-tokens allows), got "
                            f"{max_sentences}")
        return super().get_batch_iterator(dataset, max_tokens, max_sentences, *args, **kwargs)

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
            if generator.options.verify:  # --insertion-verify: the steps are drafting steps + verification passes
                tally[3] += sum(h[0]["verify_passes"] for h in hyps)
                verify = f" ({tally[3] / max(tally[2], 1):.3f} of them verification passes)"
            logger.info(f"insertion decoding ({generator.options.mode}): {tally[0]} sentences, "
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

    def decoding_options(self, args, models=(), **task_options) -> DecodingOptions:
        """The options of :class:`InsertionGenerator`: the task's decoding flags and fairseq's generation flags
        ``args`` (``--sampling`` ...), the settings stored with the first of ``models`` for the flags not given, and
        ``task_options`` (the fields a task sets itself)."""
        return DecodingOptions.from_args(self.cfg, args, stored=stored_decoding(models), **task_options)

    def hub_interface(self, cfg, models):
        """The Python interface of ``InsNetModel.from_pretrained`` over this task and ``models``."""
        return InsNetHubInterface(cfg, self, models)
