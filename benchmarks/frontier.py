#!/usr/bin/env python
"""Quality against decoding cost, every system measured the same way in one run.

    python benchmarks/frontier.py --data data-bin/multi30k_en_de --raw-ref RAW/test.de \
        --systems systems.tsv --baseline "AR+KD greedy" --threads 1 --out results/frontier_multi30k_cpu

``systems.tsv`` has one system a line, three tab-separated fields: a name, a checkpoint (fairseq's
``--path``: ``a.pt:b.pt`` for an ensemble or a judge) and its fairseq-generate flags, e.g.

    AR+KD greedy	checkpoints/ar_kd/checkpoint_avg.pt	--beam 1
    InsNet-Dinic 1 candidate	checkpoints/dinic/checkpoint_avg.pt	--task insertion_translation --insertion-mode parallel

Every system decodes ``--subset`` in this process through fairseq's own task, generator and
post-processing (``--remove-bpe --tokenizer moses``, as fairseq-generate), and gets:

* ``sacrebleu``: detokenised sacreBLEU against ``--raw-ref``;
* ``diff``, ``diff_low``, ``diff_high``, ``p_value``: its BLEU minus the baseline's and the 95% interval
  of that difference under sacreBLEU's paired bootstrap (the same 1,000 resamples of the test
  sentences for both systems, seed 12345, as ``sacrebleu --paired-bs``), and that test's p-value;
* ``passes_per_token``: decoder passes per output token. A pass is one run of a decoder's layer
  stack over one hypothesis row, counted at the first layer of every decoder stack of every loaded
  model (judges included): InsNet's initial pass over ``<s> </s>``, each insertion step that encodes
  its words (a row's last step, which places the stop check's words, runs none), the slot
  query stream where it runs as its own pass, every candidate row, and the autoregressive model's
  step that emits ``</s>``; a beam of 5 is 5 rows a step. ``calls_per_token``: the same calls
  without the rows (the number of sequential decoder runs: what latency at batch 1 follows when
  rows run in parallel). ``positions_per_token``: the target positions those calls computed (rows x
  positions a call: 1 for an AR step, the new words of an InsNet step, and one per slot query), the
  arithmetic a step's layers do, which bounds the time where a batch is large. Counted in the batch-1
  run, so no padding row is counted;
* ``ms_b1``, ``ms_b64``: milliseconds per sentence at batch 1 and at batch 64, the time of
  ``task.inference_step`` only (what fairseq-generate's own timer measures), with every system timed
  interleaved: batch by batch, each batch decoded by every system in a rotating order, after one
  untimed warm-up batch each; ``--threads`` torch threads for all. On a GPU (``--device cuda``, the
  default where one is found) the models and batches are on it, the clock waits for its queue
  (``torch.cuda.synchronize``) at both ends, and the ``device`` column names it. Every model's linear layers
  decode through :mod:`insnet_fairseq.modules.packed_linear`, the autoregressive model's too: :func:`load` applies
  :func:`~insnet_fairseq.modules.packed_linear.pack_linears` to every model of every system alike.

The outputs scored are those of the batch-1 run. Writes OUT.csv and OUT.png (BLEU against ms/sentence, one panel per batch size, every system a
labelled point, the Pareto front as a line), and prints the table.
"""
import argparse
import contextlib
import csv
import os
import shlex
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import sacrebleu
import torch
from fairseq import checkpoint_utils, options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli.generate import get_symbols_to_strip_from_output

from insnet_fairseq.measure import PassCounter
from insnet_fairseq.modules.packed_linear import pack_linears

COLUMNS = ["system", "sacrebleu", "diff", "diff_low", "diff_high", "p_value", "passes_per_token", "calls_per_token",
           "positions_per_token", "ms_b1", "ms_b64", "ratio_b1", "ratio_b64", "tokens_per_sentence", "threads",
           "device", "checkpoint", "flags"]


