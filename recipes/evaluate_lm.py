#!/usr/bin/env python
"""Score lexically constrained generation (paper Table 2) the same way for every system.

    python recipes/evaluate_lm.py --data data-bin/lm_multi30k --path CKPT --paper-sampling 10 \
        -- --user-dir insnet_fairseq --task insertion_lm                 # InsNet(-Dinic, tau 10)
    python recipes/evaluate_lm.py --data data-bin/lm_multi30k-ar --path CKPT \
        -- --user-dir insnet_fairseq --task translation --beam 5         # the AR keywords->sentence baseline

Runs fairseq-generate on ``--gen-subset`` (test) of DATA (everything after ``--`` goes to it: the
system's task and decoding flags), once per ``--seeds`` value (sampling; the paper averages 3 runs),
and prints (``--csv`` / ``--markdown``: appends) one row, the mean over seeds of:

* ``bleu2``, ``bleu4``: corpus BLEU x 100 with uniform weights up to 2 and 4 (NLTK's
  ``nltk.translate.bleu_score.corpus_bleu``, no smoothing: the same as sacreBLEU with
  ``max_ngram_order`` n, ``tokenize='none'``, ``smooth_method='none'``), on the words of the output
  (fairseq's ``H-`` line) against the held-out sentence (DATA/SUBSET.ref: tokenised, lowercased);
* ``nist2``, ``nist4``: NLTK's ``nltk.translate.nist_score.corpus_nist`` with n = 2, 4, on the same
  words (when no output has n words, NIST-n is NLTK's NIST-m for the largest m that has: the orders
  without a single output n-gram add nothing, where NLTK would divide by zero);
* ``steps``: mean decoding steps per sentence (InsNet's ``--print-step``; an autoregressive model
  prints none: output words + 1); ``seq_ratio``: mean steps / mean output length in words (the
  paper's "sequential ratio", Figure 6); ``length``: mean output words;
* ``kw_coverage``: % of the keywords (DATA/SUBSET.keywords) found in the output in their order
  (per sentence the longest common subsequence of keywords and output words, summed);
  ``kw_sentences``: % of sentences holding all their keywords in order (100 for InsNet by
  construction: its decoding never deletes or reorders them);
* with ``--nll``: held-out ``token_nll``, ``position_nll``, ``termination_nll`` (bits per word,
  recipes/validate_nll.py; the paper's Table 6).

``--paper-sampling TAU`` decodes as the paper (section 4.1): parallel insertion into the slots in
the top 70% of the position mass, top-k token sampling with k = 1, 1, 3, 3, 5 for
tau = 10, 3, 1, 0.3, -inf (flags after ``--`` still win). Output counts must equal the reference
and keyword counts, else the script stops naming the files.
"""
import argparse
import math
import os
import subprocess
import sys
import time
import warnings

from recipes.common import append_row, ms_per_sentence, parse_generate, read_lines, split_extra
from recipes.validate_nll import validate_nll

PAPER_TOPK = {10.0: 1, 3.0: 1, 1.0: 3, 0.3: 3, -math.inf: 5}  # paper 4.1: top-{1,1,3,3,5} for tau {10,3,1,0.3,-inf}
PAPER_SLOT_MASS = 0.7


def paper_sampling_args(tau: float):
    """fairseq-generate flags of the paper's decoding for a model trained at ``tau``."""
    k = PAPER_TOPK.get(float(tau))
    if k is None:
        raise ValueError(f"--paper-sampling {tau}: the paper decodes tau in {{10, 3, 1, 0.3, -inf}} only")
    return ["--insertion-mode", "parallel", "--slot-top-p", str(PAPER_SLOT_MASS), "--sampling", "--sampling-topk",
            str(k), "--beam", "1", "--nbest", "1"]


# ------------------------------------------------------------------------------------------ metrics
def bleu(hyps, refs, n):
    """Corpus BLEU x 100, uniform weights over 1..n-grams (NLTK, no smoothing). hyps, refs: lists of word lists."""
    from nltk.translate.bleu_score import corpus_bleu

    if not any(hyps):
        return 0.0
    with warnings.catch_warnings():  # NLTK warns when an order has no match (the score is then 0)
        warnings.simplefilter("ignore")
        return 100.0 * corpus_bleu([[r] for r in refs], hyps, weights=(1.0 / n,) * n)


def nist(hyps, refs, n):
    """NLTK's corpus NIST-n (orders without any output n-gram add nothing, see the module docstring)."""
    from nltk.translate.nist_score import corpus_nist

    longest = max((len(h) for h in hyps), default=0)
    m = min(n, longest)
    return corpus_nist([[r] for r in refs], hyps, n=m) if m > 0 else 0.0


