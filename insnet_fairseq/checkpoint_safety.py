"""Checkpoints load weights-only: unpickling one can build tensors, plain containers and the classes below, and
run nothing else.

A fairseq checkpoint is a pickle, and a pickle can name any callable to run while it loads (an object whose
``__reduce__`` returns ``(os.system, ("...",))``). torch's weights-only unpickler (``torch.load``'s default since
torch 2.6) refuses every global that is not a tensor, a plain container or an allowlisted class. :data:`SAFE_GLOBALS`
is that allowlist: exactly what fairseq 0.12 and this package put in the checkpoints they write, found by listing
``torch.serialization.get_unsafe_globals_in_checkpoint`` over one checkpoint of every kind the project trains
(InsNet translation, LM, infilling, expansion LM, InDIGO, fairseq's transformer, transformer LM, LevT and InsT,
with optimizer state, ``--memory-efficient-fp16``, averaged, decoding-only copies, stored decoding settings):

* ``argparse.Namespace``: fairseq's configuration holds the model's legacy ``args`` as a Namespace;
* numpy arrays of numbers (their reconstructor, ``numpy.ndarray``, ``numpy.dtype`` and the numeric dtype classes):
  fairseq's ``--task translation --eval-bleu`` keeps its BLEU counts as arrays in the saved metrics.

:func:`install` registers the list with torch (``torch.serialization.add_safe_globals``), which is all fairseq's own
``torch.load`` calls need; :func:`load` is the loader of the package's recipes and benchmarks, and turns a refused
checkpoint into one :class:`~insnet_fairseq.errors.CheckpointError` naming the file, the classes and the way to convert
a trusted file (``recipes/trust_checkpoint.py``). :func:`refusal` words that message for the loaders of fairseq.
"""
import argparse
import pickle
from typing import List

import numpy as np
import torch

from insnet_fairseq.errors import CheckpointError

CONVERTER = "recipes/trust_checkpoint.py"


def _numpy_globals() -> list:
    """What unpickling a numpy array of numbers names: the reconstructor (``numpy.core`` or ``numpy._core``, by
    version), the array and dtype classes, and the class of every numeric dtype (numpy >= 1.25 gives each its own)."""
    reconstruct = np.empty(0).__reduce__()[0]
    kinds = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
             np.float16, np.float32, np.float64]
    dtype_classes = {type(np.dtype(k)) for k in kinds} - {np.dtype}
    return [reconstruct, np.ndarray, np.dtype, *sorted(dtype_classes, key=lambda c: c.__name__)]


SAFE_GLOBALS = [argparse.Namespace, *_numpy_globals()]


def name(obj) -> str:
    """``module.qualname`` of an allowlisted global, as torch names it in its errors."""
    return f"{obj.__module__}.{obj.__qualname__}"


def install() -> None:
    """Allow :data:`SAFE_GLOBALS` in every weights-only load of this process (idempotent)."""
    allowed = set(map(id, torch.serialization.get_safe_globals()))
    torch.serialization.add_safe_globals([g for g in SAFE_GLOBALS if id(g) not in allowed])


def unsafe_globals(path: str) -> List[str]:
    """The globals the pickle of ``path`` names that weights-only loading refuses, read without unpickling it
    (``[]`` where the file cannot be read so)."""
    allowed = {name(g) for g in SAFE_GLOBALS}
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - not a zip file, damaged: the load itself says what is wrong
        return []
    return sorted({g for g in found if g not in allowed})


def refusal(path: str, error: BaseException = None) -> str:
    """The one-line message for a checkpoint that weights-only loading refused, or "" when ``error`` is another
    failure (a damaged or truncated file) and the file names no refused global."""
    found = unsafe_globals(path)
    if not found and error is not None and _global_in_message(str(error)):  # a file the scan cannot read (legacy)
        found = [_global_in_message(str(error))]
    if not found:
        return ""
    shown = ", ".join(found[:12]) + (f" and {len(found) - 12} more" if len(found) > 12 else "")
    return (f"checkpoint {path} holds {shown}, which weights-only loading refuses (unpickling it could run code): "
            f"if you trust the file, convert it once with python {CONVERTER} {path} SAFE.pt and load SAFE.pt")


def _global_in_message(text: str) -> str:
    marker = "GLOBAL "
    if marker not in text:
        return ""
    return text.split(marker, 1)[1].split()[0]


def load(path: str, map_location="cpu"):
    """``torch.load(path)`` weights-only, the allowlist installed; a refused checkpoint raises one CheckpointError
    (see :func:`refusal`), any other failure propagates as torch raised it."""
    install()
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        message = refusal(str(path), e)
        if message:
            raise CheckpointError(message) from None
        raise
