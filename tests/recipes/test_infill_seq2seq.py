"""The text-infilling paper's self-attention baseline: segment-aware positions
(insnet_fairseq/models/infill_transformer.py), its bitext (recipes/prepare_infill_seq2seq.py) and
blank-by-blank filling (recipes/infill_seq2seq.py)."""
import argparse
import random
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F


from recipes import infill_seq2seq as fill_recipe
from recipes import prepare_infill_seq2seq as prep
from recipes.evaluate_infill import fill_back
from fairseq.data import Dictionary  # noqa: E402

from insnet_fairseq.models.infill_transformer import (  # noqa: E402
    BLANK, BOUNDARY, InfillTransformerModel, blank_positions, blank_segment, infill_transformer_small,
    segment_positions)

P, E, S, M, A, B, C, X, Y, Z = 1, 2, 5, 6, 10, 11, 12, 20, 21, 22  # pad, </s>, <seg>, __m__, words


# ---------------------------------------------------------------- (a) positions
def test_positions_worked_example():
    src = torch.tensor([[P, A, B, S, M, S, C, E]])
    assert segment_positions(src, S, P, 10).tolist() == [[-1, 1, 2, 10, 11, 20, 21, 22]]
    filled = torch.tensor([[A, B, S, X, Y, Z, S, C, E]])
    assert segment_positions(filled, [S], P, 10).tolist() == [[1, 2, 10, 11, 12, 13, 20, 21, 22]]
    assert blank_segment(torch.tensor([[A, S, M, S, C, S, M, E], [A, B, C, E, P, P, P, P]]), M, S, P).tolist() == [1, 0]
    assert blank_positions(torch.tensor([[E, X, Y], [E, P, P]]), torch.tensor([1, 3]), P, 10).tolist() == \
        [[10, 11, 12], [30, -1, -1]]


def test_template_positions_do_not_depend_on_earlier_fills():
    """Whatever (and however many words) the first blank holds, the words after it keep their positions;
    the decoder's bob and words sit where the next round's <seg> and words of that blank sit."""
    g = torch.Generator().manual_seed(0)
    tail = [C, S, M, S, A, B, E]  # the text after the first blank
    ref = None
    for n in range(0, 6):
        fill_words = torch.randint(30, 40, (n,), generator=g).tolist()
        src = torch.tensor([[A, B, S] + fill_words + [S] + tail])
        pos = segment_positions(src, S, P, 64)[0]
        assert ref is None or pos[-len(tail):].tolist() == ref
        ref = pos[-len(tail):].tolist()
        dec = blank_positions(torch.tensor([[E] + fill_words]), torch.tensor([1]), P, 64)[0]
        assert dec.tolist() == pos[2 : 3 + n].tolist()  # bob at <seg>, the words at the words
    # left padding changes nothing
    src = torch.tensor([[A, S, M, S, C, E]])
    padded = torch.cat([torch.full((1, 3), P), src], 1)
    assert segment_positions(padded, S, P, 64)[0, 3:].tolist() == segment_positions(src, S, P, 64)[0].tolist()


# ---------------------------------------------------------------- (b) the bitext
def test_examples_of_a_two_blank_template():
    template = "a __m__ in an orange hat __m__ something .".split()
    blanks = [["man"], ["staring", "at"]]
    ex = prep.examples(template, blanks)
    assert [" ".join(s) for s, _ in ex] == [
        "a <seg> __m__ <seg> in an orange hat <seg> __m__ <seg> something .",
        "a <seg> man <seg> in an orange hat <seg> __m__ <seg> something .",
    ]
    assert [t for _, t in ex] == blanks
    assert " ".join(prep.source("__m__ b __m__".split(), [["a"], ["c", "d"]])) == "a <seg> b <seg> c d"


