"""An autoregressive judge of InsNet's candidates (--iter-decode-with-external-reranker, decoding/rerank.py): its
scores equal fairseq's own SequenceScorer, batched equals one by one, the output is the candidate the judge
scores highest, and every misuse is refused with the flag named."""
import pytest
import torch

from fairseq.sequence_scorer import SequenceScorer

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.geometry.orders import left_to_right
from insnet_fairseq.decoding.rerank import (Judge, best_of_groups, channel_scores, insnet_scores, judge_scores,
                                          pad_hypotheses)
from insnet_fairseq.tasks.criterion import term_losses

from conftest import build_tiny_ar, build_tiny_lm_model, build_tiny_model, make_dictionary, sample_of


@pytest.fixture(scope="module")
def models_and_batch(insnet_and_ar):
    return insnet_and_ar


def test_pad_hypotheses_and_best_of_groups_docstring_examples():
    hyps = [torch.tensor([7, 2]), torch.tensor([5, 6, 2])]
    assert pad_hypotheses(hyps, pad=1, eos=2).tolist() == [[2, 7, 2, 1], [2, 5, 6, 2]]
    assert best_of_groups(torch.tensor([-1.0, -0.5, -0.2, -0.9]), 2) == [1, 2]


def test_judge_scores_equal_fairseq_sequence_scorer_and_one_by_one(models_and_batch):
    """The mean per-token log-prob (</s> included) of fairseq's SequenceScorer, for hypotheses of different
    lengths in one batch, and the same for each scored alone."""
    _, ar, d, src, src_lengths = models_and_batch
    g = torch.Generator().manual_seed(5)
    hyps = [torch.cat([torch.randint(d.nspecial, len(d), (n,), generator=g), torch.tensor([d.eos()])])
            for n in [0, 3, 7, 1, 5, 2]]
    got = judge_scores(ar, src, src_lengths, hyps, d.pad(), d.eos())
    seq = pad_hypotheses(hyps, d.pad(), d.eos())
    sample = {"net_input": {"src_tokens": src, "src_lengths": src_lengths, "prev_output_tokens": seq[:, :-1]},
              "target": seq[:, 1:]}
    ref = [h[0]["positional_scores"].mean() for h in SequenceScorer(d).generate([ar], sample)]
    torch.testing.assert_close(got, torch.stack(ref), atol=1e-5, rtol=0)
    for b, h in enumerate(hyps):
        keep = src[b].ne(d.pad())
        alone = judge_scores(ar, src[b : b + 1, keep], src_lengths[b : b + 1], [h], d.pad(), d.eos())
        torch.testing.assert_close(alone[0], got[b], atol=1e-5, rtol=0)


def test_channel_scores_equal_fairseq_sequence_scorer_with_the_roles_swapped(models_and_batch):
    """log p(source | hypothesis) / |source| of a channel model is fairseq's SequenceScorer with the hypothesis as
    the source and the (unpadded) source as the target, for left-padded sources of different lengths; batched
    equals one by one; the Judge adds it with its weight."""
    _, ar, d, src, src_lengths = models_and_batch
    channel = build_tiny_ar(d, seed=12)
    g = torch.Generator().manual_seed(6)
    src = src.clone()
    src[0, :3] = d.pad()  # left padding: a shorter source
    hyps = [torch.cat([torch.randint(d.nspecial, len(d), (n,), generator=g), torch.tensor([d.eos()])])
            for n in [0, 3, 7, 1, 5, 2]]
    got = channel_scores(channel, src, hyps, d.pad(), d.eos())
    for b, h in enumerate(hyps):
        source = src[b][src[b].ne(d.pad())]
        seq = pad_hypotheses([source], d.pad(), d.eos())
        sample = {"net_input": {"src_tokens": h.unsqueeze(0), "src_lengths": torch.tensor([len(h)]),
                                "prev_output_tokens": seq[:, :-1]}, "target": seq[:, 1:]}
        ref = SequenceScorer(d).generate([channel], sample)[0][0]["positional_scores"].mean()
        torch.testing.assert_close(got[b], ref, atol=1e-5, rtol=0)
        alone = channel_scores(channel, src[b : b + 1], [h], d.pad(), d.eos())
        torch.testing.assert_close(alone[0], got[b], atol=1e-5, rtol=0)
    forward = judge_scores(ar, src, src_lengths, hyps, d.pad(), d.eos())
    torch.testing.assert_close(Judge(ar, channel, 0.3).score(src, src_lengths, hyps, d.pad(), d.eos()),
                               forward + 0.3 * got)
    torch.testing.assert_close(Judge(ar).score(src, src_lengths, hyps, d.pad(), d.eos()), forward)


