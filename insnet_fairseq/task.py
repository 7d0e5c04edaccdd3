"""Task ``insertion_translation``: fairseq bitext, batched as insertion trajectories."""
import logging
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from omegaconf import II
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from .data import InsertionPairDataset
from .generator import MODES, InsertionGenerator
from .orders import ORDER_POLICIES

logger = logging.getLogger(__name__)

DEFAULT_ORDER = "l2r"  # chosen by the Multi30k comparison in the README


@dataclass
class InsertionTranslationConfig(TranslationConfig):
    insertion_order: ChoiceEnum(list(ORDER_POLICIES)) = field(
        default=DEFAULT_ORDER,
        metadata={
            "help": "insertion order of training targets: l2r (left to right), random "
            "(uniform permutation), binary (middle word of every gap first, level by level); "
            "<s> and </s> always come first"
        },
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
    no_insertion_cache: bool = field(
        default=False, metadata={"help": "re-encode the whole partial sequence every step (for checks and timing)"}
    )
    seed: int = II("common.seed")


class DataError(ValueError):
    """Bad or missing data, with the file or directory it concerns."""


@register_task("insertion_translation", dataclass=InsertionTranslationConfig)
class InsertionTranslationTask(TranslationTask):
    cfg: InsertionTranslationConfig

    @classmethod
    def setup_task(cls, cfg: InsertionTranslationConfig, **kwargs):
        paths = utils.split_paths(cfg.data) if cfg.data else []
        if not paths:
            raise DataError("insertion_translation needs a data directory (the positional DATA argument)")
        for path in paths:
            if not os.path.isdir(path):
                raise DataError(
                    f"data directory {path!r} does not exist: binarise the corpus first "
                    "(e.g. `make multi30k`, or fairseq-preprocess --destdir " + path + ")"
                )
        task = super().setup_task(cfg, **kwargs)
        if task.src_dict.bos() != task.tgt_dict.bos():
            raise DataError(f"{paths[0]}: source and target dictionaries disagree on <s>")
        return task

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
            dataset, self.cfg.insertion_order, self.tgt_dict.bos(), seed=self.cfg.seed
        )

    def build_generator(self, models, args, **unused):
        from .model import InsNetModel

        for model in models:
            if not isinstance(model, InsNetModel):
                raise ValueError(
                    f"--task insertion_translation decodes InsNet models (--arch insnet_*), not {type(model).__name__}; "
                    "decode fairseq's baselines with their own task (translation, translation_lev)"
                )
        return InsertionGenerator(
            self.target_dictionary,
            mode=self.cfg.insertion_mode,
            slot_top_p=self.cfg.slot_top_p,
            max_steps=self.cfg.max_insertion_steps,
            use_cache=not self.cfg.no_insertion_cache,
            sampling=getattr(args, "sampling", False),
            sampling_topk=getattr(args, "sampling_topk", -1),
            retain_history=getattr(args, "retain_iter_history", False),
        )
