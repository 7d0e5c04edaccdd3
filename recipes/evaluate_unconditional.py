#!/usr/bin/env python
"""Score unconditional generation the iterative expansion LM paper's way (section 4.1, after Caccia et al.):
quality is BLEU-5 of the samples with the *whole* held-out set as every sample's references, diversity is
self-BLEU-5 (every sample against all the other samples). Lower self-BLEU is more diverse.

    python recipes/evaluate_unconditional.py --data data-bin/lm_multi30k --path CKPT \
        -- --user-dir insnet_fairseq --task expansion_lm --sampling --sampling-topp 0.9 --beam 1  # the expansion LM
    python recipes/evaluate_unconditional.py --data data-bin/lm_multi30k --path CKPT \
        -- --user-dir insnet_fairseq --task insertion_lm --no-keywords --insertion-mode parallel \
           --slot-top-p 0.7 --sampling --sampling-topp 0.9 --beam 1                          # InsNet, from <s> </s>

fairseq-generate draws one sample per sentence of ``--gen-subset`` (test; the sentences only set the count),
once per ``--seeds`` value; the row (``--csv`` / ``--markdown``: appended) is the mean over seeds of:
``bleu5`` and ``self_bleu5`` (x 100, corpus BLEU, uniform weights over 1..5-grams, no smoothing, brevity
penalty against the closest reference length: NLTK's ``corpus_bleu`` with every sample given the same
reference list, computed here from each n-gram's largest reference count, so 1,000 samples against 1,000
references take a second), ``length`` (mean words), ``steps`` and ``seq_ratio`` (decoding steps per sentence,
and per word; ``steps_1_9``, ``steps_10_13``, ``steps_14_plus``: mean steps of the samples of that many words),
and the training data's own figures for reference (``--reference-rows``: the held-out set
scored as if it were samples: its BLEU-5 against the training sentences, its self-BLEU-5).
"""
import argparse
import bisect
import os
import sys
from collections import Counter
from fractions import Fraction
from math import exp, log

from recipes.common import append_row, parse_generate, read_lines, split_extra
from recipes.evaluate_lm import generate

ORDER = 5


def ngrams(words, n):
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _closest(sorted_lengths, length):
    """The reference length closest to ``length`` (the shorter on a tie, as NLTK)."""
    i = bisect.bisect_left(sorted_lengths, length)
    cands = sorted_lengths[max(0, i - 1) : i + 1]
    return min(cands, key=lambda r: (abs(r - length), r))


def _bleu(matches, totals, hyp_len, ref_len, order):
    if min(matches) == 0 or hyp_len == 0:
        return 0.0
    log_p = sum(log(Fraction(m, t)) for m, t in zip(matches, totals)) / order
    bp = 1.0 if hyp_len > ref_len else exp(1 - ref_len / hyp_len)
    return 100.0 * bp * exp(log_p)


def shared_reference_bleu(hyps, refs, order=ORDER):
    """Corpus BLEU x 100 of ``hyps`` (word lists), each against all of ``refs``: NLTK's
    ``corpus_bleu([refs] * len(hyps), hyps)``. Example: hyps [["a", "b"]], refs [["a", "b"], ["c"]], order 2
    -> 100.0."""
    best = [Counter() for _ in range(order)]
    for r in refs:
        for n in range(order):
            for g, c in ngrams(r, n + 1).items():
                if c > best[n][g]:
                    best[n][g] = c
    lengths = sorted(len(r) for r in refs)
    matches, totals, hyp_len, ref_len = [0] * order, [0] * order, 0, 0
    for h in hyps:
        for n in range(order):
            counts = ngrams(h, n + 1)
            matches[n] += sum(min(c, best[n][g]) for g, c in counts.items())
            totals[n] += max(len(h) - n, 1)  # NLTK counts at least one n-gram per sample
        hyp_len += len(h)
        ref_len += _closest(lengths, len(h))
    return _bleu(matches, totals, hyp_len, ref_len, order)