def test_the_channel_judges_best_candidate_wins(models_and_batch):
    """With --channel-weight W each sentence outputs the candidate of the highest forward + W x channel score, and
    a large enough weight overrules the forward judge somewhere."""
    model, ar, d, src, src_lengths = models_and_batch
    channel = build_tiny_ar(d, seed=12)
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25, candidates=3, reranking=True)
    sample = sample_of(src, src_lengths)
    forward_only = [h[0] for h in InsertionGenerator(d, DecodingOptions(**kw)).generate([model, ar], sample)]
    plain = InsertionGenerator(d, DecodingOptions(mode="parallel", slot_top_p=0.9, max_steps=25, candidates=3)).generate([model], sample)
    out = [h[0] for h in InsertionGenerator(d, DecodingOptions(channel_weight=5.0, **kw)).generate([model, ar, channel], sample)]
    overruled = 0
    for b, cands in enumerate(plain):
        keep = src[b].ne(d.pad())
        hyps = [c["tokens"] for c in cands]
        n = len(hyps)
        scores = Judge(ar, channel, 5.0).score(src[b : b + 1, keep].expand(n, -1), src_lengths[b : b + 1].expand(n),
                                               hyps, d.pad(), d.eos()).tolist()
        best = max(range(n), key=lambda j: scores[j])
        assert out[b]["tokens"].tolist() == hyps[best].tolist()
        assert out[b]["score"] == pytest.approx(scores[best], abs=1e-5)
        overruled += out[b]["tokens"].tolist() != forward_only[b]["tokens"].tolist()
    assert overruled > 0


def test_insnet_judge_scores_are_the_criterions_nll_one_by_one(models_and_batch):
    """An InsNet judge's score of a hypothesis y is minus the insnet_loss criterion's summed NLL (token + position +
    termination) of that sentence alone, trained left to right, over |y| + 1; batched (different lengths, left-padded
    sources) equals one by one; the Judge uses it for an InsNet model and still adds the channel."""
    model, ar, d, src, src_lengths = models_and_batch
    judge, _ = build_tiny_model(seed=9, vocab=30)
    g = torch.Generator().manual_seed(8)
    src = src.clone()
    src[1, :2] = d.pad()  # left padding: a shorter source
    src_lengths = src.ne(d.pad()).sum(1)
    hyps = [torch.cat([torch.randint(d.nspecial, len(d), (n,), generator=g), torch.tensor([d.eos()])])
            for n in [0, 3, 7, 1, 5, 2]]
    got = insnet_scores(judge, src, src_lengths, hyps, d.pad(), d.bos(), d.eos())
    for b, h in enumerate(hyps):
        keep = src[b].ne(d.pad())
        target = torch.cat([torch.tensor([d.bos()]), h]).unsqueeze(0)  # [1, |y| + 2]
        out = judge(src[b : b + 1, keep], src_lengths[b : b + 1], target, left_to_right(torch.tensor([target.size(1)]),
                                                                                      target.size(1)))
        nll = sum(t[1] for t in term_losses(out).values())
        torch.testing.assert_close(got[b], -nll / len(h), atol=1e-5, rtol=0)
        alone = insnet_scores(judge, src[b : b + 1, keep], src_lengths[b : b + 1], [h], d.pad(), d.bos(), d.eos())
        torch.testing.assert_close(alone[0], got[b], atol=1e-5, rtol=0)
    channel = build_tiny_ar(d, seed=12)
    torch.testing.assert_close(Judge(judge).score(src, src_lengths, hyps, d.pad(), d.eos()), got)
    torch.testing.assert_close(Judge(judge, channel, 0.3).score(src, src_lengths, hyps, d.pad(), d.eos()),
                               got + 0.3 * channel_scores(channel, src, hyps, d.pad(), d.eos()))
    assert not torch.allclose(got, judge_scores(ar, src, src_lengths, hyps, d.pad(), d.eos()))


