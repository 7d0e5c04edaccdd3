"""Dependency trees: the expansion LM's Figure 2, binarisation, projectivisation, and the InsNet syntactic
order (``--insertion-order dependency``): its levels are the binarised tree's levels, and a level fits in
one parallel step."""
import os
import random
import shutil

import pytest
import torch

from insnet_fairseq.data.dependency import (ROOT, binarize, children, dependency_levels, expansion_iterations,
                                            parse_deps_line, projectivize, read_deps, tree_depths)
from insnet_fairseq.errors import TreeError
from insnet_fairseq.data.dependency import is_projective as package_is_projective
from insnet_fairseq.geometry.layers import uniform_layers

from conftest import random_projective
from test_layerization import check_valid

FIG1_WORDS = "my dog also likes eating sausage".split()
FIG1_HEADS = [1, 3, 3, ROOT, 3, 4]
FIG1_RELS = "poss nsubj advmod ROOT xcomp dobj".split()


def test_figure_2_iterations():
    steps = expansion_iterations(FIG1_WORDS, FIG1_HEADS, FIG1_RELS)
    pad = "[pad]"
    assert [s["input"] for s in steps] == [
        ["[ROOT]"],
        ["[nsubj]", "[advmod]", "likes", "[xcomp]"],
        ["[poss]", "dog", "also", "likes", "eating", "[dobj]"],
    ]
    assert [s["token"] for s in steps] == [
        ["likes"],
        ["dog", "also", pad, "eating"],
        ["my", pad, pad, pad, pad, "sausage"],
    ]
    assert [s["expansion"] for s in steps] == [
        ["[nsubj-advmod-HEAD-xcomp]"],
        ["[poss-HEAD]", "[HEAD]", pad, "[HEAD-dobj]"],
        ["[HEAD]", pad, pad, pad, pad, "[HEAD]"],
    ]
    # head positions index the same iteration's input ("likes" is the head of its three placeholders)
    assert steps[1]["head"] == [2, 2, ROOT, 2] and steps[2]["head"] == [1, 3, 3, ROOT, 3, 4]


def test_binarized_figure_tree():
    # "also" (the second left dependent of "likes") hangs right of "dog"; 3 levels, as before
    assert binarize(FIG1_HEADS) == [1, 3, 1, ROOT, 3, 4]
    assert dependency_levels(FIG1_HEADS) == [2, 1, 2, 0, 1, 2]
    # InsNet's dependency order on the hand-parsed sentence: <s> </s> first (layer 0), then the tree's levels
    levels = torch.tensor([[-1, 2, 1, 2, 0, 1, 2, -1]])
    assert uniform_layers(torch.tensor([8]), 8, "dependency", levels=levels).tolist() == [[0, 3, 2, 3, 1, 2, 3, 0]]
    steps = expansion_iterations(FIG1_WORDS, binarize(FIG1_HEADS), FIG1_RELS)
    assert steps[1]["input"] == ["[nsubj]", "likes", "[xcomp]"] and steps[1]["expansion"][0] == "[poss-HEAD-advmod]"
    assert steps[-1]["input"] != FIG1_WORDS  # placeholders are left before the last iteration
    final = [n for n in steps[-1]["node"]]
    assert final == list(range(6))  # the last input covers the sentence in order


def is_projective(heads):
    def dominated(h, k):
        while k != ROOT:
            if k == h:
                return True
            k = heads[k]
        return False

    return all(h == ROOT or all(dominated(h, k) for k in range(min(h, d) + 1, max(h, d))) for d, h in enumerate(heads))


def spans(heads):
    """The words of every subtree, as (min, max)."""
    out = {}
    for i in range(len(heads)):
        j = i
        while j != ROOT:
            lo, hi = out.get(j, (j, j))
            out[j] = (min(lo, i), max(hi, i))
            j = heads[j]
    return out


def test_binarize_on_random_projective_trees():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 25)
        heads = random_projective(n, rng)
        assert is_projective(heads)
        bin_heads = binarize(heads)
        kids = children(bin_heads)
        assert all(sum(c < x for c in k) <= 1 and sum(c > x for c in k) <= 1 for x, k in enumerate(kids))
        assert is_projective(bin_heads)
        old_spans, new_spans = spans(heads), spans(bin_heads)  # a subtree only grows (by the chained siblings)
        assert all(new_spans[x][0] <= lo and hi <= new_spans[x][1] for x, (lo, hi) in old_spans.items())
        for h, deps in enumerate(children(heads)):  # each word keeps its first dependent on each side
            for side in ([d for d in deps if d < h], [d for d in deps if d > h]):
                assert not side or bin_heads[side[0]] == h


def test_levels_fit_one_parallel_step_each():
    """In a binarised projective tree the words of a level lie in distinct gaps of the earlier levels: as
    InsNet layers (<s>, </s> first) every slot takes at most one word per step, checked by definition."""
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(1, 25)
        heads = random_projective(n, rng)
        if rng.random() < 0.5:  # a non-projective arc or two, lifted first
            d = rng.randrange(n)
            if heads[d] != ROOT:
                heads[d] = rng.choice([h for h in range(n) if h != d and not _below(heads, h, d)] or [heads[d]])
        levels = dependency_levels(heads)
        assert min(levels) == 0 and sorted(set(levels)) == list(range(max(levels) + 1))
        layers = uniform_layers(torch.tensor([n + 2]), n + 2, "dependency",
                                levels=torch.tensor([[-1] + levels + [-1]]))
        check_valid(layers, [n + 2])


