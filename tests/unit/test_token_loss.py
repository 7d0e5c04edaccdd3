"""The token loss with its closed-form backward equals fairseq's label_smoothed_nll_loss, values and gradients."""
import math

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

from insnet_fairseq.tasks.token_loss import smoothed_nll


def fairseq_terms(logits, target, eps):
    return label_smoothed_nll_loss(F.log_softmax(logits.float(), -1), target, eps, reduce=True)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("loss_weight,nll_weight", [(1.0, 0.0), (0.7, 0.0), (0.0, 1.0), (0.5, 2.0)])
def test_values_and_gradients_equal_fairseq(eps, loss_weight, nll_weight):
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(13, 37, generator=g, dtype=torch.float64)).requires_grad_()
    target = torch.randint(0, 37, (13,), generator=g)
    target[:3] = 5  # repeated labels
    ref_logits = logits.detach().clone().requires_grad_()
    loss, nll = smoothed_nll(logits, target, eps)
    ref_loss, ref_nll = fairseq_terms(ref_logits, target, eps)
    torch.testing.assert_close(loss.double(), ref_loss.double(), atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(nll.double(), ref_nll.double(), atol=1e-5, rtol=1e-6)
    (loss_weight * loss + nll_weight * nll).backward()
    (loss_weight * ref_loss + nll_weight * ref_nll).backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad, atol=1e-6, rtol=1e-5)


def test_half_precision_logits_get_a_gradient_of_their_dtype():
    logits = torch.randn(4, 11).to(torch.bfloat16).requires_grad_()
    target = torch.tensor([0, 3, 10, 3])
    loss, _ = smoothed_nll(logits, target, 0.1)
    assert loss.dtype == torch.float32
    loss.backward()
    ref = logits.detach().float().requires_grad_()
    fairseq_terms(ref, target, 0.1)[0].backward()
    assert logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(logits.grad.float(), ref.grad, atol=1e-2, rtol=1e-2)


def test_docstring_example_uniform_logits():
    for eps in (0.0, 0.3):
        loss, nll = smoothed_nll(torch.zeros(1, 4), torch.tensor([2]), eps)
        assert math.isclose(float(loss), math.log(4), rel_tol=1e-6)
        assert math.isclose(float(nll), math.log(4), rel_tol=1e-6)


def test_a_second_backward_through_the_same_graph_is_refused():
    """The backward writes the gradient over its saved log-probabilities, so it must not run twice."""
    logits = torch.randn(3, 7, requires_grad=True)
    loss, _ = smoothed_nll(logits, torch.tensor([1, 2, 3]), 0.1)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="once per forward"):
        loss.backward()