# ------------------------------------------------------------------------------------------- systems
@dataclass
class System:
    name: str
    checkpoint: str
    flags: List[str]
    task: object = None
    models: list = None
    generator: object = None
    cfg: object = None
    decode_fn: object = None
    strip: set = None
    counter: Optional[PassCounter] = None
    hyps: Dict[int, str] = field(default_factory=dict)
    words: Dict[int, List[int]] = field(default_factory=dict)
    seconds: Dict[int, float] = field(default_factory=lambda: defaultdict(float))  # batch size -> seconds
    calls: int = 0
    rows: int = 0
    positions: int = 0


def read_systems(path: str) -> List[System]:
    """``NAME<TAB>CHECKPOINT<TAB>FLAGS`` lines (``#`` comments and blank lines skipped)."""
    systems = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) not in (2, 3):
                sys.exit(f"{path}:{lineno}: expected NAME<TAB>CHECKPOINT<TAB>FLAGS, got {len(parts)} field(s)")
            name, ckpt, flags = parts[0].strip(), parts[1].strip(), parts[2] if len(parts) == 3 else ""
            for p in ckpt.split(":"):
                if not os.path.isfile(p):
                    sys.exit(f"{path}:{lineno}: checkpoint {p} of system '{name}' does not exist")
            systems.append(System(name, ckpt, shlex.split(flags)))
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        sys.exit(f"{path}: system names must be unique")
    return systems


