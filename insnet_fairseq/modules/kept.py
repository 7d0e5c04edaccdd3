"""Tensors derived from a module's weights and kept from one decoding call to the next (the offset projection of
:meth:`~insnet_fairseq.modules.attention.OffsetSelfAttention.project_offsets`, the packed weights of
:func:`~insnet_fairseq.modules.packed_linear.linear`): when a module may keep one, and the key that says when the
kept tensor is stale.
"""
from typing import Callable, Sequence, TypeVar

import torch
from torch import Tensor, nn

T = TypeVar("T")


def may_keep(module: nn.Module) -> bool:
    """Whether ``module`` may reuse a tensor derived from its weights: outside training, without gradients (a kept
    tensor carries no graph) and outside ``torch.compile`` (a compiled graph cannot compare the key's data pointers).
    Example: ``model.eval()`` under ``torch.no_grad()`` -> True; during training -> False."""
    return not (module.training or torch.is_grad_enabled() or torch.compiler.is_compiling())


def weights_key(*tensors: Tensor) -> tuple:
    """What a kept tensor derived from ``tensors`` depends on: each one's data pointer, version counter (bumped by an
    in-place update, e.g. an optimizer step or a checkpoint load) and dtype. Equal keys: the kept tensor still holds."""
    return tuple(x for t in tensors for x in (t.data_ptr(), t._version, t.dtype))


def kept(owner: nn.Module, store: str, name: str, sources: Sequence[Tensor], make: Callable[[], T]) -> T:
    """``make()``, derived from ``sources``, kept on ``owner`` in the dict ``owner.__dict__[store]`` under ``name`` (not
    a buffer: no state dict) and made again once their :func:`weights_key` changes. The caller checks
    :func:`may_keep`. Example: ``kept(lin, "_packed", "", [lin.weight], pack)`` packs once, and again after an
    optimizer step."""
    entries = owner.__dict__.setdefault(store, {})  # name -> (key, value)
    key = weights_key(*sources)
    entry = entries.get(name)
    if entry is None or entry[0] != key:
        entry = entries[name] = (key, make())
    return entry[1]
