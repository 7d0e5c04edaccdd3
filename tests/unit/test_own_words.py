"""--own-words: the context tokens against the docstring's example and a naive loop; the one pass over them against
the one pass over a target made of them (the same contexts) with the reference's targets; a layered trajectory's
last-layer words, which no later layer reads, change no term but the whole sentence's termination; the model's own
words are its eval-mode argmax."""
import pytest
import torch

from insnet_fairseq.geometry.layers import num_layers, trajectory, uniform_layers
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.training.own_words import own_word_context, own_words

from conftest import build_tiny_model, random_batch

A, B_, C, D = 10, 11, 12, 13  # word ids of the docstring's example; <s> 0, </s> 2 and padding 1 in fairseq's layout


def test_docstring_example():
    target = torch.tensor([[0, A, B_, 2]])
    order = torch.tensor([[0, 3, 2, 1]])  # <s>, </s>, b, a
    got = own_word_context(target, order, torch.tensor([4]), torch.tensor([C, D]), torch.tensor([[0.9, 0.9, 0.1, 0.9]]),
                           0.5)
    assert got.tolist() == [[0, A, C, 2]]


def naive_context(target, order, lengths, predicted, u, p):
    out = target.clone()
    k = 0
    for b in range(target.size(0)):
        for t in range(2, int(lengths[b])):
            if float(u[b, t]) < p:
                out[b, int(order[b, t])] = int(predicted[k])
            k += 1
    return out


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_context_matches_a_naive_loop(p):
    _, d = build_tiny_model(seed=1)
    src, src_lengths, target = random_batch(d, [9, 4, 12, 7], seed=2)
    lengths = target.ne(d.pad()).sum(1)
    order, _ = trajectory(uniform_layers(lengths, target.size(1), "anchored"))
    g = torch.Generator().manual_seed(4)
    predicted = torch.randint(d.nspecial, len(d), (int((lengths - 2).sum()),), generator=g)
    u = torch.rand(target.shape, generator=g)
    got = own_word_context(target, order, lengths, predicted, u, p)
    assert torch.equal(got, naive_context(target, order, lengths, predicted, u, p))
    assert torch.equal(got.ne(d.pad()), target.ne(d.pad())) and torch.equal(got[:, 0], target[:, 0])


def layered_batch(d, seed=3):
    src, src_lengths, target = random_batch(d, [9, 4, 12, 7], seed=seed)
    lengths = target.ne(d.pad()).sum(1)
    layers = uniform_layers(lengths, target.size(1), "anchored")
    order, context = trajectory(layers)
    return src, src_lengths, target, lengths, layers, order, context


def other_words(d, target, where, seed=5):
    """target with the words at ``where`` (bool [B, n]) replaced by random words."""
    g = torch.Generator().manual_seed(seed)
    return torch.where(where, torch.randint(d.nspecial, len(d), target.shape, generator=g), target)


@pytest.mark.parametrize("query_stream", [False, True])
def test_the_pass_reads_the_context_tokens_and_keeps_the_reference_targets(query_stream):
    model, d = build_tiny_model(seed=2, slot_query_stream=query_stream)
    src, src_lengths, target, lengths, layers, order, context = layered_batch(d)
    words = (torch.arange(target.size(1)).unsqueeze(0) >= 1) & (torch.arange(target.size(1)).unsqueeze(0)
                                                                  < (lengths - 1).unsqueeze(1))
    noisy = other_words(d, target, words)
    with torch.no_grad():
        plain = model(src, src_lengths, target, order, context=context)
        same = model(src, src_lengths, target, order, context=context, context_tokens=target)
        mixed = model(src, src_lengths, target, order, context=context, context_tokens=noisy)
        of_noisy = model(src, src_lengths, noisy, order, context=context)
    for name in ("token", "position", "termination"):  # context_tokens = target: the plain pass
        for key, value in plain[name].items():
            assert torch.equal(same[name][key], value), (name, key)
    # the noisy contexts: the pass over a target made of them, but the reference's token targets
    torch.testing.assert_close(mixed["token"]["logits"], of_noisy["token"]["logits"], atol=1e-6, rtol=0)
    torch.testing.assert_close(mixed["position"]["logits"], of_noisy["position"]["logits"], atol=1e-6, rtol=0)
    torch.testing.assert_close(mixed["termination"]["logits"], of_noisy["termination"]["logits"], atol=1e-6, rtol=0)
    assert torch.equal(mixed["token"]["target"], plain["token"]["target"])
    assert torch.equal(mixed["token"]["neighbours"], of_noisy["token"]["neighbours"])
    assert not torch.allclose(mixed["token"]["logits"], plain["token"]["logits"])


