import torch

from insnet_fairseq.data.orders import (
    anchored_levels, balanced_binary, left_to_right, make_order, right_to_left, tree_depth, uniform_random,
)
import pytest


def check_valid(order, lengths):
    n = order.size(1)
    for b, L in enumerate(lengths.tolist()):
        o = order[b].tolist()
        assert o[0] == 0 and o[1] == L - 1
        assert sorted(o[:L]) == list(range(L))
        assert o[L:] == list(range(L, n))


def test_left_to_right():
    lengths = torch.tensor([5, 3])
    order = left_to_right(lengths, 5)
    assert order.tolist() == [[0, 4, 1, 2, 3], [0, 2, 1, 3, 4]]


def test_right_to_left():
    lengths = torch.tensor([5, 3])
    order = right_to_left(lengths, 5)
    assert order.tolist() == [[0, 4, 3, 2, 1], [0, 2, 1, 3, 4]]


def test_anchored_levels_docstring_examples_and_limits():
    assert anchored_levels(torch.tensor([9]), 9, 2).tolist() == [[-1, 2, 1, 2, 0, 2, 1, 2, -1]]
    assert anchored_levels(torch.tensor([10]), 10, 1).tolist() == [[-1, 1, 2, 3, 0, 1, 2, 3, 4, -1]]
    assert make_order("anchored", torch.tensor([9]), 9).tolist() == [[0, 8, 4, 2, 6, 1, 3, 5, 7]]
    lengths = torch.randint(2, 40, (16,))
    n = int(lengths.max())
    check_valid(make_order("anchored", lengths, n, anchor_depth=3), lengths)
    # depth 0 is left to right, a depth past the tree's is the binary order
    assert torch.equal(make_order("anchored", lengths, n, anchor_depth=0), left_to_right(lengths, n))
    assert torch.equal(make_order("anchored", lengths, n, anchor_depth=7), balanced_binary(lengths, n))
    # every level's words lie in distinct gaps of the earlier levels: one parallel step each
    for depth in (1, 2, 3):
        levels = anchored_levels(lengths, n, depth)
        for b, L in enumerate(lengths.tolist()):
            lev = levels[b, :L].tolist()
            for level in set(lev[1 : L - 1]):
                earlier = [q for q, x in enumerate(lev) if x < level]  # <s>, </s> are level -1
                gaps = [max(q for q in earlier if q < p) for p, x in enumerate(lev) if x == level]
                assert len(gaps) == len(set(gaps)), (depth, lev)
    # a long sentence: depth + about L / 2**depth levels (62 words: 3 anchors, 59 words in 4 gaps of <= 15)
    assert int(anchored_levels(torch.tensor([64]), 64, 2).max()) + 1 == 2 + 15


def test_random_is_a_valid_permutation_and_seeded():
    lengths = torch.tensor([12, 7, 2, 9])
    a = uniform_random(lengths, 12, torch.Generator().manual_seed(1))
    b = uniform_random(lengths, 12, torch.Generator().manual_seed(1))
    check_valid(a, lengths)
    assert torch.equal(a, b)


def test_binary_middle_first_level_by_level():
    assert tree_depth(torch.tensor([7]), 7).tolist() == [[-1, 1, 2, 0, 1, 2, -1]]
    order = balanced_binary(torch.tensor([7, 4]), 7)
    assert order[0].tolist() == [0, 6, 3, 1, 4, 2, 5]
    assert order[1].tolist() == [0, 3, 1, 2, 4, 5, 6]
    lengths = torch.randint(2, 40, (16,))
    check_valid(balanced_binary(lengths, int(lengths.max())), lengths)
    # about log2(n) levels: 63 words fill a perfect tree of 6 levels
    assert int(tree_depth(torch.tensor([65]), 65).max()) + 1 == 6


def test_unknown_policy_names_the_flag():
    with pytest.raises(ValueError, match="--insertion-order"):
        make_order("spiral", torch.tensor([4]), 4)
