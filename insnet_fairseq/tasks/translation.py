"""Task ``insertion_translation``: fairseq bitext, batched as insertion trajectories."""
import os
from dataclasses import dataclass

from fairseq import utils
from fairseq.tasks import register_task

from insnet_fairseq.data.dataset import InsertionPairDataset
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.indigo_generator import IndigoGenerator
from insnet_fairseq.errors import DataError
from insnet_fairseq.models.indigo import IndigoModel
from insnet_fairseq.models.insnet import InsNetLMModel, InsNetModel
from insnet_fairseq.tasks.base import InsertionConfig, InsertionTask, data_paths


@dataclass
class InsertionTranslationConfig(InsertionConfig):
    """``insertion_translation``'s options: fairseq's translation options and those of every insertion task."""


@register_task("insertion_translation", dataclass=InsertionTranslationConfig)
class InsertionTranslationTask(InsertionTask):
    cfg: InsertionTranslationConfig
    insertion_task = "translation"  # the InsNet models it builds (models/task_fit.py)

    @classmethod
    def setup_task(cls, cfg: InsertionTranslationConfig, **kwargs):
        paths = data_paths(cfg.data, "insertion_translation", "e.g. `make multi30k`, or fairseq-preprocess --destdir")
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
            dataset, self.cfg.insertion_order, self.tgt_dict.bos(), seed=self.cfg.seed,
            anchor_depth=self.cfg.anchor_depth,
        )

    def build_generator(self, models, args, **unused):
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
        generator = InsertionGenerator
        if any(isinstance(model, IndigoModel) for model in models):
            generator = IndigoGenerator
        return generator(self.target_dictionary, self.decoding_options(args, judged))
