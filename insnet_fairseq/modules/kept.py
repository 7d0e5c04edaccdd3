"""Tensors derived from a module's weights and kept from one decoding call to the next (the offset projection of
:meth:`~insnet_fairseq.modules.attention.OffsetSelfAttention.project_offsets`, the packed weights of
:func:`~insnet_fairseq.modules.packed_linear.linear`): when a module may keep one, and what makes it stale.

A kept tensor is never stale, with no help from the optimizer:

* it is made only outside training mode and without gradients (:func:`may_keep`);
* a module that keeps tensors (:class:`KeepsDerived`) drops them all whenever it is put in training mode, and every
  trainer puts a model in training mode before it updates the weights: an optimizer may then write the weights in
  any way, ``p.data`` included (which leaves ``p._version`` as it was, as fairseq 0.12's optimizers do);
* in between, each kept tensor is keyed by its weights' data pointers and version counters (:func:`weights_key`),
  so an in-place change outside training (``load_state_dict``, ``p.copy_`` under ``no_grad``) makes it again.
"""
from typing import Callable, Sequence, Tuple, TypeVar

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
    in-place update of the tensor itself, e.g. a checkpoint load or a torch optimizer's step) and dtype. Equal keys:
    the kept tensor still holds."""
    return tuple(x for t in tensors for x in (t.data_ptr(), t._version, t.dtype))


class KeepsDerived(nn.Module):
    """A module that keeps tensors derived from its weights in the attributes named by ``kept_stores``: switching it
    to training mode (``model.train()``, which reaches every submodule) drops them."""

    kept_stores: Tuple[str, ...] = ()

    def train(self, mode: bool = True):
        if mode:
            forget(self)
        return super().train(mode)


def forget(module: nn.Module) -> None:
    """Drop every tensor ``module`` keeps (its ``kept_stores``); the next no-gradient call makes them again."""
    for store in getattr(module, "kept_stores", ()):
        module.__dict__.pop(store, None)


def kept(owner: nn.Module, store: str, name: str, sources: Sequence[Tensor], make: Callable[[], T]) -> T:
    """``make()``, derived from ``sources``, kept on ``owner`` in the dict ``owner.__dict__[store]`` under ``name`` (not
    a buffer: no state dict) and made again once their :func:`weights_key` changes. The caller checks
    :func:`may_keep`. Example: ``kept(lin, "_packed", "", [lin.weight], pack)`` packs once, and again after a
    ``load_state_dict`` or a return to training mode."""
    entries = owner.__dict__.setdefault(store, {})  # name -> (key, value)
    key = weights_key(*sources)
    entry = entries.get(name)
    if entry is None or entry[0] != key:
        entry = entries[name] = (key, make())
    return entry[1]
