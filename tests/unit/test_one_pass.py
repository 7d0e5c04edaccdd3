"""The paper's claim: one pass over a whole insertion trajectory gives the same per-step
log-probabilities as re-encoding every prefix from scratch."""
import pytest
import torch

from insnet_fairseq.tasks.criterion import term_losses
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.reference import naive_trajectory_logprobs, reencode_prefixes

from conftest import build_tiny_model, random_batch, step_logprobs

ATOL = 1e-5


def one_pass_logprobs(model, src, src_lengths, target, order):
    out = model(src, src_lengths, target, order)
    pos, term = out["position"], out["termination"]
    return (*step_logprobs(out), (pos["mask"], pos["mask"], term["mask"]))


@pytest.mark.parametrize("policy", ["l2r", "r2l", "random", "binary", "anchored"])
@pytest.mark.parametrize("offset_embedding,slot_query", [("sinusoidal", False), ("learned", False), ("sinusoidal", True),
                                                       ("sinusoidal", "untied"), ("sinusoidal", "last1")])
def test_one_pass_equals_reencoding_every_prefix(policy, offset_embedding, slot_query):
    model, d = build_tiny_model(seed=1, offset_embedding=offset_embedding, decoder_normalize_before=True,
                                slot_query_stream=slot_query)
    lengths = [9, 3, 12, 6]  # padded batch
    src, src_lengths, target = random_batch(d, lengths, seed=2)
    order = make_order(policy, target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(5))
    with torch.no_grad():
        tok_lp, pos_lp, term_lp, (tok_m, pos_m, term_m) = one_pass_logprobs(model, src, src_lengths, target, order)
    naive = naive_trajectory_logprobs(model, src, src_lengths, target, order)
    for b, L in enumerate(lengths):
        assert tok_m[b].sum() == L - 2 and pos_m[b].sum() == L - 2 and term_m[b].sum() == L - 1
        torch.testing.assert_close(tok_lp[b][tok_m[b]], torch.tensor(naive[b]["token"]), atol=ATOL, rtol=0)
        torch.testing.assert_close(pos_lp[b][pos_m[b]], torch.tensor(naive[b]["position"]), atol=ATOL, rtol=0)
        torch.testing.assert_close(term_lp[b][term_m[b]], torch.tensor(naive[b]["termination"]), atol=ATOL, rtol=0)


@pytest.mark.parametrize("slot_query", [False, True, "untied"])
def test_post_norm_model_and_batched_reencoding_give_the_same_loss(slot_query):
    model, d = build_tiny_model(seed=3, slot_query_stream=slot_query)
    src, src_lengths, target = random_batch(d, [10, 4, 7], seed=4)
    order = make_order("random", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0))
    with torch.no_grad():
        terms = term_losses(model(src, src_lengths, target, order))
        one_pass = sum(v[0] for v in terms.values())
        reencoded = reencode_prefixes(model, src, src_lengths, target, order)
    torch.testing.assert_close(one_pass, reencoded, atol=1e-4, rtol=1e-6)


def test_padding_does_not_change_a_sentence():
    model, d = build_tiny_model(seed=4)
    src, src_lengths, target = random_batch(d, [8, 13], seed=6)
    order = make_order("random", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(1))
    with torch.no_grad():
        batched = one_pass_logprobs(model, src, src_lengths, target, order)
        L = 8
        alone = one_pass_logprobs(model, src[:1, -int(src_lengths[0]):], src_lengths[:1], target[:1, :L], order[:1, :L])
    for i in range(3):
        mask = batched[3][i][0]
        torch.testing.assert_close(batched[i][0][mask], alone[i][0][alone[3][i][0]], atol=ATOL, rtol=0)


