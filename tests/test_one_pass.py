"""The paper's claim: one pass over a whole insertion trajectory gives the same per-step
log-probabilities as re-encoding every prefix from scratch."""
import pytest
import torch

from insnet_fairseq.tasks.criterion import term_losses
from insnet_fairseq.data.orders import make_order
from insnet_fairseq.reference import naive_trajectory_logprobs, reencode_prefixes

from conftest import build_tiny_model, random_batch, step_logprobs

ATOL = 1e-5


def one_pass_logprobs(model, src, src_lengths, target, order):
    out = model(src, src_lengths, target, order)
    pos, term = out["position"], out["termination"]
    return (*step_logprobs(out), (pos["mask"], pos["mask"], term["mask"]))


@pytest.mark.parametrize("policy", ["l2r", "r2l", "random", "binary", "anchored"])
@pytest.mark.parametrize("offset_embedding,slot_query", [("sinusoidal", False), ("learned", False), ("sinusoidal", True)])
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


@pytest.mark.parametrize("slot_query", [False, True])
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
