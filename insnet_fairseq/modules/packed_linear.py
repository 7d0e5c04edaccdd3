"""Linear layers whose products run through oneDNN on a CPU: decoding with each weight packed once, training too.

``F.linear`` on a CPU calls MKL's GEMM. oneDNN (bundled with every CPU build of torch) computes the same products, and
multiplies faster still by a weight reordered once into its blocked layout (``torch.ops.mkldnn._reorder_linear_weight``,
the op of ``torch.compile``'s weight freezing). Decoding's products by a packed weight and training's products both
take less time than ``nn.Linear``'s (measured by ``experiments/small_matmul.py --packed`` and
``benchmarks/train_throughput.py --linear-kernels``; the figures: results/README.md). Below some work (one or two rows
of an FFN matrix) MKL's product and a shorter call are faster.

:func:`linear` decides (:func:`packs`): decoding (eval mode, no gradients) multiplies by a packed copy kept on the
layer, as :mod:`insnet_fairseq.modules.kept` keeps other tensors derived from weights, made again when the weight
changes (an optimizer step, a checkpoint load); training and gradients run :class:`OneDNNLinear` on the plain weights,
which change every update; GPUs, other dtypes and small products keep ``F.linear``. The same values up to float
rounding (tested); decoding holds a second copy of each weight.

:class:`Linear` is ``nn.Linear`` with that forward (the same parameters, the same state dict). InsNet's layers are
built from it; :func:`pack_linears` turns the ``nn.Linear`` layers of any model into it: the package's own models
call it (fairseq's encoder inside InsNet, the package's baselines), and the benchmarks call it for every system they
time, fairseq's models included, so that every model multiplies through the same products. Importing the package
does not apply it to a model of fairseq's.
"""
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.modules.multihead_attention import MultiheadAttention
from torch import Tensor, nn

from insnet_fairseq.modules.kept import KeepsDerived, kept, may_keep

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
MIN_WORK = 3 << 18  # multiply-adds (3 rows by 1024 x 256) from which oneDNN's product is faster, call included
ROWS_HINT = 16  # the packing's row count hint: from 2 to 64 rows as fast as each row count's own packing


def packs(x: Tensor, weight: Tensor) -> bool:
    """Whether :func:`linear` multiplies ``x`` [..., K] by ``weight`` [N, K] through oneDNN: float32 on a CPU with
    oneDNN built in, and at least ``MIN_WORK`` multiply-adds (rows x N x K; below it the call's overhead takes the
    gain: ``experiments/small_matmul.py --packed``).
    Example: 3 rows by a 1024 x 256 weight (786K) -> True; 2 rows by it, or 8 rows by a 256 x 256 one -> False;
    one row by a 9,808 x 256 vocabulary -> True."""
    return (ONEDNN and x.dtype == torch.float32 and weight.dtype == torch.float32 and x.device.type == "cpu"
            and x.numel() * weight.size(0) >= MIN_WORK)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor], owner: nn.Module, name: str = "",
           rows: Optional[slice] = None) -> Tensor:
    """``F.linear(x, weight[rows], bias[rows])``: x [..., K], weight [N, K] -> [..., N] (or the rows' count). Outside
    training and gradients, where :func:`packs`, by oneDNN with the weight (its ``rows``) packed once and kept on
    ``owner`` under ``name`` (one layer may keep several, e.g. the query rows and the key/value rows of one
    projection); the packed copy is made again when ``weight`` changes
    (:func:`~insnet_fairseq.modules.kept.weights_key`).
    Example: x [2, 5, 256], a 1024 x 256 weight -> [2, 5, 1024], the values of ``F.linear`` to float rounding."""
    if rows is not None:
        weight, bias = _row_block(owner, name, weight, bias, rows)
    if not (owner.packed and packs(x, weight)) or torch.compiler.is_compiling():
        return F.linear(x, weight, bias)
    if owner.training or torch.is_grad_enabled():  # (not may_keep) the weights change every update: not packed
        return OneDNNLinear.apply(x.reshape(-1, x.size(-1)), weight, bias).view(*x.shape[:-1], weight.size(0))
    packed = kept(owner, "_packed", name, [weight],
                  lambda: torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), ROWS_HINT))
    return _product(x, packed, bias)