@pytest.mark.parametrize("setting", prep.RANDOM_SETTINGS + ["anchors"])
def test_template_blanks_rebuild_the_sentence(setting):
    """The blanks' words are the sentence's masked words: filling them back gives the sentence; the
    template is the one recipes/prepare_infill.py draws with the same generator."""
    from recipes.prepare_infill import random_template

    sentence = "a man in an orange hat staring at something in the street .".split()
    for seed in range(5):
        keywords = ["man", "orange", "street"]
        template, blanks = prep.template_with_blanks(sentence, setting, random.Random(seed), keywords)
        assert len(blanks) == template.count(BLANK) and all(blanks)
        it = iter(blanks)
        assert [w for t in template for w in (next(it) if t == BLANK else [t])] == sentence
        if setting != "anchors":
            assert template == random_template(sentence, int(setting[1:3]) / 100, int(setting[4:]), random.Random(seed))
    ex = prep.examples(*prep.template_with_blanks(sentence, "r30b2", random.Random(1)))
    assert len(ex) == 2 and ex[0][0].count(BLANK) == 2 and ex[1][0].count(BLANK) == 1


def test_missing_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        prep.main(["--data", str(tmp_path / "nowhere")])
    assert str(tmp_path / "nowhere" / "dict.txt") in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------- (c) a tiny model fills templates
def tiny_model(seed=0):
    torch.manual_seed(seed)
    d = Dictionary()
    for i in range(24):
        d.add_symbol(f"w{i}")
    d.add_symbol(BLANK)
    d.add_symbol(BOUNDARY)
    d.finalize(padding_factor=1)
    args = argparse.Namespace(encoder_layers=2, decoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
                              encoder_attention_heads=4, decoder_attention_heads=4, dropout=0.0,
                              share_all_embeddings=False)
    infill_transformer_small(args)
    model = InfillTransformerModel.build_model(args, SimpleNamespace(source_dictionary=d, target_dictionary=d))
    with torch.no_grad():  # untied, large output weights: varied words and lengths (tied, it repeats one word)
        model.decoder.output_projection.weight.normal_(0, 1)
    return model.eval(), d


def random_templates(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [f"w{rng.randrange(24)}" for _ in range(rng.randint(2, 9))]
        out.append(prep.template_with_blanks(words, rng.choice(prep.RANDOM_SETTINGS), rng)[0])
    out.append(["w1", "zzz", BLANK, "w3"])  # a template word outside the dictionary is copied as it is
    return out


@pytest.mark.parametrize("beam", [1, 3])
def test_fill_writes_only_inside_blanks(beam):
    model, d = tiny_model()
    templates = random_templates(12)
    gen = fill_recipe.make_generator([model], d, beam=beam, max_len=4)
    filled, steps = fill_recipe.fill(templates, gen, [model], d, batch_size=5)
    for t, f, n in zip(templates, filled, steps):
        assert fill_back(f, t) == f
        written = len(f) - (len(t) - t.count(BLANK))
        assert t.count(BLANK) <= written <= 4 * t.count(BLANK)  # 1 to max_len words a blank
        assert n == written + t.count(BLANK)  # words + one </s> a blank
        assert BLANK not in f and BOUNDARY not in f


def greedy_full(model, d, src, max_len):
    """Naive greedy decoding of one blank: the whole prefix through the model at every step, with the
    generator's rules (no pad, no __m__/<seg>/<s>, no </s> first, </s> at max_len)."""
    banned = [d.pad(), d.index(BLANK), d.index(BOUNDARY), d.bos()]
    prefix, lps = [d.eos()], []
    for step in range(max_len + 1):
        logits, _ = model(src, torch.tensor([src.size(1)]), torch.tensor([prefix]))
        lp = F.log_softmax(logits[0, -1].float(), -1)
        lp[banned] = float("-inf")
        if step == 0:
            lp[d.eos()] = float("-inf")
        if step == max_len:
            lp[torch.arange(len(d)) != d.eos()] = float("-inf")
        prefix.append(int(lp.argmax()))
        lps.append(float(lp.max()))
        if prefix[-1] == d.eos():
            break
    return prefix[1:], lps


def test_incremental_decoding_equals_full_redecoding():
    model, d = tiny_model(seed=1)
    templates = random_templates(4, seed=3)
    sources = [prep.source(t, []) for t in templates[:3]] + [prep.source(templates[3], [["w5", "w6"]])]
    src_tokens, src_lengths = fill_recipe.encode(sources, d)  # left-padded batch
    gen = fill_recipe.make_generator([model], d, beam=1, max_len=6)
    with torch.no_grad():
        hypos = gen.generate([model], {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}})
        for s, h in zip(sources, hypos):
            src = d.encode_line(" ".join(s), add_if_not_exist=False).long().unsqueeze(0)
            tokens, lps = greedy_full(model, d, src, 6)
            assert h[0]["tokens"].tolist() == tokens
            assert torch.allclose(h[0]["positional_scores"], torch.tensor(lps), atol=1e-4)


