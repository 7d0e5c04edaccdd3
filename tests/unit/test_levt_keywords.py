"""The Levenshtein Transformer baseline of lexically constrained generation
(insnet_fairseq/models/levt_keywords.py): it starts from the keywords, keeps them, and trains as fairseq's LevT."""
import argparse
import random
from types import SimpleNamespace

import torch
from fairseq.data import Dictionary
from fairseq.iterative_refinement_generator import IterativeRefinementGenerator
from fairseq.models.nat.levenshtein_transformer import LevenshteinTransformerModel

from insnet_fairseq.models.levt_keywords import (
    KeywordsLevenshteinTransformer, forbid_deleting, levenshtein_keywords_architecture, source_as_start)
from insnet_fairseq.modules.packed_linear import pack_linears


def test_source_as_start_example():
    src = torch.tensor([[1, 7, 8, 2], [5, 6, 9, 2]])
    assert source_as_start(src, pad=1, bos=0, eos=2).tolist() == [[0, 7, 8, 2, 1], [0, 5, 6, 9, 2]]


def test_forbid_deleting_example():
    scores = torch.log_softmax(torch.randn(1, 4, 2), -1)
    out = forbid_deleting(scores, torch.tensor([[0, 5, 9, 2]]), torch.tensor([[5, 2]]), torch.tensor([0, 1, 2]))
    assert out[0, 1, 1] == float("-inf") and out[0, 1, 0] == scores[0, 1, 0]
    keep = torch.tensor([0, 2, 3])
    assert torch.equal(out[0, keep], scores[0, keep])  # <s>, a non-keyword and </s> untouched
    assert torch.isfinite(scores).all()  # the input is not modified in place


def tiny(delete_source_words=False, seed=0, cls=KeywordsLevenshteinTransformer):
    d = Dictionary()
    for i in range(30):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=1)
    args = argparse.Namespace(encoder_layers=2, decoder_layers=2, encoder_embed_dim=32, decoder_embed_dim=32,
                              encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64, encoder_attention_heads=4,
                              decoder_attention_heads=4, dropout=0.0, early_exit="2,2,2", share_all_embeddings=True,
                              max_source_positions=64, max_target_positions=64, label_smoothing=0.1,
                              delete_source_words=delete_source_words)
    levenshtein_keywords_architecture(args)
    torch.manual_seed(seed)
    model = cls.build_model(args, SimpleNamespace(source_dictionary=d, target_dictionary=d))
    with torch.no_grad():  # fairseq starts these heads at zero; delete whenever "keep" scores below 0: about half
        model.decoder.embed_mask_ins.weight.normal_(0, 1)
        model.decoder.embed_word_del.weight[0].normal_(0, 1)
        model.decoder.embed_word_del.weight[1] = -model.decoder.embed_word_del.weight[0]
    return model.eval(), d


def keyword_batch(d, n=40, seed=0):
    """n random keyword sets of 1-4 distinct words, left-padded ``words </s>`` as fairseq's translation task."""
    rng = random.Random(seed)
    words = list(range(d.nspecial, len(d)))
    sets = [rng.sample(words, rng.randint(1, 4)) for _ in range(n)]
    width = max(len(s) for s in sets) + 1
    src = torch.full((n, width), d.pad())
    for i, s in enumerate(sets):
        src[i, width - len(s) - 1:] = torch.tensor(s + [d.eos()])
    lengths = src.ne(d.pad()).sum(1)
    return sets, {"net_input": {"src_tokens": src, "src_lengths": lengths}}


def in_order(keywords, tokens):
    it = iter(tokens)
    return all(k in it for k in keywords)


def decode(model, d, sample):
    gen = IterativeRefinementGenerator(d, models=[model], max_iter=4, retain_history=True)
    with torch.no_grad():
        return [h[0] for h in gen.generate([model], sample)]


def test_decoding_starts_from_the_keywords_and_keeps_them_in_order():
    model, d = tiny()
    sets, sample = keyword_batch(d)
    hypos = decode(model, d, sample)
    for kw, h in zip(sets, hypos):
        assert h["history"][0]["tokens"].tolist() == [d.bos()] + kw + [d.eos()]  # the start: <s> keywords </s>
        assert in_order(kw, h["tokens"].tolist()), (kw, h["tokens"].tolist())
    assert sum(len(h["tokens"]) - len(kw) - 2 for kw, h in zip(sets, hypos)) > 0  # it did insert words


def test_deletable_keywords_do_get_deleted():
    """The control: the same weights with --delete-source-words lose keywords, so the test above can fail."""
    model, d = tiny(delete_source_words=True)
    sets, sample = keyword_batch(d)
    hypos = decode(model, d, sample)
    assert all(h["history"][0]["tokens"].tolist() == [d.bos()] + kw + [d.eos()] for kw, h in zip(sets, hypos))
    assert sum(not in_order(kw, h["tokens"].tolist()) for kw, h in zip(sets, hypos)) > 5


def test_training_is_fairseq_levt():
    """Same weights, same batch: the training losses equal fairseq's levenshtein_transformer's (given the package's
    linear layers, which the keywords model is built on)."""
    ours, d = tiny()
    theirs = pack_linears(tiny(cls=LevenshteinTransformerModel)[0])
    theirs.load_state_dict(ours.state_dict())
    sets, sample = keyword_batch(d, n=8, seed=1)
    tgt = torch.randint(d.nspecial, len(d), (8, 9))
    tgt[:, 0], tgt[:, -1] = d.bos(), d.eos()
    prev = tgt[:, [0, 2, 5, 8]]  # a subsequence, as random_delete gives
    args = (sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"], prev, tgt)
    a, b = ours(*args), theirs(*args)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k]["out"], b[k]["out"]) and torch.equal(a[k]["tgt"], b[k]["tgt"]), k
