"""Dependency trees of target sentences: the InsNet *syntactic order* (``--insertion-order dependency``)
and the iterative expansion LM (Casas et al. 2020, :mod:`insnet_fairseq.models.expansion_lm`) both generate a
sentence along its parse, level by level from the root.

A tree is ``heads``: one entry per word, the 0-based index of its head word, -1 for the root, with
``deprels``, its relation labels. ``{split}.deps`` files (``recipes/parse_dependencies.py``, spaCy)
hold one line per sentence, ``HEAD:DEPREL`` per word, HEAD 1-based and 0 for the root:

    "a man is playing a guitar ."  ->  "2:det 4:nsubj 4:aux 0:root 6:det 4:dobj 4:punct"

These are per-sentence functions on short Python lists, run once when a split is loaded (data
preparation), never on a training or decoding step.

- :func:`projectivize` lifts the rare non-projective arc (the parser's pseudo-projective output) to its
  head's head until the tree is projective;
- :func:`binarize` is the expansion LM paper's preprocessing: every word keeps at most one dependent
  on each side; the others are chained left to right (section 3);
- :func:`tree_depths` gives the levels: the root is level 0. In a binary projective tree the words of
  one level lie in distinct gaps of the earlier levels (between two words of one level lies their
  lowest common ancestor), so InsNet can insert a level in one parallel step;
- :func:`expansion_iterations` is the expansion LM's level transitions (its Figure 2).
"""
from typing import List, Optional, Sequence, Tuple

import torch

from insnet_fairseq.errors import TreeError

ROOT = -1
HEAD = "HEAD"
PAD = "[pad]"


def parse_deps_line(line: str, n_words: int) -> Tuple[List[int], List[str]]:
    """One ``.deps`` line -> (heads, deprels), heads 0-based (-1 root). Raises :class:`TreeError`
    (without a file name: the caller adds it) for a wrong word count, a bad item, or not one tree.

    Example: "2:det 0:root" (2 words) -> ([1, -1], ["det", "root"])."""
    items = line.split()
    if len(items) != n_words:
        raise TreeError(f"{len(items)} items for a sentence of {n_words} words")
    heads, deprels = [], []
    for item in items:
        head, sep, rel = item.partition(":")
        if not sep or not head.isdigit() or not rel:
            raise TreeError(f"item {item!r} is not HEAD:DEPREL")
        if int(head) > n_words:
            raise TreeError(f"head {head} beyond the sentence's {n_words} words")
        heads.append(int(head) - 1)
        deprels.append(rel)
    check_tree(heads)
    return heads, deprels


def check_tree(heads: Sequence[int]) -> None:
    """Raise :class:`TreeError` unless ``heads`` is one tree: one root, every word reaches it, no self-loop."""
    roots = [i for i, h in enumerate(heads) if h == ROOT]
    if len(roots) != 1:
        raise TreeError(f"{len(roots)} roots (a tree has one)")
    for i in range(len(heads)):
        seen, j = 0, i
        while heads[j] != ROOT:
            j = heads[j]
            seen += 1
            if seen > len(heads):
                raise TreeError(f"word {i + 1} never reaches the root (a cycle)")


def children(heads: Sequence[int]) -> List[List[int]]:
    """Dependents of every word, left to right.  Example: [1, -1, 1] -> [[], [0, 2], []]."""
    out: List[List[int]] = [[] for _ in heads]
    for d, h in enumerate(heads):
        if h != ROOT:
            out[h].append(d)
    return out


def tree_depths(heads: Sequence[int]) -> List[int]:
    """Depth of every word; the root is 0.  Example: [1, -1, 1, 2] -> [1, 0, 1, 2]."""
    depth: List[Optional[int]] = [None] * len(heads)
    for i in range(len(heads)):
        path, j = [], i
        while depth[j] is None and heads[j] != ROOT:
            path.append(j)
            j = heads[j]
        base = 0 if depth[j] is None else depth[j]
        depth[j] = base
        for k, node in enumerate(reversed(path), 1):
            depth[node] = base + k
    return depth  # type: ignore[return-value]


