"""Data of the iterative expansion LM (Casas et al. 2020, section 3): every sentence's level transitions along
its binarised dependency tree (:mod:`insnet_fairseq.data.dependency`).

Vocabularies (built from the training parses by :func:`build_vocabularies`, written next to the data):
- the *token* dictionary is the LM's ``dict.txt`` plus one dependency placeholder per relation, ``[nsubj]``,
  ... (``dict.deprel.txt`` lists the relations); the model's output masks the placeholders;
- the *expansion* dictionary (``dict.expansion.txt``) holds the expansion placeholders, one per pattern of
  left and right dependents around ``HEAD``: ``[det-HEAD]``, ``[HEAD]``, ``[nsubj-HEAD-dobj]``, ...

A sentence item holds all of its transitions (iteration t = 0 .. depth), so a batch is made of level
transitions of several sentences; the collater sorts them by length into buckets, each padded to its width. Transition t
reads the words of depth < t and the placeholders of the depth-t words (surface order), and predicts, at
each placeholder, its word and its expansion pattern (padding elsewhere). ``head`` is the input position of
each item's head (-1 for the root); it feeds the head-position embedding.

Example, "my dog also likes eating sausage" (binarised: "also" hangs right of "dog"), t = 1: input
``[nsubj] likes [xcomp]``, head ``1 -1 1``, tokens ``dog <pad> eating``, expansions ``[poss-HEAD-advmod]
<pad> [HEAD-dobj]``.
"""
import logging
import os
from typing import Dict, List, Sequence

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset, data_utils

from insnet_fairseq.data.dependency import HEAD, children, expansion_pattern, generation_tree, read_deps, tree_depths

logger = logging.getLogger(__name__)

BUCKET_GROWTH = 1.3  # the collater's bucket widths grow by this factor
DEPREL_DICT = "dict.deprel.txt"
EXPANSION_DICT = "dict.expansion.txt"


def placeholder(deprel: str) -> str:
    return f"[{deprel}]"


def sentence_trees(path: str, word_counts: Sequence[int]):
    """``{split}.deps`` -> per sentence (binarised heads, deprels, depths, expansion patterns)."""
    out = []
    for heads, deprels in read_deps(path, word_counts):
        tree = generation_tree(heads)
        kids = children(tree)
        out.append((tree, deprels, tree_depths(tree),
                    [expansion_pattern(deprels, [c for c in k if c < x], [c for c in k if c > x])
                     for x, k in enumerate(kids)]))
    return out


def build_vocabularies(data: str, trees) -> None:
    """Write ``dict.deprel.txt`` and ``dict.expansion.txt`` into ``data`` from the training trees (counts as in
    fairseq's ``dict.txt``), unless both exist."""
    if all(os.path.isfile(os.path.join(data, f)) for f in (DEPREL_DICT, EXPANSION_DICT)):
        return
    deprels, patterns = Dictionary(), Dictionary()
    for _, rels, _, pats in trees:
        for r in rels:
            deprels.add_symbol(r)
        for p in pats:
            patterns.add_symbol(p)
    deprels.finalize(padding_factor=1)
    patterns.finalize(padding_factor=1)
    for d, name in ((deprels, DEPREL_DICT), (patterns, EXPANSION_DICT)):
        tmp = os.path.join(data, name + ".tmp")
        d.save(tmp)
        os.replace(tmp, os.path.join(data, name))
    logger.info(f"{data}: {len(deprels) - deprels.nspecial} relations, {len(patterns) - patterns.nspecial} expansion "
                f"patterns from the training parses ({DEPREL_DICT}, {EXPANSION_DICT})")


def pattern_table(expansions: Dictionary, tokens: Dictionary) -> torch.Tensor:
    """The expansion patterns as token ids: [E, K] with the left dependents' placeholders, -2 for HEAD, the
    right dependents' placeholders, then -1 (K: the longest pattern). Specials (and ``<unk>``) expand to HEAD
    alone. Example: "[det-HEAD]" -> [id("[det]"), -2, -1]."""
    rows = []
    for i, sym in enumerate(expansions.symbols):
        if i < expansions.nspecial or not (sym.startswith("[") and sym.endswith("]")):
            rows.append([-2])
            continue
        rows.append([-2 if part == HEAD else tokens.index(placeholder(part)) for part in sym[1:-1].split("-")])
    width = max(len(r) for r in rows)
    return torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.long)