def load(system: System, data: str, subset: str, src: str, tgt: str, device: str = "cpu"):
    """fairseq-generate's set-up for one system: its task, models (on ``device``), generator and post-processing."""
    argv = [data, "--path", system.checkpoint, "--gen-subset", subset, "--remove-bpe", "--tokenizer", "moses",
            "--source-lang", src, "--target-lang", tgt, "--user-dir", "insnet_fairseq", *system.flags]
    args = options.parse_args_and_arch(options.get_generation_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    task = tasks.setup_task(cfg.task)
    models, saved = checkpoint_utils.load_model_ensemble(utils.split_paths(cfg.common_eval.path),
                                                         arg_overrides=eval(cfg.common_eval.model_overrides), task=task)
    task.load_dataset(subset, task_cfg=saved.task)
    for m in models:
        pack_linears(m)  # every system on the same products (InsNet's models are built on them already)
        m.prepare_for_inference_(cfg)
        m.eval()
        m.to(device)
    system.task, system.models, system.cfg = task, models, cfg
    system.generator = task.build_generator(models, cfg.generation)
    tokenizer = task.build_tokenizer(cfg.tokenizer)
    system.decode_fn = tokenizer.decode if tokenizer is not None else (lambda s: s)
    system.strip = get_symbols_to_strip_from_output(system.generator)
    system.counter = PassCounter(models)


def batches(system: System, subset: str, batch_size: int, max_sentences: int = 0, device: str = "cpu") -> list:
    """The collated batches of ``subset`` in fairseq-generate's order (the dataset's ``ordered_indices``, by
    length) of ``batch_size`` sentences each, as ``--batch-size`` without ``--max-tokens`` makes them, on
    ``device`` (moved there before any timing, as fairseq-generate moves a batch before its timer starts);
    ``max_sentences``: only the sentences of id below it."""
    dataset = system.task.dataset(subset)
    order = [int(i) for i in dataset.ordered_indices() if not max_sentences or i < max_sentences]
    return [utils.move_to_cuda(b) if device == "cuda" else b
            for b in (dataset.collater([dataset[i] for i in order[k : k + batch_size]])
                      for k in range(0, len(order), batch_size))]


def synchronize() -> None:
    """Wait for the GPU's queue (nothing on a CPU): a step's kernels run after its Python returns."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def decode(system: System, sample: dict, record: bool) -> float:
    """Decode one batch; its seconds (inference only). ``record``: keep the outputs and the passes."""
    system.counter.reset()
    synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        hypos = system.task.inference_step(system.generator, system.models, sample)
    synchronize()
    seconds = time.perf_counter() - start
    if record:
        system.calls += system.counter.calls
        system.rows += system.counter.rows
        system.positions += system.counter.positions
        record_outputs(system, sample, hypos)
    return seconds


def record_outputs(system: System, sample: dict, hypos: list) -> None:
    """Keep each sentence's best hypothesis as fairseq-generate post-processes it (``system.hyps``, detokenised),
    and its word ids (``system.words``: no ``<s>``, ``</s>`` or padding; their number is its output length)."""
    tgt_dict = system.task.target_dictionary
    special = torch.tensor([tgt_dict.eos(), tgt_dict.bos(), tgt_dict.pad()])
    for i, sid in enumerate(sample["id"].tolist()):
        best = hypos[i][0]["tokens"].int().cpu()
        _, hyp_str, _ = utils.post_process_prediction(
            hypo_tokens=best, src_str="", alignment=None, align_dict=None, tgt_dict=tgt_dict,
            remove_bpe=system.cfg.common_eval.post_process, extra_symbols_to_ignore=system.strip)
        system.hyps[sid] = system.decode_fn(hyp_str)
        system.words[sid] = best[~torch.isin(best, special)].tolist()


def time_interleaved(systems: List[System], per_system_batches: List[list], batch_size: int, record: bool):
    """Each batch decoded by every system in a rotating order; one untimed warm-up batch each first."""
    for s, bs in zip(systems, per_system_batches):
        decode(s, bs[0], record=False)
    n = len(per_system_batches[0])
    for i in range(n):
        k = len(systems)
        for j in range(k):
            idx = (i + j) % k
            s = systems[idx]
            s.seconds[batch_size] += decode(s, per_system_batches[idx][i], record)


# ------------------------------------------------------------------------------------------- statistics
def paired_bootstrap(hyps: Sequence[str], base: Sequence[str], refs: Sequence[str], n_samples: int = 1000,
                     seed: int = 12345):
    """BLEU(hyps) - BLEU(base) and its 95% interval under paired bootstrap resampling of the sentences.

    The resamples are sacreBLEU's (``sacrebleu.significance._paired_bs_test``: the same ``n_samples``
    index draws for both systems from ``numpy.random.default_rng(seed)``, corpus BLEU of each
    resample from the sentences' sufficient statistics); the interval is the 2.5th and 97.5th
    percentile of the resampled differences, the p-value sacreBLEU's for the null "no difference".
    Returns (diff, low, high, p_value).

    Example: identical outputs give (0.0, 0.0, 0.0, 1.0).
    """
    from sacrebleu.significance import _compute_p_value

    metric = sacrebleu.metrics.BLEU()
    refs = [list(refs)]
    s_sys = np.array(metric._extract_corpus_statistics(list(hyps), refs), dtype="float32")
    s_base = np.array(metric._extract_corpus_statistics(list(base), refs), dtype="float32")
    diff = metric.corpus_score(list(hyps), refs).score - metric.corpus_score(list(base), refs).score
    idxs = np.random.default_rng(seed).choice(len(hyps), size=(n_samples, len(hyps)), replace=True)
    a = np.array([metric._compute_score_from_stats(s.sum(0)).score for s in s_sys[idxs]])
    b = np.array([metric._compute_score_from_stats(s.sum(0)).score for s in s_base[idxs]])
    diffs = a - b
    sample = np.abs(diffs)
    p = _compute_p_value(sample - sample.mean(), abs(diff)) if abs(diff) > 0 else 1.0
    return diff, float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5)), float(p)


def pareto(points: List[tuple]) -> List[tuple]:
    """The (ms, bleu) points no other point beats on both (lower ms, higher BLEU), sorted by ms.

    Example: pareto([(1, 30), (2, 29), (3, 35)]) == [(1, 30), (3, 35)].
    """
    front, best = [], -float("inf")
    for ms, bleu in sorted(points, key=lambda p: (p[0], -p[1])):
        if bleu > best:
            front.append((ms, bleu))
            best = bleu
    return front


def clock_label(threads: int, device: str) -> str:
    """What the times were measured on, for the plot's axes: ``1 CPU thread``, ``NVIDIA H200``."""
    return device if device != "cpu" else f"{threads} CPU thread{'s' if threads > 1 else ''}"


def plot(rows: List[dict], path: str, threads: int, subset: str, device: str = "cpu"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    for ax, key, title in ((axes[0], "ms_b1", "batch 1"), (axes[1], "ms_b64", "batch 64")):
        xs = [r[key] for r in rows]
        ys = [r["sacrebleu"] for r in rows]
        ax.scatter(xs, ys, s=36, color="tab:blue", zorder=3)
        front = pareto(list(zip(xs, ys)))
        ax.plot([p[0] for p in front], [p[1] for p in front], "--o", color="tab:orange", zorder=2, markersize=11,
                markerfacecolor="none", label="Pareto front (no system both faster and better)")
        ax.set_xscale("log")  # labelled at 1, 2 and 5 times a power of ten, as plain numbers (10^k notation on every
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # minor tick ran labels together)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"ms per sentence, {title} ({clock_label(threads, device)})")
        ax.set_ylabel(f"sacreBLEU ({subset})")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        lo_y, hi_y = min(ys), max(ys)
        ax.set_ylim(lo_y - 0.08 * (hi_y - lo_y + 1), hi_y + 0.08 * (hi_y - lo_y + 1))
        lo, hi = min(xs), max(xs)
        ax.set_xlim(lo / 1.3, hi * 3.0)  # room for the labels on the right
    # the legend below both panels, where no label can fall under it; the layout keeps that strip free
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", fontsize=8.5, frameon=False)
    room = (0, 0.05, 1, 1)
    fig.tight_layout(rect=room)
    for first in (True, False):  # placed, the labels take room that the layout then gives them: placed again in it
        notes = [note for ax, key in ((axes[0], "ms_b1"), (axes[1], "ms_b64"))
                 for note in place_labels(ax, [r["system"] for r in rows], [r[key] for r in rows],
                                          [r["sacrebleu"] for r in rows])]
        fig.tight_layout(rect=room)
        if first:
            for note in notes:
                note.remove()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def place_labels(ax, names: List[str], xs: List[float], ys: List[float], fontsize: float = 8.5) -> list:
    """Label each point (xs[i], ys[i]) of ``ax`` with names[i], right of it (left of it where the text would run past
    the panel's right edge), top point first; a label that would overlap one already placed or another point, or
    leave the panel at its foot, moves a line at a time, down first, then up, until it is clear, with a thin line back
    to its point. Points of one BLEU (the same outputs decoded another way) thus get stacked labels. Returns the
    annotations."""
    renderer = ax.figure.canvas.get_renderer()
    pixels = ax.transData.transform(list(zip(xs, ys)))  # [n, 2] display coordinates
    panel = ax.get_window_extent(renderer)
    step = fontsize * 1.3
    shifts = [0.0] + [s * k * step for k in range(1, 2 * len(names) + 1) for s in (-1, 1)]  # down, up, 2 down, ...

    def annotate(i, dy, side, line=False):  # side 1: the text right of the point, -1: left of it
        arrow = dict(arrowprops=dict(arrowstyle="-", lw=0.5, color="0.5", relpos=((1 - side) / 2, 0.5), shrinkA=0,
                                     shrinkB=3)) if line else {}
        return ax.annotate(names[i], (xs[i], ys[i]), xytext=(8 * side, dy), textcoords="offset points",
                           fontsize=fontsize, ha="left" if side == 1 else "right", **arrow)

    placed, out = [], []
    for i in sorted(range(len(names)), key=lambda i: (-pixels[i][1], pixels[i][0])):
        note = annotate(i, -4.0, 1)
        side = 1 if note.get_window_extent(renderer).x1 <= panel.x1 else -1
        note.remove()
        for shift in shifts:
            dy = -4.0 + shift
            note = annotate(i, dy, side)
            box = note.get_window_extent(renderer)  # the text's box (no line yet)
            covers = any(box.x0 - 5 <= px <= box.x1 + 5 and box.y0 - 5 <= py <= box.y1 + 5
                         for j, (px, py) in enumerate(pixels) if j != i)  # another system's point under the text
            if box.y0 >= panel.y0 and not covers and not any(box.overlaps(other) for other in placed):
                break
            note.remove()
        else:  # no clear place (a guard: there are more places than labels): the first one
            dy = -4.0
            note = annotate(i, dy, side)
            box = note.get_window_extent(renderer)
        if dy != -4.0:  # moved: a thin line back to its point
            note.remove()
            note = annotate(i, dy, side, line=True)
        placed.append(box)
        out.append(note)
    return out


def replot(out: str, subset: str) -> None:
    """Draw OUT.png again from OUT.csv, as the run that wrote the csv drew it (for a change of the drawing alone)."""
    if not os.path.isfile(out + ".csv"):
        sys.exit(f"--replot: {out}.csv not found")
    with open(out + ".csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or any(r["ms_b1"] == "" for r in rows):
        sys.exit(f"--replot: {out}.csv has no batch-1 times (a --score-only run draws no plot)")
    for r in rows:
        r["sacrebleu"], r["ms_b1"], r["ms_b64"] = float(r["sacrebleu"]), float(r["ms_b1"]), float(r["ms_b64"])
    plot(rows, out + ".png", int(rows[0]["threads"]), subset, rows[0].get("device") or "cpu")


# ------------------------------------------------------------------------------------------- main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="the fairseq data-bin every system decodes (required but with --replot)")
    p.add_argument("--systems", help="NAME<TAB>CHECKPOINT<TAB>FLAGS lines (required but with --replot)")
    p.add_argument("--raw-ref", help="untokenised references of --subset, one line a sentence (required but with "
                   "--replot)")
    p.add_argument("--baseline", help="the system every difference is taken against (required but with --replot)")
    p.add_argument("--subset", default="test")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--threads", type=int, default=1, help="torch threads, the same for every system")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where every system decodes (auto: cuda when torch finds a GPU, else cpu)")
    p.add_argument("--max-sentences", type=int, default=0, help="decode only the first N sentences (0: all)")
    p.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap resamples")
    p.add_argument("--score-only", action="store_true",
                   help="decode at batch 64 only and score: no batch-1 timing, no pass count (choices on valid)")
    p.add_argument("--out", required=True, help="OUT.csv and OUT.png")
    p.add_argument("--replot", action="store_true", help="only draw OUT.png again from OUT.csv (no decoding)")
    args = p.parse_args(argv)
    if args.replot:
        replot(args.out, args.subset)
        return
    missing = [f"--{name.replace('_', '-')}" for name in ("data", "systems", "raw_ref", "baseline")
               if getattr(args, name) is None]
    if missing:
        p.error(f"the following arguments are required: {', '.join(missing)}")

    torch.set_num_threads(args.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch finds no GPU (torch.cuda.is_available() is False)")
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    systems = read_systems(args.systems)
    if args.baseline not in [s.name for s in systems]:
        sys.exit(f"--baseline '{args.baseline}' is not a system of {args.systems}")
    with open(args.raw_ref, encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f]
    with contextlib.redirect_stdout(sys.stderr):
        for s in systems:
            load(s, args.data, args.subset, args.src, args.tgt, device)
    sizes = [64] if args.score_only else [1, 64]  # the passes are counted at batch 1
    for b in sizes:
        per = [batches(s, args.subset, b, args.max_sentences, device) for s in systems]
        ids = [sorted(i for x in bs for i in x["id"].tolist()) for bs in per]
        if any(i != ids[0] for i in ids):
            sys.exit("the systems' tasks batch the data differently: they must decode the same sentences")
        print(f"timing batch {b}: {len(per[0])} batches of {len(ids[0])} sentences, {len(systems)} systems "
              f"interleaved, {args.threads} thread(s), {device_name}", file=sys.stderr, flush=True)
        record = b == 1 or args.score_only
        if record:
            for s in systems:
                s.hyps, s.words, s.calls, s.rows, s.positions = {}, {}, 0, 0, 0
        time_interleaved(systems, per, b, record)
    n_sent = len(systems[0].hyps)
    ids = sorted(systems[0].hyps)
    if not args.max_sentences and ids != list(range(len(refs))):
        sys.exit(f"{n_sent} outputs for {len(refs)} reference lines in {args.raw_ref}: not the same set")
    refs = [refs[i] for i in ids]
    base = next(s for s in systems if s.name == args.baseline)
    base_hyps = [base.hyps[i] for i in ids]
    rows = []
    for s in systems:
        hyps = [s.hyps[i] for i in ids]
        bleu = sacrebleu.metrics.BLEU().corpus_score(hyps, [refs]).score
        if s is base:
            diff = low = high = 0.0
            pval = 1.0
        else:
            diff, low, high, pval = paired_bootstrap(hyps, base_hyps, refs, args.bootstrap)
        ntok = sum(len(s.words[i]) for i in ids)
        rows.append({
            "system": s.name, "sacrebleu": round(bleu, 2), "diff": round(diff, 2), "diff_low": round(low, 2),
            "diff_high": round(high, 2), "p_value": round(pval, 4),
            "passes_per_token": round(s.rows / ntok, 3) if 1 in sizes else "",
            "calls_per_token": round(s.calls / ntok, 3) if 1 in sizes else "",
            "positions_per_token": round(s.positions / ntok, 3) if 1 in sizes else "",
            "ms_b1": round(1000 * s.seconds[1] / n_sent, 2) if 1 in sizes else "",
            "ms_b64": round(1000 * s.seconds[64] / n_sent, 2),
            "tokens_per_sentence": round(ntok / n_sent, 2), "threads": args.threads, "device": device_name,
            "checkpoint": s.checkpoint, "flags": " ".join(s.flags),
        })
    b_row = next(r for r in rows if r["system"] == base.name)
    for r in rows:
        r["ratio_b1"] = round(r["ms_b1"] / b_row["ms_b1"], 3) if 1 in sizes else ""
        r["ratio_b64"] = round(r["ms_b64"] / b_row["ms_b64"], 3)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    if 1 in sizes:
        plot(rows, args.out + ".png", args.threads, args.subset, device_name)
    print(f"{args.subset}, {n_sent} sentences, {args.threads} thread(s), {device_name}; diff: BLEU minus "
          f"{base.name}'s, 95% paired-bootstrap interval")
    print(f"{'system':<44} {'BLEU':>6} {'diff [95% CI]':>22} {'pass/tok':>8} {'pos/tok':>7} {'ms b1':>7} {'ms b64':>7} "
          f"{'x b1':>6} {'x b64':>6}")
    for r in rows:
        ci = f"{r['diff']:+.2f} [{r['diff_low']:+.2f}, {r['diff_high']:+.2f}]"
        print(f"{r['system']:<44} {r['sacrebleu']:>6.2f} {ci:>22} {r['passes_per_token']!s:>8} {r['positions_per_token']!s:>7} {r['ms_b1']!s:>7} "
              f"{r['ms_b64']!s:>7} {r['ratio_b1']!s:>6} {r['ratio_b64']!s:>6}")  # '' where --score-only measured nothing
    return rows


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
