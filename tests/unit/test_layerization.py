"""InsNet-Dinic layerization and the layered (parallel) objective."""
import math

import pytest
import torch

from insnet_fairseq.tasks.criterion import term_losses
from insnet_fairseq.geometry.layers import (PAD_LAYER, compact, context_steps, delay_last_words, encoding_order,
                                            num_layers, sequential_layers, trajectory, uniform_layers)
from insnet_fairseq.training.layerization import (LADDER, layerize, promotions, promotions_from_states,
                                                  token_logprobs_by_step)
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.reference import naive_layered_logprobs

from conftest import build_tiny_model, random_batch, step_logprobs

ATOL = 1e-5


def test_worked_examples():
    order = torch.tensor([[0, 6, 2, 4, 1, 3, 5]])
    assert sequential_layers(order, torch.tensor([7])).tolist() == [[0, 3, 1, 4, 2, 5, 0]]
    assert uniform_layers(torch.tensor([7]), 7).tolist() == [[0, 2, 3, 1, 2, 3, 0]]
    layers = torch.tensor([[0, 2, 1, 2, 0]])
    order = encoding_order(layers)
    assert order.tolist() == [[0, 4, 2, 1, 3]]
    assert context_steps(layers, order).tolist() == [[0, 0, 1, 2, 2]]
    assert compact(torch.tensor([[0, 4, 1, 4, 0, PAD_LAYER]])).tolist() == [[0, 2, 1, 2, 0, PAD_LAYER]]
    assert num_layers(torch.tensor([[0, 2, 1, 2, 0, PAD_LAYER]])).tolist() == [2]


def naive_slots(lay):
    """Per layer, the (left, right) positions of each of its tokens' slots, by definition."""
    slots = {}
    for p, l in enumerate(lay):
        if l == 0:
            continue
        ctx = [q for q, x in enumerate(lay) if x < l]
        slots.setdefault(l, []).append((max(q for q in ctx if q < p), min(q for q in ctx if q > p)))
    return slots


def check_valid(layers, lengths):
    for b, L in enumerate(lengths):
        lay = layers[b, :L].tolist()
        assert lay[0] == 0 and lay[L - 1] == 0 and all(x >= 1 for x in lay[1 : L - 1])
        assert all(x == PAD_LAYER for x in layers[b, L:].tolist())
        assert sorted(set(lay[1 : L - 1])) == list(range(1, max(lay) + 1))  # every layer 1..m holds a word
        for l, slots in naive_slots(lay).items():
            assert len(slots) == len(set(slots)), f"two tokens of layer {l} in one slot: {lay}"


def batch(seed=0, lengths=(9, 3, 14, 6, 11, 12)):
    model, d = build_tiny_model(seed=seed)
    src, src_lengths, target = random_batch(d, list(lengths), seed=seed + 1)
    n_tok = target.ne(d.pad()).sum(1)
    return model, d, src, src_lengths, target, n_tok


@pytest.mark.parametrize("policy", ["binary", "random", "l2r", "r2l", "anchored"])
def test_tau_minus_inf_is_sequential_and_large_tau_stays_valid(policy):
    model, d, src, src_lengths, target, n_tok = batch()
    order = make_order(policy, n_tok, target.size(1), torch.Generator().manual_seed(3))
    seq, rounds = layerize(model, src, src_lengths, target, order, -math.inf)
    assert rounds == 0 and num_layers(seq).tolist() == (n_tok - 2).tolist()
    check_valid(seq, n_tok.tolist())
    par, rounds = layerize(model, src, src_lengths, target, order, math.inf)
    check_valid(par, n_tok.tolist())
    assert rounds >= 1
    if policy in ("l2r", "r2l"):  # every earlier slot is taken: nothing can move
        assert torch.equal(par, seq)
    else:
        assert (num_layers(par) <= num_layers(seq)).all() and num_layers(par).sum() < num_layers(seq).sum()
    if policy in ("binary", "anchored"):  # unlimited promotion of a level order gives its levels
        assert torch.equal(par, uniform_layers(n_tok, target.size(1), policy))