@pytest.mark.parametrize("order", ["anchored", "binary"])
def test_an_insnet_judge_along_uniform_levels_scores_the_criterions_layered_nll(models_and_batch, order):
    """--judge-order anchored / binary: the score is minus the criterion's summed NLL of the sentence alone along that
    order's InsNet-uniform layering (the trajectory a layered model trains on), over |y| + 1; batched equals one by
    one; it differs from the left-to-right score; the generator picks by it."""
    from insnet_fairseq.geometry.layers import trajectory, uniform_layers

    model, _, d, src, src_lengths = models_and_batch
    judge, _ = build_tiny_model(seed=9, vocab=30)
    g = torch.Generator().manual_seed(8)
    hyps = [torch.cat([torch.randint(d.nspecial, len(d), (n,), generator=g), torch.tensor([d.eos()])])
            for n in [0, 3, 7, 1, 5, 2]]
    got = insnet_scores(judge, src, src_lengths, hyps, d.pad(), d.bos(), d.eos(), order=order, anchor_depth=1)
    for b, h in enumerate(hyps):
        keep = src[b].ne(d.pad())
        target = torch.cat([torch.tensor([d.bos()]), h]).unsqueeze(0)  # [1, |y| + 2]
        steps, context = trajectory(uniform_layers(torch.tensor([target.size(1)]), target.size(1), order, 1))
        out = judge(src[b : b + 1, keep], src_lengths[b : b + 1], target, steps, context=context)
        nll = sum(t[1] for t in term_losses(out).values())
        torch.testing.assert_close(got[b], -nll / len(h), atol=1e-5, rtol=0)
        alone = insnet_scores(judge, src[b : b + 1, keep], src_lengths[b : b + 1], [h], d.pad(), d.bos(), d.eos(),
                              order=order, anchor_depth=1)
        torch.testing.assert_close(alone[0], got[b], atol=1e-5, rtol=0)
    l2r = insnet_scores(judge, src, src_lengths, hyps, d.pad(), d.bos(), d.eos())
    assert not torch.allclose(got[2], l2r[2])  # 7 words: more than one word per layer
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25, candidates=3)
    sample = sample_of(src, src_lengths)
    plain = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample)
    out = [h[0] for h in InsertionGenerator(d, DecodingOptions(reranking=True, judge_order=order, anchor_depth=1, **kw))
           .generate([model, judge], sample)]
    for b, cands in enumerate(plain):
        keep = src[b].ne(d.pad())
        hyps = [c["tokens"] for c in cands]
        n = len(hyps)
        scores = insnet_scores(judge, src[b : b + 1, keep].expand(n, -1), src_lengths[b : b + 1].expand(n), hyps,
                               d.pad(), d.bos(), d.eos(), order=order, anchor_depth=1).tolist()
        assert out[b]["tokens"].tolist() == hyps[max(range(n), key=lambda j: scores[j])].tolist()


def test_judge_order_misuse_is_refused_with_the_flag_named(models_and_batch):
    model, ar, d, src, src_lengths = models_and_batch
    sample = sample_of(src, src_lengths)
    with pytest.raises(ValueError, match="--judge-order anchored is the trajectory an InsNet judge"):
        InsertionGenerator(d, DecodingOptions(mode="parallel", candidates=2, judge_order="anchored"))
    with pytest.raises(ValueError, match="--judge-order anchored: only an InsNet judge"):
        InsertionGenerator(d, DecodingOptions(mode="parallel", candidates=2, reranking=True, judge_order="anchored")).generate(
            [model, ar], sample)
    with pytest.raises(ValueError, match="--judge-order must be one of l2r, anchored, binary, got 'random'"):
        DecodingOptions(judge_order="random")


