"""The token head's label-smoothed NLL with a one-pass backward.

fairseq's ``label_smoothed_nll_loss`` (what ``label_smoothed_cross_entropy`` and ``insnet_loss`` compute) is

    loss = (1 - eps - eps_i) * nll + eps_i * smooth,   nll = -sum_n lp[n, t_n],   smooth = -sum_{n,v} lp[n, v],

with ``lp = log_softmax(logits)`` and ``eps_i = eps / (V - 1)``. Through autograd its backward builds the gradient
of each term as its own [N, V] tensor (a scatter into zeros for the gather, an expanded ones for the sum), adds
them and then runs log_softmax's backward: four passes over [N, V], the largest tensors of a training step. The
gradient has a closed form, so one pass suffices:

    d loss / d logits[n, v] = g * ((a + b V) p[n, v] - b) - g * a [v = t_n],   a = 1 - eps - eps_i, b = eps_i,

(plus the ``nll`` output's own gradient, ``g_nll * (p - onehot)``, when it is used in a loss).
"""
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


class _SmoothedNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float) -> Tuple[Tensor, Tensor]:
        lprobs = F.log_softmax(logits.float(), dim=-1)  # [N, V]
        nll = -lprobs.gather(1, target.unsqueeze(1)).sum()
        eps_i = eps / (lprobs.size(1) - 1)
        loss = nll if eps == 0 else (1.0 - eps - eps_i) * nll - eps_i * lprobs.sum()
        ctx.save_for_backward(lprobs, target)
        ctx.eps, ctx.logits_dtype, ctx.consumed = eps, logits.dtype, False
        return loss, nll

    @staticmethod
    def backward(ctx, g_loss: Tensor, g_nll: Tensor):  # 0-dim each (autograd gives zeros for an unused output)
        if ctx.consumed:
            raise RuntimeError("smoothed_nll's backward reuses its saved log-probabilities in place: "
                               "it can run once per forward (no retain_graph=True)")
        ctx.consumed = True
        lprobs, target = ctx.saved_tensors
        V = lprobs.size(1)
        b = ctx.eps / (V - 1)
        a = 1.0 - ctx.eps - b
        at_target = g_loss * a + g_nll  # the gradient's weight on -lp[n, t_n]
        # [N, V]: p * (the sum of the weights on -lp), written over the saved log-probabilities (no new [N, V] buffer)
        grad = lprobs.exp_().mul_(at_target + g_loss * (b * V))
        if b:
            grad.sub_(g_loss * b)
        rows = torch.arange(len(target), device=target.device)
        grad[rows, target] -= at_target
        return grad.to(ctx.logits_dtype), None, None


def smoothed_nll(logits: Tensor, target: Tensor, eps: float = 0.0) -> Tuple[Tensor, Tensor]:
    """Summed label-smoothed NLL and plain NLL of ``target`` under ``logits``, as fairseq's
    ``label_smoothed_nll_loss(log_softmax(logits), target, eps)``, with a one-pass backward.

    logits: [N, V] (any float dtype; computed in float32); target: LongTensor [N]; eps: label smoothing.
    Returns (loss, nll), 0-dim float32 tensors. Example: logits zeros [1, 4], target [2], eps 0 -> (log 4, log 4);
    eps 0.3 -> the same (a uniform distribution has the same NLL for every label).
    """
    return _SmoothedNLL.apply(logits, target, float(eps))
