#!/usr/bin/env python
"""``fairseq-train`` with every model it builds on the package's linear layers, the switch the recipes pass for every
system they train, so that systems trained side by side for the same minutes (``MINUTES``) multiply through the same
products (oneDNN's on a CPU, :mod:`insnet_fairseq.modules.packed_linear`) and a time budget measures models, not
libraries.

    python recipes/train_packed.py DATA [fairseq-train flags...]      # as fairseq-train DATA [flags...]

The package's own models are built on those layers anyway; fairseq's (the AR ``transformer``, LevT, InsT) get them
here, through :func:`~insnet_fairseq.modules.packed_linear.pack_linears` on what ``fairseq.models.build_model``
returns, in this process and in the workers it starts. The same values as ``F.linear`` up to float rounding; the
checkpoints are fairseq's (the same parameters and state dict), and plain ``fairseq-train`` leaves models as they are.
"""
import sys

from fairseq import models
from fairseq_cli import train

from insnet_fairseq.modules.packed_linear import pack_linears


def packed_build_model(build_model):
    """``build_model`` that returns its model on the package's linear layers."""
    def build_packed(cfg, task, from_checkpoint=False):
        return pack_linears(build_model(cfg, task, from_checkpoint))

    build_packed.packs = True
    return build_packed


def use_packed_models() -> None:
    """Every model this process builds through fairseq (``task.build_model``) on the package's linear layers."""
    if not getattr(models.build_model, "packs", False):
        models.build_model = packed_build_model(models.build_model)


use_packed_models()  # at import: the workers of a distributed run import this module, not the __main__ block

if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    sys.argv[0] = "fairseq-train"
    train.cli_main()
