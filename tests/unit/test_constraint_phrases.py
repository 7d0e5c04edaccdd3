"""Constraint phrases stay whole in every decoding mode: no word is inserted inside a phrase, and no word that joins
the next one (BPE ``x@@``) lands right before a phrase. Checked on 200 random constraint sets of BPE words, for
sequential and parallel decoding, with and without ``--skip-repeats``: after BPE removal every phrase appears as
whole words, in order."""
import random

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.token_generation_constraints import pack_constraints

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.state import Phrases
from insnet_fairseq.decoding.templates import phrase_template
from insnet_fairseq.models.insnet import InsNetModel

from conftest import FakeTask, random_batch, sample_of, tiny_args

SETS = 200
BATCH = 20


def bpe_dictionary(n_words: int = 30) -> Dictionary:
    """Half the words are BPE pieces that join the next word (``wI@@``)."""
    d = Dictionary()
    for i in range(n_words):
        d.add_symbol(f"w{i}@@" if i % 2 else f"w{i}")
    d.finalize(padding_factor=1)
    return d


@pytest.fixture(scope="module")
def bpe_model():
    torch.manual_seed(5)
    d = bpe_dictionary()
    model = InsNetModel.build_model(tiny_args(), FakeTask(d, d))
    model.eval()
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)  # random weights stop after a while
    return model, d


def random_word(d: Dictionary, rng: random.Random) -> list:
    """One BPE word: 0-2 joining pieces, then a piece that ends the word."""
    joins = [i for i in range(d.nspecial, len(d)) if d[i].endswith("@@")]
    ends = [i for i in range(d.nspecial, len(d)) if not d[i].endswith("@@")]
    return [rng.choice(joins) for _ in range(rng.randint(0, 2))] + [rng.choice(ends)]


def random_constraints(d: Dictionary, rng: random.Random) -> list:
    """1-3 phrases of 1-3 BPE words each, as lists of ids."""
    return [[t for _ in range(rng.randint(1, 3)) for t in random_word(d, rng)] for _ in range(rng.randint(1, 3))]


def words(d: Dictionary, ids) -> list:
    """Ids -> the words they spell once BPE is removed."""
    return " ".join(d[int(i)] for i in ids).replace("@@ ", "").split()


def phrases_whole(d: Dictionary, out_ids, phrases) -> bool:
    """Every phrase appears in ``out_ids`` as a run of whole words, in order (after BPE removal).
    Example (w1@@ joins): out "w0 w1@@ w2 w4", phrases [[w1@@, w2]] -> True; [[w2]] -> False ("w1w2" holds it)."""
    out, start = words(d, out_ids), 0
    for phrase in phrases:
        want = words(d, phrase)
        found = next((i for i in range(start, len(out) - len(want) + 1) if out[i:i + len(want)] == want), None)
        if found is None:
            return False
        start = found + len(want)
    return True


def decode_sets(model, d, sets, use_constraints=True, **options):
    """Decode every constraint set (each with a random source); outputs' ids without </s>."""
    gen = InsertionGenerator(d, DecodingOptions(**options))
    outs = []
    for i in range(0, len(sets), BATCH):
        chunk = sets[i:i + BATCH]
        src, src_lengths, _ = random_batch(d, [5] * len(chunk), src_len=8, seed=i)
        sample = sample_of(src, src_lengths)
        if use_constraints:
            packed = pack_constraints([[torch.tensor(p) for p in s] for s in chunk])
            hyps = gen.generate([model], sample, constraints=packed)
        else:  # the same tokens as a plain constrained start: words may go anywhere between them
            hyps = gen.generate([model], sample, initial_tokens=[[t for p in s for t in p] for s in chunk])
        outs += [h[0]["tokens"][:-1].tolist() for h in hyps]
    return outs


@pytest.fixture(scope="module")
def constraint_sets(bpe_model):
    _, d = bpe_model
    rng = random.Random(0)
    return [random_constraints(d, rng) for _ in range(SETS)]


def test_phrase_template_and_whole_word_check():
    assert phrase_template([[4, 5], [6]]) == ([4, 5, 6], [0, 2, 3])
    assert phrase_template([]) == ([], [0])
    assert phrase_template([[4], [], [5]]) == ([4, 5], [0, 1, 2])  # an empty phrase adds no blank
    d = bpe_dictionary(6)
    w = {d[i]: i for i in range(len(d))}
    out = [w["w0"], w["w1@@"], w["w2"], w["w4"]]
    assert phrases_whole(d, out, [[w["w1@@"], w["w2"]], [w["w4"]]])
    assert not phrases_whole(d, out, [[w["w2"]]])  # glued into "w1w2"
    assert not phrases_whole(d, out, [[w["w4"]], [w["w0"]]])  # out of order
    # the logits mask: the slot left of column 2 (a phrase's first token) loses the joining words
    phrases = Phrases(4, torch.tensor([False, True, False]))
    masked = phrases.mask_logits(torch.zeros(2, 3), torch.tensor([1, 2]))
    assert torch.isfinite(masked[0]).all() and masked[1].isinf().tolist() == [False, True, False]


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
@pytest.mark.parametrize("skip_repeats", [False, True])
def test_every_phrase_stays_whole_in_order(bpe_model, constraint_sets, mode, skip_repeats):
    model, d = bpe_model
    outs = decode_sets(model, d, constraint_sets, mode=mode, skip_repeats=skip_repeats, max_steps=16)
    broken = [i for i, (out, s) in enumerate(zip(outs, constraint_sets)) if not phrases_whole(d, out, s)]
    assert broken == [], f"{len(broken)} of {SETS} constraint sets split or glued, e.g. set {broken[:3]}"
    given = sum(len(p) for s in constraint_sets for p in s)
    assert sum(len(o) for o in outs) > given + SETS  # words were inserted, more than one a sentence on average


def test_the_check_catches_split_phrases(bpe_model, constraint_sets):
    """The same sets as plain constrained starts (words may go anywhere) break phrases: the check has teeth."""
    model, d = bpe_model
    outs = decode_sets(model, d, constraint_sets, use_constraints=False, mode="parallel", max_steps=16)
    assert sum(not phrases_whole(d, out, s) for out, s in zip(outs, constraint_sets)) > SETS // 10


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_constrained_cached_equals_uncached_and_batched_equals_one_by_one(bpe_model, constraint_sets, mode):
    model, d = bpe_model
    sets = constraint_sets[:BATCH]
    cached = decode_sets(model, d, sets, mode=mode, max_steps=16)
    assert cached == decode_sets(model, d, sets, mode=mode, max_steps=16, use_cache=False)
    src, src_lengths, _ = random_batch(d, [5] * len(sets), src_len=8, seed=0)  # decode_sets' first batch
    gen = InsertionGenerator(d, DecodingOptions(mode=mode, max_steps=16))
    for b, s in enumerate(sets):
        (h,), = gen.generate([model], sample_of(src[b:b + 1], src_lengths[b:b + 1]),
                             constraints=pack_constraints([[torch.tensor(p) for p in s]]))
        assert h["tokens"][:-1].tolist() == cached[b]
