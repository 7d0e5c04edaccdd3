#!/usr/bin/env python
"""Sequence-level knowledge distillation for keywords -> sentence (``--task insertion_lm``, the "+KD" rows).

    python recipes/distill_lm.py lm_multi30k --teacher checkpoints/lm_ar/checkpoint_best.pt
    # data-bin/lm_multi30k -> data-bin/lm_multi30k-distill; then, e.g.:
    bash recipes/train.sh insnet-lm data-bin/lm_multi30k-distill checkpoints/lm_kd --insertion-order keywords

1. The teacher, the autoregressive keywords -> sentence model (``bash recipes/train.sh ar data-bin/lm_multi30k-ar
   checkpoints/lm_ar``), beam-decodes the keywords of every training sentence: recipes/distill.py's decoding over
   data-bin/NAME-ar (BEAM, GEN_BATCH;
   GEN_ARGS, default ``--max-len-a 0 --max-len-b 50``: the source is a few keywords, not the sentence), saved as
   work/NAME-SUFFIX/generate-train.txt.
2. A training sentence is replaced by the teacher's when that keeps the sentence's keywords in their order (a
   subsequence, as the keywords order and the constrained start need them); otherwise the original stays, and the
   count is reported, as is every empty hypothesis.
3. ``fairseq-preprocess --only-source`` with the original dictionary into data-bin/NAME-SUFFIX; the valid and
   test sets and every keyword and reference file are copied, so the rows trained on it are scored on the same sets.

With ``--with-originals`` the training set is the distilled sentences followed by every original sentence (twice the
lines; train.keywords doubled to match): the teacher's simpler sentences and the real ones, side by side.

Every step is skipped when its output exists. ``--suffix`` (DISTILL_SUFFIX, default ``distill``) names the outputs.
"""
import argparse
import glob
import os
import shutil
import subprocess

from recipes.common import ROOT, fairseq_tool, tool_env
from recipes.distill import decode_train, ensemble_paths, fail, languages, log


def keeps_keywords(keywords, words) -> bool:
    """Whether ``keywords`` (list of words) occur in ``words`` in their order (a subsequence).

    Example: ["man", "hat"] in "a man in a red hat ." -> True; in "a hat on a man ." -> False.
    """
    rest = iter(words)
    return all(any(w == k for w in rest) for k in keywords)


def distilled_sentences(hyps, originals, keywords):
    """The training sentences of the distilled corpus, with the number of originals kept.

    hyps {sentence id: the teacher's sentence}; originals and keywords: one line per training sentence.
    Example: hyps {0: "a man in a hat .", 1: "a dog ."}, originals ["a man with a hat .", "two cats sleep ."],
    keywords ["man hat", "cats"] -> (["a man in a hat .", "two cats sleep ."], 1).
    """
    out, kept = [], 0
    for i, (original, kw) in enumerate(zip(originals, keywords)):
        hyp = hyps.get(i, "").strip()
        if hyp and keeps_keywords(kw.split(), hyp.split()):
            out.append(hyp)
        else:
            out.append(original)
            kept += 1
    return out, kept


def read_hypotheses(generated, n):
    """{id: best hypothesis} of fairseq-generate's output; every one of the ``n`` training sentences must have one."""
    hyps = {}
    with open(generated, encoding="utf-8") as f:
        for line in f:
            if line.startswith("H-"):
                kind, _, rest = line.rstrip("\n").partition("\t")
                hyps[int(kind[2:])] = rest.partition("\t")[2]
    if sorted(hyps) != list(range(n)):
        fail(f"{generated}: {len(hyps)} hypotheses for {n} training sentences")
    return hyps


