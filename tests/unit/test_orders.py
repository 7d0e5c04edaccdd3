import torch

from insnet_fairseq.geometry.orders import (anchored_levels, balanced_binary, left_to_right, make_order, right_to_left,
                                            tree_depth, uniform_random)
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


def test_keywords_order_puts_the_given_words_first_then_fills_the_gaps_left_to_right():
    from insnet_fairseq.geometry.orders import given_first_levels, given_positions, order_levels

    # "<s> a man in a red hat </s>" with keywords "man hat" (docstring examples): ids a=5 man=6 in=7 red=8 hat=9
    target = torch.tensor([[0, 5, 6, 7, 5, 8, 9, 2]])
    source = torch.tensor([[1, 6, 9, 2]])  # left-padded keywords + </s> (pad 1, eos 2)
    given = given_positions(source, target, pad=1, eos=2)
    assert given.tolist() == [[False, False, True, False, False, False, True, False]]
    lengths = torch.tensor([8])
    assert given_first_levels(given, lengths).tolist() == [[-1, 1, 0, 1, 2, 3, 0, -1]]
    order = make_order("keywords", lengths, 8, given=given)
    assert order.tolist() == [[0, 7, 2, 6, 1, 3, 4, 5]]  # man, hat, then a | in, then a, red
    # a keyword seen twice is taken at its first occurrence after the previous keyword; a missing one marks nothing
    t2 = torch.tensor([[0, 6, 5, 6, 9, 2, 1, 1], [0, 5, 7, 2, 1, 1, 1, 1]])
    s2 = torch.tensor([[5, 6, 2], [1, 8, 2]])  # "a man", "red" (absent from the second sentence)
    assert given_positions(s2, t2, pad=1, eos=2).tolist() == [[False, False, True, True] + [False] * 4, [False] * 8]
    with pytest.raises(ValueError, match="needs each sentence's keywords"):
        order_levels("keywords", lengths, 8)
    # random sentences and keyword subsets: a valid order, given words first in sentence order
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 30, (32,))
    n = int(lengths.max())
    pos = torch.arange(n).unsqueeze(0)
    given = (torch.rand(32, n, generator=g) < 0.25) & (pos > 0) & (pos < (lengths - 1).unsqueeze(1))
    order = make_order("keywords", lengths, n, given=given)
    check_valid(order, lengths)
    for b in range(32):
        k = int(given[b].sum())
        assert order[b, 2 : 2 + k].tolist() == given[b].nonzero().view(-1).tolist()