def _dominates(heads: Sequence[int], h: int, k: int) -> bool:
    while k != ROOT:
        if k == h:
            return True
        k = heads[k]
    return False


def is_projective(heads: Sequence[int]) -> bool:
    """Every subtree covers a contiguous span of words (equivalently, every arc is projective).
    Example: [1, -1, 1] -> True; [2, 3, -1, 2] -> False (3's subtree {1, 3} skips 2)."""
    lo, hi, size = list(range(len(heads))), list(range(len(heads))), [1] * len(heads)
    for i in range(len(heads)):
        j = heads[i]
        while j != ROOT:
            lo[j], hi[j], size[j] = min(lo[j], i), max(hi[j], i), size[j] + 1
            j = heads[j]
    return all(h - l + 1 == s for l, h, s in zip(lo, hi, size))


def projectivize(heads: Sequence[int]) -> List[int]:
    """Lift every non-projective arc to its head's head until the tree is projective (an arc h -> d is
    projective when h dominates every word between them). Projective trees come back unchanged.

    Example: [2, 3, -1, 2] (root 2; 0 and 3 depend on it, 1 on 3): the arc 3 -> 1 spans word 2, which
    3 does not dominate, so 1 is lifted to 3's head: -> [2, 2, -1, 2]."""
    heads = list(heads)
    changed = not is_projective(heads)
    while changed:
        changed = False
        for d, h in enumerate(heads):
            if h == ROOT:
                continue
            lo, hi = min(h, d), max(h, d)
            if any(not _dominates(heads, h, k) for k in range(lo + 1, hi)):
                heads[d] = heads[h]
                changed = True
                break
    return heads


def right_spine_end(right: Sequence[Optional[int]], x: int) -> int:
    while right[x] is not None:
        x = right[x]  # type: ignore[assignment]
    return x


def binarize(heads: Sequence[int]) -> List[int]:
    """The expansion LM's tree binarisation: afterwards every word has at most one dependent on each side.
    A word keeps its *first* dependent on each side (the leftmost); each
    further dependent on that side is re-attached, left to right, as the right dependent of the last word
    of the previous dependent's subtree (the end of its right spine), so every rearranged arc points left
    to right and the tree stays projective (a subtree grows by the siblings chained into it). A projective
    input is assumed (:func:`projectivize`). Each word keeps its own deprel.

    Example: "my dog also likes eating sausage", heads [1, 3, 3, -1, 3, 4] ("likes" has two left
    dependents, "dog" and "also") -> [1, 3, 1, -1, 3, 4]: "also" becomes the right dependent of "dog".
    """
    kids = children(heads)
    left: List[Optional[int]] = [None] * len(heads)
    right: List[Optional[int]] = [None] * len(heads)
    depth = tree_depths(heads)
    for x in sorted(range(len(heads)), key=lambda i: -depth[i]):  # dependents before their heads
        for side in ([c for c in kids[x] if c < x], [c for c in kids[x] if c > x]):
            if not side:
                continue
            if side[0] < x:
                left[x] = side[0]
            else:
                right[x] = side[0]
            for prev, nxt in zip(side, side[1:]):
                right[right_spine_end(right, prev)] = nxt
    out = [ROOT] * len(heads)
    for x in range(len(heads)):
        for c in (left[x], right[x]):
            if c is not None:
                out[c] = x
    return out


def generation_tree(heads: Sequence[int]) -> List[int]:
    """The tree both systems generate along: the parse made projective, then binarised."""
    return binarize(projectivize(heads))


def dependency_levels(heads: Sequence[int]) -> List[int]:
    """Levels of the InsNet syntactic order: the depth of every word in the projective, binarised tree.
    Example: [1, 3, 3, -1, 3, 4] ("my dog also likes eating sausage") -> [2, 1, 2, 0, 1, 2]."""
    return tree_depths(generation_tree(heads))