@pytest.mark.parametrize("slot_query", [False, True])
def test_left_to_right_offset_term_equals_the_general_gather(slot_query, monkeypatch):
    """A batch all in the l2r order takes OffsetSelfAttention.left_to_right_bias (no gather); the loss and every
    parameter's gradient equal the general path's (the offsets gathered), on a padded batch."""
    import insnet_fairseq.models.insnet as insnet
    from insnet_fairseq.modules.attention import OffsetSelfAttention

    model, d = build_tiny_model(seed=6, slot_query_stream=slot_query)
    model.train()  # (dropout 0: deterministic)
    for m in model.modules():  # the dense paths (the C++ kernel, which would take both, is tested on its own)
        if isinstance(m, OffsetSelfAttention):
            m.offset_kernel = False
    src, src_lengths, target = random_batch(d, [9, 3, 12, 6], seed=7)
    order = make_order("l2r", target.ne(d.pad()).sum(1), target.size(1))
    calls = []
    fast = OffsetSelfAttention.left_to_right_bias
    monkeypatch.setattr(OffsetSelfAttention, "left_to_right_bias",
                        lambda self, *a: calls.append(1) or fast(self, *a))

    def loss_and_grads():
        model.zero_grad()
        terms = term_losses(model(src, src_lengths, target, order))
        loss = sum(v[0] for v in terms.values())
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads()
    assert len(calls) == len(model.decoder.context.layers)  # the token stream of every layer took it
    monkeypatch.setattr(insnet, "is_left_to_right", lambda *a: False)
    general_loss, general_grads = loss_and_grads()
    assert len(calls) == len(model.decoder.context.layers)  # not taken again
    torch.testing.assert_close(loss, general_loss, atol=1e-5, rtol=1e-6)
    assert grads.keys() == general_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], general_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_left_to_right_path_is_not_taken_with_clipped_offsets(monkeypatch):
    from insnet_fairseq.modules.attention import OffsetSelfAttention

    model, d = build_tiny_model(seed=6, offset_clip=1)
    src, src_lengths, target = random_batch(d, [9, 5], seed=7)
    order = make_order("l2r", target.ne(d.pad()).sum(1), target.size(1))
    monkeypatch.setattr(OffsetSelfAttention, "left_to_right_bias", lambda *a: pytest.fail("taken with --offset-clip"))
    with torch.no_grad():
        model(src, src_lengths, target, order)


@pytest.mark.parametrize("S", [1, 2, 3, 7])
def test_left_to_right_bias_and_its_gradients_equal_the_gathered_offsets(S):
    """OffsetSelfAttention.left_to_right_bias (the skewed view and its own backward) against offset_bias's general
    gather on the l2r offsets, down to one and two tokens: the same scores, -inf where blocked, and the same gradients
    of q, W_kR and v."""
    from insnet_fairseq.modules.attention import OffsetSelfAttention, sinusoidal_offset_table
    from insnet_fairseq.geometry.offsets import left_to_right_offsets

    torch.manual_seed(S)
    att = OffsetSelfAttention(16, 2, 16).double()
    att.offset_kernel = False  # the dense gather (the kernel has its own tests: test_offset_scores.py)
    torch.nn.init.normal_(att.v)
    table = sinusoidal_offset_table(S + 2, 16).double()
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    offsets = left_to_right_offsets(S).expand(3, S, S)
    q = torch.randn(3, 2, S, 8, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, 2, S, S, dtype=torch.float64)  # (blocked entries too: their gradient must be dropped)

    def bias_and_grads(l2r):
        for t in (q, att.r_proj.weight, att.v):
            t.grad = None
        bias = (att.left_to_right_bias(q + att.v.view(1, 2, 1, 8), table, mask) if l2r
                else att.offset_bias(q, offsets, table, mask, S))
        bias.backward(grad)
        return bias.detach(), [t.grad.clone() for t in (q, att.r_proj.weight, att.v)]

    fast, fast_grads = bias_and_grads(True)
    general, general_grads = bias_and_grads(False)
    torch.testing.assert_close(fast, general)
    for a, b in zip(fast_grads, general_grads):
        torch.testing.assert_close(a, b)
