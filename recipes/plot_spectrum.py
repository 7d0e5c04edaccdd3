#!/usr/bin/env python
"""BLEU against sequential ratio (decoding steps / output length), the paper's Figure 6.

    python recipes/plot_spectrum.py results/tau_spectrum.csv results/tau_spectrum.png

Reads the rows written by recipes/evaluate.py (columns model, sacrebleu, steps_per_token).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_spectrum: {src} has no rows")
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, row in enumerate(rows):
        x, y = float(row["steps_per_token"]), float(row["sacrebleu"])
        dinic = row["model"].startswith("tau=")
        ax.scatter([x], [y], marker="o" if dinic else "s", color="tab:blue" if dinic else "tab:orange")
        # staggered labels: points of nearly equal ratio and BLEU stay readable
        ax.annotate(row["model"], (x, y), textcoords="offset points", xytext=(6, -14 + 10 * (i % 4)), fontsize=7)
    ax.set_xlabel("sequential ratio (decoding steps / output length)")
    ax.set_ylabel("test sacreBLEU")
    ax.set_title("InsNet-Dinic tau spectrum (Multi30k En-De)", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
