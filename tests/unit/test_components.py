"""Fast paths against their oracles: gathered offset attention vs materialised P, fused
position head vs materialised slot representations."""
import pytest
import torch

from insnet_fairseq.modules.attention import (OffsetIndex, OffsetSelfAttention, per_head_scores,
                                              sinusoidal_offset_table)
from insnet_fairseq.geometry.masks import causal_mask
from insnet_fairseq.geometry.offsets import offset_matrix, rank_matrix, slot_neighbours
from insnet_fairseq.geometry.orders import uniform_random
from insnet_fairseq.modules.slots import SlotHeads, gather_steps


def test_offset_attention_matches_materialised_positions():
    torch.manual_seed(0)
    attn = OffsetSelfAttention(32, 4, 32).eval()
    torch.nn.init.normal_(attn.u)
    torch.nn.init.normal_(attn.v)
    B, n = 3, 11
    order = uniform_random(torch.tensor([11, 11, 11]), n, torch.Generator().manual_seed(0))
    offsets = offset_matrix(order)
    table = sinusoidal_offset_table(20, 32)
    x = torch.randn(B, n, 32)
    fast, fast_kv = attn(x, offsets, table, causal_mask(n, x.device))
    slow, slow_kv = attn.naive_forward(x, offsets, table, causal_mask(n, x.device))
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    for a, b in zip(fast_kv, slow_kv):
        torch.testing.assert_close(a, b)
    # slot queries (--slot-query-stream) read those keys with their own offsets and mask
    q = torch.randn(B, 5, 32)
    q_off = torch.randint(-(n - 1), n, (B, 5, n))
    q_mask = torch.rand(B, 5, n) < 0.4
    q_mask[:, :, 0] = False
    fast_q = attn.query(q, fast_kv, q_off, table, q_mask)
    attn.naive = True
    slow_q = attn.query(q, fast_kv, q_off, table, q_mask)
    attn.naive = False
    torch.testing.assert_close(fast_q, slow_q, atol=1e-5, rtol=1e-5)


def test_offset_index_prepared_once_equals_each_layers_own():
    """OffsetIndex: the docstring example; offsets beyond a small table clamped to it; a call given the prepared index
    (and its rows) equals one that prepares its own, offsets of one row for a batch included."""
    one = OffsetIndex.of(torch.tensor([[[-1, 1, 0]]]), None, sinusoidal_offset_table(5, 8), 2)
    assert one.M == 2 and one.index.tolist() == [[[[1, 3, 2]], [[1, 3, 2]]]] and one.blocked is None
    small = OffsetIndex.of(torch.tensor([[[-3, 2, 0, 1]]]), torch.zeros(1, 4, dtype=torch.bool),
                           sinusoidal_offset_table(1, 8), 1)
    assert small.M == 1 and small.index.tolist() == [[[[0, 2, 1, 2]]]] and small.blocked.shape == (1, 1, 1, 4)
    torch.manual_seed(4)
    attn = OffsetSelfAttention(32, 4, 32).eval()
    torch.nn.init.normal_(attn.v)
    table = sinusoidal_offset_table(20, 32)
    B, T, S = 3, 5, 9
    q = torch.randn(B, 4, T, 8)
    offsets = torch.randint(-(S - 1), S, (B, T, S))
    mask = torch.rand(B, T, S) < 0.3
    with torch.no_grad():
        own = attn.offset_bias(q, offsets, table, mask, S)
        index = OffsetIndex.of(offsets, mask, table, 4)
        assert torch.equal(attn.offset_bias(q, offsets, table, mask, S, index=index), own)
        assert torch.equal(attn.offset_bias(q[:, :, 2:], offsets[:, 2:], table, mask[:, 2:], S, index=index.rows(2)),
                           attn.offset_bias(q[:, :, 2:], offsets[:, 2:], table, mask[:, 2:], S))
        shared = offsets[:1]  # one row of offsets for the batch, a [T, S] mask
        assert torch.equal(attn.offset_bias(q, shared, table, mask[0], S),
                           attn.offset_bias(q, shared.expand(B, T, S), table, mask[0].expand(B, T, S), S))


@pytest.mark.parametrize("B", [1, 3])
def test_per_head_scores_equal_the_broadcast_product(B):
    """per_head_scores (one bmm over the heads) against ``q @ p^T`` broadcast over the batch: the values and both
    gradients, for queries laid out as the attention makes them (a permuted view of the fused projection) and a
    sliced table."""
    torch.manual_seed(B)
    H, T, Dh, R = 4, 5, 8, 7
    q = torch.randn(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)[0].detach().requires_grad_()  # [B, H, T, Dh], not contiguous
    p = torch.randn(H, 2 * R, Dh)[:, 1 : R + 1].detach().requires_grad_()  # [H, R, Dh], not contiguous
    fast, slow = per_head_scores(q, p), q @ p.transpose(-2, -1)
    assert fast.shape == (B, H, T, R)
    torch.testing.assert_close(fast, slow)
    g = torch.randn(B, H, T, R)
    fast_grads = torch.autograd.grad(fast, (q, p), g)
    for a, b in zip(fast_grads, torch.autograd.grad(slow, (q, p), g)):
        torch.testing.assert_close(a, b)