def expansion_pattern(deprels: Sequence[str], left: Sequence[int], right: Sequence[int]) -> str:
    """A word's expansion placeholder: its dependents' relations around HEAD.
    Example: left nsubj, advmod; right xcomp -> "[nsubj-advmod-HEAD-xcomp]"."""
    return "[" + "-".join([deprels[c] for c in left] + [HEAD] + [deprels[c] for c in right]) + "]"


def expansion_iterations(words: Sequence[str], heads: Sequence[int], deprels: Sequence[str]):
    """The expansion LM's level transitions of one sentence (its Figure 2), from its tree (binarised or not).

    Returns one dict per iteration, each a list per input position:
    ``input`` (a word, or ``[deprel]``: the dependency placeholder of a word still to generate),
    ``head`` (the input position of the item's head, -1 for the root), ``node`` (the word index it stands
    for), ``token`` (the word to generate at a placeholder, :data:`PAD` at a word already there) and
    ``expansion`` (the placeholder's expansion pattern, :data:`PAD` elsewhere). The next input replaces each
    placeholder by its dependents' placeholders around the generated word; iterations end when no
    placeholder is left (the number of iterations is the tree's depth + 1).

    Example (Figure 2): "my dog also likes eating sausage", heads [1, 3, 3, -1, 3, 4], deprels
    [poss, nsubj, advmod, ROOT, xcomp, dobj]: inputs [ROOT]; [nsubj] [advmod] likes [xcomp];
    [poss] dog also likes eating [dobj].
    """
    kids = children(heads)
    root = heads.index(ROOT)
    seq = [(root, False)]  # (word index, generated yet)
    out = []
    while any(not done for _, done in seq):
        where = {node: i for i, (node, _) in enumerate(seq)}
        step = {"input": [], "head": [], "node": [], "token": [], "expansion": []}
        for node, done in seq:
            step["input"].append(words[node] if done else f"[{deprels[node]}]")
            step["head"].append(where.get(heads[node], ROOT) if heads[node] != ROOT else ROOT)
            step["node"].append(node)
            step["token"].append(PAD if done else words[node])
            step["expansion"].append(PAD if done else expansion_pattern(
                deprels, [c for c in kids[node] if c < node], [c for c in kids[node] if c > node]))
        out.append(step)
        nxt = []
        for node, done in seq:
            if done:
                nxt.append((node, True))
            else:
                nxt += [(c, False) for c in kids[node] if c < node] + [(node, True)] + \
                       [(c, False) for c in kids[node] if c > node]
        seq = nxt
    return out


def read_deps(path: str, word_counts: Sequence[int]):
    """A ``.deps`` file -> [(heads, deprels)] per sentence; ``word_counts`` the words of every sentence of the
    split it belongs to. Raises :class:`TreeError` naming the file (and line) for a wrong line count, a line
    that does not fit its sentence or is not one tree."""
    with open(path, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(word_counts):
        raise TreeError(f"{path}: {len(lines):,} parses, but the split holds {len(word_counts):,} sentences: one line "
                        "per sentence, in the same order (recipes/parse_dependencies.py)")
    trees = []
    for i, (line, n) in enumerate(zip(lines, word_counts), 1):
        try:
            trees.append(parse_deps_line(line, n))
        except TreeError as e:
            raise TreeError(f"{path}, line {i}: {e}") from None
    return trees


def levels_of_file(path: str, word_counts: Sequence[int]):
    """The ``dependency`` order's levels of a split: (flat LongTensor [words], offsets LongTensor [N + 1]) for
    :func:`insnet_fairseq.data.dataset.padded_levels`, the number of sentences whose parse had to be made
    projective, and the total number of levels (parallel insertion steps) over the split."""
    flat, offsets, lifted, steps = [], [0], 0, 0
    for heads, _ in read_deps(path, word_counts):
        lifted += not is_projective(heads)
        depths = dependency_levels(heads)
        steps += max(depths) + 1
        flat += depths
        offsets.append(len(flat))
    return torch.tensor(flat, dtype=torch.long), torch.tensor(offsets, dtype=torch.long), lifted, steps
