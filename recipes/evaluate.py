#!/usr/bin/env python
"""Evaluate a checkpoint the same way for every model: run fairseq-generate, then score.

    python recipes/evaluate.py --data data-bin/multi30k_en_de --path ckpt.pt \
        --raw-ref ../shared/data/multi30k/test.de --tok-ref work/multi30k_en_de/test.clean.de \
        --src en --tgt de -- --user-dir insnet_fairseq --task insertion_translation --insertion-mode parallel

Everything after ``--`` goes to fairseq-generate (the model's task and decoding flags; e.g. for
fairseq's NAT baselines ``--task translation_lev --iter-decode-max-iter 9 --iter-decode-eos-penalty 0``).
Prints (and with ``--csv`` / ``--markdown`` appends) one row: detokenised sacreBLEU against the raw
reference (with its signature), tokenised BLEU against the Moses-tokenised reference (what NAT
papers report), average decoding steps (fairseq's ``--print-step``; for an autoregressive model,
which prints none, output length + 1), steps per output token ("sequential ratio", the paper's
Figure 6), and ms per sentence from fairseq-generate's own timing, at ``--batch-size`` (64) and,
with ``--batch1``, also at batch 1 (a second decoding of the test set, one sentence at a time).
``--nll`` adds the split's held-out NLL terms (InsNet: ``token_nll``, ``position_nll``,
``termination_nll``; recipes/validate_nll.py), as the ablation table reports them (experiments/lm_budget.sh).
"""
import argparse
import re
import subprocess
import sys
import time

import sacrebleu

from recipes.common import append_row, ms_per_sentence, parse_generate, split_extra
from recipes.validate_nll import validate_nll


def main(argv=None):
    argv, extra = split_extra(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--raw-ref", required=True, help="untokenised reference, one line per test sentence")
    p.add_argument("--tok-ref", help="Moses-tokenised reference (for tokenised BLEU)")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--name", default=None, help="row label (default: the checkpoint path)")
    p.add_argument("--batch1", action="store_true", help="also time decoding at batch 1")
    p.add_argument("--csv", help="append the row to this CSV file")
    p.add_argument("--markdown", help="append the row to this Markdown table (header written when new)")
    p.add_argument("--nll", action="store_true", help="also the held-out NLL terms (fairseq-validate on --gen-subset)")
    args = p.parse_args(argv)

    out, wall = generate(args, args.batch_size, extra)
    hyp, tok_hyp, steps, ntok = parse_generate(out.stdout)
    row = score(args, hyp, tok_hyp, steps, ntok)
    row[f"ms_per_sentence_b{args.batch_size}"] = ms_per_sentence(out.stderr)
    if args.batch1:
        out1, _ = generate(args, 1, extra)
        row["ms_per_sentence_b1"] = ms_per_sentence(out1.stderr)
    if args.nll:
        keep = [a for flag in ("--user-dir", "--task") if flag in extra for a in (flag, extra[extra.index(flag) + 1])]
        row.update({k: round(v, 3) for k, v in validate_nll(args.data, args.path, args.gen_subset, keep).items()})
    row["wall_s"] = round(wall, 1)
    passes = re.findall(r"\(([\d.]+) of them verification passes\)", out.stderr)  # --insertion-verify: the log's split
    print(f"{row['model']}: sacreBLEU {row['sacrebleu']} ({row['signature']})"
          + "".join(f", {k} {v}" for k, v in row.items() if k not in ("model", "sacrebleu", "signature"))
          + (f", of the steps/token {passes[-1]} verification passes" if passes else ""))
    append_row(row, args.csv, args.markdown, [k for k in row if k not in ("signature", "wall_s")])
    return row


def generate(args, batch_size, extra):
    cmd = ["fairseq-generate", args.data, "--path", args.path, "--gen-subset", args.gen_subset,
           "--batch-size", str(batch_size), "--remove-bpe", "--tokenizer", "moses",
           "--source-lang", args.src, "--target-lang", args.tgt, *extra]
    task = extra[extra.index("--task") + 1] if "--task" in extra else "translation"
    if task != "translation":  # fairseq's autoregressive generator has no step count to print
        cmd.append("--print-step")
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"fairseq-generate failed:\n{out.stderr[-1500:]}")
    return out, wall


def score(args, hyp, tok_hyp, steps, ntok):
    with open(args.raw_ref, encoding="utf-8") as f:
        raw = [l.rstrip("\n") for l in f]
    ids = sorted(hyp)
    if ids != list(range(len(raw))):
        sys.exit(f"{len(hyp)} hypotheses (ids {ids[0] if ids else '-'}..{ids[-1] if ids else '-'}) for {len(raw)} reference "
                 f"lines in {args.raw_ref}: the references are not aligned with the binarised test set (a test pair "
                 "dropped by the preparation, --max-lines, or sentences fairseq-generate skipped?); score against "
                 "work/<name>/test.ref.<tgt>, written by recipes/prepare_bitext.py for exactly the pairs it binarises")
    hyps = [hyp[i] for i in ids]
    bleu = sacrebleu.metrics.BLEU()
    detok = bleu.corpus_score(hyps, [raw])
    row = {"model": args.name or args.path, "sacrebleu": round(detok.score, 2), "signature": str(bleu.get_signature())}
    words = [h.split() for h in hyps]
    repeats = sum(a == b for w in words for a, b in zip(w, w[1:])) / max(1, sum(len(w) for w in words))
    print(f"{row['model']}: {detok} | adjacent repeated words {100 * repeats:.2f}%")
    if args.tok_ref:
        with open(args.tok_ref, encoding="utf-8") as f:
            tok_ref = [l.rstrip("\n") for l in f]
        if len(tok_ref) != len(raw):
            sys.exit(f"{args.tok_ref} has {len(tok_ref)} lines but {args.raw_ref} has {len(raw)}: references out of alignment")
        tok_hyps = [tok_hyp[i] for i in ids]
        row["tok_bleu"] = round(sacrebleu.corpus_bleu(tok_hyps, [tok_ref], tokenize="none").score, 2)
    mean_len = sum(ntok.values()) / max(1, len(ntok))
    # autoregressive models print no steps: one step per output token and one for </s>
    mean_steps = sum(steps.values()) / len(steps) if steps else mean_len + 1
    row["steps"] = round(mean_steps, 2)
    row["steps_per_token"] = round(mean_steps / max(mean_len, 1e-9), 3)
    return row

if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
