"""The end-of-slot objective (``--slot-objective gap``) on sampled layered trajectories, and its decoding.

* every sampled trajectory is a valid layering, and equal seeds give equal trajectories;
* the gap targets equal a naive listing of every layer end's gaps and missing words;
* the one-pass loss equals re-encoding every layer end's context from scratch (reference.naive_gap_loss), every
  slot scored, a drawn sample of them weighted (--gap-slot-rate), or the slots decoding asks (--gap-slots asked);
* decoding along a gold layering gives the one pass's per-slot probabilities;
* a model whose every slot says end-of-slot stops after one pass;
* cached equals uncached, and batch 1 equals batch 64, with done slots shut and re-scored;
* a shut slot gets no query, and a live one the query of the full computation.
"""
import dataclasses
import math

import pytest
import torch

from insnet_fairseq.decoding.gaps import Shut, closing_columns, open_slots, slot_done_logits, with_slot_queries
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.state import HOLE
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.geometry.gaps import asked_slots, gap_targets, gap_weights, sample_layers, sample_slots
from insnet_fairseq.geometry.layers import PAD_LAYER, uniform_layers
from insnet_fairseq.reference import naive_gap_loss
from insnet_fairseq.tasks.criterion import gap_losses

from conftest import build_tiny_model, random_batch

ATOL = 1e-5


def random_lengths(seed, B=12, low=2, high=20):
    return torch.randint(low, high, (B,), generator=torch.Generator().manual_seed(seed))


def check_valid_layering(layers, lengths):
    """<s>, </s> at layer 0, padding PAD_LAYER, every word in one layer >= 1, the words of a layer in distinct gaps of
    the context the earlier layers made, and no empty layer."""
    for row, L in zip(layers.tolist(), lengths.tolist()):
        assert row[0] == 0 and row[L - 1] == 0 and all(x == PAD_LAYER for x in row[L:])
        words = row[1 : L - 1]
        assert all(x >= 1 for x in words)
        m = max(words, default=0)
        assert sorted(set(words)) == list(range(1, m + 1))  # no empty layer
        for layer in range(1, m + 1):
            context = [p for p in range(L) if row[p] < layer]
            gaps = [max(q for q in context if q < p) for p in range(L) if row[p] == layer]  # each word's left neighbour
            assert len(gaps) == len(set(gaps)), (row, layer)


@pytest.mark.parametrize("spread,skip", [(1.0, 0.0), (1.0, 0.3), (3.0, 0.1), (0.3, 0.5)])
def test_sampled_layerings_are_valid_and_equal_seeds_give_equal_layerings(spread, skip):
    lengths = random_lengths(0)
    n = int(lengths.max()) + 2  # padded wider than the longest sentence
    draws = [sample_layers(lengths, n, torch.Generator().manual_seed(s), spread, skip) for s in (7, 7, 8)]
    for layers in draws:
        check_valid_layering(layers, lengths)
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


def test_sampled_layerings_split_off_centre_and_let_gaps_wait():
    """Not one layering per sentence: a sentence of 15 words gets many layerings over draws, some of whose first
    word is not the middle one, and skipping makes some longer than the binary tree's 4 layers."""
    lengths = torch.full((200,), 17)
    layers = sample_layers(lengths, 17, torch.Generator().manual_seed(0), 1.0, 0.3)
    first = (layers == 1).float().argmax(1)
    assert len({tuple(r) for r in layers.tolist()}) > 50
    assert bool((first != 8).any()) and bool((first == 8).any())
    assert int(layers[:, 1:16].max()) > 4


def test_spread_zero_is_the_balanced_binary_tree():
    lengths = random_lengths(1, B=30, high=40)
    n = int(lengths.max())
    assert torch.equal(sample_layers(lengths, n, torch.Generator().manual_seed(0), 0.0, 0.0),
                       uniform_layers(lengths, n, "binary"))