def read_lines(path):
    if not os.path.isfile(path):
        fail(f"{path} not found: prepare the corpus first (make lm-multi30k)")
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="the LM data-bin folder's name, e.g. lm_multi30k (its AR bitext: NAME-ar)")
    p.add_argument("--teacher", default=os.environ.get("TEACHER", ""),
                   help="the AR keywords -> sentence checkpoint, or an ensemble of them joined by ':' (as --path)")
    p.add_argument("--data-dir", default="data-bin")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--suffix", default=os.environ.get("DISTILL_SUFFIX", "distill"))
    p.add_argument("--with-originals", action="store_true",
                   help="train on the distilled sentences and the original ones (twice the lines)")
    args = p.parse_args(argv)
    if not args.suffix or "/" in args.suffix:
        fail(f"--suffix must be a non-empty name without '/', got '{args.suffix}'")
    if not args.teacher:
        fail("--teacher: no checkpoint given (train one: bash recipes/train.sh ar data-bin/NAME-ar SAVE_DIR)")
    teacher = ":".join(os.path.abspath(p) for p in ensemble_paths(args.teacher))
    data = os.path.abspath(os.path.join(args.data_dir, args.name))
    ar_data = data + "-ar"
    for d in (data, ar_data):
        if not os.path.isdir(d):
            fail(f"{d} does not exist: prepare the corpus first (make lm-multi30k)")
    dest = os.path.abspath(os.path.join(args.data_dir, f"{args.name}-{args.suffix}"))
    work = os.path.abspath(os.path.join(args.work_dir, f"{args.name}-{args.suffix}"))
    os.makedirs(work, exist_ok=True)

    originals = read_lines(os.path.join(os.path.abspath(args.work_dir), args.name, "train.tok"))
    keywords = read_lines(os.path.join(data, "train.keywords"))
    if len(keywords) != len(originals):
        fail(f"{data}/train.keywords has {len(keywords)} lines for {len(originals)} training sentences")
    src, tgt = languages(ar_data)
    generated = os.path.join(work, "generate-train.txt")
    decode_train(ar_data, teacher, src, tgt, generated, gen_args="--max-len-a 0 --max-len-b 50")

    text = os.path.join(work, "train.tok")
    if os.path.exists(text):
        log(f"distilled text: done before, skipped ({text})")
    else:
        sentences, kept = distilled_sentences(read_hypotheses(generated, len(originals)), originals, keywords)
        words = sum(len(s.split()) for s in sentences) / max(1, sum(len(s.split()) for s in originals))
        log(f"distilled training set: {len(sentences)} sentences, {len(sentences) - kept} from the teacher, {kept} "
            f"originals kept (a teacher sentence missing a keyword or out of order, or empty); "
            f"{words:.3f}x the original words" + (f"; then the {len(originals)} originals" if args.with_originals else ""))
        if args.with_originals:
            sentences = sentences + originals
        with open(text + ".tmp", "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in sentences))
        os.replace(text + ".tmp", text)

    if os.path.exists(os.path.join(dest, "train.bin")):
        log(f"binarise: done before, skipped ({dest})")
        return
    code = subprocess.run([*fairseq_tool("preprocess"), "--only-source", "--trainpref", text,
                           "--destdir", dest, "--srcdict", os.path.join(data, "dict.txt"),
                           "--workers", str(min(4, os.cpu_count() or 1))], cwd=ROOT, env=tool_env()).returncode
    if code != 0:
        fail(f"fairseq-preprocess failed (exit {code})")
    for path in glob.glob(os.path.join(data, "*")):  # the held-out sets, keyword and reference files, unchanged
        name = os.path.basename(path)
        if os.path.isfile(path) and not name.startswith(("train.bin", "train.idx", "dict.txt", "preprocess.log")):
            shutil.copyfile(path, os.path.join(dest, name))
    if args.with_originals:  # the keywords of every line: the distilled copies', then the originals'
        with open(os.path.join(dest, "train.keywords"), "w", encoding="utf-8") as f:
            f.write("".join(k + "\n" for k in keywords + keywords))
    log(f"ready: {dest}")


if __name__ == "__main__":
    main()
