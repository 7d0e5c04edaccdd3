#!/usr/bin/env python
"""Bring your own corpus: prepare, train and evaluate any parallel corpus the way the named ones are.

    make custom NAME=my_corpus SRC=xx TGT=yy RAW_DIR=/path/to/corpus
    python recipes/custom.py --name my_corpus --src xx --tgt yy --raw-dir /path/to/corpus   # the same

RAW_DIR holds {train,valid,test}.{xx,yy}, one sentence per line, line i of .xx translated by line
i of .yy. The stages, each skipped or resumed when already done:

1. prepare: recipes/prepare_bitext.py -> work/NAME/, data-bin/NAME/ (sacremoses tokenisation,
   joint subword-nmt BPE with --bpe-merges, fairseq-preprocess --joined-dictionary). It checks
   the files (a line-count mismatch or a pair with an empty side is reported with its file and
   line), unescapes Moses/HTML escapes (&apos; &quot; &amp; ...) and does not tokenise again a
   side that is already tokenised (--unescape / --tokenized: auto, yes, no). A test pair dropped
   because a side is empty is reported, and the test references are written without it
   (work/NAME/test.ref.yy, test.clean.yy; test.lines maps them to the raw line numbers).
2. train: recipes/train.sh KIND data-bin/NAME SAVE_DIR (KIND insnet, ar, levt or inst; the
   results-table settings; environment UPDATES, MINUTES, MAX_TOKENS, LR, WARMUP, THREADS, ORDER as
   train.sh reads them; --train-args adds fairseq-train flags).
3. evaluate: recipes/evaluate.py on the test set against work/NAME/test.ref.yy (sacreBLEU of the
   detokenised output) and work/NAME/test.clean.yy (tokenised BLEU), with the decoding flags of KIND
   (insnet: --insertion-mode MODE) and --generate-args.
"""
import argparse
import os
import shlex
import subprocess
import sys

from recipes import evaluate, prepare_bitext
from recipes.common import ROOT, tool_env

HERE = os.path.dirname(os.path.abspath(__file__))

STAGES = ("prepare", "train", "evaluate")


def decode_flags(kind, mode):
    """fairseq-generate flags that decode a model of KIND (as experiments/results_table.sh does)."""
    common = ["--user-dir", os.path.join(ROOT, "insnet_fairseq")]  # also lets fairseq load its checkpoints under torch >= 2.6
    if kind == "insnet":
        return common + ["--task", "insertion_translation", "--insertion-mode", mode]
    if kind == "ar":
        return common + ["--beam", "5"]
    return common + ["--task", "translation_lev", "--iter-decode-max-iter", "9", "--iter-decode-eos-penalty", "0",
                     "--beam", "1"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="data-bin/NAME, work/NAME")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--raw-dir", required=True, help="folder with {train,valid,test}.{src,tgt}")
    p.add_argument("--kind", choices=["insnet", "ar", "levt", "inst"], default="insnet")
    p.add_argument("--mode", choices=["sequential", "parallel"], default="sequential", help="InsNet decoding")
    p.add_argument("--bpe-merges", type=int, default=10000)
    p.add_argument("--tokenized", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--unescape", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--max-lines", type=int, default=0, help="keep the first N lines of every split")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--dest-dir", default="data-bin")
    p.add_argument("--save-dir", default="", help="default: checkpoints/NAME-KIND")
    p.add_argument("--train-args", default="", help="extra fairseq-train flags (one string)")
    p.add_argument("--generate-args", default="", help="extra fairseq-generate flags (one string)")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    p.add_argument("--csv", help="append the evaluation row to this CSV file")
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        p.error(f"--stages: unknown {', '.join(unknown)} (choose from {', '.join(STAGES)})")
    data = os.path.abspath(os.path.join(args.dest_dir, args.name))
    work = os.path.abspath(os.path.join(args.work_dir, args.name))
    save = os.path.abspath(args.save_dir or os.path.join("checkpoints", f"{args.name}-{args.kind}"))
    # the tools of the interpreter running this (the project's .venv) come first
    env = tool_env()

    if "prepare" in stages:
        print(f"== custom {args.name}: prepare {args.raw_dir} -> {data}", flush=True)
        argv = ["--name", args.name, "--raw-dir", args.raw_dir, "--src", args.src, "--tgt", args.tgt,
                "--bpe-merges", str(args.bpe_merges), "--max-lines", str(args.max_lines), "--work-dir", args.work_dir,
                "--dest-dir", args.dest_dir, "--tokenized", args.tokenized, "--unescape", args.unescape]
        if args.workers:
            argv += ["--workers", str(args.workers)]
        os.environ["PATH"] = env["PATH"]  # subword-nmt, fairseq-preprocess
        prepare_bitext.main(argv)
    if "train" in stages:
        print(f"== custom {args.name}: train {args.kind} -> {save}", flush=True)
        cmd = ["bash", os.path.join(HERE, "train.sh"), args.kind, data, save, *shlex.split(args.train_args)]
        out = subprocess.run(cmd, cwd=ROOT, env=env)  # train.sh passes --user-dir insnet_fairseq: from ROOT
        if out.returncode != 0:
            sys.exit(f"custom: training failed (recipes/train.sh {args.kind} {data} {save}, exit {out.returncode})")
    if "evaluate" in stages:
        ref = os.path.join(work, f"test.ref.{args.tgt}")
        if not os.path.exists(ref):
            sys.exit(f"custom: {ref} is missing: run the prepare stage first")
        print(f"== custom {args.name}: evaluate {save}/checkpoint_last.pt on the test set", flush=True)
        ev = ["--data", data, "--path", os.path.join(save, "checkpoint_last.pt"), "--src", args.src, "--tgt", args.tgt,
              "--raw-ref", ref, "--tok-ref", os.path.join(work, f"test.clean.{args.tgt}"),
              "--name", f"{args.name} {args.kind}" + (f" {args.mode}" if args.kind == "insnet" else "")]
        if args.csv:
            ev += ["--csv", args.csv]
        os.environ["PATH"] = env["PATH"]  # fairseq-generate
        return evaluate.main(ev + ["--", *decode_flags(args.kind, args.mode), *shlex.split(args.generate_args)])


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