class ExpansionDataset(FairseqDataset):
    """Sentences with their level transitions.  ``tokens``: fairseq's indexed dataset of the split (words +
    ``</s>``); ``trees``: :func:`sentence_trees`; ``tokens_dict`` has the placeholders, ``expansions`` the
    patterns."""

    def __init__(self, tokens, trees, tokens_dict: Dictionary, expansions: Dictionary):
        self.tokens = tokens
        self.tokens_dict, self.expansions = tokens_dict, expansions
        self.pad = tokens_dict.pad()
        # per sentence, once: heads, depths, placeholder ids (an unknown relation reads as <unk>), pattern ids
        placeholders = {}
        self.trees = []
        for heads, rels, depth, pats in trees:
            ph = [placeholders.setdefault(r, tokens_dict.index(placeholder(r))) for r in rels]
            self.trees.append((np.asarray(heads), np.asarray(depth), np.asarray(ph),
                               np.asarray([expansions.index(p) for p in pats])))
        self.sizes = np.array([np.cumsum(np.bincount(d)).sum() for _, d, _, _ in self.trees], dtype=np.int64)

    def __len__(self):
        return len(self.trees)

    def num_tokens(self, index):
        return self.sizes[index]

    def size(self, index):
        return self.sizes[index]

    def ordered_indices(self):
        return np.argsort(self.sizes, kind="mergesort")

    def __getitem__(self, index) -> Dict:
        heads, depth, ph, pat = self.trees[index]
        words = self.tokens[index][:-1].numpy()  # drop </s>
        steps = []
        for t in range(int(depth.max()) + 1):  # one vectorised transition per level
            keep = depth <= t
            nodes = np.nonzero(keep)[0]  # surface order
            rank = np.cumsum(keep) - 1  # node -> its input position
            new = depth[nodes] == t
            h = heads[nodes]
            steps.append((np.where(new, ph[nodes], words[nodes]),  # input
                          np.where(h >= 0, rank[np.maximum(h, 0)], -1),  # head position
                          np.where(new, words[nodes], self.pad),  # token targets
                          np.where(new, pat[nodes], self.expansions.pad())))  # expansion targets
        return {"id": index, "steps": steps, "words": self.tokens[index]}

    def collater(self, samples: List[Dict]) -> Dict:
        """The samples' transitions, sorted by length and cut into buckets of similar widths (a bucket ends where
        a transition is more than :data:`BUCKET_GROWTH` times as long as the bucket's first), each padded to
        its own width: ``net_input["buckets"]`` is a list of dicts of [transitions, width] tensors ``tokens``,
        ``heads`` (-2 at padding), ``expansions`` (gold patterns, padding elsewhere) and ``token_target``
        (the words to predict, padding elsewhere). Bucketing keeps padding low: one transition holds 1 to
        ``len`` items."""
        if not samples:
            return {}
        steps = sorted((s for sample in samples for s in sample["steps"]), key=lambda s: len(s[0]))
        buckets, start = [], 0
        for i in range(1, len(steps) + 1):
            if i == len(steps) or len(steps[i][0]) > BUCKET_GROWTH * len(steps[start][0]):
                buckets.append(self._pad(steps[start:i]))
                start = i
        words = data_utils.collate_tokens([s["words"] for s in samples], self.pad, self.tokens_dict.eos())
        return {
            "id": torch.tensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": int(sum(b["token_target"].ne(self.pad).sum() for b in buckets)),  # words to predict (each once)
            "net_input": {"buckets": buckets},
            "target": words,  # the sentences, for fairseq-generate's references
        }

    def _pad(self, steps) -> Dict:
        width = max(len(s[0]) for s in steps)

        def pad(k, value):
            out = np.full((len(steps), width), value, dtype=np.int64)
            for i, s in enumerate(steps):
                out[i, : len(s[k])] = s[k]
            return torch.from_numpy(out)

        return {"tokens": pad(0, self.pad), "heads": pad(1, -2), "token_target": pad(2, self.pad),
                "expansions": pad(3, self.expansions.pad())}
