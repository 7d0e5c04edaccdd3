#!/usr/bin/env python
"""How much the decoding cache can gain, and how the gain grows with length (the target: cached >= 3x uncached at
batch 64, growing with length).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/cache_gain.py --path checkpoints/t120_insnet_l2r/checkpoint_avg.pt \
        [--sentences 256] [--concat 1 2 3 4] [--rounds 3] [--threads 1]

Sources of growing length are made from the Multi30k test set by joining K consecutive source sentences into
one (``--concat K``; K = 1: the test set itself); for K > 1 outputs are held to the source's length
(``--min-length-ratio 1``: a model trained on single sentences stops after about one). Each set is decoded at
batch 64, sequentially, with the cache and without it (every step re-encodes the whole partial sequence), in
alternating rounds; the median is kept.
Both decodings must give the same tokens (checked here, and token for token in tests/unit/test_generator.py).

Beside the ratio it prints where the time goes: the decoder passes (the context encoder over inserted tokens,
which is all the cache saves) and the rest (the source encoder, the vocabulary projection at each step's slot,
the slot scores, the word choice, the state's bookkeeping), which both decodings spend alike. ``bound`` is the
ratio a cache with passes of zero cost would reach, uncached / rest: no cache can beat it.

``--profile-passes`` decodes each set once more, cached, under ``torch.profiler`` and splits the cached passes' time:
the layers' matrix products (``addmm``/``mm``/``bmm``), the attention kernel, copies (the cache writes among them),
the other ops, and the Python and dispatch outside any op; ``if products only`` is the gain the cache would reach if
its passes cost their matrix products and nothing else (the rest of the decoding as measured).
"""
import argparse
import statistics
import sys
import time
from typing import List, Tuple

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.decode_latency import load
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions


class CallTimer:
    """Wraps ``obj.method`` and adds the wall time of every call to ``seconds`` (one CPU thread: the call's work);
    each call is also a ``record_function(label)`` range for the profiler (``--profile-passes``)."""

    def __init__(self, obj, method="forward", clock=time.perf_counter, label="timed"):
        self.seconds, inner = 0.0, getattr(obj, method)

        def timed(*args, **kwargs):
            start = clock()
            with record_function(label):
                out = inner(*args, **kwargs)
            self.seconds += clock() - start
            return out

        setattr(obj, method, timed)


def joined_items(ds, ids, k, eos):
    """Dataset items whose source (and target) joins the sentences ``ids[j : j + k]`` (each without its </s>)."""
    items = []
    for j in range(0, len(ids) - k + 1, k):
        parts = [ds[i] for i in ids[j : j + k]]
        src = torch.cat([p["source"][:-1] for p in parts] + [torch.tensor([eos])])
        tgt = torch.cat([p["target"][:-1] for p in parts] + [torch.tensor([eos])])
        items.append({"id": len(items), "source": src, "target": tgt})
    return items


PASS = "cache_gain.pass"
PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm")


def pass_ops(events) -> Tuple[float, List[Tuple[str, float]]]:
    """The profiled ``PASS`` ranges (a range inside another counted once, in the outer one): their inclusive seconds,
    and every op (``aten::``) inside them with its self seconds. events: ``prof.events()`` (a tree)."""
    ops = []

    def walk(e):
        for ch in e.cpu_children:
            if ch.name.startswith("aten::"):
                ops.append((ch.name, ch.self_cpu_time_total / 1e6))
            walk(ch)

    total = 0.0
    for e in events:
        if e.name == PASS and not _inside(e, PASS):
            total += e.cpu_time_total / 1e6
            walk(e)
    return total, ops


def pass_breakdown(events) -> dict:
    """Seconds of the profiled passes (:func:`pass_ops`): ``total`` and its parts by the ops' self time: ``products``
    (PRODUCTS), ``attention`` (scaled_dot_product kernels), ``copies`` (``aten::copy_``), ``other ops``, and
    ``outside ops`` (the rest: Python, module calls, dispatch)."""
    total, ops = pass_ops(events)
    parts = dict.fromkeys(("products", "attention", "copies", "other ops"), 0.0)
    for name, seconds in ops:
        kind = ("products" if name in PRODUCTS else "attention" if "scaled_dot_product" in name
                else "copies" if name == "aten::copy_" else "other ops")
        parts[kind] += seconds
    parts["outside ops"] = max(0.0, total - sum(parts.values()))
    return {"total": total, **parts}


def _inside(e, name) -> bool:
    p = e.cpu_parent
    while p is not None:
        if p.name == name:
            return True
        p = p.cpu_parent
    return False