def self_bleu(hyps, order=ORDER):
    """Corpus BLEU x 100 of every sample against all the *other* samples (NLTK's ``corpus_bleu`` with sample i's
    references ``hyps[:i] + hyps[i + 1:]``): each n-gram keeps its two largest counts and who holds the largest."""
    top = [{} for _ in range(order)]  # n-gram -> (largest count, its sample, second largest)
    for i, h in enumerate(hyps):
        for n in range(order):
            for g, c in ngrams(h, n + 1).items():
                first, who, second = top[n].get(g, (0, -1, 0))
                top[n][g] = (c, i, first) if c > first else (first, who, max(second, c))
    lengths = sorted(len(h) for h in hyps)
    matches, totals, hyp_len, ref_len = [0] * order, [0] * order, 0, 0
    for i, h in enumerate(hyps):
        for n in range(order):
            for g, c in ngrams(h, n + 1).items():
                first, who, second = top[n][g]
                matches[n] += min(c, second if who == i else first)
            totals[n] += max(len(h) - n, 1)  # NLTK counts at least one n-gram per sample
        others = list(lengths)
        others.pop(bisect.bisect_left(others, len(h)))
        hyp_len += len(h)
        ref_len += _closest(others, len(h)) if others else 0
    return _bleu(matches, totals, hyp_len, ref_len, order)


LENGTH_BINS = ((1, 9), (10, 13), (14, 10 ** 9))  # output words: short, middle, long (Multi30k's median is 12)


def steps_by_length(hyps, steps):
    """Mean decoding steps of the samples of 1-9, 10-13 and 14+ words (None where no sample has that length; an
    autoregressive model: words + 1)."""
    out = {}
    for lo, hi in LENGTH_BINS:
        sel = [i for i, h in enumerate(hyps) if lo <= len(h) <= hi]
        name = f"steps_{lo}_{hi}" if hi < 10 ** 9 else f"steps_{lo}_plus"
        out[name] = (sum(steps[i] if steps else len(hyps[i]) + 1 for i in sel) / len(sel)) if sel else None
    return out


def main(argv=None):
    argv, extra = split_extra(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--path", help="checkpoint (not needed with --reference-rows only)")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--ref", help="held-out sentences, one per line (default DATA/SUBSET.ref)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--name", default=None)
    p.add_argument("--csv")
    p.add_argument("--markdown")
    p.add_argument("--reference-rows", metavar="TRAIN_TEXT",
                   help="also score the held-out sentences themselves against TRAIN_TEXT (tokenised training sentences)")
    args = p.parse_args(argv)
    ref_path = args.ref or os.path.join(args.data, f"{args.gen_subset}.ref")
    if not os.path.isfile(ref_path):
        sys.exit(f"{ref_path} not found (make lm-multi30k writes DATA/SUBSET.ref)")
    refs = [r.split() for r in read_lines(ref_path)]
    rows = []
    if args.reference_rows:
        train = [t.split() for t in read_lines(args.reference_rows)]
        rows.append({"model": f"held-out sentences ({ref_path}) vs {args.reference_rows}",
                     "bleu5": round(shared_reference_bleu(refs, train), 2), "self_bleu5": round(self_bleu(refs), 2),
                     "length": round(sum(map(len, refs)) / len(refs), 2), "steps": "", "seq_ratio": "",
                     "steps_1_9": "", "steps_10_13": "", "steps_14_plus": "", "seeds": ""})
    if args.path:
        runs = []
        for seed in args.seeds:
            out, _ = generate(args, extra, seed)
            _, tok, steps, _ = parse_generate(out.stdout)
            if sorted(tok) != list(range(len(refs))):
                sys.exit(f"{len(tok)} samples for the {len(refs)} sentences of {ref_path}: one sample per sentence")
            hyps = [tok[i].split() for i in sorted(tok)]
            length = sum(map(len, hyps)) / len(hyps)
            mean_steps = sum(steps.values()) / len(steps) if steps else length + 1
            runs.append({"bleu5": shared_reference_bleu(hyps, refs), "self_bleu5": self_bleu(hyps), "length": length,
                         "steps": mean_steps, "seq_ratio": mean_steps / max(length, 1e-9),
                         **steps_by_length(hyps, [steps[i] for i in sorted(tok)] if steps else None)})
        row = {"model": args.name or args.path}
        for key in runs[0]:
            values = [r[key] for r in runs if r[key] is not None]
            row[key] = round(sum(values) / len(values), 3 if key == "seq_ratio" else 2) if values else ""
        row["seeds"] = " ".join(map(str, args.seeds))
        rows.append(row)
    for row in rows:
        print(f"{row['model']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "model"))
        append_row(row, args.csv, args.markdown)
    return rows


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
