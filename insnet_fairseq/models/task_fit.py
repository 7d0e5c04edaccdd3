"""The check that an InsNet model is built only for the task that trains and decodes it.

Called by the models' own ``build_model`` (the hook fairseq calls for every model it builds), so an InsNet
architecture trained with another ``--task`` (fairseq's ``translation``, or ``insertion_lm`` for a translation
model) is refused before anything runs. The tasks name themselves by a class attribute, ``insertion_task``
(``"translation"`` or ``"lm"``), which keeps this layer from importing the tasks above it.
"""


def _task_name(task) -> str:
    return getattr(getattr(task, "cfg", None), "_name", None) or type(task).__name__


def check_task_fits(cls, args, task) -> None:
    """Before a model of class ``cls`` (built from ``args``) is built for ``task``: an InsNet language model
    (``cls.language_model``) only for ``insertion_lm``, an InsNet translation model only for
    ``insertion_translation``. Raises ValueError naming the task and the flag to pass.
    Example: ``--task translation --arch insnet_small`` -> "... only the task insertion_translation trains and
    decodes, not --task translation: pass --user-dir insnet_fairseq --task insertion_translation"."""
    arch = getattr(args, "arch", None) or getattr(args, "_name", None)
    kind = getattr(task, "insertion_task", None)
    if getattr(cls, "language_model", False):
        if kind != "lm":
            raise ValueError(
                f"this is an InsNet language model (--arch {arch or 'insnet_lm_*'}), which only the "
                f"task insertion_lm trains and decodes, not --task {_task_name(task)}: "
                "pass --user-dir insnet_fairseq --task insertion_lm"
            )
        return
    if kind != "translation":
        raise ValueError(
            f"this is an InsNet model (--arch {arch or 'insnet_*'}), which only the task "
            f"insertion_translation trains and decodes, not --task {_task_name(task)}: "
            "pass --user-dir insnet_fairseq --task insertion_translation"
            + (" (or, for insertion_lm, an --arch insnet_lm_*)" if kind == "lm" else "")
        )
