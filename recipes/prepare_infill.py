#!/usr/bin/env python
"""Text-infilling templates (the text-infilling paper, section 4) for an insertion_lm data-bin.

    python recipes/prepare_infill.py --data data-bin/lm_multi30k [--splits valid test] [--seed 1]

Reads each split's held-out sentences (``DATA/{split}.ref``, written by ``make lm-multi30k`` /
``make lm-custom``) and writes, one template per sentence, ``__m__`` at each blank:

* ``{split}.template.r{30,40,50}b{1,2}``: random masking (the paper's Table 1): a share ``r`` of the
  words (rounded, at least one per blank, at least one word kept) is removed in ``b`` blanks of random
  lengths at random places; blanks never touch (two touching blanks would be one).
* ``{split}.template.anchors``: the paper's "few anchor words" setting (section 4.2): only the
  sentence's keywords (``DATA/{split}.keywords``, YAKE) are kept, and every run of removed words is a
  blank (as the paper keeps one noun and one verb, or names and numbers).

Deterministic: sentence i of a setting draws from ``random.Random(f"{seed}-{setting}-{i}")``.
Decode with ``fairseq-generate DATA --task insertion_lm --infill --template-suffix template.r30b1 ...``
and score with ``recipes/evaluate_infill.py``.
"""
import argparse
import os
import random
import sys
from typing import List, Sequence

BLANK = "__m__"
RATES = (0.3, 0.4, 0.5)
BLANKS = (1, 2)


def random_template(words: Sequence[str], rate: float, blanks: int, rng: random.Random) -> List[str]:
    """Mask ``rate`` of ``words`` in ``blanks`` non-touching blanks of random lengths.

    m = round(rate * n) words go, clamped so that every blank holds one word and blanks - 1 words
    stay between them; a sentence of fewer than 2 words keeps its words and gets a blank at the end.
    Example (n = 10, rate 0.3, 2 blanks): 3 words in blanks of 1 and 2 words, e.g.
    ``a __m__ in an orange hat __m__ something .``.
    """
    n = len(words)
    if n < 2:
        return list(words) + [BLANK]
    blanks = min(blanks, (n + 1) // 2)  # k blanks need k words and k - 1 kept words between them
    m = min(max(round(rate * n), blanks), n - blanks + 1, n - 1)
    cuts = sorted(rng.sample(range(1, m), blanks - 1))  # blank lengths: a random composition of m
    lengths = [b - a for a, b in zip([0] + cuts, cuts + [m])]
    kept = n - m
    gaps = sorted(rng.sample(range(kept + 1), blanks))  # distinct gaps between kept words: blanks never touch
    length_at = dict(zip(gaps, lengths))
    out, i = [], 0  # i: the next word of the sentence
    for j in range(kept + 1):  # gap j lies before the j-th kept word
        if j in length_at:
            out.append(BLANK)
            i += length_at[j]
        if j < kept:
            out.append(words[i])
            i += 1
    return out


def anchor_template(words: Sequence[str], keywords: Sequence[str]) -> List[str]:
    """Keep the keywords (in order, each matched at its next occurrence); every run of other words is a blank.
    Example: "a man in an orange hat ." with keywords "man orange" -> ``__m__ man __m__ orange __m__``."""
    out, k = [], 0
    for w in words:
        if k < len(keywords) and w == keywords[k]:
            out.append(w)
            k += 1
        elif not out or out[-1] != BLANK:
            out.append(BLANK)
    if k < len(keywords):
        raise ValueError(f"keywords {' '.join(keywords)!r} are not in order in {' '.join(words)!r}")
    return out


def read(path: str) -> List[str]:
    if not os.path.isfile(path):
        sys.exit(f"prepare_infill.py: {path} not found (make lm-multi30k / make lm-custom write it)")
    with open(path, encoding="utf-8") as f:
        return f.read().rstrip("\n").split("\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an insertion_lm data-bin with {split}.ref and {split}.keywords")
    p.add_argument("--splits", nargs="+", default=["valid", "test"])
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    for split in args.splits:
        sentences = [line.split() for line in read(os.path.join(args.data, f"{split}.ref"))]
        settings = {f"r{round(r * 100)}b{b}": (r, b) for r in RATES for b in BLANKS}
        for name, (rate, blanks) in settings.items():
            rows = [random_template(s, rate, blanks, random.Random(f"{args.seed}-{name}-{i}"))
                    for i, s in enumerate(sentences)]
            write(os.path.join(args.data, f"{split}.template.{name}"), rows, sentences)
        keywords = [line.split() for line in read(os.path.join(args.data, f"{split}.keywords"))]
        if len(keywords) != len(sentences):
            sys.exit(f"prepare_infill.py: {split}.keywords has {len(keywords)} lines for {len(sentences)} sentences")
        write(os.path.join(args.data, f"{split}.template.anchors"),
              [anchor_template(s, k) for s, k in zip(sentences, keywords)], sentences)


def write(path: str, rows: List[List[str]], sentences: List[List[str]]) -> None:
    masked = sum(len(s) - (len(r) - r.count(BLANK)) for r, s in zip(rows, sentences))
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(" ".join(r) + "\n" for r in rows)
    print(f"{path}: {len(rows):,} templates, {masked / sum(map(len, sentences)):.1%} of the words masked, "
          f"{sum(r.count(BLANK) for r in rows) / len(rows):.2f} blanks per template")


if __name__ == "__main__":
    main()
