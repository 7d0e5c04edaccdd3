#!/usr/bin/env python
"""BLEU against sequential ratio (decoding steps / output length), the paper's Figure 6.

    python experiments/plot_spectrum.py results/tau_spectrum.csv results/tau_spectrum.png [--title TITLE]
    python experiments/plot_spectrum.py results/lm_spectrum.csv results/lm_spectrum.png --x seq_ratio --y bleu4 \
        --ylabel "test BLEU-4" --dinic-prefix dinic --title "..."      # recipes/evaluate_lm.py's rows

Reads the rows written by recipes/evaluate.py (columns model, sacrebleu, steps_per_token; others with
--x / --y); rows whose model starts with --dinic-prefix are drawn as Dinic points (circles). Labels sit
in a column right of the axes, each joined to its point by a thin line, spread vertically by
:func:`spread` so that no two overlap however close the points are.
"""
import argparse
import csv
import sys
from typing import List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def spread(ys: List[float], gap: float, low: float = 0.0, high: float = 1.0) -> List[float]:
    """Label heights near ``ys`` (axes fractions), at least ``gap`` apart, inside [low, high].

    Sorted by height, each label goes to max(its point, the label below + gap); labels pushed past
    ``high`` are shifted down together (then no lower than ``low``, which needs len * gap <= high - low).
    Returns the heights in the input's order.
    Example: spread([0.5, 0.51, 0.9], 0.05) -> [0.5, 0.55, 0.9].
    """
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    out = [0.0] * len(ys)
    last = low - gap
    for i in order:
        last = out[i] = max(ys[i], last + gap)
    excess = max(0.0, last - high)
    if excess:  # shift the top down; keep the gaps
        top = high
        for i in reversed(order):
            out[i] = min(out[i], top)
            top = out[i] - gap
    return [max(y, low) for y in out]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("png")
    p.add_argument("--title", default="InsNet-Dinic tau spectrum (Multi30k En-De)")
    p.add_argument("--x", default="steps_per_token", help="column of the sequential ratio")
    p.add_argument("--y", default="sacrebleu", help="column of the score")
    p.add_argument("--ylabel", default="test sacreBLEU")
    p.add_argument("--dinic-prefix", default="tau=", help="model names of the Dinic rows start with this")
    args = p.parse_args(argv)
    with open(args.csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_spectrum: {args.csv} has no rows")
    for col in (args.x, args.y):
        if col not in rows[0]:
            sys.exit(f"plot_spectrum: {args.csv} has no column {col!r} (columns: {', '.join(rows[0])})")
    xs = [float(r[args.x]) for r in rows]
    ys = [float(r[args.y]) for r in rows]
    labels = [f"{r['model']}: {y:.1f} @ {x:.2f}" for x, y, r in zip(xs, ys, rows)]
    # axes 4.2 inches wide after a 0.8-inch margin; the label column as wide as the longest label needs
    label_width = 0.3 + 0.068 * max(len(label) for label in labels)  # inches at fontsize 7.5
    width = 0.8 + 4.2 + label_width
    fig, ax = plt.subplots(figsize=(width, 4.6))
    fig.subplots_adjust(left=0.8 / width, right=5.0 / width, bottom=0.12, top=0.9)
    for x, y, r in zip(xs, ys, rows):
        dinic = r["model"].startswith(args.dinic_prefix)
        ax.scatter([x], [y], marker="o" if dinic else "s", color="tab:blue" if dinic else "tab:orange", zorder=3)
    pad_x, pad_y = 0.05 * (max(xs) - min(xs) or 1), 0.08 * (max(ys) - min(ys) or 1)
    ax.set_xlim(min(xs) - pad_x, max(xs) + pad_x)
    ax.set_ylim(min(ys) - pad_y, max(ys) + pad_y)
    to_frac = ax.transLimits.transform  # data -> axes fraction
    heights = spread([to_frac((x, y))[1] for x, y in zip(xs, ys)], gap=1.0 / max(len(rows), 14))
    for x, y, h, label in zip(xs, ys, heights, labels):
        ax.annotate(label, xy=(x, y), xycoords="data", xytext=(1.03, h), textcoords="axes fraction",
                    va="center", fontsize=7.5, arrowprops=dict(arrowstyle="-", lw=0.5, color="0.6"))
    ax.set_xlabel("sequential ratio (decoding steps / output length)")
    ax.set_ylabel(args.ylabel)
    ax.set_title(args.title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.savefig(args.png, dpi=120)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
