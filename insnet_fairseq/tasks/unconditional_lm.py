"""Task ``unconditional_language_modeling``: fairseq's ``language_modeling`` whose generation starts from nothing.

fairseq-generate with ``--task language_modeling`` continues every sentence of ``--gen-subset`` (its
``inference_step`` makes the source sentence the prefix). Unconditional samples (the expansion LM paper's
evaluation, ``recipes/evaluate_unconditional.py``) need the autoregressive LM to start from ``</s>`` alone, as the
insertion LMs start from ``<s> </s>``: this task is ``language_modeling`` (same data, options and checkpoints)
with an empty prefix, so the held-out sentences only set how many samples are drawn.
"""
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from insnet_fairseq.tasks.cli_errors import use_one_line_errors


@register_task("unconditional_language_modeling", dataclass=LanguageModelingConfig)
class UnconditionalLanguageModelingTask(LanguageModelingTask):
    @classmethod
    def add_args(cls, parser):
        """fairseq's, after setting the one-line errors (:mod:`~insnet_fairseq.tasks.cli_errors`): a command line
        parses a task's flags only when the user picked that task, before any of fairseq's own checks run."""
        use_one_line_errors()
        super().add_args(parser)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if prefix_tokens is None:
            prefix_tokens = sample["net_input"]["src_tokens"][:, :0]  # [B, 0]: no prefix
        return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
