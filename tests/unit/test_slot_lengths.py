"""The slot length head (``--slot-length-classes``): its training targets against a naive loop, its one-pass logits
against the generator's per-prefix states, and parallel decoding that fills the slots it predicts non-empty and
stops when it predicts every slot empty.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.errors import FlagError
from insnet_fairseq.geometry.layers import sequential_layers, trajectory, uniform_layers
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.models.insnet import InsNetModel
from insnet_fairseq.tasks.criterion import term_losses
from insnet_fairseq.training.layerization import layerize

from conftest import build_tiny_model, random_batch, sample_of, tiny_args

C = 6
LENGTHS = [9, 4, 12, 7, 3, 14]


def layerings(kind, model, src, src_lengths, target, n_tok):
    n = target.size(1)
    if kind == "sequential":
        return sequential_layers(make_order("random", n_tok, n, torch.Generator().manual_seed(4)), n_tok)
    if kind == "dinic":
        order = make_order("random", n_tok, n, torch.Generator().manual_seed(6))
        return layerize(model, src, src_lengths, target, order, 1.0)[0]
    return uniform_layers(n_tok, n, kind)


def naive_targets(layers, L):
    """Per context (each layer's, then the whole sentence), left to right: the words the final sentence holds
    between each pair of neighbours inserted so far."""
    out = []
    for layer in range(1, int(max(int(x) for x in layers[:L])) + 2):
        inserted = sorted(p for p in range(L) if int(layers[p]) < layer)
        out += [min(q - p - 1, C - 1) for p, q in zip(inserted, inserted[1:])]
    return out


@pytest.mark.parametrize("kind", ["sequential", "anchored", "binary", "dinic"])
def test_slot_length_targets_equal_a_naive_loop(kind):
    model, d = build_tiny_model(seed=3, slot_length_classes=C)
    src, src_lengths, target = random_batch(d, LENGTHS, seed=4)
    n_tok = target.ne(d.pad()).sum(1)
    layers = layerings(kind, model, src, src_lengths, target, n_tok)
    order, context = trajectory(layers)
    with torch.no_grad():
        out = model(src, src_lengths, target, order, context=None if kind == "sequential" else context)
    expected = sum((naive_targets(layers[b], L) for b, L in enumerate(LENGTHS)), [])
    assert out["slot_length"]["target"].tolist() == expected
    assert out["slot_length"]["logits"].shape == (len(expected), C)
    assert C - 1 in expected and 0 in expected  # the clamp and the finished contexts are both exercised
    terms = term_losses(out)
    torch.testing.assert_close(terms["slot_length"][0], F.cross_entropy(out["slot_length"]["logits"],
                                                                        out["slot_length"]["target"], reduction="sum"))


def test_slot_length_terms_docstring_example():
    model, d = build_tiny_model(seed=3, slot_length_classes=C)
    src, src_lengths, target = random_batch(d, [4], seed=1)
    with torch.no_grad():
        out = model(src, src_lengths, target, torch.tensor([[0, 3, 2, 1]]))
    assert out["slot_length"]["target"].tolist() == [2, 1, 0, 0, 0, 0]


def test_model_without_the_head_has_no_term_and_bad_class_counts_are_refused():
    model, d = build_tiny_model(seed=3)
    src, src_lengths, target = random_batch(d, [6, 4], seed=1)
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("l2r", n_tok, target.size(1), torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert "slot_length" not in model(src, src_lengths, target, order)
    for bad in (1, -2):
        with pytest.raises(ValueError, match="--slot-length-classes"):
            InsNetModel.check_ablation_flags(tiny_args(slot_length_classes=bad))


def test_a_checkpoint_without_the_head_loads_with_its_initial_values():
    """--finetune-from-model of a model without the head: every other weight is the checkpoint's."""
    plain, _ = build_tiny_model(seed=1)
    model, _ = build_tiny_model(seed=2, slot_length_classes=C)
    initial = {k: v.clone() for k, v in model.decoder.heads.length_proj.state_dict().items()}
    state = plain.state_dict()
    model.decoder.upgrade_state_dict_named(state, "decoder")
    model.load_state_dict(state, strict=True)
    for k, v in model.decoder.heads.length_proj.state_dict().items():
        assert torch.equal(v, initial[k])
    torch.testing.assert_close(model.decoder.heads.token_proj.weight, plain.decoder.heads.token_proj.weight)


def mixed_model(seed=11):
    """A tiny model whose length head predicts some slots empty and some not."""
    model, d = build_tiny_model(seed=seed, vocab=25, decoder_normalize_before=True, slot_length_classes=C)
    with torch.no_grad():
        model.decoder.heads.length_proj.weight.mul_(8.0)
    return model, d


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("kind", ["anchored", "dinic"])
def test_generator_along_gold_trajectory_scores_slot_lengths_as_forward(kind, cache):
    """At each layer's context of a gold trajectory, the generator's slot length logits equal the one-pass ones, and
    its slot distribution closes exactly the slots whose p(0 words) > 0.5."""
    model, d = mixed_model()
    src, src_lengths, target = random_batch(d, LENGTHS, seed=12)
    n_tok = target.ne(d.pad()).sum(1)
    layers = layerings(kind, model, src, src_lengths, target, n_tok)
    order, context = trajectory(layers)
    gen = InsertionGenerator(d, DecodingOptions.for_mode("parallel", use_cache=cache))
    decoder = model.decoder
    closed_seen = open_seen = 0
    with torch.no_grad():
        logits = model(src, src_lengths, target, order, context=context)["slot_length"]["logits"]
        at = 0
        for b, L in enumerate(LENGTHS):
            keep = src[b].ne(d.pad())
            source_kv, source_pad = decoder.encode_source(model.forward_encoder(src[b : b + 1, keep], src_lengths[b : b + 1]))
            state = gen.initial_state(decoder, 1, src.device, source_kv, source_pad)
            inserted = [0, L - 1]
            for layer in range(1, int(layers[b, :L].max()) + 2):
                slots, pos_lprobs = gen.slot_distribution(decoder, state)
                every = torch.ones_like(pos_lprobs, dtype=torch.bool)
                mine = decoder.heads.length_logits(gen.chosen_slot_repr(decoder, state, slots, every))  # [K, C]
                theirs = logits[at : at + len(mine)]
                at += len(mine)
                torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
                p0 = F.log_softmax(theirs, -1)[:, 0]
                sure = (p0 + math.log(2)).abs() > 1e-4
                closed = ~torch.isfinite(pos_lprobs[0])
                assert torch.equal(closed[sure], (p0 > -math.log(2))[sure])
                closed_seen, open_seen = closed_seen + int(closed.sum()), open_seen + int((~closed).sum())
                words = [p for p in range(L) if int(layers[b, p]) == layer]
                if not words:
                    break
                chosen = torch.zeros_like(pos_lprobs, dtype=torch.bool)
                chosen[0, [sum(q < p for q in inserted) - 1 for p in words]] = True
                state = gen.insert(decoder, state, chosen, target[b, words], torch.zeros(len(words)), source_kv,
                                   source_pad)
                inserted += words
        assert at == len(logits)
    assert closed_seen > 0 and open_seen > 0


def decode(model, d, src, src_lengths, **kw):
    gen = InsertionGenerator(d, DecodingOptions.for_mode("parallel", **kw))
    return [h[0] for h in gen.generate([model], sample_of(src, src_lengths))]


@pytest.mark.parametrize("slot_query", [False, True])
@pytest.mark.parametrize("candidates", [1, 2])
def test_length_decoding_cached_uncached_and_batched_agree(slot_query, candidates):
    model, d = mixed_model(seed=5)
    if slot_query:
        model, d = build_tiny_model(seed=5, vocab=25, slot_query_stream=True, slot_length_classes=C)
        model.decoder.heads.length_proj.weight.data.mul_(8.0)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    kw = dict(max_steps=12, candidates=candidates, slot_top_p=1.0)
    cached = decode(model, d, src, src_lengths, **kw)
    uncached = decode(model, d, src, src_lengths, use_cache=False, **kw)
    for b in range(len(src)):
        assert cached[b]["tokens"].tolist() == uncached[b]["tokens"].tolist()
        torch.testing.assert_close(cached[b]["positional_scores"], uncached[b]["positional_scores"], atol=1e-4, rtol=0)
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], **kw)[0]
        assert alone["tokens"].tolist() == cached[b]["tokens"].tolist()
    assert len({len(h["tokens"]) for h in cached}) > 1  # the head stops sentences at different lengths


