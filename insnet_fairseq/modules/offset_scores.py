"""The offset term of the self-attention scores for the unblocked (query, key) pairs only: a CPU kernel for training.

:meth:`~insnet_fairseq.modules.attention.OffsetSelfAttention.offset_bias` multiplies every query by all ``R = 2S - 1``
offset rows, gathers the ``S`` it needs and, backward, scatters the gradient over a zero-filled [B, H, T, R]. Under
one-pass training's causal mask a query sees half its keys, so that is four times the products the term needs, plus
the gather, the zero fill and the scatter. The C++ kernel here (``offset_scores.cpp``, built by ``setup.py`` as
``insnet_fairseq.modules._offset_scores``) computes

    bias[b, h, i, j] = scaling * qv[b, h, i] . p[h, index[b, i, j]]    (-inf where mask[b, i, j])

for the unblocked pairs and their gradients for qv and p, with nothing of size [B, H, T, R]. Same values as the
gather (float64: to rounding; float32: the order of the sums differs), tested in ``tests/test_offset_scores.py``.

Used by ``offset_bias`` when gradients are taken on the CPU in float32 or float64 and the kernel is built
(:func:`available`); decoding, GPUs and other dtypes keep the dense gather, and so does a layer whose
``offset_kernel`` is False (``benchmarks/train_throughput.py --offset-kernels`` times both).
"""
from typing import Optional

import torch
from torch import Tensor

try:
    from insnet_fairseq.modules import _offset_scores as _kernel
except ImportError:  # not built: `make install` (pip install -e .) builds it
    _kernel = None


def available() -> bool:
    """Whether the C++ kernel was built (``pip install -e .``, which ``make install`` runs)."""
    return _kernel is not None


def applies(qv: Tensor) -> bool:
    """Whether :func:`offset_scores` serves ``qv``: the kernel is built, ``qv`` is on the CPU in float32/float64 and
    gradients are being taken (training; decoding's few rows keep the dense product)."""
    return (_kernel is not None and qv.device.type == "cpu" and qv.dtype in (torch.float32, torch.float64)
            and torch.is_grad_enabled() and qv.requires_grad)


class _OffsetScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qv: Tensor, p: Tensor, index: Tensor, mask: Tensor, scaling: float) -> Tensor:
        qv, p = qv.contiguous(), p.contiguous()
        ctx.save_for_backward(qv, p, index, mask)
        ctx.scaling = scaling
        return _kernel.forward(qv, p, index, mask, scaling)

    @staticmethod
    def backward(ctx, grad: Tensor):
        qv, p, index, mask = ctx.saved_tensors
        grad_qv, grad_p = _kernel.backward(grad, qv, p, index, mask, ctx.scaling)
        return grad_qv, grad_p, None, None, None


def offset_scores(qv: Tensor, p: Tensor, index: Tensor, mask: Optional[Tensor], scaling: float) -> Tensor:
    """The scaled offset scores of the unblocked pairs, -inf where blocked.

    qv [B, H, T, Dh] (queries plus the position bias v); p [H, R, Dh] (offset rows); index [B, T, S] int64, the row
    of p for each pair, in [0, R) wherever unblocked (anything where blocked); mask bool [T, S] or [B, T, S] (True:
    blocked) or None -> [B, H, T, S], differentiable in qv and p.
    Example: T = S = 3, a causal mask, R = 5: 6 dot products per (b, h), ``bias[..., 0, 1:]`` is -inf.
    """
    if mask is None:
        mask = torch.empty(0, dtype=torch.bool)
    elif mask.dim() == 2:
        mask = mask.unsqueeze(0)
    return _OffsetScores.apply(qv, p, index.contiguous(), mask.contiguous(), float(scaling))
