"""The fill head (``--slot-fill-head``) and the termination it learns (``--slot-fill-threshold``).

Training: the fill term of every context and slot against a naive loop that builds each context by hand; the other
terms unchanged by the head. Decoding: the generator along a gold trajectory reads the fill logits that
``model.forward`` trains; cached, uncached, batched and one-by-one decoding agree with the fill rule; the defaults a
fill-head model gets, and the refusal for a model without the head.
"""
import math

import pytest
import torch

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.geometry.layers import sequential_layers, trajectory, uniform_layers
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.tasks.criterion import term_losses

from conftest import build_tiny_model, random_batch, sample_of, step_logprobs

ATOL = 1e-5
LENGTHS = [9, 4, 12, 7, 3]


def fill_model(seed=5, **kw):
    return build_tiny_model(seed=seed, vocab=25, decoder_normalize_before=True, slot_fill_head=True, **kw)


def layering(kind, target, n_tok):
    n = target.size(1)
    if kind == "sequential":
        return sequential_layers(make_order("random", n_tok, n, torch.Generator().manual_seed(4)), n_tok)
    return uniform_layers(n_tok, n, kind)


def naive_fill(model, src, src_lengths, target, order, lengths):
    """Per sentence, per context t = 1..len-1 (the tokens of steps 0..t), per slot left to right: (fill logit of
    the materialised slot representation, target: its neighbours' final positions are not adjacent)."""
    heads = model.decoder.heads
    h = model.decoder.encode_trajectory(target, order, model.forward_encoder(src, src_lengths))[0]
    out = []
    for b, L in enumerate(lengths):
        rows = []
        for t in range(1, L):
            steps = sorted(range(t + 1), key=lambda s: int(order[b, s]))  # the context's tokens by position
            logits, targets = [], []
            for l, r in zip(steps[:-1], steps[1:]):
                e = heads.slot_repr(h[b, l], h[b, r], h[b, t])
                logits.append(float(heads.fill_proj(e)))
                targets.append(float(int(order[b, r]) - int(order[b, l]) > 1))
            rows.append((t, logits, targets))
        out.append(rows)
    return out


@pytest.mark.parametrize("kind,every_step", [("sequential", False), ("anchored", False), ("binary", False),
                                             ("anchored", True)])
def test_fill_terms_equal_a_naive_loop(kind, every_step):
    """Logits and targets of every trained (context, slot); the contexts are the termination term's: each layer's
    end and the finished sentence (whose slots are all empty), or every step with --termination-every-step."""
    model, d = fill_model(slot_query_stream=True)
    model.decoder.termination_every_step = every_step
    src, src_lengths, target = random_batch(d, LENGTHS, seed=6)
    n_tok = target.ne(d.pad()).sum(1)
    layers = layering(kind, target, n_tok)
    order, context = trajectory(layers)
    with torch.no_grad():
        out = model(src, src_lengths, target, order, context=None if kind == "sequential" else context)
        naive = naive_fill(model, src, src_lengths, target, order, LENGTHS)
    fill, term_mask = out["fill"], out["termination"]["mask"]
    for b, L in enumerate(LENGTHS):
        for t, logits, targets in naive[b]:
            trained = bool(term_mask[b, t - 1])
            assert fill["mask"][b, t - 1].tolist() == [trained and k < t for k in range(fill["mask"].size(2))]
            if not trained:
                continue
            torch.testing.assert_close(fill["logits"][b, t - 1, :t], torch.tensor(logits), atol=ATOL, rtol=0)
            assert fill["target"][b, t - 1, :t].tolist() == targets
        assert sum(naive[b][-1][2]) == 0  # the finished sentence: no slot wants a word
        assert sum(naive[b][0][2]) == (L > 2)  # <s> </s>: the one slot holds every word


def test_the_other_terms_do_not_depend_on_the_fill_head():
    model, d = fill_model(slot_query_stream=True)
    src, src_lengths, target = random_batch(d, LENGTHS, seed=6)
    n_tok = target.ne(d.pad()).sum(1)
    order, context = trajectory(uniform_layers(n_tok, target.size(1), "anchored"))
    with torch.no_grad():
        with_fill = term_losses(model(src, src_lengths, target, order, context=context))
        model.decoder.heads.fill_proj = None
        without = term_losses(model(src, src_lengths, target, order, context=context))
    assert set(with_fill) == set(without) | {"fill"} and with_fill["fill"][0] > 0
    for name in without:
        torch.testing.assert_close(with_fill[name][0], without[name][0], atol=ATOL, rtol=0)