def test_offset_attention_with_cache_matches_full_pass():
    torch.manual_seed(1)
    attn = OffsetSelfAttention(32, 4, 32).eval()
    n = 9
    order = uniform_random(torch.tensor([n, n]), n, torch.Generator().manual_seed(2))
    offsets = offset_matrix(order)
    table = sinusoidal_offset_table(20, 32)
    x = torch.randn(2, n, 32)
    full, _ = attn(x, offsets, table, causal_mask(n, x.device))
    first, past = attn(x[:, :5], offsets[:, :5, :5], table, causal_mask(5, x.device))
    rest, _ = attn(x[:, 5:], offsets[:, 5:, :], table, causal_mask(n, x.device)[5:], past=past)
    torch.testing.assert_close(torch.cat([first, rest], 1), full, atol=1e-5, rtol=1e-5)


def test_fused_position_logits_match_materialised_slots():
    torch.manual_seed(2)
    heads = SlotHeads(24, 30)
    torch.nn.init.normal_(heads.norm.weight)
    torch.nn.init.normal_(heads.norm.bias)
    B, n = 4, 10
    h = torch.randn(B, n, 24) * 3
    order = uniform_random(torch.tensor([n] * B), n, torch.Generator().manual_seed(3))
    left, right = slot_neighbours(rank_matrix(order))
    steps = torch.arange(1, n - 1)
    left, right = left[:, 1 : n - 1, : n - 2], right[:, 1 : n - 1, : n - 2]
    fused = heads.position_logits(h, steps, left, right)  # [B, T, K]
    g = h[:, steps].unsqueeze(2).expand(-1, -1, n - 2, -1)
    e = heads.slot_repr(gather_steps(h, left), gather_steps(h, right), g)  # [B, T, K, D]
    slow = heads.position_logit(e)
    valid = torch.arange(n - 2).unsqueeze(0) < steps.unsqueeze(1)
    torch.testing.assert_close(fused[:, valid], slow[:, valid], atol=1e-4, rtol=1e-5)


def test_offset_projection_kept_for_decoding_follows_the_weights():
    """Outside training and without gradients, P is kept and sliced: equal to projecting the rows at every
    call, over growing ranges, and projected again after W_kR changes in place (an optimizer step)."""
    torch.manual_seed(5)
    attn = OffsetSelfAttention(16, 2, 16).eval()
    table = sinusoidal_offset_table(100, 16)
    center = 100

    def direct(m):
        return attn._project(table[center - m : center + m + 1])

    with torch.no_grad():
        for m in (3, 1, 40, 70, 100):  # inside the kept range, then past it (kept range doubled, then capped)
            torch.testing.assert_close(attn.project_offsets(table, m), direct(m), atol=1e-6, rtol=1e-6)
        kept = attn.project_offsets(table, 5)
        attn.r_proj.weight.add_(1.0)  # in place, as an optimizer step
        moved = attn.project_offsets(table, 5)
        torch.testing.assert_close(moved, direct(5), atol=1e-6, rtol=1e-6)
        assert not torch.allclose(moved, kept)
    attn.train()  # training projects every call, with gradients
    p = attn.project_offsets(table, 5)
    assert p.requires_grad and p.shape == (2, 11, 8)


@pytest.mark.parametrize("global_vector", [True, False])
def test_decoding_position_logits_match_the_fused_head(global_vector):
    """One decoding step's slots scored from the tokens' parts (materialised, a few ops) equal the fused
    training head's logits for the same step (T = 1), with and without the global vector."""
    torch.manual_seed(4)
    heads = SlotHeads(24, 30, global_vector=global_vector)
    torch.nn.init.normal_(heads.norm.weight)
    torch.nn.init.normal_(heads.norm.bias)
    B, S = 3, 9
    h = torch.randn(B, S, 24) * 3
    a, b = heads.parts(h)
    left, right = torch.randint(0, S, (B, S - 1)), torch.randint(0, S, (B, S - 1))
    last = torch.tensor([2, 8, 5])
    g = h[torch.arange(B), last]  # [B, D]
    step = heads.step_position_logits(a, b, g, left, right)  # [B, K]
    fused = heads.position_logits_from_parts(a, b, g.unsqueeze(1), left.unsqueeze(1), right.unsqueeze(1)).squeeze(1)
    assert step.dtype == torch.float32 and step.shape == (B, S - 1)
    torch.testing.assert_close(step, fused, atol=1e-4, rtol=1e-5)
    # and the docstring's example: 3 tokens, 2 slots
    assert heads.step_position_logits(a[:1, :3], b[:1, :3], g[:1], torch.tensor([[0, 2]]), torch.tensor([[2, 1]])).shape == (1, 2)


