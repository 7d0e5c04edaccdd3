"""Instruments that count what a decoding does, for the tests, the benchmarks and the experiments alike.

* :class:`PassCounter`: decoder passes (calls of the first layer of every decoder layer stack), the hypothesis rows
  and target positions they compute;
* :class:`HostSyncs`: the ops that would make the host wait for a GPU (a device value read back), by call site.

This module imports nothing of the package, so any layer's tests may use it.
"""
import collections
import os
import traceback
from typing import Sequence

import torch
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # call sites are named relative to it


class PassCounter:
    """Counts decoder passes: calls of the first layer of every decoder layer stack of ``models``.

    A stack is an ``nn.ModuleList`` named ``layers`` inside a model's ``decoder``, or ``query_layers`` (InsNet's
    untied slot query stream). Every method that runs that layer over target-side states is counted
    (``forward``; InsNet's ``forward_with_queries`` and ``query``, the slot query stream), except a call made
    inside a counted one (a fused pass that runs its queries through the untied query layer is one pass).
    ``rows`` adds the hypothesis rows of each call: the batch dimension of the states (fairseq's layers take
    ``T x B x C``, InsNet's ``B x T x C``), ``positions`` their rows x positions (the target positions the call
    computes).

    Example: AR greedy decoding of one sentence into 4 tokens + ``</s>`` is 5 calls of 1 row; beam 5,
    5 calls of 5 rows; InsNet sequential decoding of 4 tokens, 1 initial pass + 4 steps = 5 calls, and
    2 + 4 = 6 positions (``<s> </s>``, then one word a step), 4 more with the slot query stream.
    """

    METHODS = ("forward", "forward_with_queries", "query")

    def __init__(self, models: Sequence[nn.Module]):
        self.calls = 0
        self.rows = 0
        self.positions = 0
        self._patched = []
        self._inside = 0  # counted calls running now: a call inside one is part of its pass
        for model in models:
            decoder = getattr(model, "decoder", model)
            for name, module in decoder.named_modules():
                if name.split(".")[-1] in ("layers", "query_layers") and isinstance(module, nn.ModuleList) \
                        and len(module):
                    self._patch(module[0])

    @staticmethod
    def _batch_dim(layer: nn.Module) -> int:
        return 1 if isinstance(layer, TransformerDecoderLayerBase) else 0

    def _patch(self, layer: nn.Module):
        dim = self._batch_dim(layer)
        for method in self.METHODS:
            if not hasattr(layer, method):
                continue
            original = getattr(layer, method)

            def counted(*args, __original=original, __method=method, **kwargs):
                if self._inside:
                    return __original(*args, **kwargs)
                self.count(__method, dim, args, kwargs)
                self._inside += 1
                try:
                    return __original(*args, **kwargs)
                finally:
                    self._inside -= 1

            setattr(layer, method, counted)  # an instance attribute: nn.Module.__call__ finds it first
            self._patched.append((layer, method))

    def count(self, method: str, dim: int, args, kwargs) -> None:
        """One call of ``method`` of a counted layer, its states first (batch dimension ``dim``)."""
        x = args[0] if args else next(iter(kwargs.values()))
        self.calls += 1
        self.rows += int(x.size(dim))
        self.positions += int(x.size(0)) * int(x.size(1))

    def reset(self):
        self.calls = self.rows = self.positions = 0

    def remove(self):
        for layer, method in self._patched:
            delattr(layer, method)
        self._patched = []


READ_BACK = {"aten.nonzero.default", "aten._local_scalar_dense.default", "aten.is_nonzero.default",
             "aten.equal.default", "aten.masked_select.default", "aten._unique2.default",
             "aten.unique_consecutive.default", "aten.unique_dim.default", "aten.repeat_interleave.Tensor"}
BOOL_INDEXED = {"aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default",
                "aten._index_put_impl_.default"}


def reads_back(func, args) -> bool:
    """Whether the aten op ``func`` called with ``args`` needs a device value on the host."""
    name = str(func)
    if name in READ_BACK:
        return True
    if name in BOOL_INDEXED and len(args) > 1 and isinstance(args[1], (list, tuple)):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
    return False


class HostSyncs(TorchDispatchMode):
    """Counts the ops that read a device value back (:func:`reads_back`), and the calls of ``Tensor.tolist`` (a copy
    to the host on a GPU, no aten op on a CPU), by op and by the innermost call site in ``insnet_fairseq``
    (file:line function), while active: ``with HostSyncs() as syncs: ...; syncs.total``."""

    def __init__(self):
        super().__init__()
        self.sites = collections.Counter()
        self._tolist = None

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def _count(self, op: str) -> None:
        frames = [f for f in traceback.extract_stack() if "insnet_fairseq" in f.filename]
        site = (f"{os.path.relpath(frames[-1].filename, CHECKOUT)}:{frames[-1].lineno} {frames[-1].name}"
                if frames else "(outside insnet_fairseq)")
        self.sites[(op, site)] += 1

    def __enter__(self):
        self._tolist = torch.Tensor.tolist
        tolist = self._tolist

        def counted_tolist(t, *args, **kwargs):
            self._count("tolist")
            return tolist(t, *args, **kwargs)

        torch.Tensor.tolist = counted_tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if reads_back(func, args):
            self._count(str(func).split(".")[1])
        return func(*args, **(kwargs or {}))