def test_a_checkpoint_without_the_head_loads_with_it_at_its_initial_values():
    """--finetune-from-model of a model trained without the head (an l2r model) into a --slot-fill-head one."""
    plain, _ = build_tiny_model(seed=1, vocab=25, decoder_normalize_before=True)
    model, _ = fill_model(seed=2)
    initial = {k: v.clone() for k, v in model.decoder.heads.fill_proj.state_dict().items()}
    state = plain.state_dict()
    model.upgrade_state_dict(state)  # in place, as fairseq does on loading
    model.load_state_dict(state)  # strict: every key present
    for k, v in model.decoder.heads.fill_proj.state_dict().items():
        assert torch.equal(v, initial[k])
    torch.testing.assert_close(model.decoder.heads.position_proj.weight, plain.decoder.heads.position_proj.weight)


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("kind", ["sequential", "anchored"])
def test_generator_along_a_gold_trajectory_reads_the_trained_fill_logits(kind, cache):
    """At every context the generator meets along a gold layering, its stop log-odds are logit(F) minus the largest
    fill logit that ``model.forward`` computes for that context."""
    model, d = fill_model(slot_query_stream=True)
    src, src_lengths, target = random_batch(d, LENGTHS, seed=6)
    n_tok = target.ne(d.pad()).sum(1)
    layers = layering(kind, target, n_tok)
    order, context = trajectory(layers)
    F = 0.3
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel", use_cache=cache, slot_fill_threshold=F))
    decoder = model.decoder
    with torch.no_grad():
        model.decoder.termination_every_step = True  # every context of the trajectory trained: all compared
        fill = model(src, src_lengths, target, order, context=context)["fill"]
        for b, L in enumerate(LENGTHS):
            keep = src[b].ne(d.pad())
            source_kv, source_pad = decoder.encode_source(model.forward_encoder(src[b : b + 1, keep],
                                                                                src_lengths[b : b + 1]))
            state = gen.initial_state(decoder, 1, src.device, source_kv, source_pad)
            inserted, t = [0, L - 1], 1
            for layer in range(1, int(layers[b].max()) + 2):
                expected = math.log(F / (1 - F)) - fill["logits"][b, t - 1, :t].max()
                torch.testing.assert_close(gen.stop_log_odds(decoder, state)[0], expected, atol=ATOL, rtol=0)
                words = [p for p in range(L) if int(layers[b, p]) == layer]
                if not words:
                    break
                chosen = torch.zeros(1, len(inserted) - 1, dtype=torch.bool)
                chosen[0, [sum(q < p for q in inserted) - 1 for p in words]] = True
                state = gen.insert(decoder, state, chosen, target[b, words], torch.zeros(len(words)), source_kv,
                                   source_pad)
                inserted += words
                t += len(words)
            assert t == L - 1


def sharpen(model):
    """Random weights give every slot about the same fill logit: spread them, so that sentences stop at different
    steps (sequential: after 1 and 5 steps, the others at the cap of 12)."""
    model.decoder.heads.fill_proj.weight.data.mul_(10.0)
    model.decoder.heads.fill_proj.bias.data.fill_(-1.0)


def decode(model, d, src, src_lengths, **kw):
    gen = InsertionGenerator(d, DecodingOptions(**kw))
    return [h[0] for h in gen.generate([model], sample_of(src, src_lengths))]


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_fill_rule_cached_uncached_batched_and_one_by_one_agree(mode):
    model, d = fill_model(seed=7, slot_query_stream=True)
    sharpen(model)
    src, src_lengths, _ = random_batch(d, [5, 7, 4, 9, 6, 5], src_len=9, seed=3)
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=12, slot_fill_threshold=0.5)
    cached = decode(model, d, src, src_lengths, **kw)
    uncached = decode(model, d, src, src_lengths, use_cache=False, **kw)
    assert len({h["steps"] for h in cached}) > 1  # sentences stop at different steps
    for b in range(len(src)):
        assert cached[b]["tokens"].tolist() == uncached[b]["tokens"].tolist()
        torch.testing.assert_close(cached[b]["positional_scores"], uncached[b]["positional_scores"], atol=1e-4, rtol=0)
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], **kw)[0]
        assert alone["tokens"].tolist() == cached[b]["tokens"].tolist() and alone["steps"] == cached[b]["steps"]


