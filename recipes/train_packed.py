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
import os
import sys
from typing import List, Optional

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


def flag(argv: List[str], name: str, default: str) -> str:
    """The last value of ``--name VALUE`` or ``--name=VALUE`` in ``argv``, else ``default``."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def finished_updates(argv: List[str]) -> Optional[int]:
    """The updates of the run that ``argv`` (fairseq-train's flags) resumes, where it has already reached its
    ``--max-update``, else None. fairseq-train resumes such a run and trains one update more, then stops:
    fairseq_cli/train.py checks ``max_update`` only after each step, so every re-run of a finished recipe would move
    its weights. Only the default resume file (``SAVE_DIR/checkpoint_last.pt``) is read, weights-only.

    Example: ``--save-dir ck --max-update 500`` with ck/checkpoint_last.pt at update 500 -> 500; at 250 -> None.
    """
    max_update = int(flag(argv, "--max-update", "0"))
    path = os.path.join(flag(argv, "--save-dir", "checkpoints"), "checkpoint_last.pt")
    if max_update <= 0 or flag(argv, "--restore-file", "checkpoint_last.pt") != "checkpoint_last.pt" \
            or not os.path.exists(path):
        return None
    from insnet_fairseq import checkpoint_safety

    try:
        history = checkpoint_safety.load(path).get("optimizer_history") or [{}]
    except Exception:  # unreadable here: fairseq-train loads it next and says why
        return None
    updates = int(history[-1].get("num_updates", 0))
    return updates if updates >= max_update else None


use_packed_models()  # at import: the workers of a distributed run import this module, not the __main__ block

if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    done = finished_updates(sys.argv[1:])
    if done is not None:
        print(f"train_packed.py: {flag(sys.argv[1:], '--save-dir', 'checkpoints')}/checkpoint_last.pt has trained "
              f"{done} updates, its --max-update: nothing to train")
        sys.exit(0)
    sys.argv[0] = "fairseq-train"
    train.cli_main()