def test_slot_query_model_loads_a_checkpoint_without_the_stream():
    """--finetune-from-model of a plain checkpoint into --slot-query-stream: every saved parameter
    is loaded, the stream's own start from their initial values."""
    from conftest import build_tiny_model

    plain, _ = build_tiny_model(seed=1)
    query, _ = build_tiny_model(seed=2, slot_query_stream=True)
    start = query.decoder.context.slot_query.detach().clone()
    query.load_state_dict(plain.state_dict())
    loaded = query.state_dict()
    for k, v in plain.state_dict().items():
        assert torch.equal(v, loaded[k]), k
    assert torch.equal(query.decoder.context.slot_query, start)
    with pytest.raises(RuntimeError):  # anything else missing is still an error
        sd = plain.state_dict()
        del sd["decoder.heads.f_left.weight"]
        query.load_state_dict(sd)


def test_gap_model_loads_a_checkpoint_of_the_position_objective():
    """--finetune-from-model of an l2r (position objective) checkpoint into --slot-objective gap: every parameter
    the two models share is loaded, the position and termination heads are dropped, the end-of-slot head keeps its
    initial values; a checkpoint missing anything else is still refused."""
    from conftest import build_tiny_model

    plain, _ = build_tiny_model(seed=1)
    gap, _ = build_tiny_model(seed=2, slot_objective="gap")
    start = {k: v.detach().clone() for k, v in gap.decoder.heads.done_proj.state_dict().items()}
    gap.load_state_dict(plain.state_dict())
    loaded = gap.state_dict()
    shared = [k for k in plain.state_dict() if k in loaded]
    assert len(shared) == len(loaded) - 2  # all but done_proj's weight and bias
    for k in shared:
        assert torch.equal(plain.state_dict()[k], loaded[k]), k
    assert not any("position_proj" in k or "termination_proj" in k for k in loaded)
    for k, v in gap.decoder.heads.done_proj.state_dict().items():
        assert torch.equal(v, start[k]), k
    with pytest.raises(RuntimeError):
        sd = plain.state_dict()
        del sd["decoder.heads.f_left.weight"]
        gap.load_state_dict(sd)


