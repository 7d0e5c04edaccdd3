#!/usr/bin/env python
"""Score text infilling (the text-infilling paper's Table 1) for an InsNet language model.

    python recipes/evaluate_infill.py --data data-bin/lm_multi30k --path CKPT \
        --settings r30b1 r30b2 r50b1 r50b2 anchors --markdown results/infill.md \
        -- --insertion-mode sequential

For each setting S it runs ``fairseq-generate DATA --task insertion_lm --infill --template-suffix
template.S`` on ``--gen-subset`` (test; templates from ``recipes/prepare_infill.py``; everything after
``--`` goes to fairseq-generate) and prints (``--csv`` / ``--markdown``: appends) one row:

* ``bleu4`` (and ``bleu2``): corpus BLEU x 100 of the filled sentences against the original ones
  (DATA/SUBSET.ref), the metric of ``recipes/evaluate_lm.py`` (NLTK, no smoothing);
* ``template_bleu4``: the same for the template with its blanks left out (the paper's "Template" column);
* ``kept``: % of outputs that are their template with words in the blanks only (every template word,
  in order, and each stretch between blanks unbroken); 100 for InsNet by construction. A template word
  outside the model's dictionary comes out as ``<unk>`` and is restored before scoring;
* ``masked``: % of the original words in blanks; ``filled``: mean words written per blank;
  ``steps``, ``seq_ratio``: decoding steps per sentence and per inserted word; ``wall_s``: seconds of the
  fairseq-generate run, model loading included.
"""
import argparse
import os
import re
import sys

from recipes.common import append_row, parse_generate, read_lines, split_extra
from recipes.evaluate_lm import bleu, generate

BLANK = "__m__"


def fill_back(output, template, vocab=None):
    """``output`` (words) if it is ``template`` (words, BLANK at blanks) with zero or more words written
    at each blank and nowhere else, else None. A template word outside ``vocab`` (the model's
    dictionary) is copied by the model as ``<unk>``: it is matched as ``<unk>`` and restored.
    Example: template "a __m__ c" keeps "a b b c" and "a c", not "a c d"; with c out of the vocabulary,
    "a b <unk>" gives "a b c"."""
    pattern = ""
    for w in template:
        pattern += r"(?: \S+)*" if w == BLANK else "( " + re.escape(w if vocab is None or w in vocab else "<unk>") + ")"
    text = "".join(" " + w for w in output)
    m = re.fullmatch(pattern, text)
    if m is None:
        return None
    out = list(output)
    words = [w for w in template if w != BLANK]
    for g, w in enumerate(words, 1):
        out[text[: m.start(g) + 1].count(" ") - 1] = w  # the group starts at the space before its word
    return out


def reference_blanks(reference, template):
    """The words each blank of ``template`` (words, BLANK at blanks) holds in ``reference`` (words), left to
    right, or None when the reference does not fit the template. Where a template word also occurs next to a
    blank the split is ambiguous; the earliest blank takes the fewest words.
    Example: "a b c d e" with "a __m__ d __m__" -> [["b", "c"], ["e"]]."""
    pattern = "".join(r"((?: \S+)*?)" if w == BLANK else " " + re.escape(w) for w in template)
    m = re.fullmatch(pattern, "".join(" " + w for w in reference))
    return None if m is None else [g.split() for g in m.groups()]


def template_kept(output, template) -> bool:
    return fill_back(output, template) is not None


def score(outputs, steps, refs, templates, source="templates", vocab=None):
    """{id: output text}, {id: steps}, reference and template lines -> metrics; template words outside
    ``vocab`` are restored where the output copied them as ``<unk>`` (:func:`fill_back`)."""
    ids = sorted(outputs)
    if len(refs) != len(templates):
        sys.exit(f"{source} has {len(templates)} lines for {len(refs)} reference sentences")
    if ids != list(range(len(refs))):
        sys.exit(f"{len(outputs)} outputs for {len(refs)} sentences: every template needs exactly one output")
    tmpl = [t.split() for t in templates]
    filled = [fill_back(outputs[i].split(), t, vocab) for i, t in zip(ids, tmpl)]
    hyps = [f if f is not None else outputs[i].split() for i, f in zip(ids, filled)]
    ref_words = [r.split() for r in refs]
    bare = [[w for w in t if w != BLANK] for t in tmpl]
    written = sum(len(h) - len(b) for h, b in zip(hyps, bare))
    n_blanks = sum(t.count(BLANK) for t in tmpl)
    mean_steps = sum(steps.values()) / max(1, len(steps))
    return {
        "bleu4": bleu(hyps, ref_words, 4), "bleu2": bleu(hyps, ref_words, 2),
        "template_bleu4": bleu(bare, ref_words, 4),
        "kept": 100.0 * sum(f is not None for f in filled) / len(hyps),
        "masked": 100.0 * sum(len(r) - len(b) for r, b in zip(ref_words, bare)) / sum(map(len, ref_words)),
        "filled": written / max(1, n_blanks),
        "steps": mean_steps, "seq_ratio": mean_steps / max(1e-9, written / len(hyps)),
    }


ROUND = {"bleu4": 2, "bleu2": 2, "template_bleu4": 2, "kept": 1, "masked": 1, "filled": 2, "steps": 2,
         "seq_ratio": 3, "wall_s": 1, "ppl": 2}


def main(argv=None):
    argv, extra = split_extra(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--settings", nargs="+", default=["r30b1", "r30b2", "r50b1", "r50b2", "anchors"],
                   help="template suffixes after 'template.' (recipes/prepare_infill.py)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--name", default=None, help="row label prefix (default: the checkpoint path)")
    p.add_argument("--csv")
    p.add_argument("--markdown")
    args = p.parse_args(argv)
    refs = read_lines(os.path.join(args.data, f"{args.gen_subset}.ref"))
    vocab = {line.split(" ", 1)[0] for line in read_lines(os.path.join(args.data, "dict.txt"))}
    for setting in args.settings:
        tpath = os.path.join(args.data, f"{args.gen_subset}.template.{setting}")
        if not os.path.isfile(tpath):
            sys.exit(f"evaluate_infill.py: {tpath} not found (python recipes/prepare_infill.py --data {args.data})")
        out, wall = generate(args, ["--user-dir", "insnet_fairseq", "--task", "insertion_lm", "--infill",
                                    "--template-suffix", f"template.{setting}", *extra], args.seed)
        _, tok, steps, _ = parse_generate(out.stdout)
        row = {"system": f"{args.name or args.path}", "setting": setting,
               **score(tok, steps, refs, read_lines(tpath), tpath, vocab),
               "wall_s": wall}
        row = {k: round(v, ROUND[k]) if k in ROUND else v for k, v in row.items()}
        print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        append_row(row, args.csv, args.markdown)


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
