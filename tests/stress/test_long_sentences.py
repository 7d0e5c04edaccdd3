"""Long sentences: a 1,000-token target trains (one pass) and decodes sequentially and in parallel
with the default --max-target-positions (1024); an output cut by that limit is reported, never
silently truncated. Peak memory against length: benchmarks/memory_scaling.py."""
import logging

import torch

from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.tasks.criterion import term_losses

from conftest import build_tiny_model, random_batch

WORDS = 1000


def long_model():
    model, d = build_tiny_model(seed=1, vocab=40, max_source_positions=1024, max_target_positions=1024,
                                decoder_layers=1, encoder_layers=1)
    return model, d


def test_a_1000_word_target_trains_in_one_pass():
    model, d = long_model()
    src, src_lengths, target = random_batch(d, [WORDS + 2], src_len=8, seed=0)
    order = make_order("random", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0))
    model.train()
    terms = term_losses(model(src, src_lengths, target, order))
    loss = sum(v[0] for v in terms.values())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.decoder.heads.token_proj.weight.grad.abs().sum() > 0


def test_1000_words_decode_sequentially_and_in_parallel(caplog):
    model, d = long_model()
    model.decoder.heads.termination_proj.bias.data.fill_(-1e4)  # never stops before its caps
    src, src_lengths, _ = random_batch(d, [4], src_len=8, seed=0)
    sample = {"id": torch.arange(1), "net_input": {"src_tokens": src, "src_lengths": src_lengths}}
    for mode in ("sequential", "parallel"):
        gen = InsertionGenerator(d, DecodingOptions(mode=mode, slot_top_p=0.9, max_steps=WORDS, length_cap=(0, WORDS)))
        hyp = gen.generate([model], sample)[0][0]
        assert len(hyp["tokens"]) == WORDS + 1  # 1000 words and </s>: the output cap
        assert hyp["steps"] == WORDS if mode == "sequential" else hyp["steps"] < WORDS / 4
    # past the model's limit (1022 words with <s> and </s>) the output is cut, with a warning
    caplog.clear()
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel", slot_top_p=0.9, max_steps=5000, length_cap=(0, 5000)))
    with caplog.at_level(logging.WARNING):
        hyp = gen.generate([model], sample)[0][0]
    assert len(hyp["tokens"]) == 1022 + 1
    assert "reached the model's limit of 1022 words" in caplog.text and "--max-target-positions" in caplog.text
