"""Let fairseq load its own checkpoints under torch >= 2.6.

torch 2.6 changed ``torch.load``'s default to ``weights_only=True``. fairseq 0.12 checkpoints
hold more than tensors (its config, optimizer history, metric meters), so ``fairseq-train``
resume, ``fairseq-generate`` and ``fairseq-interactive`` fail with an unpickling error.

The fix is scoped: the modules of fairseq that load checkpoints or pickled objects get a
``torch`` whose ``load`` defaults to ``weights_only=False`` (torch's pre-2.6 behaviour, the one
fairseq was written for); ``torch.load`` everywhere else is untouched. As with any pickle, only
load checkpoints you trust. Installed when ``insnet_fairseq`` is imported (``--user-dir``), so it
covers our models and every fairseq baseline trained or decoded with ``--user-dir insnet_fairseq``.
"""
import functools
import importlib
import types

import torch

PATCHED_MODULES = ("fairseq.checkpoint_utils", "fairseq.distributed.utils")


class _TorchWithLegacyLoad(types.ModuleType):
    """A stand-in for the ``torch`` module: everything is torch's, except ``load``."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    @functools.wraps(torch.load)
    def load(*args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return torch.load(*args, **kwargs)


def install() -> None:
    """Idempotently point fairseq's checkpoint loaders at :class:`_TorchWithLegacyLoad`."""
    shim = _TorchWithLegacyLoad()
    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        if not isinstance(getattr(module, "torch", None), _TorchWithLegacyLoad):
            module.torch = shim
