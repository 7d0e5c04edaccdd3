#!/usr/bin/env python
"""Held-out NLL of a checkpoint, term by term: fairseq-validate on one split.

    python recipes/validate_nll.py --data DATA --path CKPT [--subset test] -- --user-dir insnet_fairseq --task insertion_lm

For InsNet (criterion ``insnet_loss``) the row holds ``token_nll``, ``position_nll``,
``termination_nll`` and ``loss``: bits per inserted word, summed over the split by fairseq's
criterion (the paper's Table 6 reports the termination NLL). InsNet-Dinic / uniform checkpoints
are scored under their own layering (the task's ``--dinic-tau`` / ``--layerization``, from the
checkpoint), as in training. Other models report what their criterion logs (``nll_loss``).
Everything after ``--`` goes to fairseq-validate (the task and its flags).
"""
import argparse
import re
import subprocess
import sys

from recipes.common import split_extra

KEYS = ("loss", "nll_loss", "token_nll", "position_nll", "termination_nll")


def parse_validate(output: str, subset: str):
    """fairseq-validate's log -> {key: float} from its ``valid on 'SUBSET' subset | k v | ...`` line."""
    lines = [l for l in output.splitlines() if f"valid on '{subset}' subset" in l and "|" in l]
    if not lines:
        return None
    fields = [f.strip().split(" ", 1) for f in lines[-1].split("|")]
    return {k: float(v) for k, v in (f for f in fields if len(f) == 2) if k in KEYS and re.fullmatch(r"[-\d.eE+]+", v)}


def validate_nll(data, path, subset="test", fairseq_args=(), batch_size=64):
    cmd = ["fairseq-validate", data, "--path", path, "--valid-subset", subset, "--batch-size", str(batch_size),
           "--log-format", "simple", *fairseq_args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    row = parse_validate(out.stdout + out.stderr, subset) if out.returncode == 0 else None
    if row is None:
        sys.exit(f"fairseq-validate failed on {path} ({subset}):\n{(out.stderr or out.stdout)[-1500:]}")
    return row


def main(argv=None):
    argv, extra = split_extra(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--subset", default="test")
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)
    row = validate_nll(args.data, args.path, args.subset, extra, args.batch_size)
    print(" ".join(f"{k} {v}" for k, v in row.items()))
    return row


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