def test_gap_weights():
    w = gap_weights(torch.tensor([1.0, 0.0, 1.0, 0.5, 0.5]), torch.tensor([0, 0, 0, 1, 1]), 1.0)
    e = math.exp(-1)
    torch.testing.assert_close(w, torch.tensor([e / (1 + 2 * e), 1 / (1 + 2 * e), e / (1 + 2 * e), 0.5, 0.5]))
    hard = gap_weights(torch.tensor([1.0, 0.0, 1.0, 0.5, 0.5]), torch.tensor([0, 0, 0, 1, 1]), 0.0)
    torch.testing.assert_close(hard, torch.tensor([0.0, 1.0, 0.0, 0.5, 0.5]))


def naive_listing(layers, lengths):
    """Every (row, end, left, right, done) slot and every (slot index, word, distance) missing word, by loops."""
    slots, pairs = [], []
    for b, (row, L) in enumerate(zip(layers.tolist(), lengths.tolist())):
        m = max(row[:L])
        for end in range(m + 1):
            context = [p for p in range(L) if row[p] <= end]
            for a, z in zip(context[:-1], context[1:]):
                for i in range(a + 1, z):
                    pairs.append((len(slots), i, abs(i - (a + z) / 2)))
                slots.append((b, end, a, z, z == a + 1))
    return slots, pairs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gap_targets_equal_a_naive_listing(seed):
    lengths = random_lengths(seed)
    layers = sample_layers(lengths, int(lengths.max()) + 3, torch.Generator().manual_seed(seed), 1.0, 0.2)
    t = gap_targets(layers, lengths)
    slots, pairs = naive_listing(layers, lengths)
    got = list(zip(t.row.tolist(), t.end.tolist(), t.left.tolist(), t.right.tolist(), t.done.tolist()))
    assert got == slots
    got_pairs = sorted(zip(t.slot.tolist(), t.word.tolist(), t.distance.tolist()))
    assert got_pairs == sorted(pairs)
    assert t.context_last.shape[0] == len(lengths)


@pytest.mark.parametrize("temperature,pre_norm,stream,last_head", [
    (1.0, True, False, False), (0.0, True, False, False), (3.0, True, False, False), (1.0, False, False, False),
    (0.0, False, False, False), (3.0, False, False, False), (1.0, True, True, False), (0.0, False, True, False),
    (1.0, True, "last1", False), (1.0, True, True, True), (0.0, False, False, True)])
def test_one_pass_gap_loss_equals_reencoding_every_layer_end(temperature, pre_norm, stream, last_head):
    """With the slot query stream too: every slot's query against one re-encoded from its context. With the last-word
    head: its term against q(last) of every slot that misses words, re-encoded."""
    model, d = build_tiny_model(seed=1, slot_objective="gap", decoder_normalize_before=pre_norm,
                                slot_query_stream=stream, last_word_head=last_head)
    lengths = [9, 3, 12, 6, 2]  # padded batch; the last sentence is empty
    src, src_lengths, target = random_batch(d, lengths, seed=2)
    layers = sample_layers(target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(3), 1.0, 0.2)
    with torch.no_grad():
        out = model(src, src_lengths, target, None, layers=layers)["gap"]
        terms = gap_losses(out, 0.0, temperature)
    token, done, done_logits, last = naive_gap_loss(model, src, src_lengths, target, layers, temperature)
    torch.testing.assert_close(out["done_logits"], torch.tensor(done_logits), atol=ATOL, rtol=0)
    assert float(terms["slot_token"][0]) == pytest.approx(token, rel=1e-5)
    assert float(terms["slot_done"][0]) == pytest.approx(done, rel=1e-5)
    assert int(out["words"]) == sum(L - 2 for L in lengths)
    if last_head:
        assert float(terms["slot_last"][0]) == pytest.approx(last, rel=1e-5) and last > 0
    else:
        assert "slot_last" not in terms and last == 0


def test_sampled_slots_are_seeded_and_weighted_by_the_inverse_rate():
    layers = sample_layers(random_lengths(4, B=40), 25, torch.Generator().manual_seed(0), 1.0, 0.1)
    draws = [sample_slots(layers, 0.25, torch.Generator().manual_seed(s)) for s in (5, 5, 6)]
    assert draws[0].shape == (40, int(layers.masked_fill(layers == PAD_LAYER, 0).max()) + 1, 25)
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])
    assert set(draws[0].unique().tolist()) == {0.0, 4.0}
    assert 0.2 < float(draws[0].gt(0).float().mean()) < 0.3  # a fixed draw of 40 x L x 25
    assert bool(sample_slots(layers, 1.0).eq(1).all())


