"""Text infilling (the text-infilling paper): InsNet fills only the blanks of a template and
never changes or reorders its words, in every decoding mode; the template recipe masks as the paper
does; the scorer's template check. (fairseq-generate / -interactive --infill: tests/cli/test_lm_task_cli.py.)"""
import random

import pytest
import torch

from conftest import build_tiny_lm_model
from insnet_fairseq.decoding.templates import check_blanks, split_template
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions

from recipes.evaluate_infill import fill_back, template_kept
from recipes.prepare_infill import BLANK, anchor_template, random_template


def test_split_template_and_bad_blanks():
    assert split_template([5, 3, 6, 7, 3], 3) == ([5, 6, 7], [1, 3])
    assert split_template([3, 3, 5, 3], 3) == ([5], [0, 1])  # touching blanks are one
    assert check_blanks([[0, 2]], [2]) == [[0, 2]]
    for bad in ([[2, 1]], [[1, 1]], [[3]], [[-1]]):
        with pytest.raises(ValueError, match="blanks"):
            check_blanks(bad, [2])


def empty_batch(B):
    """insertion_lm's source side without keywords: </s> alone."""
    return {"id": torch.arange(B), "net_input": {"src_tokens": torch.full((B, 1), 2, dtype=torch.long),
                                                 "src_lengths": torch.ones(B, dtype=torch.long)}}


def random_templates(n_sets, vocab, seed):
    rng = random.Random(seed)
    tokens, blanks = [], []
    for _ in range(n_sets):
        n = rng.randint(0, 7)
        tokens.append([rng.randrange(4, vocab) for _ in range(n)])
        blanks.append(sorted(rng.sample(range(n + 1), rng.randint(1, min(3, n + 1)))))
    return tokens, blanks


@pytest.mark.parametrize("mode,sampling,cache", [("sequential", False, True), ("parallel", False, True),
                                                 ("parallel", True, True), ("sequential", True, False)])
def test_only_blanks_are_filled_on_100_templates(mode, sampling, cache):
    model, d = build_tiny_lm_model(seed=4, vocab=30, slot_query_stream=mode == "parallel")
    tokens, blanks = random_templates(100, len(d), seed=1)
    # q(stop) > 0.99 hardly happens with random weights: sentences run to the step cap and insert
    gen = InsertionGenerator(d, DecodingOptions(mode=mode, max_steps=5, sampling=sampling, sampling_topk=3, stop_threshold=0.99,
                             conditional=False, use_cache=cache))
    torch.manual_seed(0)
    hypos = gen.generate([model], empty_batch(100), initial_tokens=tokens, blanks=blanks)
    written = 0
    for b, (h,) in enumerate(hypos):
        out, scores = h["tokens"][:-1].tolist(), h["positional_scores"][:-1]
        given = scores.eq(0).tolist()  # template tokens are given (score 0); insertions have log-prob < 0
        assert [t for t, g in zip(out, given) if g] == tokens[b]  # every template token, in order
        for i, g in enumerate(given):
            if not g:  # an inserted word sits in a blank: the number of template words before it is a blank
                assert sum(given[:i]) in blanks[b], (tokens[b], blanks[b], out)
        written += len(out) - len(tokens[b])
    assert written > 100  # the blanks were filled, not left alone


def test_cached_and_uncached_infilling_agree():
    model, d = build_tiny_lm_model(seed=6, vocab=30, slot_query_stream=True)
    tokens, blanks = random_templates(20, len(d), seed=2)
    outs = []
    for cache in (True, False):
        gen = InsertionGenerator(d, DecodingOptions(mode="parallel", max_steps=4, stop_threshold=0.99, conditional=False,
                                 use_cache=cache))
        outs.append([h[0]["tokens"].tolist() for h in gen.generate([model], empty_batch(20), initial_tokens=tokens,
                                                                    blanks=blanks)])
    assert outs[0] == outs[1]


def test_a_template_without_blanks_is_its_own_output(caplog):
    model, d = build_tiny_lm_model(seed=4, vocab=30)
    gen = InsertionGenerator(d, DecodingOptions(max_steps=5, stop_threshold=0.99, conditional=False))
    hypos = gen.generate([model], empty_batch(2), initial_tokens=[[5, 6], [7]], blanks=[[], [1]])
    assert hypos[0][0]["tokens"].tolist() == [5, 6, d.eos()] and hypos[0][0]["steps"] == 0
    assert hypos[1][0]["tokens"].tolist()[0] == 7 and len(hypos[1][0]["tokens"]) > 2
    assert "sample id 0: its template has no blank" in caplog.text


def test_random_templates_mask_as_asked():
    words = "a man in an orange hat starring at something .".split()
    for rate in (0.3, 0.4, 0.5):
        for k in (1, 2):
            for seed in range(20):
                t = random_template(words, rate, k, random.Random(seed))
                assert t.count(BLANK) == k
                assert len(words) - (len(t) - k) == round(rate * len(words))  # masked words
                assert all(not (x == y == BLANK) for x, y in zip(t, t[1:]))  # blanks never touch
                assert template_kept(words, t)  # the sentence is one filling of its template
    assert anchor_template(words, ["man", "orange", "hat"]) == [BLANK, "man", BLANK, "orange", "hat", BLANK]
    assert random_template(["x"], 0.5, 2, random.Random(0)) == ["x", BLANK]


def test_template_check():
    t = ["a", BLANK, "c"]
    assert template_kept(["a", "b", "b", "c"], t) and template_kept(["a", "c"], t)
    assert not template_kept(["a", "c", "d"], t) and not template_kept(["c", "a"], t)
    assert not template_kept(["a", "x", "c"], ["a", "c", BLANK])  # a word between template words
    # an out-of-vocabulary template word comes out as <unk> and is restored
    assert fill_back(["a", "b", "<unk>", "d"], ["a", BLANK, "zz", BLANK], vocab={"a", "b", "d"}) == ["a", "b", "zz", "d"]
    assert fill_back(["<unk>", "<unk>"], [BLANK, "zz"], vocab=set()) == ["<unk>", "zz"]
    assert fill_back(["a", "c"], ["a", "zz", BLANK], vocab={"a"}) is None