def _row_block(owner: nn.Module, name: str, weight: Tensor, bias: Optional[Tensor], rows: slice):
    """``(weight[rows], bias[rows])``: views, kept on ``owner`` under ``name`` from one decoding call to the next
    (:func:`~insnet_fairseq.modules.kept.may_keep`; a batch-1 step costs about its number of op calls, and slicing
    is two of them), made again when ``weight`` changes. Example: a [768, 256] W_qkv, rows 256:768 -> [512, 256]."""
    def block():
        return weight[rows], None if bias is None else bias[rows]

    if not may_keep(owner):
        return block()
    return kept(owner, "_row_blocks", name, [weight] if bias is None else [weight, bias], block)


def _product(x: Tensor, w: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """x [..., K] @ w [N, K]^T + bias -> [..., N] by oneDNN; ``w`` plain or packed (``_reorder_linear_weight``)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), w, bias, "none", [], "")


class OneDNNLinear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` in training: the forward product and both gradient products by oneDNN, with
    plain (unpacked) weights, as they change every update. x [M, K], weight [N, K], bias [N] or None -> [M, N].
    Gradients: x's is g W ([M, N] @ [N, K]), W's is g^T x ([N, M] @ [M, K]; both transposes copied contiguous),
    the bias' the sum of g over rows. The same values as ``F.linear``'s up to float rounding (tested)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _product(x, weight.contiguous(), bias)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        g = grad.contiguous()  # [M, N] (made contiguous once for both products)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _product(g, weight.t().contiguous())  # [M, K]
        if ctx.needs_input_grad[1]:
            gw = _product(g.t().contiguous(), x.t().contiguous())  # [N, K]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g.sum(0)
        return gx, gw, gb


class Linear(KeepsDerived, nn.Linear):
    """``nn.Linear`` whose forward is :func:`linear`, and :meth:`rows`, the product by a block of its rows. ``packed``
    (True) lets it use oneDNN; :func:`set_packed` switches a whole model."""

    packed = True
    kept_stores = ("_packed", "_row_blocks")  # dropped in training mode (KeepsDerived)

    def __getstate__(self):
        """Copies and pickles leave the packed weights out (oneDNN's opaque tensors have no storage to copy); a copy
        packs its own on its first decoding call."""
        state = dict(super().__getstate__())
        state.pop("_packed", None)
        state.pop("_row_blocks", None)
        return state

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self)

    def rows(self, x: Tensor, start: int, stop: int) -> Tensor:
        """The product by rows ``start:stop`` of the weight (and bias) only: x [..., K] -> [..., stop - start].
        Example: a fused W_qkv [3D, D]: ``rows(x, 0, D)`` is the queries, ``rows(x, D, 3 * D)`` the keys and values."""
        return linear(x, self.weight, self.bias, self, f"{start}:{stop}", slice(start, stop))


def pack_linears(model: nn.Module) -> nn.Module:
    """Every ``nn.Linear`` of ``model`` made a :class:`Linear` in place (its class only: the same parameters, hooks and
    state dict), so that it decodes and trains through :func:`linear`; and, on a machine without a GPU, every fairseq
    ``MultiheadAttention`` set to run its projections through its layers (fairseq's own switch,
    ``_set_skip_embed_dim_check``: its other path hands the weights to ``F.multi_head_attention_forward``, past the
    layers; on a GPU that path's fused attention is kept). Returns ``model``. Subclasses of ``nn.Linear`` with a
    forward of their own are left as they are."""
    cpu_only = not torch.cuda.is_available()
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = Linear
        elif cpu_only and isinstance(module, MultiheadAttention):
            module._set_skip_embed_dim_check()
    return model


def set_packed(model: nn.Module, packed: bool) -> nn.Module:
    """Let every :class:`Linear` of ``model`` use oneDNN (True) or keep ``F.linear`` (False: for a side-by-side
    benchmark, :mod:`benchmarks.linear_kernels`). The packed copies stay kept (still keyed by their weights): switching
    back and forth packs nothing again. Returns ``model``."""
    for module in model.modules():
        if isinstance(module, Linear):
            module.packed = packed
    return model