def test_layers_never_grow_with_tau():
    model, d, src, src_lengths, target, n_tok = batch(seed=5, lengths=(14, 9, 17, 12, 6, 15, 10, 16))
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(0))
    previous = None
    for tau in [-math.inf, *LADDER, math.inf]:  # tolerances on the ladder
        layers, _ = layerize(model, src, src_lengths, target, order, tau, ladder=True)
        check_valid(layers, n_tok.tolist())
        count = num_layers(layers)
        if previous is not None:
            assert (count <= previous).all(), f"tau={tau}: {count.tolist()} vs {previous.tolist()}"
        previous = count


def test_direct_and_ladder_layerings_are_fixpoints():
    """Without the ladder the rounds run at tau only; either way the result is a fixpoint at tau:
    continuing from it moves nothing (one round)."""
    model, d, src, src_lengths, target, n_tok = batch(seed=5, lengths=(14, 9, 17, 12, 6, 15, 10, 16))
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(0))
    for ladder in (False, True):
        layers, rounds = layerize(model, src, src_lengths, target, order, 1.0, ladder=ladder)
        check_valid(layers, n_tok.tolist())
        again, rounds_again = layerize(model, src, src_lengths, target, order, 1.0, start=layers)
        assert torch.equal(again, layers) and rounds_again == 1
    assert num_layers(layers).float().mean() < n_tok.float().mean() - 2  # something was promoted


def test_max_rounds_and_continuing_from_a_layering():
    model, d, src, src_lengths, target, n_tok = batch(seed=2)
    order = make_order("binary", n_tok, target.size(1))
    one, rounds = layerize(model, src, src_lengths, target, order, math.inf, max_rounds=1)
    assert rounds == 1
    full, _ = layerize(model, src, src_lengths, target, order, math.inf)
    assert (num_layers(full) <= num_layers(one)).all()
    cont, _ = layerize(model, src, src_lengths, target, order, math.inf, start=one)
    assert torch.equal(cont, full)


def test_capped_visits_compose_to_the_fixpoint():
    """--dinic-max-rounds R: visits of at most R rounds, each continuing from the last (one per epoch, the
    model held fixed), reach the layering of one uncapped layerization, at a finite tau too."""
    model, d, src, src_lengths, target, n_tok = batch(seed=3)
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(2))
    full, full_rounds = layerize(model, src, src_lengths, target, order, 1.0)
    assert full_rounds > 2  # the cap below does bind
    layers, visits = None, 0
    while True:
        layers, rounds = layerize(model, src, src_lengths, target, order, 1.0, start=layers, max_rounds=2)
        visits += 1
        assert rounds <= 2
        if rounds < 2 or visits > full_rounds:
            break
    assert visits > 1 and torch.equal(layers, full)


def layered_logprobs(model, src, src_lengths, target, layers):
    order, context = trajectory(layers)
    out = model(src, src_lengths, target, order, context=context)
    return (out, *step_logprobs(out))


