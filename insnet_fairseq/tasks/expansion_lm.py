"""Task ``expansion_lm`` and criterion ``expansion_lm_loss``: the iterative expansion LM
(Casas et al. 2020), an unconditional LM that generates a sentence level by level down its dependency tree
(model: :mod:`insnet_fairseq.models.expansion_lm`).

Data: the monolingual data of ``insertion_lm`` (``make lm-multi30k``: ``dict.txt``, ``{split}.bin/.idx``) and
each split's parses, ``{split}.deps`` (``make lm-parse-multi30k``, spaCy). The first run writes the relation and
expansion vocabularies from the training parses next to the data (:mod:`insnet_fairseq.data.expansion_dataset`).

Loss (section 3.2): cross-entropy of the words and of the expansion placeholders at every placeholder of
every level transition, added with equal weights; both are logged per word (``token_nll``,
``expansion_nll``, in bits). Their sum is the NLL of the sentence *and* its binarised tree.

Decoding: ``fairseq-generate --task expansion_lm --gen-subset test`` writes one sentence per test sentence
(unconditional; the test sentences only set the count), greedy or ``--sampling --sampling-topp P`` (the
paper's nucleus sampling), with ``--print-step`` the iterations of each.
"""
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Optional

import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.data import Dictionary, data_utils
from fairseq.data.indexed_dataset import get_available_dataset_impl
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from omegaconf import II
from fairseq.tasks import FairseqTask, register_task

from insnet_fairseq.data.expansion_dataset import (
    DEPREL_DICT, EXPANSION_DICT, ExpansionDataset, build_vocabularies, pattern_table, placeholder, sentence_trees,
)
from insnet_fairseq.decoding.expansion_generator import ExpansionGenerator
from insnet_fairseq.errors import DataError, TreeError
from insnet_fairseq.tasks.base import data_paths
from insnet_fairseq.tasks.checkpoint_checks import CheckedCheckpoints
from insnet_fairseq.tasks.cli_errors import use_one_line_errors

logger = logging.getLogger(__name__)


@dataclass
class ExpansionLMConfig(FairseqDataclass):
    data: str = field(default="", metadata={"help": "data-bin directory of an LM corpus with {split}.deps parses"})
    max_iterations: int = field(default=50, metadata={"help": "decoding: iteration cap per batch"})
    max_output_words: int = field(default=200, metadata={"help": "decoding: stop expanding past this many items"})
    seed: int = II("common.seed")
    dataset_impl: Optional[ChoiceEnum(get_available_dataset_impl())] = II("dataset.dataset_impl")