@pytest.mark.parametrize("seed", [0, 1])
def test_gap_targets_of_sampled_slots_are_the_drawn_subset_of_every_slot(seed):
    """Weighted targets list exactly the slots of positive weight, in the same order, with the same neighbours and
    done flags and all of their missing words, each slot carrying its weight."""
    lengths = random_lengths(seed)
    layers = sample_layers(lengths, int(lengths.max()) + 3, torch.Generator().manual_seed(seed), 1.0, 0.2)
    weight = sample_slots(layers, 0.4, torch.Generator().manual_seed(seed + 10))
    full, part = gap_targets(layers, lengths), gap_targets(layers, lengths, weight=weight)
    w = weight[full.row, full.end, full.left]
    kept = w.gt(0)
    assert 0 < int(kept.sum()) < len(kept)
    for name in ("row", "end", "left", "right", "done"):
        assert torch.equal(getattr(part, name), getattr(full, name)[kept]), name
    torch.testing.assert_close(part.weight, w[kept])
    new_index = kept.long().cumsum(0) - 1  # a full slot's index among the kept ones
    on = kept[full.slot]
    assert sorted(zip(part.slot.tolist(), part.word.tolist(), part.distance.tolist())) == sorted(
        zip(new_index[full.slot[on]].tolist(), full.word[on].tolist(), full.distance[on].tolist()))


