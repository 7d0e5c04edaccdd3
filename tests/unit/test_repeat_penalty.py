"""--repeat-penalty: the slots' neighbour words that the one pass returns, against a naive walk of the trajectory;
the unlikelihood term on a known example; the criterion leaves the model's NLL and its other terms unchanged."""
import math

import torch

from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.tasks.criterion import repeat_unlikelihood, term_losses

from conftest import build_tiny_model, random_batch


def naive_neighbours(target, order, length):
    """Per inserted token (steps 2 .. length - 1): the tokens left and right of its slot among the tokens inserted
    before it (final positions order[:t])."""
    left, right = [], []
    for t in range(2, length):
        before = order[:t].tolist()
        p = int(order[t])
        left.append(int(target[max(q for q in before if q < p)]))
        right.append(int(target[min(q for q in before if q > p)]))
    return left, right


def test_neighbours_match_a_naive_walk_of_random_trajectories():
    model, d = build_tiny_model(seed=2)
    src, src_lengths, target = random_batch(d, [9, 4, 6], seed=5)
    lengths = target.ne(d.pad()).sum(1)
    order = make_order("random", lengths, target.size(1), torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(src, src_lengths, target, order)
    left, right = (n.tolist() for n in out["token"]["neighbours"])
    want_l, want_r = [], []
    for b in range(len(lengths)):
        l, r = naive_neighbours(target[b], order[b], int(lengths[b]))
        want_l, want_r = want_l + l, want_r + r
    assert (left, right) == (want_l, want_r)
    assert len(left) == out["token"]["target"].numel()


def test_unlikelihood_docstring_example_and_gradient():
    logits = torch.zeros(1, 4, requires_grad=True)
    got = repeat_unlikelihood(logits, torch.tensor([2]), torch.tensor([[1], [2]]))
    assert math.isclose(float(got), -math.log(0.75), rel_tol=1e-6)
    got.backward()
    assert logits.grad[0, 1] > 0 and logits.grad[0, 2] < 0  # lowers the repeated word, raises the others


def test_penalty_adds_a_term_and_changes_nothing_else():
    model, d = build_tiny_model(seed=3)
    src, src_lengths, target = random_batch(d, [8, 5], seed=6)
    order = make_order("random", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model(src, src_lengths, target, order)
        plain, penalised = term_losses(out), term_losses(out, repeat_penalty=0.5)
    assert set(penalised) == set(plain) | {"repeat"}
    for name in plain:
        torch.testing.assert_close(penalised[name][0], plain[name][0])
    loss, term = penalised["repeat"]
    assert float(term) > 0 and math.isclose(float(loss), 0.5 * float(term), rel_tol=1e-6)