def test_a_sentence_stops_exactly_when_no_open_slot_wants_a_word():
    """Sequential greedy decoding: every output's final state has no slot above F, every earlier state one (the
    step cap aside)."""
    model, d = fill_model(seed=7, slot_query_stream=True)
    sharpen(model)
    src, src_lengths, _ = random_batch(d, [5, 7, 4, 9, 6, 5], src_len=9, seed=3)
    F = 0.5
    gen = InsertionGenerator(d, DecodingOptions(mode="sequential", max_steps=12, slot_fill_threshold=F))
    hyps = [h[0] for h in gen.generate([model], sample_of(src, src_lengths))]
    for b, hyp in enumerate(hyps):
        keep = src[b].ne(d.pad())
        decoder = model.decoder
        source_kv, source_pad = decoder.encode_source(model.forward_encoder(src[b : b + 1, keep],
                                                                            src_lengths[b : b + 1]))
        stopped = []  # the loop's states again, step by step
        state = gen.initial_state(decoder, 1, src.device, source_kv, source_pad)
        for step in range(hyp["steps"] + 1):
            stopped.append(bool(gen.stop_log_odds(decoder, state)[0] > 0))
            if step < hyp["steps"]:
                state = gen.step(decoder, state, source_kv, source_pad, 10 ** 6)
        assert not any(stopped[:-1])
        assert stopped[-1] or hyp["steps"] == 12
    assert sorted({h["steps"] for h in hyps}) == [1, 5, 12]


def test_fill_defaults_and_refusal():
    plain = DecodingOptions.for_mode("parallel")
    assert (plain.slot_fill_threshold, plain.stop_check_prob) == (0.0, 0.75)
    fill = DecodingOptions.for_mode("parallel", fill_head=True)
    assert (fill.slot_fill_threshold, fill.stop_check_prob, fill.skip_repeats, fill.slot_top_p) == (0.5, 0.0, True, 0.9)
    given = DecodingOptions.for_mode("parallel", fill_head=True, slot_fill_threshold=0.0, stop_check_prob=0.6)
    assert (given.slot_fill_threshold, given.stop_check_prob) == (0.0, 0.6)
    assert DecodingOptions.for_mode("sequential", fill_head=True).slot_fill_threshold == 0.5
    with pytest.raises(ValueError, match="--slot-fill-threshold must be in"):
        DecodingOptions(slot_fill_threshold=1.0)


def test_beam_hypotheses_score_their_trajectory_with_the_fill_rules_stop():
    """--insertion-beam with the fill rule: a hypothesis's score is its trajectory's log-probability by
    ``model.forward`` with q(stop) at each context replaced by sigmoid(logit(F) - its largest fill logit)."""
    model, d = fill_model(seed=7)
    sharpen(model)
    src, src_lengths, _ = random_batch(d, [5, 7, 4], src_len=6, seed=2)
    F = 0.5
    gen = InsertionGenerator(d, DecodingOptions(mode="sequential", beam=3, retain_history=True, max_steps=6,
                                                lenpen=0.0, slot_fill_threshold=F))
    out = gen.generate([model], sample_of(src, src_lengths))
    for b, hyps in enumerate(out):
        keep = src[b].ne(d.pad())
        for h in hyps:
            last = h["history"][-1]
            target = torch.cat([torch.tensor([d.bos()]), last["tokens"]]).unsqueeze(0)  # [1, n]
            order = torch.cat([torch.tensor([0]), last["inserted"]]).argsort().unsqueeze(0)
            with torch.no_grad():
                net = model(src[b : b + 1, keep], src_lengths[b : b + 1], target, order)
            tok, pos, _ = step_logprobs(net)
            n = target.size(1)
            stop = torch.stack([math.log(F / (1 - F)) - net["fill"]["logits"][0, t - 1, :t].max() for t in range(1, n)])
            go = torch.nn.functional.logsigmoid(-stop[:-1]).sum() + torch.nn.functional.logsigmoid(stop[-1])
            expected = float(tok[0].sum() + pos[0].sum() + go)
            assert float(h["positional_scores"].sum()) == pytest.approx(expected, abs=1e-4)
    assert len({h["steps"] for hyps in out for h in hyps}) > 1


def test_show_trajectory_explains_the_fill_rules_stop():
    """recipes/show_trajectory.py --explain with a fill-head model: each note prints the largest p(fill), above F
    at every state but the last of a sentence the model stopped."""
    import re

    from recipes.show_trajectory import ExplainingGenerator

    model, d = fill_model(seed=7, slot_query_stream=True)
    sharpen(model)
    src, src_lengths, _ = random_batch(d, [5, 7, 4, 9, 6, 5], src_len=9, seed=3)
    stopped = 0
    for b in range(len(src)):
        keep = src[b].ne(d.pad())
        gen = ExplainingGenerator(d, DecodingOptions(mode="sequential", max_steps=12, slot_fill_threshold=0.5,
                                                     retain_history=True))
        hypo = gen.generate([model], sample_of(src[b : b + 1, keep], src_lengths[b : b + 1]))[0][0]
        fills = [float(re.search(r"max p\(fill\) ([0-9.]+) ", note).group(1)) for note in gen.notes]
        assert len(fills) == len(hypo["history"]) and all(f >= 0.5 for f in fills[:-1])
        if hypo["steps"] < 12:  # the model stopped it (printed to 2 decimals: 0.499 is "0.50")
            stopped += 1
            assert fills[-1] <= 0.5
    assert stopped >= 2