def test_an_insnet_judges_best_candidate_wins(models_and_batch):
    """--path INSNET.pt:INSNET_JUDGE.pt: each sentence outputs the candidate the InsNet judge scores highest."""
    model, _, d, src, src_lengths = models_and_batch
    judge, _ = build_tiny_model(seed=9, vocab=30)
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25, candidates=3)
    sample = sample_of(src, src_lengths)
    plain = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample)
    out = [h[0] for h in InsertionGenerator(d, DecodingOptions(reranking=True, **kw)).generate([model, judge], sample)]
    for b, cands in enumerate(plain):
        keep = src[b].ne(d.pad())
        hyps = [c["tokens"] for c in cands]
        n = len(hyps)
        scores = insnet_scores(judge, src[b : b + 1, keep].expand(n, -1), src_lengths[b : b + 1].expand(n), hyps,
                               d.pad(), d.bos(), d.eos()).tolist()
        best = max(range(n), key=lambda j: scores[j])
        assert out[b]["tokens"].tolist() == hyps[best].tolist()
        assert out[b]["score"] == pytest.approx(scores[best], abs=1e-5)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_the_judges_best_candidate_wins(models_and_batch, mode):
    """With the judge, each sentence outputs the candidate of the highest judge score (scored alone here), that
    score is its score, and the candidates are those decoded without the judge; batched == one by one."""
    model, ar, d, src, src_lengths = models_and_batch
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=25, candidates=3)
    plain = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample_of(src, src_lengths))  # every sentence's K candidates
    assert all(len(c) == 3 for c in plain)
    out = [h[0] for h in InsertionGenerator(d, DecodingOptions(reranking=True, **kw)).generate([model, ar], sample_of(src, src_lengths))]
    assert len(plain) == len(out) == len(src)
    judge_differs = 0
    for b, cands in enumerate(plain):
        keep = src[b].ne(d.pad())
        scores = [float(judge_scores(ar, src[b : b + 1, keep], src_lengths[b : b + 1], [c["tokens"]], d.pad(),
                                     d.eos())[0]) for c in cands]
        best = max(range(len(cands)), key=lambda j: scores[j])
        assert out[b]["tokens"].tolist() == cands[best]["tokens"].tolist()
        assert out[b]["score"] == pytest.approx(scores[best], abs=1e-5)
        assert out[b]["steps"] == max(c["steps"] for c in cands)
        self_best = max(range(len(cands)), key=lambda j: cands[j]["score"])
        judge_differs += cands[best]["tokens"].tolist() != cands[self_best]["tokens"].tolist()
        alone = InsertionGenerator(d, DecodingOptions(reranking=True, **kw)).generate(
            [model, ar], sample_of(src[b : b + 1, keep], src_lengths[b : b + 1]))[0][0]
        assert alone["tokens"].tolist() == out[b]["tokens"].tolist()
    assert judge_differs > 0  # the judge overruled the model's own choice somewhere: the choice is exercised


def test_misuse_is_refused_with_the_flag_named(models_and_batch):
    model, ar, d, src, src_lengths = models_and_batch
    sample = sample_of(src, src_lengths)
    with pytest.raises(ValueError, match="chooses among candidates: add --insertion-candidates"):
        InsertionGenerator(d, DecodingOptions(reranking=True))
    gen = InsertionGenerator(d, DecodingOptions(reranking=True, candidates=2))
    with pytest.raises(ValueError, match="needs two checkpoints.*INSNET.pt:AR.pt"):
        gen.generate([model], sample)
    with pytest.raises(ValueError, match="must be an autoregressive encoder-decoder.*not InsNetLMModel"):
        gen.generate([model, build_tiny_lm_model(vocab=21)[0]], sample)
    with pytest.raises(ValueError, match="must be an autoregressive encoder-decoder \\(e.g. --arch transformer\\), "
                                         "not InsNetModel"):  # an InsNet judge, but never an InsNet channel
        InsertionGenerator(d, DecodingOptions(reranking=True, candidates=2, channel_weight=0.5)).generate([model, model, model], sample)
    with pytest.raises(ValueError, match="judge's target dictionary has 25 entries"):
        gen.generate([model, build_tiny_ar(make_dictionary(21))], sample)
    with pytest.raises(ValueError, match="three checkpoints.*INSNET.pt:AR.pt:REV.pt"):
        InsertionGenerator(d, DecodingOptions(reranking=True, candidates=2, channel_weight=0.5)).generate([model, ar], sample)
    with pytest.raises(ValueError, match="a third, the channel model, needs --channel-weight"):
        gen.generate([model, ar, ar], sample)
    for bad in (dict(channel_weight=0.5), dict(reranking=True, channel_weight=-1.0)):  # no judge; a negative weight
        with pytest.raises(ValueError, match="--channel-weight"):
            InsertionGenerator(d, DecodingOptions(candidates=2, **bad))
    with pytest.raises(ValueError, match="InsNet decoding does not ensemble"):  # without the flag: no judge
        InsertionGenerator(d, DecodingOptions(candidates=2)).generate([model, ar], sample)