@pytest.mark.parametrize("query_stream", [False, True])
def test_last_layer_words_are_read_by_no_later_layer_only_by_the_final_stop(query_stream):
    model, d = build_tiny_model(seed=4, slot_query_stream=query_stream)
    src, src_lengths, target, lengths, layers, order, context = layered_batch(d, seed=6)
    last = layers.eq(num_layers(layers).unsqueeze(1))  # [B, n] the words of each sentence's last layer
    assert bool(last.any())
    with torch.no_grad():
        plain = model(src, src_lengths, target, order, context=context)
        moved = model(src, src_lengths, target, order, context=context,
                      context_tokens=other_words(d, target, last))
    torch.testing.assert_close(moved["token"]["logits"], plain["token"]["logits"], atol=1e-6, rtol=0)
    pos_mask = plain["position"]["mask"]
    torch.testing.assert_close(moved["position"]["logits"][pos_mask], plain["position"]["logits"][pos_mask],
                               atol=1e-6, rtol=0)
    # every termination term but the whole sentence's, which reads the last word's state
    term = plain["termination"]
    before_end = term["mask"] & term["target"].eq(0)
    torch.testing.assert_close(moved["termination"]["logits"][before_end], term["logits"][before_end], atol=1e-6,
                               rtol=0)


def test_own_words_are_the_eval_argmax_and_training_mode_is_restored():
    model, d = build_tiny_model(seed=5, slot_query_stream=True, dropout=0.3)
    src, src_lengths, target, lengths, layers, order, context = layered_batch(d, seed=7)
    net_input = dict(src_tokens=src, src_lengths=src_lengths, target=target, order=order, context=context)
    special = torch.tensor([d.bos(), d.eos(), d.pad()])
    model.train()
    u = torch.zeros(target.shape)
    got = own_words(model, net_input, special, d.pad(), u, 1.0)
    assert model.training
    model.eval()
    with torch.no_grad():
        logits = model(**net_input)["token"]["logits"]
    logits[:, special] = float("-inf")
    want = own_word_context(target, order, lengths, logits.argmax(-1), u, 1.0)
    assert torch.equal(got, want)
    words = got[target.ne(d.pad()) & target.ne(d.bos()) & target.ne(d.eos())]
    assert not bool(torch.isin(words, special).any())
    model.train()
    assert torch.equal(own_words(model, net_input, special, d.pad(), u, 0.0), target)


def test_random_orders_too():
    """Not only anchored layerings: the context of any trajectory (a random sequential one) is replaced at its
    steps."""
    _, d = build_tiny_model(seed=1)
    _, _, target = random_batch(d, [6, 9], seed=8)
    lengths = target.ne(d.pad()).sum(1)
    order = make_order("random", lengths, target.size(1), torch.Generator().manual_seed(3))
    predicted = torch.arange(int((lengths - 2).sum())) % (len(d) - d.nspecial) + d.nspecial
    u = torch.rand(target.shape, generator=torch.Generator().manual_seed(9))
    assert torch.equal(own_word_context(target, order, lengths, predicted, u, 0.5),
                       naive_context(target, order, lengths, predicted, u, 0.5))