def test_reference_blanks():
    from recipes.evaluate_infill import reference_blanks
    assert reference_blanks("a b c d e".split(), f"a {BLANK} d {BLANK}".split()) == [["b", "c"], ["e"]]
    assert reference_blanks("a b c".split(), f"a {BLANK} b c".split()) == [[]]  # a blank may hold nothing
    assert reference_blanks("a x c".split(), f"a {BLANK} b c".split()) is None  # the template does not fit


def test_reference_nll_batched_equals_one_token_at_a_time():
    """--ppl: the batched, padded teacher-forced NLL equals the sum of each target token's log-probability
    computed alone from its prefix (blank by blank, earlier blanks holding the reference words)."""
    from recipes.evaluate_infill import reference_blanks
    model, d = tiny_model(seed=2)
    rng = random.Random(5)
    refs = [[f"w{rng.randrange(24)}" for _ in range(rng.randint(3, 9))] for _ in range(6)]
    templates = [prep.template_with_blanks(r, rng.choice(prep.RANDOM_SETTINGS), rng)[0] for r in refs]
    pairs = fill_recipe.reference_pairs(templates, refs, "templates")
    assert len(pairs) == sum(t.count(BLANK) for t in templates)
    nll, tokens = fill_recipe.reference_nll(model, d, pairs, batch_size=4)
    naive, count = 0.0, 0
    with torch.no_grad():
        for src_words, tgt_words in pairs:
            src = d.encode_line(" ".join(src_words), add_if_not_exist=False).long().unsqueeze(0)
            tgt = [d.index(w) for w in tgt_words] + [d.eos()]
            prefix = [d.eos()]
            for tok in tgt:
                logits, _ = model(src, torch.tensor([src.size(1)]), torch.tensor([prefix]))
                naive -= float(F.log_softmax(logits[0, -1].float(), -1)[tok])
                prefix.append(tok)
                count += 1
    assert tokens == count and abs(nll - naive) < 1e-3 * count
    for t, r in zip(templates, refs):  # the examples rebuild each reference
        assert fill_back(r, t) == r and reference_blanks(r, t) is not None


def test_segment_positions_embed_as_fairseq_sinusoids():
    """The cached table gives fairseq's SinusoidalPositionalEmbedding rows (zeros at padding), also after it grows."""
    from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding

    from insnet_fairseq.models.infill_transformer import SegmentPositions, sinusoids
    emb = SegmentPositions(dim=16, boundary=S, pad=P, base=8, max_positions=512)
    ref = SinusoidalPositionalEmbedding.get_embedding(300, 16)
    for pos in (torch.tensor([[-1, 0, 3, 7]]), torch.tensor([[5, 250, -1, 17]])):  # the second outgrows the table
        out = sinusoids(pos, 16, emb.table(pos))
        assert torch.equal(out[pos < 0], torch.zeros(int((pos < 0).sum()), 16))
        assert torch.allclose(out[pos >= 0], ref[pos[pos >= 0]], atol=1e-6)
        assert torch.allclose(out, sinusoids(pos, 16), atol=1e-6)  # the same without a cached table
    assert emb.table(torch.tensor([[2]])).size(0) > 250  # grown, kept
