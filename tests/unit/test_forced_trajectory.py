"""The generator, driven along a gold trajectory, scores every step as ``model.forward`` does.

Decoding and training share the slot heads but compute states differently: the generator encodes
each step's new tokens against its cache, training encodes the whole trajectory in one pass. Here
the generator inserts the gold tokens into their gold slots, layer by layer (one token per layer
for a sequential trajectory), and its token, position and termination log-probabilities must
equal the one-pass terms of the same trajectory.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.geometry.layers import num_layers, sequential_layers, trajectory, uniform_layers
from insnet_fairseq.training.layerization import layerize
from insnet_fairseq.geometry.orders import make_order

from conftest import build_tiny_model, random_batch, step_logprobs

ATOL = 1e-5
LENGTHS = [9, 4, 12, 7, 3]


def forced_logprobs(gen, model, src, src_lengths, target, layers):
    """Drive ``gen`` along one sentence's layering; per step (encoding order) its token and position
    log-probs, and the termination log-probs of every context (continue) and of the end (stop)."""
    decoder = model.decoder
    source_kv, source_pad = decoder.encode_source(model.forward_encoder(src, src_lengths))
    state = gen.steps.initial_state(decoder, 1, src.device, source_kv, source_pad)
    L = target.numel()
    inserted = [0, L - 1]
    tok, pos, term = [], [], []
    for layer in range(1, int(layers.max()) + 1):
        stop = gen.steps.termination_logit(decoder, state)
        term.append(F.logsigmoid(-stop))  # not yet complete
        neighbours, pos_lprobs = gen.steps.slot_distribution(decoder, state)
        words = [p for p in range(L) if int(layers[p]) == layer]  # left to right
        slots = [sum(q < p for q in inserted) - 1 for p in words]
        chosen = torch.zeros_like(pos_lprobs, dtype=torch.bool)
        chosen[0, slots] = True
        lp = F.log_softmax(gen.steps.token_logits(decoder, state, neighbours, chosen, source_kv, source_pad).float(), -1)
        tok += lp.gather(1, target[words].unsqueeze(1)).squeeze(1).tolist()
        pos += pos_lprobs[0, slots].tolist()
        state = gen.steps.insert(decoder, state, chosen, target[words], torch.zeros(len(words)), source_kv, source_pad)
        inserted += words
    term.append(F.logsigmoid(gen.steps.termination_logit(decoder, state)))  # complete
    return tok, pos, torch.cat(term).tolist()


def layerings(kind, model, src, src_lengths, target, n_tok):
    n = target.size(1)
    if kind.startswith("sequential"):
        return sequential_layers(make_order(kind.split("-")[1], n_tok, n, torch.Generator().manual_seed(4)), n_tok)
    if kind.startswith("uniform"):
        return uniform_layers(n_tok, n, kind.split("-")[1])
    order = make_order("random", n_tok, n, torch.Generator().manual_seed(6))
    return layerize(model, src, src_lengths, target, order, 1.0)[0]


@pytest.mark.parametrize("cache,slot_query", [(True, False), (False, False), (True, True), (False, True), (True, "untied"),
                                              (False, "untied")])
@pytest.mark.parametrize("kind", ["sequential-random", "sequential-r2l", "sequential-anchored", "uniform-binary",
                                  "uniform-anchored", "dinic"])
def test_generator_along_gold_trajectory_equals_forward(kind, cache, slot_query):
    model, d = build_tiny_model(seed=11, vocab=25, decoder_normalize_before=True, slot_query_stream=slot_query)
    src, src_lengths, target = random_batch(d, LENGTHS, seed=12)
    n_tok = target.ne(d.pad()).sum(1)
    layers = layerings(kind, model, src, src_lengths, target, n_tok)
    order, context = trajectory(layers)
    sequential = kind.startswith("sequential")
    with torch.no_grad():
        out = model(src, src_lengths, target, order, context=None if sequential else context)
        tok_lp, pos_lp, term_lp = step_logprobs(out)
        gen = InsertionGenerator(d, DecodingOptions(mode="parallel", use_cache=cache))
        for b, L in enumerate(LENGTHS):
            keep = src[b].ne(d.pad())
            tok, pos, term = forced_logprobs(gen, model, src[b : b + 1, keep], src_lengths[b : b + 1], target[b, :L],
                                             layers[b, :L])
            m = out["position"]["mask"][b]
            assert len(tok) == L - 2 and len(term) == int(num_layers(layers[b : b + 1])) + 1
            torch.testing.assert_close(torch.tensor(tok), tok_lp[b][m], atol=ATOL, rtol=0)
            torch.testing.assert_close(torch.tensor(pos), pos_lp[b][m], atol=ATOL, rtol=0)
            torch.testing.assert_close(torch.tensor(term), term_lp[b][out["termination"]["mask"][b]], atol=ATOL, rtol=0)
            if sequential:
                assert len(term) == L - 1
            assert math.isfinite(sum(tok) + sum(pos))