def pct(x, total):
    return f"{100 * x / total:.0f}%"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", required=True, help="an InsNet checkpoint (decoded sequentially)")
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--sentences", type=int, default=256, help="first N test sentences (by id)")
    p.add_argument("--concat", type=int, nargs="+", default=[1, 2, 3, 4],
                   help="sentences joined into one source (1: the test sentences as they are)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--profile-passes", action="store_true",
                   help="also split the cached passes' time by kind of op (one more decoding, under the profiler)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, task = load(args.path, args.data)
    ds = task.dataset("test")
    tgt = task.target_dictionary
    timers = {"passes": CallTimer(model.decoder.context, label=PASS), "source": CallTimer(model.encoder),
              "vocabulary": CallTimer(model.decoder.heads, "token_logits")}
    ids = list(range(min(args.sentences, len(ds))))
    print(f"{len(ids)} Multi30k test sentences, batch {args.batch_size}, {torch.get_num_threads()} threads, "
          f"median of {args.rounds} rounds, sequential decoding of {args.path}\n")
    print("| sources | sentences | source tokens (median) | output tokens (mean) | cached ms/sentence | "
          "uncached ms/sentence | cached gain | cached: passes / source encoder / vocabulary / other | "
          "uncached: passes / rest | bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    gains, profiled = [], []
    for k in args.concat:
        # joined sources: outputs held to the source's length (--min-length-ratio 1), since a model trained on single
        # sentences stops after about one of them; the words past that point are the model's, and cost what any do
        generators = {c: InsertionGenerator(tgt, DecodingOptions(use_cache=c, mode="sequential", min_length_ratio=1.0 if k > 1 else 0.0))
                      for c in (True, False)}
        items = joined_items(ds, ids, k, tgt.eos())
        items.sort(key=lambda it: (len(it["source"]), it["id"]))
        samples = [ds.collater(items[j : j + args.batch_size]) for j in range(0, len(items), args.batch_size)]
        wall = {c: [] for c in generators}
        spent = {(c, name): [] for c in generators for name in timers}
        outputs = {}
        with torch.no_grad():
            for c, g in generators.items():  # warm-up
                g.generate([model], samples[0])
            for _ in range(args.rounds):
                for c, g in generators.items():
                    for timer in timers.values():
                        timer.seconds = 0.0
                    start = time.perf_counter()
                    outputs[c] = [h[0]["tokens"].tolist() for s in samples for h in g.generate([model], s)]
                    wall[c].append(time.perf_counter() - start)
                    for name, timer in timers.items():
                        spent[(c, name)].append(timer.seconds)
        if outputs[True] != outputs[False]:
            sys.exit(f"cache_gain: cached and uncached decoding differ for --concat {k} (a bug: see tests/unit/test_generator.py)")
        n = len(items)
        t = {c: statistics.median(wall[c]) for c in generators}
        part = {key: statistics.median(v) for key, v in spent.items()}
        rest = {c: t[c] - part[(c, "passes")] for c in generators}
        other = rest[True] - part[(True, "source")] - part[(True, "vocabulary")]
        src_med = statistics.median(len(it["source"]) for it in items)
        out_mean = statistics.mean(len(o) for o in outputs[True])
        gain = t[False] / t[True]
        gains.append((k, src_med, gain))
        print(f"| {k} joined | {n} | {src_med:.0f} | {out_mean:.1f} | {1000 * t[True] / n:.1f} | {1000 * t[False] / n:.1f} "
              f"| {gain:.2f}x | {pct(part[(True, 'passes')], t[True])} / {pct(part[(True, 'source')], t[True])} / "
              f"{pct(part[(True, 'vocabulary')], t[True])} / {pct(other, t[True])} "
              f"| {pct(part[(False, 'passes')], t[False])} / {pct(rest[False], t[False])} "
              f"| {t[False] / rest[True]:.2f}x |", flush=True)
        if args.profile_passes:
            with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
                for s in samples:
                    generators[True].generate([model], s)
            b = pass_breakdown(prof.events())
            share = {key: b[key] / max(b["total"], 1e-12) for key in b if key != "total"}
            products_only = t[False] / (t[True] - part[(True, "passes")] * (1 - share["products"]))
            profiled.append(f"{k} joined: cached passes, profiler on, {1000 * b['total'] / n:.1f} ms/sentence: "
                            + " / ".join(f"{key} {100 * v:.0f}%" for key, v in share.items())
                            + f"; if products only: {products_only:.2f}x")
    for line in profiled:
        print(line)
    print()
    for k, src_med, gain in gains:
        print(f"sources of {k} joined sentence(s) (median {src_med:.0f} tokens): cached is {gain:.2f}x faster than uncached")


if __name__ == "__main__":
    main()
