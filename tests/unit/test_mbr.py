"""Minimum-Bayes-risk candidates (decoding/mbr.py): BLEU+1 of every pair against its definition written as a loop,
the docstrings' examples, and the generator's --insertion-candidates-mbr order against expected utilities computed
one candidate at a time."""
import collections
import math
import random

import pytest
import torch

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.mbr import mbr_order, mbr_ranks, ngram_ids, pairwise_bleu

from conftest import build_tiny_model, make_dictionary, random_batch, sample_of


def bleu_plus_one(hyp, ref):
    """Lin and Och's BLEU+1 by its definition: clipped n-gram counts, add-one smoothing for n >= 2."""
    log_p = 0.0
    for n in range(1, 5):
        h = collections.Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
        r = collections.Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
        matches, total = sum(min(c, r[g]) for g, c in h.items()), max(len(hyp) - n + 1, 0)
        p = matches / max(total, 1) if n == 1 else (matches + 1) / (total + 1)
        log_p += math.log(max(p, 1e-9))
    return math.exp(log_p / 4 + min(0.0, 1 - len(ref) / max(len(hyp), 1)))


def test_ngram_ids_docstring_example():
    orders = list(ngram_ids(torch.tensor([[5, 6, 5, 6]]), torch.tensor([4])))
    assert orders[0].tolist() == [[5, 6, 5, 6]]
    i, j, k, end = orders[1][0].tolist()
    assert i == k != j and end == -1
    assert orders[3][0].tolist()[1:] == [-1, -1, -1]  # one 4-gram


def test_pairwise_bleu_equals_its_definition():
    rng = random.Random(0)
    G, K, T = 4, 5, 11
    tokens = torch.full((G, K, T), 1)
    lengths = torch.zeros(G, K, dtype=torch.long)
    seqs = {}
    for g in range(G):
        for k in range(K):
            n = rng.randint(1, T)
            seqs[g, k] = [rng.randint(3, 7) for _ in range(n)]  # a small vocabulary: many shared n-grams
            tokens[g, k, :n] = torch.tensor(seqs[g, k])
            lengths[g, k] = n
    u = pairwise_bleu(tokens, lengths)
    for g in range(G):
        for a in range(K):
            for b in range(K):
                assert u[g, a, b].item() == pytest.approx(bleu_plus_one(seqs[g, a], seqs[g, b]), abs=1e-6)
    # the docstring's example, and a large vocabulary (ids renumbered per order: no overflow)
    ex = pairwise_bleu(torch.tensor([[[3, 4, 5, 6], [3, 4, 5, 7]]]), torch.tensor([[4, 4]]))
    assert ex[0, 0, 0].item() == pytest.approx(1.0) and ex[0, 0, 1].item() == pytest.approx(0.658, abs=1e-3)
    short = pairwise_bleu(torch.tensor([[[3, 4], [3, 1]]]), torch.tensor([[2, 1]]))  # shorter than the 4-grams
    assert short[0, 0, 1].item() == pytest.approx(bleu_plus_one([3, 4], [3]), abs=1e-6)
    assert short[0, 1, 0].item() == pytest.approx(bleu_plus_one([3], [3, 4]), abs=1e-6)
    big = pairwise_bleu(torch.tensor([[[10**6, 3, 10**6 - 1, 4], [10**6, 3, 10**6 - 1, 5]]]), torch.tensor([[4, 4]]))
    assert big[0, 0, 1].item() == pytest.approx(0.658, abs=1e-3)


def test_mbr_order_prefers_the_consensus_and_follows_the_weights():
    tokens = torch.tensor([[[3, 4, 5, 6], [3, 4, 5, 7], [8, 9, 10, 11], [1, 1, 1, 1]]])  # the docstring's example
    lengths = torch.tensor([[4, 4, 4, 0]])
    valid = torch.tensor([[True, True, True, False]])  # the fourth: no candidate (never first, weight 0)
    even = mbr_order(tokens, lengths, torch.zeros(1, 4), valid, float("inf"))[0].tolist()
    assert even[0] in (0, 1) and even[2:] == [2, 3]
    sharp = mbr_order(tokens, lengths, torch.tensor([[-3.0, -3.0, -0.1, 0.0]]), valid, 0.01)[0].tolist()
    assert sharp[0] == 2 and sharp[-1] == 3  # all weight on the third: it is its own best match


def test_generator_ranks_candidates_by_expected_bleu():
    """--insertion-candidates-mbr T: the same candidates as without it, ordered by sum_b softmax(score/T)_b
    BLEU+1(a | b), computed here one candidate at a time; refused without candidates."""
    model, d = build_tiny_model(seed=7, vocab=30)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 4, src_len=9, seed=3)
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25, candidates=4)
    plain = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample_of(src, src_lengths))
    changed = 0
    for t in (float("inf"), 0.5):
        out = InsertionGenerator(d, DecodingOptions(candidates_mbr=t, **kw)).generate([model], sample_of(src, src_lengths))
        for hyps, base in zip(out, plain):
            key = sorted(h["tokens"].tolist() for h in hyps)
            assert key == sorted(h["tokens"].tolist() for h in base)  # the same candidates
            words = [h["tokens"][:-1].tolist() for h in hyps]
            scores = torch.tensor([h["score"] for h in hyps])
            w = torch.ones(len(hyps)) / len(hyps) if math.isinf(t) else torch.softmax(scores / t, 0)
            gain = [sum(float(w[b]) * bleu_plus_one(words[a], words[b]) for b in range(len(hyps)))
                    for a in range(len(hyps))]
            assert all(gain[i] >= gain[i + 1] - 1e-6 for i in range(len(gain) - 1))  # best expected BLEU first
            changed += hyps[0]["tokens"].tolist() != base[0]["tokens"].tolist()
    assert changed > 0  # MBR picked another candidate than the best score somewhere: the choice is exercised
    with pytest.raises(ValueError, match="--insertion-candidates-mbr"):
        InsertionGenerator(d, DecodingOptions(candidates_mbr=1.0))


def test_generator_mbr_with_empty_and_missing_candidates():
    """Candidates with no words (a model that stops at once) and candidates dropped unfinished (None) are ranked
    without error: the empty ones by their (zero) utility, the missing ones never."""
    gen = InsertionGenerator(make_dictionary(20), DecodingOptions(candidates=3, candidates_mbr=float("inf")))
    eos = gen.eos
    hyps = [dict(tokens=torch.tensor([eos]), score=-1.0), None, dict(tokens=torch.tensor([5, 6, eos]), score=-2.0),
            dict(tokens=torch.tensor([eos]), score=-1.0), dict(tokens=torch.tensor([eos]), score=-0.5), None]
    ranks = mbr_ranks(hyps, 2, 3, gen.options.candidates_mbr, gen.pad, eos)
    assert sorted(ranks[0]) == [0, 1] and sorted(ranks[1]) == [0, 1]  # places among each sentence's finished ones
