"""The paper's ablations (Table 6) as model flags: ``--offset-clip 1`` (InsNet-truncated) clips every
offset the attention sees to [-1, 1] and changes nothing else; ``--no-global-slot`` (InsNet-noglobal)
drops h_t from the slot representation and changes nothing else. Under each flag (and both, with and
without the slot query stream, for the translation and the language model) the one-pass objective
still equals re-encoding every prefix, the layered objective per-layer re-encoding, and the
generator driven along a gold trajectory the one-pass terms."""
import argparse

import pytest
import torch

from insnet_fairseq.modules.attention import OffsetSelfAttention
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.geometry.layers import num_layers, trajectory, uniform_layers
from insnet_fairseq.training.layerization import layerize
from insnet_fairseq.models.insnet import InsNetModel
from insnet_fairseq.geometry.offsets import offset_matrix
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.reference import naive_layered_logprobs, naive_trajectory_logprobs

from conftest import build_tiny_lm_model, build_tiny_model, random_batch, step_logprobs
from test_forced_trajectory import forced_logprobs

ATOL = 1e-5
FLAGS = {"truncated": dict(offset_clip=1), "noglobal": dict(no_global_slot=True),
         "both": dict(offset_clip=1, no_global_slot=True)}


def build(kind, seed=1, **flags):
    make = build_tiny_lm_model if kind == "lm" else build_tiny_model
    return make(seed=seed, vocab=25, decoder_normalize_before=True, **flags)


class OffsetSpy:
    """Records the offsets every offset attention (token and query stream, one-pass and cached) reads."""

    def __init__(self, monkeypatch):
        self.seen = []
        original = OffsetSelfAttention._attend

        def attend(module, q, k, v, offsets, rel_table, attn_mask, left_to_right=False, index=None):
            if index is not None:  # a pass's prepared gather index reads these same offsets
                read = index.index[:, 0] - index.M  # [B, T, S]
                assert torch.equal(read, offsets.clamp(-index.M, index.M).expand_as(read))
            self.seen.append((offsets.detach().clone(), attn_mask))
            return original(module, q, k, v, offsets, rel_table, attn_mask, left_to_right, index)

        monkeypatch.setattr(OffsetSelfAttention, "_attend", attend)


# ---------------------------------------------------------------------------------------- offset clip
def test_offset_clip_flag_parses_and_is_checked():
    parser = argparse.ArgumentParser()
    InsNetModel.add_args(parser)
    args = parser.parse_args(["--offset-clip", "1", "--no-global-slot"])
    assert args.offset_clip == 1 and args.no_global_slot is True
    with pytest.raises(ValueError, match="--offset-clip must be >= 0"):
        build("mt", offset_clip=-1)


@pytest.mark.parametrize("kind", ["mt", "lm"])
def test_truncated_attention_sees_offsets_clipped_to_one(kind, monkeypatch):
    spy = OffsetSpy(monkeypatch)
    model, d = build(kind, offset_clip=1, slot_query_stream=True)
    plain, _ = build(kind, slot_query_stream=True)
    assert plain.state_dict().keys() == model.state_dict().keys()  # the flag adds or removes no parameter
    for name, p in plain.state_dict().items():
        assert torch.equal(p, model.state_dict()[name]), name  # same seed, same weights
    src, src_lengths, target = random_batch(d, [12, 5, 9], seed=3)
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(2))
    with torch.no_grad():
        model(src, src_lengths, target, order)
    full = offset_matrix(order, torch.arange(target.size(1)).unsqueeze(0) >= n_tok.unsqueeze(1))
    assert full.abs().max() > 1  # the sentences do have offsets beyond [-1, 1]
    token_stream = [o for o, _ in spy.seen if o.shape == full.shape]
    assert len(token_stream) == 2  # both layers read the clipped matrix
    for offsets in token_stream:
        assert torch.equal(offsets, full.clamp(-1, 1))
    assert all(o.abs().max() <= 1 for o, _ in spy.seen)  # the slot query stream too
    spy.seen.clear()
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel", max_steps=4))  # cached decoding
    gen.generate([model], {"net_input": {"src_tokens": src, "src_lengths": src_lengths}})
    assert spy.seen and all(o.abs().max() <= 1 for o, _ in spy.seen)


