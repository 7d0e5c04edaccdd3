#!/usr/bin/env python
"""Does InsNet (keywords order, +KD) beat the AR keywords -> sentence model on BLEU-4? The answer from
experiments/lm_pair_eval.sh's folders: AR against InsNet, seed by seed and on average.

    python experiments/lm_pair_summary.py --ar RESULTS_FOLDER --insnet RESULTS_FOLDER [--beam 5]

Each folder (``--ar`` and ``--insnet`` take one or more; a folder may hold both systems' rows) holds ``valid_lenpen.csv`` (every valid decoding: rows "NAME beam B lenpen L") and ``lm_table.csv`` (the
test rows "NAME beam B, lenpen L (valid)"), NAME being ROW_sSEED: AR rows are ar_sSEED, InsNet rows kd_sSEED. Per seed that both systems have:
the valid BLEU-4 at the length penalty chosen on valid (the best of the grid, as lm_pair_eval.sh chose it) and the test
BLEU-4 there; then the means over those seeds and InsNet minus AR on each (> 0: InsNet above AR).
"""
import argparse
import csv
import os
import re
import sys
from statistics import mean

NAME = re.compile(r"^(?P<row>[a-z0-9]+)_s(?P<seed>\d+) beam (?P<beam>\d+),? lenpen (?P<lenpen>[0-9.]+)")


def read_rows(path):
    if not os.path.isfile(path):
        sys.exit(f"lm_pair_summary.py: {path} not found (run experiments/lm_pair_eval.sh first)")
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def chosen_scores(valid_rows, test_rows, beam: int, row: str):
    """{seed: (lenpen, valid BLEU-4, test BLEU-4)} of one system (its rows named ``row``_sSEED) at beam ``beam``: the
    lenpen of the best valid BLEU-4 (the first of equals, as lm_pair_eval.sh), and the test row decoded at it.

    Example: valid rows "kd_s1 beam 5 lenpen 1" 29.7 and "kd_s1 beam 5 lenpen 2.2" 30.0, test row
    "kd_s1 beam 5, lenpen 2.2 (valid)" 31.27 -> {1: ("2.2", 30.0, 31.27)}.
    """
    best = {}
    for r in valid_rows:
        m = NAME.match(r["model"])
        if m and m["row"] == row and int(m["beam"]) == beam:
            seed, score = int(m["seed"]), float(r["bleu4"])
            if seed not in best or score > best[seed][1]:
                best[seed] = (m["lenpen"], score)
    out = {}
    for r in test_rows:
        m = NAME.match(r["model"])
        if m and m["row"] == row and int(m["beam"]) == beam and int(m["seed"]) in best and best[int(m["seed"])][0] == m["lenpen"]:
            out[int(m["seed"])] = (*best[int(m["seed"])], float(r["bleu4"]))
    return out


def summary(ar, insnet):
    """Markdown lines of the seeds both systems have (``ar``, ``insnet``: :func:`chosen_scores`), their means and
    the InsNet - AR gaps. Example: ar {1: ("2.2", 30.54, 31.04)}, insnet {1: ("2.2", 29.98, 31.27)} -> a seed-1 row,
    then "mean ... | -0.56 | +0.23"."""
    seeds = sorted(set(ar) & set(insnet))
    if not seeds:
        sys.exit(f"lm_pair_summary.py: no seed scored for both systems (AR seeds {sorted(ar)}, InsNet {sorted(insnet)})")
    lines = ["| seed | AR lenpen: valid / test | InsNet lenpen: valid / test | InsNet - AR: valid / test |",
             "|---|---|---|---|"]
    for s in seeds:
        (la, va, ta), (li, vi, ti) = ar[s], insnet[s]
        lines.append(f"| {s} | {la}: {va:.2f} / {ta:.2f} | {li}: {vi:.2f} / {ti:.2f} | {vi - va:+.2f} / {ti - ta:+.2f} |")
    va, ta = mean(ar[s][1] for s in seeds), mean(ar[s][2] for s in seeds)
    vi, ti = mean(insnet[s][1] for s in seeds), mean(insnet[s][2] for s in seeds)
    lines.append(f"| mean of {len(seeds)} | {va:.2f} / {ta:.2f} | {vi:.2f} / {ti:.2f} | **{vi - va:+.2f} / {ti - ta:+.2f}** |")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ar", nargs="+", required=True, help="lm_pair_eval.sh's results folder(s) of the AR rows (ar_sSEED)")
    p.add_argument("--insnet", nargs="+", required=True, help="... of the InsNet rows (kd_sSEED)")
    p.add_argument("--beam", type=int, default=5)
    args = p.parse_args(argv)
    scores = []
    for row, folders in (("ar", args.ar), ("kd", args.insnet)):
        seen = {}
        for d in folders:
            found = chosen_scores(read_rows(os.path.join(d, "valid_lenpen.csv")),
                                  read_rows(os.path.join(d, "lm_table.csv")), args.beam, row)
            twice = sorted(set(found) & set(seen))
            if twice:
                sys.exit(f"lm_pair_summary.py: {d} scores {row} seed(s) {twice} again (one folder a seed)")
            seen.update(found)
        scores.append(seen)
    print(f"BLEU-4, beam {args.beam}, the length penalty chosen on valid; AR: {' '.join(args.ar)}; "
          f"InsNet: {' '.join(args.insnet)}")
    print("\n".join(summary(*scores)))


if __name__ == "__main__":
    main()
