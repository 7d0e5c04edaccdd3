"""Beam search over sequential insertions (``--insertion-beam``): every finished hypothesis's score is the
log-probability ``model.forward`` gives its trajectory; a beam wide enough finds every trajectory (checked
against brute force); cached == uncached; batched == one by one; constraints kept; misuse refused."""
import copy
import itertools

import pytest
import torch

from insnet_fairseq.decoding.beam import choose_beam
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions

from conftest import build_tiny_model, random_batch, sample_of, step_logprobs


def beam_decode(model, d, src, src_lengths, beam, **kw):
    gen = InsertionGenerator(d, DecodingOptions(mode="sequential", beam=beam, retain_history=True, **kw))
    return gen.generate([model], sample_of(src, src_lengths))


@pytest.fixture(scope="module")
def model_and_batch():
    model, d = build_tiny_model(seed=5, vocab=12)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.0)  # random weights: stop now and then
    src, src_lengths, _ = random_batch(d, [5] * 4, src_len=6, seed=2)
    return model, d, src, src_lengths


def trajectory_logprob(model, d, src, src_lengths, hyp) -> float:
    """log p of the hypothesis's trajectory (its history: each word's insertion index) by ``model.forward``."""
    last = hyp["history"][-1]
    target = torch.cat([torch.tensor([d.bos()]), last["tokens"]]).unsqueeze(0)  # [1, n] <s> ... </s>
    inserted = torch.cat([torch.tensor([0]), last["inserted"]])  # [n] insertion index of each position
    assert target[0].tolist()[1:] == hyp["tokens"].tolist()
    order = inserted.argsort().unsqueeze(0)  # [1, n] position inserted at each step
    with torch.no_grad():
        out = model(src, src_lengths, target, order)
    tok, pos, term = step_logprobs(out)
    m = out["position"]["mask"][0]
    return float(tok[0][m].sum() + pos[0][m].sum() + term[0][out["termination"]["mask"][0]].sum())


def test_choose_beam_docstring_example():
    finish, pick, scores = choose_beam(torch.tensor([[-1.0, -5.0]]), torch.tensor([[-0.5, -2.0, -3.0]]), 2)
    assert finish.tolist() == [[True, False]]
    assert pick.tolist() == [[0, 1]] and scores.tolist() == [[-0.5, -2.0]]
    # fewer finite extensions than the beam: the rest of the picks are dead (-inf)
    _, pick, scores = choose_beam(torch.tensor([[-9.0, float("-inf")]]), torch.tensor([[-1.0, float("-inf")]]), 2)
    assert scores[0, 0] == -1.0 and scores[0, 1] == float("-inf")


def test_every_hypothesis_scores_its_trajectory_as_forward_does(model_and_batch):
    model, d, src, src_lengths = model_and_batch
    out = beam_decode(model, d, src, src_lengths, beam=3, max_steps=6, lenpen=0.0)  # lenpen 0: raw log-probs
    for b, hyps in enumerate(out):
        assert len(hyps) == 3
        assert [h["score"] for h in hyps] == sorted((h["score"] for h in hyps), reverse=True)
        keep = src[b].ne(d.pad())
        for h in hyps:
            raw = float(h["positional_scores"].sum())
            assert h["score"] == pytest.approx(raw, abs=1e-6)
            assert raw == pytest.approx(trajectory_logprob(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], h),
                                        abs=1e-4)
            assert h["steps"] == len(h["tokens"]) - 1  # one word per step
    with_lenpen = beam_decode(model, d, src, src_lengths, beam=3, max_steps=6, lenpen=1.0)
    h = with_lenpen[0][0]
    assert h["score"] == pytest.approx(float(h["positional_scores"].sum()) / (h["steps"] + 1), abs=1e-6)


def test_a_wide_beam_finds_every_trajectory_brute_force():
    """3 words and <unk>, at most 2 steps: 1 + 4 + 4 x 2 x 4 = 37 trajectories; a beam of 40 keeps them all."""
    model, d = build_tiny_model(seed=9, vocab=3)
    src, src_lengths, _ = random_batch(d, [4], src_len=5, seed=1)
    keep = src[0].ne(d.pad())
    src, src_lengths = src[:, keep], src_lengths
    hyps = beam_decode(model, d, src, src_lengths, beam=40, max_steps=2, lenpen=0.0)[0]
    words = [w for w in range(len(d)) if w not in (d.bos(), d.eos(), d.pad())]
    brute = []
    for n_steps in range(3):  # every sequence of (slot, word) insertions of n_steps steps
        for slots in itertools.product(*[range(k + 1) for k in range(n_steps)]):
            for ws in itertools.product(words, repeat=n_steps):
                seq, when = [], []  # words left to right, and the step that inserted each
                for t, (k, w) in enumerate(zip(slots, ws)):
                    seq.insert(k, w)
                    when.insert(k, t)
                target = torch.tensor([[d.bos()] + seq + [d.eos()]])
                inserted = torch.tensor([0] + [2 + t for t in when] + [1])
                with torch.no_grad():
                    out = model(src, src_lengths, target, inserted.argsort().unsqueeze(0))
                tok, pos, term = step_logprobs(out)
                m = out["position"]["mask"][0]
                lp = float(tok[0][m].sum() + pos[0][m].sum() + term[0][out["termination"]["mask"][0]].sum())
                brute.append((tuple(seq), lp))
    assert len(brute) == 37 and len(hyps) == 37
    got = sorted((tuple(h["tokens"][:-1].tolist()), round(h["score"], 4)) for h in hyps)
    want = sorted((s, round(lp, 4)) for s, lp in brute)
    assert [g[0] for g in got] == [w[0] for w in want]
    torch.testing.assert_close(torch.tensor([g[1] for g in got]), torch.tensor([w[1] for w in want]), atol=2e-4, rtol=0)