def test_singleton_layers_give_the_sequential_objective():
    model, d, src, src_lengths, target, n_tok = batch(seed=7)
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(1))
    with torch.no_grad():
        sequential = term_losses(model(src, src_lengths, target, order))
        layers = sequential_layers(order, n_tok)
        out = layered_logprobs(model, src, src_lengths, target, layers)[0]
        layered = term_losses(out)
    assert out["termination"]["mask"].sum() == (n_tok - 1).sum()
    for name in sequential:
        torch.testing.assert_close(layered[name][0], sequential[name][0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("slot_query", [False, True, "untied"])
@pytest.mark.parametrize("kind", ["uniform", "uniform-anchored", "dinic"])
def test_layered_objective_equals_per_layer_reencoding(kind, slot_query):
    model, d = build_tiny_model(seed=3, decoder_normalize_before=True, slot_query_stream=slot_query)
    lengths = [9, 4, 12, 7]
    src, src_lengths, target = random_batch(d, lengths, seed=4)
    n_tok = target.ne(d.pad()).sum(1)
    if kind.startswith("uniform"):
        layers = uniform_layers(n_tok, target.size(1), "anchored" if kind.endswith("anchored") else "binary")
    else:
        order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(2))
        layers, _ = layerize(model, src, src_lengths, target, order, 0.5)
    with torch.no_grad():
        out, tok_lp, pos_lp, term_lp = layered_logprobs(model, src, src_lengths, target, layers)
    naive = naive_layered_logprobs(model, src, src_lengths, target, layers)
    pos_m, term_m = out["position"]["mask"], out["termination"]["mask"]
    for b, L in enumerate(lengths):
        assert term_m[b].sum() == int(num_layers(layers[b : b + 1])) + 1
        torch.testing.assert_close(tok_lp[b][pos_m[b]], torch.tensor(naive[b]["token"]), atol=ATOL, rtol=0)
        torch.testing.assert_close(pos_lp[b][pos_m[b]], torch.tensor(naive[b]["position"]), atol=ATOL, rtol=0)
        torch.testing.assert_close(term_lp[b][term_m[b]], torch.tensor(naive[b]["termination"]), atol=ATOL, rtol=0)


def test_termination_every_step_trains_termination_inside_layers_too():
    """--termination-every-step: a layered trajectory's termination terms are the sequential ones (one
    after every token: stop only at the last), with the same logits; the layer-end terms are among them."""
    model, d = build_tiny_model(seed=3, decoder_normalize_before=True)
    lengths = [9, 4, 12, 7]
    src, src_lengths, target = random_batch(d, lengths, seed=4)
    n_tok = target.ne(d.pad()).sum(1)
    layers = uniform_layers(n_tok, target.size(1), "binary")
    with torch.no_grad():
        per_layer = layered_logprobs(model, src, src_lengths, target, layers)[0]["termination"]
        model.decoder.termination_every_step = True
        every = layered_logprobs(model, src, src_lengths, target, layers)[0]["termination"]
    assert every["mask"].sum(1).tolist() == (n_tok - 1).tolist()  # every step t = 1..len-1
    assert (every["mask"] | ~per_layer["mask"]).all() and every["mask"].sum() > per_layer["mask"].sum()
    assert torch.equal(every["target"][every["mask"]].sum(), torch.tensor(float(len(lengths))))  # one stop each
    torch.testing.assert_close(every["logits"], per_layer["logits"])


def test_delay_last_words_docstring_example():
    layers = torch.tensor([[0, 1, 2, 1, 2, 2, 0]])
    u = torch.tensor([[0.5, 0.5, 0.1, 0.5, 0.9, 0.3, 0.5]])
    assert delay_last_words(layers, u, 0.5).tolist() == [[0, 1, 3, 1, 2, 3, 0]]
    # every word of the last layer drawn: the leftmost stays; a one-word last layer never moves
    assert delay_last_words(layers, torch.zeros(1, 7), 0.5).tolist() == [[0, 1, 2, 1, 3, 3, 0]]
    assert delay_last_words(torch.tensor([[0, 2, 1, 0]]), torch.zeros(1, 4), 0.9).tolist() == [[0, 2, 1, 0]]


@pytest.mark.parametrize("kind", ["uniform", "dinic"])
def test_delayed_layerings_stay_valid_and_keep_every_earlier_layer(kind):
    """--late-words: on random layerings, the delayed words form one new last layer, the layers before are
    untouched, the result is a valid layering (distinct slots per layer), and the layer before the new one
    is a partial output whose termination target is 0 (it is not the end)."""
    model, d, src, src_lengths, target, n_tok = batch(seed=5, lengths=(9, 3, 14, 6, 11, 12, 2, 7))
    if kind == "uniform":
        layers = uniform_layers(n_tok, target.size(1), "anchored")
    else:
        layers, _ = layerize(model, src, src_lengths, target, make_order("random", n_tok, target.size(1),
                                                                      torch.Generator().manual_seed(1)), 3.0)
    moved_any = False
    for seed in range(20):
        u = torch.rand(layers.shape, generator=torch.Generator().manual_seed(seed))
        late = delay_last_words(layers, u, 0.5)
        check_valid(late, n_tok.tolist())
        m, m2 = num_layers(layers), num_layers(late)
        grew = m2 > m
        assert ((m2 - m) <= 1).all() and torch.equal(late[~grew], layers[~grew])
        keep = layers < m.unsqueeze(1)  # every word of an earlier layer stays where it was
        assert torch.equal(late[keep], layers[keep])
        moved = late == (m + 1).unsqueeze(1)
        assert (layers[moved] == m.unsqueeze(1).expand_as(layers)[moved]).all()  # only last-layer words move
        moved_any |= bool(grew.any())
    assert moved_any


def naive_promotion_gains(model, src, src_lengths, target, layers):
    """By definition, with one forward pass per token: for every word of layer l >= 2 whose slot in
    the context of layers < l - 1 holds no word of layer l - 1, log p(word where it is) - log p(word
    when inserted one layer up), the latter read from the layered forward of the layering with that
    word moved up. Returns {(b, position): gain}."""

    def token_lp_by_position(lay):
        order, context = trajectory(lay)
        tok_lp = step_logprobs(model(src, src_lengths, target, order, context=context))[0]  # [B, n - 2]: steps 2..
        return tok_lp.new_zeros(order.shape).scatter_(1, order[:, 2:], tok_lp)

    def slot(lay, p, below):  # (left, right) neighbours of position p among the words of layers < below
        ctx = [q for q, x in enumerate(lay) if x < below]
        return max(q for q in ctx if q < p), min(q for q in ctx if q > p)

    now = token_lp_by_position(layers)
    gains = {}
    for b in range(target.size(0)):
        lay = [x for x in layers[b].tolist() if x < PAD_LAYER]
        for p, l in enumerate(lay):
            if l < 2:
                continue
            taken = {slot(lay, q, l - 1) for q, x in enumerate(lay) if x == l - 1}
            if slot(lay, p, l - 1) in taken:
                continue
            moved = layers.clone()
            moved[b, p] = l - 1
            gains[b, p] = float(now[b, p] - token_lp_by_position(moved)[b, p])
    return gains


@pytest.mark.parametrize("slot_query", [False, True, "untied"])
def test_promotion_round_matches_its_definition(slot_query):
    """One Dinic round (:func:`promotions`) against the definition: a word goes one layer up when its
    slot there is free and its gain is <= tau, the left-most word winning a slot two words claim."""
    model, d = build_tiny_model(seed=11, decoder_normalize_before=True, slot_query_stream=slot_query)
    lengths = [10, 5, 13, 8]
    src, src_lengths, target = random_batch(d, lengths, seed=12)
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(3))
    with torch.no_grad():  # a layering with several words per layer, then one round from it
        layers, _ = layerize(model, src, src_lengths, target, order, math.inf, max_rounds=1)
        gains = naive_promotion_gains(model, src, src_lengths, target, layers)
        values = sorted(set(round(g, 4) for g in gains.values()))
        tau = (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2  # about half pass, none at the border
        source_kv, source_pad = model.decoder.encode_source(model.encoder(src, src_lengths=src_lengths))
        up = promotions(model.decoder, target, layers, source_kv, source_pad, tau)
    expected = torch.zeros_like(up)
    for b in range(len(lengths)):
        lay = layers[b].tolist()
        claimed = set()
        for p in range(lengths[b]):  # left to right: the left-most candidate takes a contested slot
            if (b, p) not in gains or gains[b, p] > tau:
                continue
            ctx = [q for q, x in enumerate(lay) if x < lay[p] - 1]
            key = (lay[p], max(q for q in ctx if q < p), min(q for q in ctx if q > p))
            if key not in claimed:
                claimed.add(key)
                expected[b, p] = True
    assert 0 < int(expected.sum()) < len(gains)
    assert torch.equal(up, expected)


def lagged_case(slot_query, lengths):
    """The tiny model (with or without the slot query stream), a random batch of ``lengths`` and its random orders,
    shared by the --dinic-lagged promotion tests: (model, src, src_lengths, target, n_tok, order)."""
    model, d = build_tiny_model(seed=13, slot_query_stream=slot_query)
    src, src_lengths, target = random_batch(d, lengths, seed=14)
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("random", n_tok, target.size(1), torch.Generator().manual_seed(5))
    return model, src, src_lengths, target, n_tok, order


@pytest.mark.parametrize("slot_query", [False, True])
@pytest.mark.parametrize("tau", [1.0, math.inf])
def test_promotions_from_the_training_pass_equal_a_promotion_round(slot_query, tau):
    """--dinic-lagged: the promotions computed from the states of the model's own forward over a layered
    trajectory (no extra pass) are those of a promotion round over the same layering (dropout 0)."""
    model, src, src_lengths, target, n_tok, order = lagged_case(slot_query, [11, 4, 14, 9, 7])
    with torch.no_grad():
        for rounds in (0, 1, 2):  # the sequential layering, then layerings with several words per layer
            layers = sequential_layers(order, n_tok) if rounds == 0 else \
                layerize(model, src, src_lengths, target, order, tau, max_rounds=rounds)[0]
            source_kv, source_pad = model.decoder.encode_source(model.encoder(src, src_lengths=src_lengths))
            expected = promotions(model.decoder, target, layers, source_kv, source_pad, tau)
            out = model(src, src_lengths, target, *trajectory(layers), return_states=True)
            up = promotions_from_states(model.decoder, layers, *out["states"], tau)
            assert torch.equal(up, expected), rounds
            # the forward's token log-probabilities as the words' scores at their slots now: the same round
            current = token_logprobs_by_step(out["token"], n_tok, target.size(1))
            assert torch.equal(promotions_from_states(model.decoder, layers, *out["states"], tau, current=current),
                               expected), rounds
            assert int(expected.sum()) > 0  # something moves: the check is not vacuous


@pytest.mark.parametrize("slot_query", [False, True])
@pytest.mark.parametrize("tau", [1.0, math.inf])
def test_lagged_promotions_of_a_late_words_pass_are_the_stored_layerings_for_the_words_not_moved(slot_query, tau):
    """--dinic-lagged with --late-words: the pass encodes the stored layering with some last-layer words moved to a
    new layer; the promotions it gives the other words are those of the stored layering's own pass (the moved
    words stay, TrainingTask.promote_lagged)."""
    model, src, src_lengths, target, n_tok, order = lagged_case(slot_query, [11, 4, 14, 9, 7, 12])
    with torch.no_grad():
        layers = layerize(model, src, src_lengths, target, order, tau, max_rounds=2)[0]
        late = delay_last_words(layers, torch.rand(layers.shape, generator=torch.Generator().manual_seed(3)), 0.5)
        kept = late.eq(layers)
        ups = []
        for encoded in (layers, late):
            out = model(src, src_lengths, target, *trajectory(encoded), return_states=True)
            current = token_logprobs_by_step(out["token"], n_tok, target.size(1))
            ups.append(promotions_from_states(model.decoder, encoded, *out["states"], tau, current=current))
    assert not bool(kept.all())  # words were moved
    assert torch.equal(ups[0] & kept, ups[1] & kept)
    assert int((ups[0] & kept).sum()) > 0  # something moves: the check is not vacuous
    if tau == math.inf:  # every word with a free slot moves: words of the last layer among them
        assert int((ups[0] & kept & (layers == num_layers(layers).unsqueeze(1))).sum()) > 0


def test_token_logprobs_by_step_docstring_example():
    logits = torch.randn(4, 6)
    target = torch.tensor([1, 4, 2, 5])
    lp = token_logprobs_by_step({"logits": logits, "target": target}, torch.tensor([5, 3]), 5)
    want = torch.log_softmax(logits, -1)[torch.arange(4), target]
    assert torch.equal(lp[0, 2:5], want[:3]) and torch.equal(lp[1, 2:3], want[3:])
    assert lp[0, :2].eq(0).all() and lp[1, :2].eq(0).all() and lp[1, 3:].eq(0).all()
