#!/usr/bin/env python
"""Bitext for the text-infilling paper's self-attention baseline (``--arch infill_transformer_*``,
:mod:`insnet_fairseq.models.infill_transformer`): one example per blank, source = the current template,
target = the blank's words.

    python recipes/prepare_infill_seq2seq.py --data data-bin/lm_multi30k      # -> data-bin/lm_multi30k-infill

(``make infill-baseline-multi30k``); training, filling and scoring: see ``recipes/infill_seq2seq.py``.

Inputs (from ``recipes/prepare_lm.py`` and ``recipes/prepare_infill.py``): the sentences, tokenised and
lowercased, of train (``WORK/train.tok``, WORK = ``work/NAME``) and of valid and test (``DATA/{split}.ref``);
their keywords (``DATA/{split}.keywords``; train's from ``WORK/train.keywords`` in data prepared before
prepare_lm.py wrote them beside the data; without them the anchors setting is left out of train, said so);
``DATA/dict.txt``.

Templates: every sentence gets ``--copies`` templates (train; 1 for valid and test), each of a setting
drawn uniformly from the test settings (the masking of ``recipes/prepare_infill.py``, its functions
reused: ``random_template`` at rates 0.3/0.4/0.5 with 1 or 2 blanks, and ``anchor_template`` with the
sentence's keywords). A template of k blanks gives k examples (Appendix A.2.1): for blank i, earlier
blanks hold their ground truth, later ones ``__m__`` (source format: the model's docstring; every
segment after the first opens with ``<seg>``). Example, "a man in an orange hat staring at something ."
masked as "a __m__ in an orange hat __m__ something .":

    a <seg> __m__ <seg> in an orange hat <seg> __m__ <seg> something .   ->  man
    a <seg> man <seg> in an orange hat <seg> __m__ <seg> something .     ->  staring at

Output: ``WORK-infill/{split}.tmpl`` / ``.blank`` (text) and ``DEST`` (default ``DATA-infill``), binarised
by ``fairseq-preprocess`` with one dictionary for both sides, ``dict.txt`` plus ``__m__`` and ``<seg>``
(its padding symbols ``madeupword*`` dropped). Deterministic: sentence j of a split, copy c, draws from
``random.Random(f"{seed}-{split}-{c}-{j}")``.
"""
import argparse
import os
import random
import subprocess
import sys
from collections import Counter
from typing import List, Sequence, Tuple

from insnet_fairseq.models.infill_transformer import BLANK, BOUNDARY
from recipes.prepare_infill import BLANKS, RATES, anchor_template, random_template

SPLITS = ("train", "valid", "test")
RANDOM_SETTINGS = [f"r{round(r * 100)}b{b}" for r in RATES for b in BLANKS]


def fail(message: str) -> None:
    sys.exit(f"prepare_infill_seq2seq.py: {message}")


class _Word(str):
    """A sentence word that remembers its index, so that a template tells which words each blank took."""

    def __new__(cls, word: str, index: int):
        w = super().__new__(cls, word)
        w.index = index
        return w


def template_with_blanks(words: Sequence[str], setting: str, rng: random.Random,
                         keywords: Sequence[str] = ()) -> Tuple[List[str], List[List[str]]]:
    """A template of ``setting`` (``r30b1`` ... ``r50b2``: :func:`random_template`, ``anchors``:
    :func:`anchor_template` with ``keywords``) -> (template words with BLANK, the words of each blank).
    Example: "a b c d e", a template "a __m__ d __m__" -> blanks [["b", "c"], ["e"]]."""
    indexed = [_Word(w, i) for i, w in enumerate(words)]
    if setting == "anchors":
        template = anchor_template(indexed, list(keywords))
    else:
        template = random_template(indexed, int(setting[1:3]) / 100, int(setting[4:]), rng)
    kept = [-1] + [w.index for w in template if isinstance(w, _Word)] + [len(words)]
    blanks, k = [], 0  # k: kept words seen
    for w in template:
        if isinstance(w, _Word):
            k += 1
        else:
            blanks.append(list(words[kept[k] + 1 : kept[k + 1]]))
    return [str(w) for w in template], blanks


def source(template: Sequence[str], fills: Sequence[List[str]]) -> List[str]:
    """The model's source: ``template``'s segments, each after the first opened by ``<seg>``, with the
    blanks' words for the first ``len(fills)`` blanks and ``__m__`` for the others.
    Example: "a __m__ c __m__" with fills [["b"]] -> "a <seg> b <seg> c <seg> __m__"."""
    out, blank = [], 0
    for j, w in enumerate(template):
        if w == BLANK:
            if j:
                out.append(BOUNDARY)
            out.extend(fills[blank] if blank < len(fills) else [BLANK])
            blank += 1
            if j + 1 < len(template):
                out.append(BOUNDARY)
        else:
            out.append(w)
    return out