@register_task("expansion_lm", dataclass=ExpansionLMConfig)
class ExpansionLMTask(CheckedCheckpoints, FairseqTask):
    cfg: ExpansionLMConfig

    @classmethod
    def add_args(cls, parser):
        """fairseq's, after setting the one-line errors (:mod:`~insnet_fairseq.tasks.cli_errors`): a command line
        parses a task's flags only when the user picked that task, before any of fairseq's own checks run."""
        use_one_line_errors()
        super().add_args(parser)

    @classmethod
    def setup_task(cls, cfg: ExpansionLMConfig, **kwargs):
        path = data_paths(cfg.data, "expansion_lm", "make lm-multi30k && make lm-parse-multi30k")[0]
        words = os.path.join(path, "dict.txt")
        if not os.path.isfile(words):
            raise DataError(f"{words} not found: expansion_lm reads the monolingual data of make lm-multi30k")
        if not all(os.path.isfile(os.path.join(path, f)) for f in (DEPREL_DICT, EXPANSION_DICT)):
            prefix = os.path.join(path, "train")
            tokens = data_utils.load_indexed_dataset(prefix, Dictionary.load(words), cfg.dataset_impl)
            if tokens is None or not os.path.isfile(prefix + ".deps"):
                raise DataError(f"{path}: the first expansion_lm run builds its vocabularies from train.bin and "
                                "train.deps (make lm-parse-multi30k); one of them is missing")
            build_vocabularies(path, cls._trees(prefix, tokens))
        tokens_dict = Dictionary.load(words)
        relations = Dictionary.load(os.path.join(path, DEPREL_DICT))
        placeholders = [tokens_dict.add_symbol(placeholder(r)) for r in relations.symbols[relations.nspecial:]]
        expansions = Dictionary.load(os.path.join(path, EXPANSION_DICT))
        logger.info(f"dictionary {words}: {len(tokens_dict) - len(placeholders)} words + {len(placeholders)} "
                    f"placeholders; {len(expansions)} expansion symbols")
        return cls(cfg, tokens_dict, expansions, placeholders)

    def __init__(self, cfg, tokens_dict, expansions, placeholder_ids):
        super().__init__(cfg)
        self.tokens_dict, self.expansion_dictionary, self.placeholder_ids = tokens_dict, expansions, placeholder_ids
        root = placeholder("root")
        if tokens_dict.index(root) == tokens_dict.unk():
            raise DataError(f"{cfg.data}: no '{root}' relation in {DEPREL_DICT}: the parses need 'root' on the root")
        self.root = tokens_dict.index(root)

    @property
    def source_dictionary(self):
        return None

    @property
    def target_dictionary(self):
        return self.tokens_dict

    @staticmethod
    def _trees(prefix, tokens):
        try:
            return sentence_trees(prefix + ".deps", [int(s) - 1 for s in tokens.sizes])
        except TreeError as e:
            raise DataError(str(e)) from None

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        path = utils.split_paths(self.cfg.data)[0]
        prefix = os.path.join(path, split)
        tokens = data_utils.load_indexed_dataset(prefix, self.tokens_dict, self.cfg.dataset_impl)
        if tokens is None:
            raise DataError(f"{prefix}.bin / {prefix}.idx not found: split {split!r} was not binarised")
        if not os.path.isfile(prefix + ".deps"):
            raise DataError(f"{prefix}.deps not found: the expansion LM trains along each sentence's dependency parse "
                            "(make lm-parse-multi30k)")
        trees = self._trees(prefix, tokens)
        self.datasets[split] = ExpansionDataset(tokens, trees, self.tokens_dict, self.expansion_dictionary)
        levels = sum(max(t[2]) + 1 for t in trees)
        logger.info(f"{split}: {len(trees):,} sentences from {prefix}.bin, {levels:,} level transitions "
                    f"({levels / max(1, int(sum(tokens.sizes) - len(trees))):.2f} per word)")

    def max_positions(self):
        return None

    def build_generator(self, models, args, **kwargs):
        sampling = bool(getattr(args, "sampling", False))
        return ExpansionGenerator(self.tokens_dict, pattern_table(self.expansion_dictionary, self.tokens_dict),
                                  self.root, sampling=sampling, top_k=int(getattr(args, "sampling_topk", -1)),
                                  top_p=float(getattr(args, "sampling_topp", -1.0)),
                                  max_iterations=self.cfg.max_iterations, max_length=self.cfg.max_output_words,
                                  temperature=float(getattr(args, "temperature", 1.0)))


@register_criterion("expansion_lm_loss")
class ExpansionLMLoss(FairseqCriterion):
    """Word + expansion cross-entropy at the placeholders (the paper's equal-weight sum)."""

    def forward(self, model, sample, reduce=True):
        pad = self.task.target_dictionary.pad()
        token = expansion = 0.0
        for b in sample["net_input"]["buckets"]:  # transitions of similar lengths
            where = b["token_target"].ne(pad)  # [T, m] the placeholders
            out = model(b["tokens"], b["heads"], b["expansions"], where)
            token = token + F.cross_entropy(out["token"].float(), b["token_target"][where], reduction="sum")
            expansion = expansion + F.cross_entropy(out["expansion"].float(), b["expansions"][where], reduction="sum")
        loss = token + expansion
        words = sample["ntokens"]
        log = {"loss": loss.data, "token_loss": token.data, "expansion_loss": expansion.data, "ntokens": words,
               "nsentences": sample["nsentences"], "sample_size": words}
        return loss, words, log

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        words = sum(log.get("ntokens", 0) for log in logging_outputs)
        for key, name in (("loss", "loss"), ("token_loss", "token_nll"), ("expansion_loss", "expansion_nll")):
            total = sum(log.get(key, 0) for log in logging_outputs)
            metrics.log_scalar(name, total / max(words, 1) / math.log(2), words, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
