"""The C++ offset-score kernel of CPU training (insnet_fairseq/modules/offset_scores.py) against the dense gather it
replaces: the same scores, -inf where blocked, and the same gradients, down to the model's loss and every parameter's
gradient; a clear error for an offset outside the table."""
import pytest
import torch

from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.modules import offset_scores
from insnet_fairseq.modules.attention import OffsetSelfAttention
from insnet_fairseq.geometry.offsets import offset_matrix
from insnet_fairseq.tasks.criterion import term_losses

from conftest import build_tiny_model, random_batch


def test_the_kernel_is_built():
    """`make install` (pip install -e .) builds it; without it CPU training silently takes the slower gather."""
    assert offset_scores.available(), "insnet_fairseq.modules._offset_scores is not built: run `make install`"


def dense(qv, p, index, mask, scaling):
    """The gather the kernel replaces: [B, H, T, R] products, gathered, scaled, -inf where blocked."""
    B, H, T, _ = qv.shape
    S = index.size(-1)
    bias = (qv @ p.transpose(-2, -1)).gather(-1, index.unsqueeze(1).expand(B, H, T, S)) * scaling
    if mask is not None:
        bias = bias.masked_fill((mask if mask.dim() == 3 else mask.unsqueeze(0)).unsqueeze(1), float("-inf"))
    return bias


def case(kind, B=3, H=2, T=6, S=6, Dh=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    R = 2 * S - 1
    qv = torch.randn(B, H, T, Dh, dtype=dtype, generator=g, requires_grad=True)
    p = torch.randn(H, R, Dh, dtype=dtype, generator=g, requires_grad=True)
    if kind == "one pass":  # a random insertion order's offsets under the causal mask
        order = make_order("random", torch.full((B,), S), S, g)
        index, mask = offset_matrix(order) + S - 1, torch.ones(T, S, dtype=torch.bool).triu(1)
    else:  # any index, a per-sentence mask (rows of queries over S keys, some fully open), or nothing blocked
        index = torch.randint(0, R, (B, T, S), generator=g)
        mask = None if kind == "open" else torch.rand(B, T, S, generator=g) < 0.4
        if mask is not None:
            mask[:, 0] = False
            index = index.masked_fill(mask, 10 ** 6)  # blocked pairs' offsets are never read
    return qv, p, index, mask


@pytest.mark.parametrize("kind,T,S,Dh", [("one pass", 6, 6, 8), ("one pass", 1, 1, 8), ("one pass", 9, 9, 20),
                                         ("queries", 4, 7, 8), ("queries", 5, 3, 3), ("open", 3, 5, 16),
                                         ("one pass", 9, 9, 64), ("queries", 4, 7, 32)])  # (64, 32: unrolled)
def test_scores_and_gradients_equal_the_dense_gather(kind, T, S, Dh):
    qv, p, index, mask = case(kind, T=T, S=S, Dh=Dh)
    grad = torch.randn(qv.size(0), qv.size(1), T, S, dtype=torch.float64)  # blocked entries' gradient is dropped
    fast = offset_scores.offset_scores(qv, p, index, mask, 0.3)
    fast_grads = torch.autograd.grad(fast, (qv, p), grad)
    safe_index = index if mask is None else index.masked_fill(mask if mask.dim() == 3 else mask.unsqueeze(0), 0)
    slow = dense(qv, p, safe_index, mask, 0.3)
    slow_grads = torch.autograd.grad(slow, (qv, p), grad.masked_fill(slow.isinf(), 0))
    assert torch.equal(fast.isinf(), slow.isinf()) and (fast.isinf() == (fast == float("-inf"))).all()
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    for a, b in zip(fast_grads, slow_grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_float32_and_a_shared_or_per_sentence_mask():
    qv, p, index, mask = case("one pass", B=4, H=4, T=17, S=17, Dh=64, dtype=torch.float32)
    per_sentence = mask.unsqueeze(0).expand(4, 17, 17)
    a = offset_scores.offset_scores(qv, p, index, mask, 0.125)
    b = offset_scores.offset_scores(qv, p, index, per_sentence, 0.125)
    assert torch.equal(a, b)
    torch.testing.assert_close(a, dense(qv, p, index, mask, 0.125), rtol=1e-5, atol=1e-5)


def test_an_offset_outside_the_table_is_a_clear_error():
    qv, p, index, mask = case("one pass")
    index = index.clone()
    index[1, 3, 2] = p.size(1)  # unblocked (2 <= 3) and one past the last row
    with pytest.raises(RuntimeError, match=r"offset index 11 is outside \[0, 11\)"):
        offset_scores.offset_scores(qv, p, index, mask, 1.0)


def test_decoding_and_other_devices_keep_the_gather():
    qv = torch.randn(1, 2, 3, 4, requires_grad=True)
    assert offset_scores.applies(qv)
    with torch.no_grad():
        assert not offset_scores.applies(qv)
    assert not offset_scores.applies(qv.detach())
    assert not offset_scores.applies(qv.detach().half().requires_grad_())


@pytest.mark.parametrize("policy,slot_query", [("random", False), ("l2r", False), ("binary", True)])
def test_a_training_step_gives_the_loss_and_gradients_of_the_gather(policy, slot_query, monkeypatch):
    """The model's loss and every parameter's gradient, with the kernel and with every layer's dense path (the gather,
    or the l2r order's skewed view), on a padded batch; the kernel is the path taken."""
    model, d = build_tiny_model(seed=6, slot_query_stream=slot_query)
    model.double().train()  # (dropout 0: deterministic)
    src, src_lengths, target = random_batch(d, [9, 3, 12, 6], seed=7)
    order = make_order(policy, target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(3))
    layers = [m for m in model.modules() if isinstance(m, OffsetSelfAttention)]
    calls = []
    kernel = offset_scores.offset_scores
    monkeypatch.setattr(offset_scores, "offset_scores", lambda *a: calls.append(1) or kernel(*a))

    def loss_and_grads(use_kernel):
        for m in layers:
            m.offset_kernel = use_kernel
        model.zero_grad()
        loss = sum(v[0] for v in term_losses(model(src, src_lengths, target, order)).values())
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads(True)
    assert len(calls) == len(layers) * (2 if slot_query else 1)  # every layer's tokens (and slot queries) took it
    dense_loss, dense_grads = loss_and_grads(False)
    assert len(calls) == len(layers) * (2 if slot_query else 1)  # not taken with offset_kernel False
    torch.testing.assert_close(loss, dense_loss, rtol=1e-12, atol=1e-10)
    assert grads.keys() == dense_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], dense_grads[name], rtol=1e-9, atol=1e-10, msg=name)