def test_truncation_changes_nothing_where_offsets_are_within_one():
    """<s> w </s>: every offset is in [-1, 1], so the clipped model scores it exactly as the plain one."""
    plain, d = build("mt", seed=4)
    clipped, _ = build("mt", seed=4, offset_clip=1)
    src, src_lengths, target = random_batch(d, [3, 3], seed=5)
    order = make_order("l2r", target.ne(d.pad()).sum(1), target.size(1))
    with torch.no_grad():
        a, b = plain(src, src_lengths, target, order), clipped(src, src_lengths, target, order)
    for x, y in zip(step_logprobs(a), step_logprobs(b)):
        torch.testing.assert_close(x, y, atol=0, rtol=0)
    src, src_lengths, target = random_batch(d, [9], seed=5)  # longer: the clipped model differs
    order = make_order("random", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = plain(src, src_lengths, target, order), clipped(src, src_lengths, target, order)
    assert not torch.allclose(a["token"]["logits"], b["token"]["logits"])


# ---------------------------------------------------------------------------------------- no global slot
def test_noglobal_slot_representation_has_no_global_vector():
    model, _ = build("mt", no_global_slot=True)
    plain, _ = build("mt")
    assert plain.state_dict().keys() == model.state_dict().keys()
    heads, plain_heads = model.decoder.heads, plain.decoder.heads
    g = torch.Generator().manual_seed(0)
    h_l, h_r, g1, g2 = (torch.randn(5, 32, generator=g) for _ in range(4))
    with torch.no_grad():
        e1, e2 = heads.slot_repr(h_l, h_r, g1), heads.slot_repr(h_l, h_r, g2)
        torch.testing.assert_close(e1, e2, atol=0, rtol=0)  # h_t is absent
        expected = heads.norm(torch.cat([heads.f_left(h_l), heads.f_right(h_r)], -1))  # LayerNorm(concat(...))
        torch.testing.assert_close(e1, expected, atol=0, rtol=0)
        assert not torch.allclose(plain_heads.slot_repr(h_l, h_r, g1), plain_heads.slot_repr(h_l, h_r, g2))
        # the fused training head over all slots of all steps agrees, and ignores the global vector too
        h = torch.randn(2, 6, 32, generator=g)
        steps = torch.arange(1, 5)
        left = torch.randint(0, 6, (2, 4, 3), generator=g)
        right = torch.randint(0, 6, (2, 4, 3), generator=g)
        fused = heads.position_logits(h, steps, left, right)
        gather = lambda idx: h.gather(1, idx.reshape(2, -1, 1).expand(-1, -1, 32)).view(2, 4, 3, 32)  # noqa: E731
        direct = heads.position_logit(heads.norm(torch.cat([heads.f_left(gather(left)), heads.f_right(gather(right))], -1)))
        torch.testing.assert_close(fused, direct, atol=1e-5, rtol=0)
        # termination still reads h_t
        torch.testing.assert_close(heads.termination_logit(g1), plain_heads.termination_logit(g1), atol=0, rtol=0)


# ---------------------------------------------------------------------------------------- exactness under each flag
@pytest.mark.parametrize("slot_query", [False, True])
@pytest.mark.parametrize("flag", list(FLAGS))
@pytest.mark.parametrize("kind", ["mt", "lm"])
def test_one_pass_equals_reencoding_under_each_flag(kind, flag, slot_query):
    model, d = build(kind, slot_query_stream=slot_query, **FLAGS[flag])
    lengths = [9, 3, 12, 6]
    src, src_lengths, target = random_batch(d, lengths, seed=2)
    order = make_order("random", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = model(src, src_lengths, target, order)
    tok_lp, pos_lp, term_lp = step_logprobs(out)
    naive = naive_trajectory_logprobs(model, src, src_lengths, target, order)
    pos_m, term_m = out["position"]["mask"], out["termination"]["mask"]
    for b in range(len(lengths)):
        torch.testing.assert_close(tok_lp[b][pos_m[b]], torch.tensor(naive[b]["token"]), atol=ATOL, rtol=0)
        torch.testing.assert_close(pos_lp[b][pos_m[b]], torch.tensor(naive[b]["position"]), atol=ATOL, rtol=0)
        torch.testing.assert_close(term_lp[b][term_m[b]], torch.tensor(naive[b]["termination"]), atol=ATOL, rtol=0)


@pytest.mark.parametrize("flag", list(FLAGS))
@pytest.mark.parametrize("kind", ["mt", "lm"])
def test_layered_objective_and_forced_decoding_under_each_flag(kind, flag):
    model, d = build(kind, seed=3, slot_query_stream=True, **FLAGS[flag])
    lengths = [9, 4, 12, 7]
    src, src_lengths, target = random_batch(d, lengths, seed=4)
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(2))
    for layers in (layerize(model, src, src_lengths, target, order, 0.5)[0], uniform_layers(n_tok, target.size(1))):
        order_l, context = trajectory(layers)
        with torch.no_grad():
            out = model(src, src_lengths, target, order_l, context=context)
        tok_lp, pos_lp, term_lp = step_logprobs(out)
        naive = naive_layered_logprobs(model, src, src_lengths, target, layers)
        pos_m, term_m = out["position"]["mask"], out["termination"]["mask"]
        gen = InsertionGenerator(d, DecodingOptions(mode="parallel"))
        for b, L in enumerate(lengths):
            assert term_m[b].sum() == int(num_layers(layers[b : b + 1])) + 1
            torch.testing.assert_close(tok_lp[b][pos_m[b]], torch.tensor(naive[b]["token"]), atol=ATOL, rtol=0)
            torch.testing.assert_close(pos_lp[b][pos_m[b]], torch.tensor(naive[b]["position"]), atol=ATOL, rtol=0)
            torch.testing.assert_close(term_lp[b][term_m[b]], torch.tensor(naive[b]["termination"]), atol=ATOL, rtol=0)
            keep = src[b].ne(d.pad())
            with torch.no_grad():
                tok, pos, term = forced_logprobs(gen, model, src[b : b + 1, keep], src_lengths[b : b + 1],
                                                 target[b, :L], layers[b, :L])
            torch.testing.assert_close(torch.tensor(tok), tok_lp[b][pos_m[b]], atol=ATOL, rtol=0)
            torch.testing.assert_close(torch.tensor(pos), pos_lp[b][pos_m[b]], atol=ATOL, rtol=0)
            torch.testing.assert_close(torch.tensor(term), term_lp[b][term_m[b]], atol=ATOL, rtol=0)