def test_length_head_decides_the_slots_and_the_stop_and_no_slot_lengths_ignores_it():
    model, d = build_tiny_model(seed=7, vocab=30, slot_length_classes=C)
    heads = model.decoder.heads
    src, src_lengths, _ = random_batch(d, [5] * 3, src_len=9, seed=3)
    with torch.no_grad():
        heads.termination_proj.bias.fill_(-50.0)  # q(stop) never fires
        heads.length_proj.weight.zero_()
        heads.length_proj.bias.fill_(0.0)
        heads.length_proj.bias[0] = 50.0  # every slot empty: nothing is inserted
        assert all(h["tokens"].tolist() == [d.eos()] and h["steps"] == 0 for h in decode(model, d, src, src_lengths))
        heads.length_proj.bias[0] = -50.0  # no slot empty: every open slot is filled at every step, until the cap
        for h in decode(model, d, src, src_lengths, max_steps=3, slot_top_p=1.0, skip_repeats=False):
            assert h["steps"] == 3 and len(h["tokens"]) == 2 ** 3 - 1 + 1
        # --no-slot-lengths: q(stop) and --slot-top-p decide, as for the model without the head
        heads.termination_proj.bias.fill_(-1.5)
        off = decode(model, d, src, src_lengths, max_steps=12, slot_lengths=False)
        heads_proj, heads.length_proj = heads.length_proj, None
        without = decode(model, d, src, src_lengths, max_steps=12)
        heads.length_proj = heads_proj
    assert [h["tokens"].tolist() for h in off] == [h["tokens"].tolist() for h in without]


