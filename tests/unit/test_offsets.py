import random

import pytest
import torch

from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.geometry.offsets import (is_left_to_right, left_to_right_offsets, offset_matrix, rank_matrix,
                                             slot_neighbours, target_slots)
from insnet_fairseq.reference import naive_offsets

PAPER_ORDER = [0, 6, 2, 4, 1, 3, 5]  # "(BOS) (EOS) have pen I a ." for "(BOS) I have a pen . (EOS)"


def test_paper_worked_example_row_of_a():
    off = offset_matrix(torch.tensor([PAPER_ORDER]))
    assert off[0, 5, :6].tolist() == [-3, 2, -1, 1, -2, 0]


def test_paper_worked_example_full_lower_triangle():
    off = offset_matrix(torch.tensor([PAPER_ORDER]))[0]
    expected = naive_offsets(PAPER_ORDER)
    for i in range(7):
        assert off[i, : i + 1].tolist() == expected[i][: i + 1]
    # the paper's 3.1.1 example: inserting "a" into "I have pen" (order have, pen, I) gives
    # have -1, pen +1, I -2
    assert expected[5][2] == -1 and expected[5][3] == 1 and expected[5][4] == -2


def random_order(n, rng):
    middle = list(range(1, n - 1))
    rng.shuffle(middle)
    return [0, n - 1] + middle


@pytest.mark.parametrize("seed", range(5))
def test_offsets_match_naive_loop_on_random_orders(seed):
    rng = random.Random(seed)
    for _ in range(40):
        lengths = [rng.randint(2, 24) for _ in range(rng.randint(1, 5))]
        n = max(lengths)
        orders, pad = [], []
        for L in lengths:
            o = random_order(L, rng)
            # padded steps: arbitrary garbage must not matter when masked
            orders.append(o + [rng.randint(0, n) for _ in range(n - L)])
            pad.append([False] * L + [True] * (n - L))
        off = offset_matrix(torch.tensor(orders), torch.tensor(pad))
        for b, L in enumerate(lengths):
            expected = naive_offsets(orders[b][:L])
            for i in range(L):
                assert off[b, i, : i + 1].tolist() == expected[i][: i + 1]


def test_slot_neighbours_and_target_slots_match_sorting():
    rng = random.Random(3)
    for _ in range(50):
        n = rng.randint(3, 20)
        order = random_order(n, rng)
        rank = rank_matrix(torch.tensor([order]))
        left, right = slot_neighbours(rank)
        slots = target_slots(rank)[0]
        for t in range(1, n):
            by_pos = sorted(range(t + 1), key=lambda j: order[j])
            assert left[0, t, :t].tolist() == by_pos[:-1]
            assert right[0, t, :t].tolist() == by_pos[1:]
            if t < n - 1:
                nxt = order[t + 1]
                assert int(slots[t]) == sum(p < nxt for p in order[: t + 1]) - 1


def test_docstring_examples():
    rank = rank_matrix(torch.tensor([PAPER_ORDER]))
    assert rank[0, 5].tolist() == [0, 5, 2, 4, 1, 3, 5]
    assert target_slots(rank)[0].tolist() == [0, 0, 1, 0, 2, 4]
    left, right = slot_neighbours(rank_matrix(torch.tensor([[0, 6, 2, 4]])))
    assert left[0, 3, :3].tolist() == [0, 2, 3] and right[0, 3, :3].tolist() == [2, 3, 1]


@pytest.mark.parametrize("n", range(2, 12))
def test_left_to_right_offsets_are_the_l2r_orders_offset_matrix(n):
    order = make_order("l2r", torch.tensor([n]), n)
    below = torch.ones(n, n, dtype=torch.bool).tril()
    assert torch.equal(left_to_right_offsets(n)[below], offset_matrix(order)[0][below])
    naive = naive_offsets(order[0].tolist())  # the naive loop
    assert all(left_to_right_offsets(n)[i, : i + 1].tolist() == naive[i][: i + 1] for i in range(n))


def test_is_left_to_right_accepts_padded_l2r_batches_only():
    lengths = torch.tensor([6, 4, 2])
    pad = torch.arange(6).view(1, -1) >= lengths.view(-1, 1)
    g = torch.Generator().manual_seed(1)
    assert is_left_to_right(make_order("l2r", lengths, 6), pad)
    assert not is_left_to_right(make_order("r2l", lengths, 6), pad)
    assert not is_left_to_right(make_order("random", lengths, 6, g), pad)
    mixed = make_order("l2r", lengths, 6)
    mixed[0] = make_order("r2l", lengths[:1], 6)[0]  # one row in another order
    assert not is_left_to_right(mixed, pad)
    # a padded step holds anything: only the real steps count
    assert is_left_to_right(make_order("l2r", lengths, 6).masked_fill(pad, 0), pad)