def test_asked_slots_worked_example():
    layers = torch.tensor([[0, 2, 1, 2, 0], [0, 1, 2, 3, 0]])
    w = asked_slots(layers)
    t = gap_targets(layers, torch.tensor([5, 5]), weight=w)
    assert list(zip(t.row.tolist(), t.end.tolist(), t.left.tolist(), t.right.tolist())) == [
        (0, 0, 0, 4), (0, 1, 0, 2), (0, 1, 2, 4), (0, 2, 0, 1), (0, 2, 1, 2), (0, 2, 2, 3), (0, 2, 3, 4),
        (1, 0, 0, 4), (1, 1, 0, 1), (1, 1, 1, 4), (1, 2, 1, 2), (1, 2, 2, 4), (1, 3, 2, 3), (1, 3, 3, 4)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_asked_slots_are_every_open_slot_and_each_done_slot_once_where_it_appears(seed):
    """Against the naive listing: a slot is asked when its gap misses words, or when it is done and was not a slot of
    the layer end before; so every done slot of a sentence is asked exactly once, and every open slot at every layer
    end (a gap that waits a layer is asked again). Padding columns do not matter."""
    lengths = random_lengths(seed, B=20)
    layers = sample_layers(lengths, int(lengths.max()) + 3, torch.Generator().manual_seed(seed), 1.0, 0.3)
    slots, _ = naive_listing(layers, lengths)
    present = {(b, end, a, z) for b, end, a, z, _ in slots}
    expected = [s for s in slots if not s[4] or (s[0], s[1] - 1, s[2], s[3]) not in present]
    t = gap_targets(layers, lengths, weight=asked_slots(layers))
    got = list(zip(t.row.tolist(), t.end.tolist(), t.left.tolist(), t.right.tolist(), t.done.tolist()))
    assert got == expected and bool(t.weight.eq(1).all())
    done = [(b, a, z) for b, _, a, z, d in got if d]
    assert len(done) == len(set(done)) == sum(L - 1 for L in lengths.tolist())  # each final slot once
    assert len(expected) < len(slots)  # some done slots are left out
    full = gap_targets(layers, lengths)
    assert t.word.numel() == full.word.numel()  # every missing word still counted


@pytest.mark.parametrize("stream,smoothing,last_head", [(False, 0.0, False), (True, 0.0, False), (True, 0.1, False),
                                                        ("last1", 0.0, False), (True, 0.0, True)])
def test_one_pass_loss_of_sampled_slots_equals_reencoding_the_drawn_slots(stream, smoothing, last_head):
    """--gap-slot-rate: the one pass scores the drawn slots only, each weighted 1 / rate, as re-encoding every layer
    end and scoring those slots does; with every slot drawn at weight 1 it is the full loss; smoothing's uniform term
    carries the weights too."""
    model, d = build_tiny_model(seed=1, slot_objective="gap", slot_query_stream=stream, last_word_head=last_head)
    lengths = [9, 3, 12, 6, 2]
    src, src_lengths, target = random_batch(d, lengths, seed=2)
    layers = sample_layers(target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(3), 1.0, 0.2)
    weight = sample_slots(layers, 0.5, torch.Generator().manual_seed(4))
    with torch.no_grad():
        out = model(src, src_lengths, target, None, layers=layers, slot_weight=weight)["gap"]
        terms = gap_losses(out, 0.0, 1.0)
        ones = gap_losses(model(src, src_lengths, target, None, layers=layers,
                                slot_weight=torch.ones_like(weight))["gap"], smoothing, 1.0)
        every = model(src, src_lengths, target, None, layers=layers)["gap"]
        full = gap_losses(every, smoothing, 1.0)
        if smoothing:  # the uniform term of the drawn slots, weighted: the smoothed loss's other part
            open_w = out["slot_weight"][~out["done"]]
            lprobs = torch.log_softmax(out["token_logits"], -1)
            smoothed = gap_losses(out, smoothing, 1.0)["slot_token"][0]
            expected = (1 - smoothing) * terms["slot_token"][0] - smoothing * (lprobs.mean(-1) * open_w).sum()
            torch.testing.assert_close(smoothed, expected)
    token, done, done_logits, last = naive_gap_loss(model, src, src_lengths, target, layers, 1.0, weight=weight)
    torch.testing.assert_close(out["done_logits"], torch.tensor(done_logits), atol=ATOL, rtol=0)
    assert float(terms["slot_token"][0]) == pytest.approx(token, rel=1e-5)
    assert float(terms["slot_done"][0]) == pytest.approx(done, rel=1e-5)
    assert 0 < out["done"].numel() < every["done"].numel()  # a sample, not every slot
    if last_head:
        assert float(terms["slot_last"][0]) == pytest.approx(last, rel=1e-5)
    for name in ("slot_token", "slot_done") + (("slot_last",) if last_head else ()):
        torch.testing.assert_close(ones[name][0], full[name][0])


@pytest.mark.parametrize("stream", [False, True, "last1"])
def test_one_pass_loss_of_the_asked_slots_equals_reencoding_them(stream):
    """--gap-slots asked: the one pass scores the slots decoding asks, as re-encoding every layer end and scoring
    those slots does; the words' term is every slot's (every open slot is asked), the done term smaller."""
    model, d = build_tiny_model(seed=1, slot_objective="gap", slot_query_stream=stream)
    src, src_lengths, target = random_batch(d, [9, 3, 12, 6, 2], seed=2)
    layers = sample_layers(target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(3), 1.0, 0.2)
    weight = asked_slots(layers)
    with torch.no_grad():
        out = model(src, src_lengths, target, None, layers=layers, slot_weight=weight)["gap"]
        terms = gap_losses(out, 0.0, 1.0)
        full = gap_losses(model(src, src_lengths, target, None, layers=layers)["gap"], 0.0, 1.0)
    token, done, done_logits, _ = naive_gap_loss(model, src, src_lengths, target, layers, 1.0, weight=weight)
    torch.testing.assert_close(out["done_logits"], torch.tensor(done_logits), atol=ATOL, rtol=0)
    assert float(terms["slot_token"][0]) == pytest.approx(token, rel=1e-5)
    assert float(terms["slot_done"][0]) == pytest.approx(done, rel=1e-5)
    torch.testing.assert_close(terms["slot_token"][0], full["slot_token"][0])
    assert float(terms["slot_done"][0]) < float(full["slot_done"][0])


def test_a_sequential_layering_is_the_default_trajectory():
    """Without ``layers`` a gap model scores ``order`` one word a layer (the sequential layering)."""
    from insnet_fairseq.geometry.layers import sequential_layers
    from insnet_fairseq.geometry.orders import make_order

    model, d = build_tiny_model(seed=2, slot_objective="gap")
    src, src_lengths, target = random_batch(d, [7, 5], seed=1)
    lengths = target.ne(d.pad()).sum(1)
    order = make_order("random", lengths, target.size(1), torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = model(src, src_lengths, target, order)["gap"]
        b = model(src, src_lengths, target, None, layers=sequential_layers(order, lengths))["gap"]
    torch.testing.assert_close(a["done_logits"], b["done_logits"])


@pytest.mark.parametrize("use_cache,stream,fused,last_head", [
    (True, False, False, False), (False, False, False, False), (True, True, False, False), (False, True, False, False),
    (True, True, True, False), (True, "last1", False, False), (False, "last1", False, False),
    (True, "last1", True, False), (True, True, True, True), (False, False, False, True)])
def test_decoding_along_a_gold_layering_gives_the_one_pass_probabilities(use_cache, stream, fused, last_head):
    """The generator's states along a gold layering (each layer's words inserted into their slots) score every slot
    as model.forward does: end-of-slot logits of every slot, and the token log-probabilities of every open slot.
    With the slot query stream: its queries computed at the step, or by the pass that made the state (fused). With
    the last-word head: q(last) of every open slot."""
    model, d = build_tiny_model(seed=4, slot_objective="gap", slot_query_stream=stream, last_word_head=last_head)
    src, src_lengths, target = random_batch(d, [11], seed=5)
    L = 11
    layers = sample_layers(torch.tensor([L]), L, torch.Generator().manual_seed(1), 1.0, 0.2)
    with torch.no_grad():
        out = model(src, src_lengths, target, None, layers=layers)["gap"]
        t = gap_targets(layers, torch.tensor([L]))
        token_lp = torch.log_softmax(out["token_logits"], -1)
        gen = InsertionGenerator(d, DecodingOptions.for_mode("parallel", use_cache=use_cache,
                                                             fuse_slot_queries="on" if fused else "off"))
        source_kv, source_pad = model.decoder.encode_source(model.forward_encoder(src, src_lengths))
        state = gen.steps.initial_state(model.decoder, 1, src.device, source_kv, source_pad, capacity=L)
        assert (state.slot_queries is not None) == fused
        row = layers[0].tolist()
        open_row = (~t.done).long().cumsum(0) - 1
        for end in range(max(row) + 1):
            here = t.end.eq(end)
            slots, logits, *last = slot_done_logits(model.decoder, state, source_kv, source_pad, last=last_head)
            torch.testing.assert_close(logits[0], out["done_logits"][here], atol=ATOL, rtol=0)
            if last_head:  # the open slots' q(last), in the order of the one pass's open slots
                torch.testing.assert_close(last[0][0][~t.done[here]], out["last_logits"][open_row[here][~t.done[here]]],
                                           atol=ATOL, rtol=0)
            if end == max(row):
                assert bool(t.done[here].all())
                break
            context = [p for p in range(L) if row[p] <= end]
            chosen = torch.tensor([[not t.done[here][k] for k in range(len(context) - 1)]])
            words = [p for p in range(L) if row[p] == end + 1]  # left to right: one per chosen slot with a word
            fills = torch.tensor([[any(a < p < z for p in words) for a, z in zip(context[:-1], context[1:])]])
            logits_v = gen.steps.token_logits(model.decoder, state, slots, chosen, source_kv, source_pad)
            torch.testing.assert_close(torch.log_softmax(logits_v, -1), token_lp[open_row[here][~t.done[here]]],
                                       atol=ATOL, rtol=0)
            tokens = target[0, words]
            state = gen.steps.insert(model.decoder, state, fills, tokens, torch.zeros(len(words)), source_kv, source_pad)


def test_a_model_whose_every_slot_says_end_of_slot_stops_after_one_pass():
    model, d = build_tiny_model(seed=5, slot_objective="gap")
    model.decoder.heads.done_proj.bias.data.fill_(1e4)
    src, src_lengths, _ = random_batch(d, [5, 8, 3], seed=1)
    passes = []
    context = model.decoder.context
    real_forward = context.forward
    context.forward = lambda *a, **k: passes.append(1) or real_forward(*a, **k)
    hyps = InsertionGenerator(d, DecodingOptions.for_mode("parallel")).generate(
        [model], {"id": torch.arange(3), "net_input": {"src_tokens": src, "src_lengths": src_lengths}})
    assert len(passes) == 1
    assert [h[0]["tokens"].tolist() for h in hyps] == [[d.eos()]] * 3
    assert [h[0]["steps"] for h in hyps] == [0, 0, 0]


@pytest.mark.parametrize("stream", [False, True])
def test_a_word_that_says_last_closes_its_gap_and_the_sentence_ends_without_another_pass(stream):
    """--last-word-head: a model whose every slot misses words (never done) and whose every word is its gap's last
    writes one word a sentence and stops after the initial pass, its word placed without one; with --last-word 1
    (the head not read) the same model never stops before its cap, its first step the same word."""
    model, d = build_tiny_model(seed=5, slot_objective="gap", last_word_head=True, slot_query_stream=stream)
    model.decoder.heads.done_proj.bias.data.fill_(-1e4)
    model.decoder.heads.last_proj.bias.data.fill_(1e4)
    src, src_lengths, _ = random_batch(d, [5, 8, 3], seed=1)
    sample = {"id": torch.arange(3), "net_input": {"src_tokens": src, "src_lengths": src_lengths}}
    passes = []
    context = model.decoder.context
    for name in ("forward", "forward_with_queries"):
        real = getattr(context, name)
        setattr(context, name, lambda *a, _real=real, **k: passes.append(1) or _real(*a, **k))
    hyps = InsertionGenerator(d, DecodingOptions.for_mode("parallel")).generate([model], sample)
    assert len(passes) == 1
    assert [len(h[0]["tokens"]) for h in hyps] == [2, 2, 2] and [h[0]["steps"] for h in hyps] == [1, 1, 1]
    off = InsertionGenerator(d, DecodingOptions.for_mode("parallel", last_word=1.0, max_steps=3)).generate([model], sample)
    assert [h[0]["steps"] for h in off] == [3, 3, 3]
    first = InsertionGenerator(d, DecodingOptions.for_mode("parallel", last_word=1.0, max_steps=1)).generate([model], sample)
    assert [h[0]["tokens"].tolist() for h in first] == [h[0]["tokens"].tolist() for h in hyps]


def test_closing_columns_and_shut_slots_of_last_words():
    """A step filling slots 0 and 2 of "<s> a b </s>" where slot 2's word is its gap's last: the new columns are
    [slot 0's word, slot 2's word], the second closing; the slot left of it (right of "b") is shut by close."""
    chosen, closes = torch.tensor([[True, False, True]]), torch.tensor([[False, False, True]])
    assert closing_columns(chosen, closes).tolist() == [[False, True]]
    shut = Shut(torch.zeros(1, 4, dtype=torch.bool))  # columns <s>, </s>, a, b
    left = torch.tensor([[0, 2, 3]])  # slot k's left neighbour's column
    closed = shut.close((left, None), torch.full((1, 3), -5.0), 0.5, closes)
    assert closed.cols.tolist() == [[False, False, False, True]]


def test_the_step_cap_warns(caplog):
    model, d = build_tiny_model(seed=5, slot_objective="gap")
    model.decoder.heads.done_proj.bias.data.fill_(-1e4)  # never done
    src, src_lengths, _ = random_batch(d, [5], seed=1)
    with caplog.at_level("WARNING"):
        hyps = InsertionGenerator(d, DecodingOptions.for_mode("parallel", max_steps=2)).generate(
            [model], {"id": torch.tensor([7]), "net_input": {"src_tokens": src, "src_lengths": src_lengths}})
    assert hyps[0][0]["steps"] == 2
    assert "sample id 7: stopped at its cap" in caplog.text


def test_open_slots():
    q = torch.tensor([[0.1, 0.9, 0.3], [0.6, 0.7, 0.2]])
    logits = torch.log(q / (1 - q))
    assert open_slots(logits, 0.5, torch.tensor([5, 5])).tolist() == [[True, False, True], [False, False, True]]
    assert open_slots(logits, 0.5, torch.tensor([1, 5])).tolist() == [[True, False, False], [False, False, True]]
    assert open_slots(logits, 0.65, torch.tensor([5, 5]), one_per_row=True).tolist() == \
        [[True, False, False], [False, False, True]]


@pytest.mark.parametrize("mode,stream,reopen,last_head", [
    ("parallel", False, False, False), ("sequential", False, False, False), ("parallel", True, False, False),
    ("parallel", True, True, False), ("parallel", "last1", False, False), ("parallel", True, False, True),
    ("parallel", False, False, True), ("sequential", True, False, True)])
def test_cached_uncached_and_batched_outputs_are_identical(mode, stream, reopen, last_head):
    """With the last-word head too (about half its words say last): rows end without a pass at different steps."""
    model, d = build_tiny_model(seed=6, vocab=30, slot_objective="gap", slot_query_stream=stream,
                                last_word_head=last_head)
    model.decoder.heads.done_proj.bias.data.fill_(-1.0)  # a few steps before the slots close
    B = 64
    src, src_lengths, _ = random_batch(d, [4] * B, seed=3)
    sample = {"id": torch.arange(B), "net_input": {"src_tokens": src, "src_lengths": src_lengths}}
    out = {}
    for cache in (True, False):
        gen = InsertionGenerator(d, DecodingOptions.for_mode(mode, use_cache=cache, reopen_done_slots=reopen))
        out[cache] = [h[0]["tokens"].tolist() for h in gen.generate([model], sample)]
    assert out[True] == out[False]
    gen = InsertionGenerator(d, DecodingOptions.for_mode(mode, reopen_done_slots=reopen))
    alone = []
    for b in range(B):
        keep = src[b].ne(d.pad())
        one = {"id": torch.tensor([b]), "net_input": {"src_tokens": src[b : b + 1, keep], "src_lengths": src_lengths[b : b + 1]}}
        alone.append(gen.generate([model], one)[0][0]["tokens"].tolist())
    assert alone == out[True]
    assert len({len(t) for t in alone}) > 1  # outputs of several lengths: the rows stop at different steps
    if last_head:  # the head decides: without it the same model writes other outputs
        gen = InsertionGenerator(d, DecodingOptions.for_mode(mode, reopen_done_slots=reopen, last_word=1.0))
        assert [h[0]["tokens"].tolist() for h in gen.generate([model], sample)] != out[True]


@pytest.mark.parametrize("given,flag", [(dict(mode="sequential", beam=2), "--insertion-beam"),
                                        (dict(mode="parallel", candidates=2), "--insertion-candidates")])
def test_options_of_several_rows_a_sentence_are_refused_in_one_line(given, flag):
    model, d = build_tiny_model(seed=5, slot_objective="gap")
    src, src_lengths, _ = random_batch(d, [5], seed=1)
    mode = given.pop("mode")
    gen = InsertionGenerator(d, DecodingOptions.for_mode(mode, **given))
    with pytest.raises(ValueError, match=f"--slot-objective gap .* drop {flag}"):
        gen.generate([model], {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": src_lengths}})


def test_closed_slots_stay_closed():
    """A template's closed slots (infilling, constraint phrases) take no word: the given tokens stay together, the
    words go into the blanks only."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_objective="gap")
    model.decoder.heads.done_proj.bias.data.fill_(-1.0)
    src, src_lengths, _ = random_batch(d, [4, 4], seed=2)
    given = [[7, 8, 9], [10, 11]]
    hyps = InsertionGenerator(d, DecodingOptions.for_mode("parallel")).generate(
        [model], {"id": torch.arange(2), "net_input": {"src_tokens": src, "src_lengths": src_lengths}},
        initial_tokens=given, blanks=[[0, 3], [2]])
    first, second = (h[0]["tokens"].tolist() for h in hyps)
    assert len(first) > 4 and first[first.index(7) : first.index(7) + 3] == [7, 8, 9]
    assert second[:2] == [10, 11] and len(second) > 3


def test_live_slots_and_shut_slots():
    """The worked examples of InsertionSteps.live_slots and Shut: a slot that said done is shut by its left token's
    column, and a step's new tokens open live slots."""
    positions = torch.tensor([[0, 2, 1, HOLE]])  # "<s> a </s>" inserted <s>, </s>, a, then a hole
    order, lengths = positions.argsort(1), torch.tensor([3])
    assert InsertionSteps.live_slots(lengths, order, torch.tensor([[False, False, True, False]])).tolist() == \
        [[True, False, False]]
    assert InsertionSteps.live_slots(lengths, order, torch.zeros(1, 4, dtype=torch.bool)).tolist() == \
        [[True, True, False]]
    assert InsertionSteps.live_slots(lengths, order, None).tolist() == [[True, True, False]]
    q = torch.tensor([[0.2, 0.9, 0.5]])  # slot 1 (right of "a", column 2) says done; slot 2 does not exist
    done_logits = torch.log(q / (1 - q)).masked_fill(torch.tensor([[False, False, True]]), float("inf"))
    left = positions.argsort(1)[:, :-1]  # [[0, 2, 1]]: slot k's left column
    shut = Shut(torch.zeros(1, 4, dtype=torch.bool)).close((left, None), done_logits, 0.7)
    assert shut.cols.tolist() == [[False, True, True, False]]  # </s> (column 1) opens no slot: shutting it is moot
    assert Shut(None).close((left, None), done_logits, 0.7).cols is None  # --reopen-done-slots


@pytest.mark.parametrize("fused", [False, True])
def test_shut_slots_get_no_query_and_live_ones_the_full_computation(fused):
    """With some slots shut, the live slots' queries (computed at the step, or by the fused pass that made the state)
    equal those of every slot computed at once, and the shut slots' end-of-slot logits are +inf."""
    model, d = build_tiny_model(seed=4, slot_objective="gap", slot_query_stream=True)
    src, src_lengths, _ = random_batch(d, [6, 9], seed=5)
    gen = InsertionGenerator(d, DecodingOptions.for_mode("parallel", fuse_slot_queries="on" if fused else "off"))
    dec = model.decoder
    with torch.no_grad():
        source_kv, source_pad = dec.encode_source(model.forward_encoder(src, src_lengths))
        state = gen.steps.initial_state(dec, 2, src.device, source_kv, source_pad, capacity=12)
        for words in ([[5], [6]], [[7, 8], [9, 10]]):  # fill every slot, twice: 1, then 2 words a sentence
            K = state.tokens.size(1) - 1
            chosen = torch.zeros(2, K, dtype=torch.bool)
            chosen[:, : len(words[0])] = True
            tokens = torch.tensor([w for row in words for w in row])
            shut = torch.zeros_like(state.real)
            shut[:, 2:] = torch.arange(state.tokens.size(1) - 2) % 2 == 0  # every other word's right slot is done
            state = gen.steps.insert(dec, state, chosen, tokens, torch.zeros(len(tokens)), source_kv, source_pad,
                                     shut=shut)
        shut = torch.cat([shut, torch.zeros(2, state.tokens.size(1) - shut.size(1), dtype=torch.bool)], 1)
        live = InsertionSteps.live_slots(state.lengths, state.sequence_order(), shut)
        assert (~live[:, :4]).any() and live.any()
        partial = with_slot_queries(dec, state, source_kv, source_pad, shut).slot_queries
        assert (state.slot_queries is not None) == fused
        every = with_slot_queries(dec, dataclasses.replace(state, slot_queries=None), source_kv, source_pad)
        torch.testing.assert_close(partial[live], every.slot_queries[live], atol=ATOL, rtol=0)
        assert bool(partial[~live].eq(0).all())
        _, logits = slot_done_logits(dec, state, source_kv, source_pad, shut)
        exists = torch.arange(live.size(1)).unsqueeze(0) < (state.lengths - 1).unsqueeze(1)
        assert bool(torch.isinf(logits[exists & ~live]).all()) and bool(torch.isfinite(logits[live]).all())