def lcs(a, b) -> int:
    """Length of the longest common subsequence of two word lists."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def keyword_coverage(hyps, keywords):
    """(% of keywords present in order, % of sentences with all keywords in order); sentences without
    keywords count as covered."""
    total = sum(len(k) for k in keywords)
    found = [lcs(k, h) for k, h in zip(keywords, hyps)]
    full = sum(f == len(k) for f, k in zip(found, keywords))
    return (100.0 * sum(found) / total if total else 100.0), 100.0 * full / max(1, len(keywords))


def score(hyp_text, steps, refs, keywords, ref_path="references", keyword_path="keywords"):
    """{id: output text}, {id: steps} (empty for an autoregressive model), reference and keyword lines -> metrics."""
    ids = sorted(hyp_text)
    if len(refs) != len(keywords):
        sys.exit(f"{ref_path} has {len(refs)} lines but {keyword_path} has {len(keywords)}: they must pair line by line")
    if ids != list(range(len(refs))):
        sys.exit(f"{len(hyp_text)} outputs (ids {ids[0] if ids else '-'}..{ids[-1] if ids else '-'}) for {len(refs)} "
                 f"sentences of {ref_path}: every held-out sentence needs exactly one output (sentences skipped by "
                 "fairseq-generate? --skip-invalid-size-inputs-valid-test, --max-target-positions)")
    hyps = [hyp_text[i].split() for i in ids]
    ref_words = [r.split() for r in refs]
    kw_words = [k.split() for k in keywords]
    length = sum(len(h) for h in hyps) / len(hyps)
    mean_steps = sum(steps.values()) / len(steps) if steps else length + 1  # AR: one step per word and </s>
    coverage, full = keyword_coverage(hyps, kw_words)
    return {
        "bleu2": bleu(hyps, ref_words, 2), "bleu4": bleu(hyps, ref_words, 4),
        "nist2": nist(hyps, ref_words, 2), "nist4": nist(hyps, ref_words, 4),
        "steps": mean_steps, "seq_ratio": mean_steps / max(length, 1e-9), "length": length,
        "kw_coverage": coverage, "kw_sentences": full,
    }


# ------------------------------------------------------------------------------------------ running
def generate(args, extra, seed):
    cmd = ["fairseq-generate", args.data, "--path", args.path, "--gen-subset", args.gen_subset,
           "--batch-size", str(args.batch_size), "--seed", str(seed), *extra]
    task = extra[extra.index("--task") + 1] if "--task" in extra else "translation"
    if task not in ("translation", "language_modeling", "unconditional_language_modeling"):  # AR: no step count
        cmd.append("--print-step")
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fairseq-generate failed:\n{out.stderr[-1500:]}")
    return out, time.perf_counter() - start


ROUND = {"bleu2": 2, "bleu4": 2, "nist2": 3, "nist4": 3, "steps": 2, "seq_ratio": 3, "length": 2, "kw_coverage": 2,
         "kw_sentences": 2, "ms_per_sentence": 1, "token_nll": 3, "position_nll": 3, "termination_nll": 3, "loss": 3,
         "nll_loss": 3}


def main(argv=None):
    argv, extra = split_extra(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--ref", help="held-out sentences, one per line (default DATA/SUBSET.ref)")
    p.add_argument("--keywords", help="their keywords (default DATA/SUBSET.keywords)")
    p.add_argument("--paper-sampling", type=float, metavar="TAU", help="decode as the paper for a model of this tau")
    p.add_argument("--seeds", type=int, nargs="+", default=[1], help="one decoding per seed, metrics averaged")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--nll", action="store_true", help="also the held-out NLL terms (fairseq-validate)")
    p.add_argument("--name", default=None, help="row label (default: the checkpoint path)")
    p.add_argument("--csv", help="append the row to this CSV file")
    p.add_argument("--markdown", help="append the row to this Markdown table (header written when new)")
    args = p.parse_args(argv)
    ref_path = args.ref or os.path.join(args.data, f"{args.gen_subset}.ref")
    kw_path = args.keywords or os.path.join(args.data, f"{args.gen_subset}.keywords")
    for path in (ref_path, kw_path):
        if not os.path.isfile(path):
            sys.exit(f"{path} not found (make lm-multi30k / lm-custom write DATA/SUBSET.ref and .keywords)")
    refs, keywords = read_lines(ref_path), read_lines(kw_path)
    gen_args = [*(paper_sampling_args(args.paper_sampling) if args.paper_sampling is not None else []), *extra]

    runs = []
    for seed in args.seeds:
        out, wall = generate(args, gen_args, seed)
        _, tok, steps, _ = parse_generate(out.stdout)
        row = score(tok, steps, refs, keywords, ref_path, kw_path)
        row["ms_per_sentence"] = ms_per_sentence(out.stderr)
        runs.append(row)
    row = {"model": args.name or args.path}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        row[key] = round(sum(values) / len(values), ROUND.get(key, 3)) if values else None
    row["seeds"] = " ".join(map(str, args.seeds))
    if args.nll:
        task_args = [a for a in extra if a not in ("--sampling",)]
        keep = []
        for flag in ("--user-dir", "--task"):
            if flag in task_args:
                keep += [flag, task_args[task_args.index(flag) + 1]]
        for key, value in validate_nll(args.data, args.path, args.gen_subset, keep).items():
            row[key] = round(value, ROUND.get(key, 3))
    print(f"{row['model']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "model"))
    append_row(row, args.csv, args.markdown)
    return row


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