def test_beam_cached_equals_uncached_and_batched_equals_one_by_one(model_and_batch):
    model, d, src, src_lengths = model_and_batch
    cached = beam_decode(model, d, src, src_lengths, beam=4, max_steps=8)
    uncached = beam_decode(model, d, src, src_lengths, beam=4, max_steps=8, use_cache=False)
    for a, b in zip(cached, uncached):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        torch.testing.assert_close(torch.tensor([h["score"] for h in a]), torch.tensor([h["score"] for h in b]),
                                   atol=1e-4, rtol=0)
    for b in range(len(src)):
        keep = src[b].ne(d.pad())
        alone = beam_decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], beam=4, max_steps=8)[0]
        assert [h["tokens"].tolist() for h in alone] == [h["tokens"].tolist() for h in cached[b]]
    assert len({tuple(hs[0]["tokens"].tolist()) for hs in cached}) > 1  # not a degenerate output


def test_pruned_search_equals_scoring_every_proposed_slot(model_and_batch, monkeypatch):
    """The words of a slot that cannot make the beam are not scored: the same hypotheses and scores as scoring all."""
    import insnet_fairseq.decoding.beam as beam_mod

    model, d, src, src_lengths = model_and_batch
    model = copy.deepcopy(model)
    model.decoder.heads.position_proj.weight.data.mul_(8)  # a peaked slot distribution, as a trained model's
    calls = {"rows": 0}
    real = beam_mod.BeamSearch.extensions

    def counting(self, *args):
        calls["rows"] += int(args[4].sum())  # slots whose words are scored
        return real(self, *args)

    monkeypatch.setattr(beam_mod.BeamSearch, "extensions", counting)
    pruned = beam_decode(model, d, src, src_lengths, beam=4, max_steps=8)
    pruned_rows, calls["rows"] = calls["rows"], 0
    monkeypatch.setattr(beam_mod.BeamSearch, "PRUNE", False)
    full = beam_decode(model, d, src, src_lengths, beam=4, max_steps=8)
    assert calls["rows"] > pruned_rows  # pruning skipped some slots...
    for a, b in zip(pruned, full):  # ...and changed nothing
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        torch.testing.assert_close(torch.tensor([h["score"] for h in a]), torch.tensor([h["score"] for h in b]),
                                   atol=1e-5, rtol=0)


def test_beam_keeps_constraints_in_order_and_min_length(model_and_batch):
    model, d, src, src_lengths = model_and_batch
    given = [[d.nspecial + 1, d.nspecial + 2], [], [d.nspecial + 3], [d.nspecial + 4, d.nspecial + 4]]
    gen = InsertionGenerator(d, DecodingOptions(mode="sequential", beam=3, max_steps=5))
    out = gen.generate([model], sample_of(src, src_lengths), initial_tokens=given)
    for g, hyps in zip(given, out):
        for h in hyps:
            it = iter(h["tokens"].tolist())
            assert all(w in it for w in g)  # a subsequence: present, in order
    gen = InsertionGenerator(d, DecodingOptions(mode="sequential", beam=3, max_steps=12, min_length_ratio=1.0))
    out = gen.generate([model], sample_of(src, src_lengths))
    for b, hyps in enumerate(out):
        for h in hyps:  # at least as many words as source words (without </s>), unless the step cap cut it
            assert len(h["tokens"]) - 1 >= int(src_lengths[b]) - 1 or h["steps"] == 12


@pytest.mark.parametrize("threshold", [0.2, 0.8])
def test_stop_threshold_is_the_termination_bias_shifted_by_its_logit(model_and_batch, threshold):
    """--stop-threshold T in the beam = the beam of the model whose termination bias is lowered by logit(T)."""
    import math

    model, d, src, src_lengths = model_and_batch
    shifted = copy.deepcopy(model)
    shifted.decoder.heads.termination_proj.bias.data -= math.log(threshold / (1 - threshold))
    out = beam_decode(model, d, src, src_lengths, beam=3, max_steps=8, stop_threshold=threshold)
    ref = beam_decode(shifted, d, src, src_lengths, beam=3, max_steps=8)
    plain = beam_decode(model, d, src, src_lengths, beam=3, max_steps=8)
    for a, b in zip(out, ref):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        torch.testing.assert_close(torch.tensor([h["score"] for h in a]), torch.tensor([h["score"] for h in b]),
                                   atol=1e-5, rtol=0)
    steps = lambda res: sum(h["steps"] for hyps in res for h in hyps)  # noqa: E731
    assert (steps(out) < steps(plain)) if threshold < 0.5 else (steps(out) > steps(plain))  # stops earlier / later


@pytest.mark.parametrize("kw,flag", [(dict(mode="parallel"), "--insertion-mode sequential"),
                                     (dict(candidates=2), "--insertion-candidates"),
                                     (dict(skip_repeats=True), "--skip-repeats"),
                                     (dict(sampling=True), "--sampling"),
                                     (dict(beam=0), "--insertion-beam must be >= 1")])
def test_beam_misuse_is_refused_naming_the_flag(kw, flag):
    _, d = build_tiny_model(vocab=5)
    kw = dict(dict(mode="sequential", beam=3), **kw)
    with pytest.raises(ValueError, match=flag):
        InsertionGenerator(d, DecodingOptions(**kw))


def test_indigo_refuses_the_insnet_beam():
    from insnet_fairseq.decoding.indigo_generator import IndigoGenerator

    _, d = build_tiny_model(vocab=5)
    with pytest.raises(ValueError, match="--insertion-beam applies to InsNet decoding"):
        IndigoGenerator(d, DecodingOptions(mode="sequential", beam=3))
