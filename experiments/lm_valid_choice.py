#!/usr/bin/env python
"""Choose a keywords -> sentence row's checkpoint on the valid set: the best valid loss, the last, or their average.

    python experiments/lm_valid_choice.py --data data-bin/lm_multi30k --dir checkpoints/lm_seq-keywords \
        --csv results/DIR/valid_choice.csv --name "InsNet keywords order" \
        -- --user-dir insnet_fairseq --task insertion_lm --insertion-mode sequential --insertion-beam 5

Each candidate (``checkpoint_best.pt``, ``checkpoint_last.pt``, ``checkpoint_avg.pt``: recipes/average_checkpoints.py
over the run's kept checkpoints, remade only when one is newer) is decoded on ``--gen-subset`` (valid) with the
flags after ``--`` and scored by recipes/evaluate_lm.py (one row each in ``--csv``). The chosen one has the highest
BLEU-4 (ties: the first in that order); its path is the last line printed, so a script can read it with ``tail -1``.
Test figures are then made from that checkpoint alone: the test set plays no part in the choice.
"""
import argparse
import os
import subprocess
import sys

from recipes import evaluate_lm
from recipes.common import split_extra

CANDIDATES = ("best", "last", "avg")


def chosen(rows):
    """The candidate name of the highest ``bleu4`` among ``rows`` [(name, row dict)] (ties: the first).

    Example: [("best", {"bleu4": 29.5}), ("last", {"bleu4": 29.5}), ("avg", {"bleu4": 29.8})] -> "avg".
    """
    top = max(r["bleu4"] for _, r in rows)
    return next(name for name, r in rows if r["bleu4"] == top)


def main(argv=None):
    argv, extra = split_extra(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--dir", required=True, help="the row's checkpoint directory")
    p.add_argument("--gen-subset", default="valid")
    p.add_argument("--name", default=None, help="row label prefix (default: the directory)")
    p.add_argument("--csv", help="append one row per candidate to this CSV file")
    args = p.parse_args(argv)
    last = os.path.join(args.dir, "checkpoint_last.pt")
    if not os.path.isfile(last):
        sys.exit(f"{last} not found: train the row first")
    here = os.path.dirname(os.path.abspath(__file__))
    avg = os.path.join(args.dir, "checkpoint_avg.pt")
    subprocess.run([sys.executable, os.path.join(here, "average_checkpoints.py"), "--inputs", args.dir, "--output", avg,
                    "--reuse"], check=True)
    rows = []
    for name in CANDIDATES:
        path = os.path.join(args.dir, f"checkpoint_{name}.pt")
        if not os.path.isfile(path):
            print(f"skip {path}: not found")
            continue
        label = f"{args.name or args.dir} checkpoint_{name}, {args.gen_subset}"
        run = ["--data", args.data, "--path", path, "--gen-subset", args.gen_subset, "--name", label]
        row = evaluate_lm.main(run + (["--csv", args.csv] if args.csv else []) + ["--", *extra])
        rows.append((name, row))
    best = chosen(rows)
    print(f"chosen on {args.gen_subset} (BLEU-4): checkpoint_{best}")
    print(os.path.join(args.dir, f"checkpoint_{best}.pt"))


if __name__ == "__main__":
    main()