def _below(heads, h, d):
    """h lies in d's subtree (making h the head of d would close a cycle)."""
    while h != ROOT:
        if h == d:
            return True
        h = heads[h]
    return False


def test_projectivize():
    assert projectivize([2, 3, ROOT, 2]) == [2, 2, ROOT, 2]
    assert not package_is_projective([2, 3, ROOT, 2]) and package_is_projective([1, ROOT, 1])
    rng = random.Random(2)
    for _ in range(200):
        n = rng.randint(2, 15)
        heads = random_projective(n, rng)
        assert projectivize(heads) == heads  # projective trees are kept
        assert package_is_projective(heads)
        d = rng.randrange(n)
        if heads[d] != ROOT:
            heads[d] = rng.choice([h for h in range(n) if h != d and not _below(heads, h, d)])
        assert package_is_projective(heads) == is_projective(heads)  # spans against arcs
        lifted = projectivize(heads)
        assert is_projective(lifted) and tree_depths(lifted)  # still one tree


def test_deps_lines_and_files(tmp_path):
    assert parse_deps_line("2:det 4:nsubj 4:aux 0:root 6:det 4:dobj 4:punct", 7)[0] == [1, 3, 3, ROOT, 5, 3, 3]
    for line, n, message in [("2:det", 2, "1 items for a sentence of 2 words"), ("2det 0:root", 2, "not HEAD:DEPREL"),
                             ("0:root 0:root", 2, "2 roots"), ("2:a 1:b 0:root", 3, "never reaches the root"),
                             ("5:det 0:root", 2, "beyond the sentence")]:
        with pytest.raises(TreeError, match=message):
            parse_deps_line(line, n)
    path = tmp_path / "valid.deps"
    path.write_text("2:det 0:root\n0:root\n")
    assert read_deps(str(path), [2, 1]) == [([1, ROOT], ["det", "root"]), ([ROOT], ["root"])]
    with pytest.raises(TreeError, match=r"valid.deps: 2 parses, but the split holds 3 sentences"):
        read_deps(str(path), [2, 1, 1])
    with pytest.raises(TreeError, match=r"valid.deps, line 2: 1 items for a sentence of 2 words"):
        read_deps(str(path), [2, 2])


# ---------------------------------------------------------------------------------------- the InsNet dependency order


def chain_deps(n):
    """A projective parse of n words: the middle word is the root, every other word hangs on its neighbour
    towards it (levels: distance from the middle)."""
    mid = (n - 1) // 2
    return " ".join("0:root" if i == mid else f"{i + 2 if i < mid else i}:dep" for i in range(n))


def test_insnet_dependency_order_batches(lm_data, tmp_path):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    from insnet_fairseq.tasks.criterion import InsNetLoss
    from insnet_fairseq.errors import DataError
    from test_lm_task import Backward, lm_task, tiny_lm_model

    data = str(tmp_path / "bin")
    os.makedirs(data)
    for f in ("dict.txt", "test.bin", "test.idx"):
        shutil.copy(os.path.join(lm_data, f), data)
    words = [len(x) - 1 for x in MMapIndexedDataset(f"{data}/test")]
    with pytest.raises(DataError, match=r"test.deps not found: --insertion-order dependency"):
        lm_task(data, insertion_order="dependency").load_dataset("test")
    deps = [chain_deps(n) for n in words]
    bad = list(deps)
    bad[6] = "0:root " * words[6] + "x"
    with open(f"{data}/test.deps", "w") as f:
        f.write("".join(x + "\n" for x in bad))
    with pytest.raises(DataError, match=r"test.deps, line 7: .*items for a sentence"):
        lm_task(data, insertion_order="dependency").load_dataset("test")
    with open(f"{data}/test.deps", "w") as f:
        f.write("".join(x + "\n" for x in deps))
    task = lm_task(data, insertion_order="dependency", layerization="uniform")
    task.load_dataset("test")
    dataset = task.datasets["test"]
    sample = dataset.collater([dataset[i] for i in range(16)])
    order, levels = sample["net_input"]["order"], sample["levels"]
    for b, i in enumerate(sample["id"].tolist()):
        n = words[i]
        expect = dependency_levels(parse_deps_line(deps[i], n)[0])
        assert levels[b, 1 : n + 1].tolist() == expect and levels[b, 0] == -1 and (levels[b, n + 1 :] == -1).all()
        # the sequential order inserts level by level (root first), left to right in a level
        steps = order[b, 2 : n + 2].tolist()
        assert [expect[p - 1] for p in steps] == sorted(expect)
    model = tiny_lm_model(task)
    loss, size, log = task.train_step(sample, model, InsNetLoss(task), Backward(), 0)
    assert torch.isfinite(loss) and size == int(sample["ntokens"])
    # uniform layers are the levels: a chain from the middle inserts about two words per step
    expect_layers = sum(max(dependency_levels(parse_deps_line(deps[i], words[i])[0])) + 1 for i in sample["id"].tolist())
    assert int(log["layers"]) == expect_layers < int(sample["ntokens"])


def test_dependency_order_is_an_lm_order():
    from insnet_fairseq.tasks.translation import InsertionTranslationConfig, InsertionTranslationTask

    from test_lm_task import make_dictionary

    d = make_dictionary(10)
    with pytest.raises(ValueError, match=r"dependency parse .*use it with --task insertion_lm"):
        InsertionTranslationTask(InsertionTranslationConfig(insertion_order="dependency"), d, d)
