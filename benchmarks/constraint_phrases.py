#!/usr/bin/env python
"""Constraint phrases through fairseq-interactive: are they kept whole?

    python benchmarks/constraint_phrases.py --path checkpoints/demo-parallel/checkpoint_last.pt \
        --data data-bin/multi30k_en_de [--lines 200] [--seed 1]      # or: make constraint-check

Each of ``--lines`` test sentences (seeded draw from ``--source`` / ``--target``, BPE text: the recipe's
``work/NAME/test.bpe.*``) gets 1-2 constraint phrases of 1-2 whole words taken from its reference, in reference
order, and is decoded with ``--constraints`` in every mode of ``--modes``: ``sequential``, ``parallel`` (its default
flags), ``parallel-no-skip`` (``--no-skip-repeats``). For each mode it prints the lines, the phrases, the phrases
*split* (their BPE tokens not contiguous in the output), the phrases *not whole* (after BPE removal, not a run of whole
words of the output, or out of order) and the lines with either; the exit status is 1 when any phrase is split or not
whole, or fairseq-interactive fails.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

from recipes.common import ROOT, fairseq_tool, read_lines, tool_env

MODES = {
    "sequential": ["--insertion-mode", "sequential"],
    "parallel": ["--insertion-mode", "parallel"],
    "parallel-no-skip": ["--insertion-mode", "parallel", "--no-skip-repeats"],
}


def bpe_words(tokens):
    """BPE tokens -> whole words, each a list of its pieces. Example: "a@@ b c" -> [[a@@, b], [c]]."""
    out, word = [], []
    for t in tokens:
        word.append(t)
        if not t.endswith("@@"):
            out.append(word)
            word = []
    return out + ([word] if word else [])


def draw_phrases(reference: str, rng: random.Random):
    """1-2 phrases of 1-2 whole words of ``reference`` (BPE text), disjoint and in order, as BPE strings."""
    words = bpe_words(reference.split())
    if not words:
        return []
    k = min(rng.randint(1, 2), len(words))
    starts = sorted(rng.sample(range(len(words)), k))
    phrases, end = [], 0
    for s in starts:
        if s < end:
            continue
        n = min(rng.randint(1, 2), len(words) - s)
        phrases.append(" ".join(t for w in words[s:s + n] for t in w))
        end = s + n
    return phrases


def contiguous(tokens, phrase) -> bool:
    """Whether the BPE tokens of ``phrase`` appear as one run in ``tokens``."""
    n = len(phrase)
    return any(tokens[i:i + n] == phrase for i in range(len(tokens) - n + 1))


def whole_in_order(output: str, phrases) -> list:
    """Per phrase: does it appear as a run of whole words of ``output`` (BPE removed), each after the one before?"""
    out, start, ok = output.replace("@@ ", "").split(), 0, []
    for phrase in phrases:
        want = phrase.replace("@@ ", "").split()
        at = next((i for i in range(start, len(out) - len(want) + 1) if out[i:i + len(want)] == want), None)
        ok.append(at is not None)
        start = start if at is None else at + len(want)
    return ok


def interactive(args, lines, flags):
    """fairseq-interactive --constraints over ``lines``; the hypothesis (BPE text) of each line, in order."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    cmd = [*fairseq_tool("interactive"), args.data, "--user-dir", os.path.join(ROOT, "insnet_fairseq"),
           "--task", "insertion_translation", "--path", args.path, "--input", f.name, "--constraints",
           "--batch-size", "64", "--buffer-size", "64", "--cpu", "--input-preprocessing", "none", *flags]  # BPE text in
    proc = subprocess.run(cmd, capture_output=True, text=True, env=tool_env(OMP_NUM_THREADS=str(args.threads)))
    os.unlink(f.name)
    if proc.returncode != 0:
        sys.exit(f"constraint_phrases: fairseq-interactive failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    hyps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("H-"):
            sid, _, text = (line.split("\t") + ["", ""])[:3]
            hyps[int(sid[2:])] = text
    return [hyps.get(i, "") for i in range(len(lines))]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="an insertion_translation checkpoint")
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--source", help="BPE source sentences (default: work/NAME/test.bpe.SRC)")
    p.add_argument("--target", help="BPE references (default: work/NAME/test.bpe.TGT)")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    work = os.path.join("work", os.path.basename(os.path.normpath(args.data)))
    source = args.source or os.path.join(work, f"test.bpe.{args.src}")
    target = args.target or os.path.join(work, f"test.bpe.{args.tgt}")
    for name, path in (("--path", args.path), ("--source", source), ("--target", target)):
        if not os.path.isfile(path):
            sys.exit(f"constraint_phrases: {name} {path}: no such file")
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        sys.exit(f"constraint_phrases: --modes {','.join(unknown)}: unknown (choose from {', '.join(MODES)})")
    src, ref = read_lines(source), read_lines(target)
    rng = random.Random(args.seed)
    picked = sorted(rng.sample(range(len(src)), min(args.lines, len(src))))
    cases = [(src[i].strip(), draw_phrases(ref[i], rng)) for i in picked]
    cases = [(s, ph) for s, ph in cases if s and ph]
    lines = ["\t".join([s, *ph]) for s, ph in cases]
    n_phrases = sum(len(ph) for _, ph in cases)
    print(f"{len(lines)} lines, {n_phrases} constraint phrases ({args.path})")
    print(f"{'mode':<18} {'lines':>6} {'phrases':>8} {'split':>6} {'not whole':>10} {'lines hit':>10}")
    failed = False
    for mode in modes:
        outputs = interactive(args, lines, MODES[mode])
        split = not_whole = hit = 0
        for (_, phrases), out in zip(cases, outputs):
            tokens = out.split()
            s = sum(not contiguous(tokens, ph.split()) for ph in phrases)
            w = sum(not ok for ok in whole_in_order(out, phrases))
            split, not_whole, hit = split + s, not_whole + w, hit + bool(s or w)
        failed |= bool(split or not_whole)
        print(f"{mode:<18} {len(lines):>6} {n_phrases:>8} {split:>6} {not_whole:>10} {hit:>10}")
    print("FAIL" if failed else "PASS: every phrase contiguous and whole words, in order, in every mode")
    return 1 if failed else 0


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    sys.exit(main())
