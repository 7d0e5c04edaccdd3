"""Task ``unconditional_language_modeling``: fairseq's ``language_modeling`` whose generation starts from nothing.

fairseq-generate with ``--task language_modeling`` continues every sentence of ``--gen-subset`` (its
``inference_step`` makes the source sentence the prefix). Unconditional samples (the expansion LM paper's
evaluation, ``recipes/evaluate_unconditional.py``) need the autoregressive LM to start from ``</s>`` alone, as the
insertion LMs start from ``<s> </s>``: this task is ``language_modeling`` (same data, options and checkpoints)
with an empty prefix, so the held-out sentences only set how many samples are drawn.
"""
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask


@register_task("unconditional_language_modeling", dataclass=LanguageModelingConfig)
class UnconditionalLanguageModelingTask(LanguageModelingTask):
    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if prefix_tokens is None:
            prefix_tokens = sample["net_input"]["src_tokens"][:, :0]  # [B, 0]: no prefix
        return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