def test_slot_lengths_default_on_in_parallel_mode_only():
    assert DecodingOptions.for_mode("parallel").slot_lengths
    assert not DecodingOptions.for_mode("sequential").slot_lengths
    assert not DecodingOptions.for_mode("parallel", slot_lengths=False).slot_lengths
    assert DecodingOptions.for_mode("parallel", stored={"parallel": {"slot_lengths": False}}).slot_lengths is False
    with pytest.raises(FlagError, match="stored"):
        DecodingOptions.for_mode("parallel", stored={"parallel": {"slot_length": False}})


def test_the_criterion_weighs_the_slot_length_term_and_logs_it_unweighted():
    from insnet_fairseq.tasks.criterion import InsNetLoss

    model, d = build_tiny_model(seed=3, slot_length_classes=C)
    src, src_lengths, target = random_batch(d, [9, 6], seed=2)
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(0))
    sample = {"net_input": {"src_tokens": src, "src_lengths": src_lengths, "target": target, "order": order},
              "target": target}
    with torch.no_grad():
        full, _, log_full = InsNetLoss(None)(model, sample)
        light, _, log_light = InsNetLoss(None, slot_length_weight=0.1)(model, sample)
    torch.testing.assert_close(log_full["slot_length_nll"], log_light["slot_length_nll"])
    torch.testing.assert_close(full - light, 0.9 * log_full["slot_length_nll"])
    torch.testing.assert_close(log_full["nll_loss"], log_light["nll_loss"])  # the trajectory's NLL leaves it out
    with pytest.raises(ValueError, match="--slot-length-weight"):
        InsNetLoss(None, slot_length_weight=-1.0)