def examples(template: Sequence[str], blanks: Sequence[List[str]]) -> List[Tuple[List[str], List[str]]]:
    """(source, target) for every blank, left to right, earlier blanks filled with their ground truth."""
    return [(source(template, blanks[:i]), list(blanks[i])) for i in range(len(blanks))]


def read(path: str) -> List[str]:
    if not os.path.isfile(path):
        fail(f"{path} not found (python recipes/prepare_lm.py and recipes/prepare_infill.py write it)")
    with open(path, encoding="utf-8") as f:
        return f.read().rstrip("\n").split("\n")


def split_examples(sentences, keywords, copies, seed, split, path):
    """All (source, target) pairs of a split and the settings drawn."""
    settings = RANDOM_SETTINGS + (["anchors"] if keywords is not None else [])
    pairs, drawn = [], Counter()
    for j, words in enumerate(sentences):
        for c in range(copies):
            rng = random.Random(f"{seed}-{split}-{c}-{j}")
            setting = rng.choice(settings)
            drawn[setting] += 1
            try:
                template, blanks = template_with_blanks(words, setting, rng, keywords[j] if keywords else ())
            except ValueError as e:
                fail(f"{path}:{j + 1}: {e}")
            pairs.extend(examples(template, blanks))
    return pairs, drawn


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the LM data-bin: dict.txt, {valid,test}.ref and .keywords")
    p.add_argument("--work", help="prepare_lm's work folder with train.tok (default work/NAME)")
    p.add_argument("--dest", help="output data-bin (default DATA-infill)")
    p.add_argument("--copies", type=int, default=2, help="templates per training sentence (default 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    if args.copies < 1:
        fail(f"--copies must be >= 1, got {args.copies}")
    data = args.data.rstrip("/")
    name = os.path.basename(data)
    work = args.work or os.path.join("work", name)
    dest = args.dest or data + "-infill"
    out_work = work.rstrip("/") + "-infill"
    dict_path = os.path.join(data, "dict.txt")
    words = [line for line in read(dict_path) if not line.startswith("madeupword")]
    if any(line.split(" ", 1)[0] in (BLANK, BOUNDARY) for line in words):
        fail(f"{dict_path} already holds {BLANK} or {BOUNDARY}: they would mean two things")
    os.makedirs(out_work, exist_ok=True)
    joined = os.path.join(out_work, "dict.txt")
    with open(joined, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in words + [f"{BLANK} 0", f"{BOUNDARY} 0"])
    for split in SPLITS:
        text = os.path.join(work, "train.tok") if split == "train" else os.path.join(data, f"{split}.ref")
        kw_path = os.path.join(data, f"{split}.keywords")
        if split == "train" and not os.path.isfile(kw_path):  # data prepared before prepare_lm.py wrote them there
            kw_path = os.path.join(work, "train.keywords")
        sentences = [line.split() for line in read(text)]
        keywords = None
        if split != "train" or os.path.isfile(kw_path):
            keywords = [line.split() for line in read(kw_path)]
            if len(keywords) != len(sentences):
                fail(f"{kw_path} has {len(keywords)} lines for the {len(sentences)} sentences of {text}")
        else:
            print(f"{kw_path} not found (prepare_lm.py --ar yes writes it): train has no anchors templates")
        pairs, drawn = split_examples(sentences, keywords, args.copies if split == "train" else 1, args.seed,
                                      split, kw_path)
        for side, k in (("tmpl", 0), ("blank", 1)):
            with open(os.path.join(out_work, f"{split}.{side}"), "w", encoding="utf-8") as f:
                f.writelines(" ".join(pair[k]) + "\n" for pair in pairs)
        print(f"{split}: {len(sentences):,} sentences, {sum(drawn.values()):,} templates "
              f"({', '.join(f'{s} {drawn[s]:,}' for s in sorted(drawn))}), {len(pairs):,} examples", flush=True)
    preprocess = os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess")
    out = subprocess.run([preprocess if os.path.isfile(preprocess) else "fairseq-preprocess",
                          "--source-lang", "tmpl", "--target-lang", "blank",
                          *[a for s in SPLITS for a in (f"--{s}pref", os.path.join(out_work, s))],
                          "--destdir", dest, "--srcdict", joined, "--tgtdict", joined, "--workers", str(args.workers)])
    if out.returncode:
        fail(f"fairseq-preprocess failed (exit {out.returncode}, its messages above) writing {dest}")
    print(f"ready: {dest}")


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