def test_untied_query_layers_start_as_the_tokens_layers_and_are_the_ones_the_stream_runs():
    """--untied-slot-queries: fine-tuning a checkpoint with a tied stream copies each tokens' layer into its query
    layer (W_qkv: its query third), so the model computes exactly the tied model's log-probabilities; once the
    query layers change, the token terms change and the position and termination terms do not (the tokens' stream
    never runs the query layers). A plain checkpoint (no stream) loads too; the flag alone is refused."""
    from conftest import build_tiny_model, random_batch, step_logprobs, tiny_args
    from insnet_fairseq.geometry.orders import make_order
    from insnet_fairseq.models.insnet import InsNetModel

    tied, d = build_tiny_model(seed=1, slot_query_stream=True)
    untied, _ = build_tiny_model(seed=2, slot_query_stream="untied")
    untied.load_state_dict(tied.state_dict())
    D = 32
    layer, qlayer = tied.decoder.context.layers[1], untied.decoder.context.query_layers[1]
    assert qlayer.self_attn.qkv_proj.weight.shape == (D, D) and qlayer.cross_attn.kv_proj is None
    assert torch.equal(qlayer.self_attn.qkv_proj.weight, layer.self_attn.qkv_proj.weight[:D])
    assert torch.equal(qlayer.fc2.weight, layer.fc2.weight)
    src, src_lengths, target = random_batch(d, [9, 4, 7], seed=3)
    order = make_order("anchored", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(4))

    def terms(model):  # the token, position and termination log-probs of every real step
        with torch.no_grad():
            tok, pos, term = step_logprobs(model(src, src_lengths, target, order))
        real = target.ne(d.pad())[:, 2:]
        return [tok[real], pos[real], term[target.ne(d.pad())[:, 1:]]]

    for a, b in zip(terms(tied), terms(untied)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    with torch.no_grad():
        qlayer.fc2.bias.add_(torch.randn(D, generator=torch.Generator().manual_seed(5)))  # (not a constant: LayerNorm)
    changed = terms(untied)
    assert not torch.allclose(changed[0], terms(tied)[0], atol=1e-3)
    for a, b in zip(changed[1:], terms(tied)[1:]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    plain, _ = build_tiny_model(seed=1)
    fresh, _ = build_tiny_model(seed=2, slot_query_stream="untied")
    fresh.load_state_dict(plain.state_dict())
    assert torch.equal(fresh.decoder.context.query_layers[0].fc1.weight, plain.decoder.context.layers[0].fc1.weight)
    with pytest.raises(ValueError, match="--untied-slot-queries needs --slot-query-stream"):
        InsNetModel.build_model(tiny_args(untied_slot_queries=True), type("T", (), {
            "source_dictionary": d, "target_dictionary": d, "insertion_task": "translation"})())


def test_joint_attention_equals_the_tokens_call_then_the_queries_call():
    """OffsetSelfAttention.joint (a fused decoding step): the new tokens' rows equal forward() over the cache, the
    slot queries' rows equal query() over the keys that include the new tokens; the keys it returns are forward()'s.
    The test oracle (naive) takes the two calls one after the other and agrees."""
    torch.manual_seed(3)
    attn = OffsetSelfAttention(32, 4, 32).eval()
    B, S0, T, Q = 2, 5, 2, 4
    S = S0 + T
    table = sinusoidal_offset_table(20, 32)
    past = (torch.randn(B, 4, S0, 8), torch.randn(B, 4, S0, 8))
    x, q = torch.randn(B, T, 32), torch.randn(B, Q, 32)
    offsets = torch.randint(-(S - 1), S, (B, T + Q, S))
    mask = torch.rand(B, T + Q, S) < 0.3
    mask[:, :, 0] = False
    with torch.no_grad():
        out, kv = attn.joint(torch.cat([x, q], 1), T, offsets, table, mask, past)
        tokens, kv_ref = attn(x, offsets[:, :T], table, mask[:, :T], past)
        queries = attn.query(q, kv_ref, offsets[:, T:], table, mask[:, T:])
        attn.naive = True
        oracle, _ = attn.joint(torch.cat([x, q], 1), T, offsets, table, mask, past)
        attn.naive = False
    assert out.shape == (B, T + Q, 32) and kv[0].shape == (B, 4, S, 8)
    torch.testing.assert_close(out[:, :T], tokens, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[:, T:], queries, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(oracle, out, atol=1e-5, rtol=1e-5)
    for a, b in zip(kv, kv_ref):
        torch.testing.assert_close(a, b)


def test_slot_queries_through_the_last_layer_read_that_layer_only():
    """--slot-query-layers 1: the learned start goes through the last layer's query alone, reading that layer's
    keys/values of the tokens (and the final LayerNorm); the full stream differs. Refused: without the stream, more
    layers than the decoder has, and with --untied-slot-queries."""
    from conftest import build_tiny_model, random_batch, tiny_args
    from insnet_fairseq.models.insnet import InsNetModel

    full, d = build_tiny_model(seed=3, slot_query_stream=True, decoder_normalize_before=True)
    last, _ = build_tiny_model(seed=3, slot_query_stream="last1", decoder_normalize_before=True)
    last.load_state_dict(full.state_dict())
    ctx = last.decoder.context
    assert ctx.query_from == 1 and full.decoder.context.query_from == 0
    src, src_lengths, target = random_batch(d, [6], seed=1)
    S = target.size(1)
    with torch.no_grad():
        source_kv, pad = last.decoder.encode_source(last.forward_encoder(src, src_lengths))
        offsets = (torch.arange(S).unsqueeze(0) - torch.arange(S).unsqueeze(1)).unsqueeze(0)  # left to right
        _, kv = ctx(target, offsets, causal_mask(S, target.device), source_kv, pad)
        q_off = torch.tensor([[[-1, 1] + [2 + j for j in range(S - 2)], [-2, -1] + [1 + j for j in range(S - 2)]]])
        q_mask = torch.zeros(1, 2, S, dtype=torch.bool)
        z = ctx.query_stream(q_off, q_mask, kv, source_kv, pad)
        start = (ctx.embed_scale * ctx.slot_query).expand(1, 2, -1)
        by_hand = ctx.layer_norm(ctx.layers[1].query(start, kv[1], q_off, ctx.offset_embed, q_mask, source_kv[1], pad))
        torch.testing.assert_close(z, by_hand, atol=1e-6, rtol=0)
        assert not torch.allclose(z, full.decoder.context.query_stream(q_off, q_mask, kv, source_kv, pad), atol=1e-3)
    task = type("T", (), {"source_dictionary": d, "target_dictionary": d, "insertion_task": "translation"})()
    for flags, message in [(dict(slot_query_layers=1), "--slot-query-layers needs --slot-query-stream"),
                           (dict(slot_query_stream=True, slot_query_layers=3), r"in \[0, --decoder-layers \(2\)\]"),
                           (dict(slot_query_stream="untied", slot_query_layers=1), "choose one"),
                           (dict(last_word_head=True), "--last-word-head needs --slot-objective gap")]:
        with pytest.raises(ValueError, match=message):
            InsNetModel.build_model(tiny_args(**flags), task)
