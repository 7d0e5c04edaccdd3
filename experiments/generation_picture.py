#!/usr/bin/env python
"""A picture of insertion decoding (the paper's Table 3): for a few test sentences, every system's
output with each word coloured by the decoding step that inserted it, as one HTML page.

    python experiments/generation_picture.py --data data-bin/lm_multi30k \
        --system "InsNet sequential=checkpoints/lm_seq-binary/checkpoint_last.pt" \
        --system "InsNet-Dinic tau 3=checkpoints/lm_dinic-3/checkpoint_last.pt:parallel" \
        --sentences 6 --out results/lm_generation.html

``--system NAME=CHECKPOINT[:MODE]`` (MODE: sequential, the default, or parallel) can be given several
times; any InsNet checkpoint of ``insertion_lm`` (the keywords are step 0, the constrained start) or
``insertion_translation`` (the source is shown above the outputs) works. Decoding is greedy with
``--slot-top-p`` (0.7, the paper's) in parallel mode. Sentences: ``--sentences`` ids of ``--split``
drawn with ``--seed``, or ``--ids``. The page is also printed as text, a word's step after it.
"""
import argparse
import html
import os
import random
from argparse import Namespace
from typing import List, Tuple

import torch


import insnet_fairseq  # noqa: F401  (registers the tasks and models)
from insnet_fairseq.tasks import checkpoint_checks

# one light colour per step (step 0, the given words, is white with a frame); later steps cycle
PALETTE = ["#ffd6d6", "#ffe7c2", "#fff5b0", "#dff5c8", "#c9f0e6", "#cfe6ff", "#ddd5ff", "#f7d2f0", "#e6e6e6",
           "#ffb3b3", "#ffcf87", "#d9f58a", "#9fe6cf", "#a9cfff", "#c5b3ff"]


def word_steps(hypo) -> List[Tuple[str, int]]:
    """(token id, step) of every output token, left to right, from ``--retain-iter-history``: a token's
    step is the first history entry holding its insertion index (0: the start, keywords included).
    Example: histories with insertion indices [2] then [2, 3] then [4, 2, 3] give steps [2, 0, 1]."""
    history = hypo["history"]
    final = history[-1]
    first = {}
    for step, h in enumerate(history):
        for col in h["inserted"].tolist():
            first.setdefault(col, step)
    return [(int(t), first[int(c)]) for t, c in zip(final["tokens"].tolist(), final["inserted"].tolist())]


def render(words: List[Tuple[str, int]]) -> str:
    """HTML spans, one per word, coloured by step (BPE pieces ending in @@ join the next one)."""
    out = []
    for i, (w, step) in enumerate(words):
        joined = w.endswith("@@")
        text = html.escape(w[:-2] if joined else w)
        style = "border:1px solid #333;background:#fff;font-weight:bold" if step == 0 else \
            f"background:{PALETTE[(step - 1) % len(PALETTE)]}"
        out.append(f'<span title="step {step}" style="{style};padding:1px 3px;border-radius:3px">{text}'
                   f'<sub style="color:#777">{step}</sub></span>' + ("" if joined or i == len(words) - 1 else " "))
    return "".join(out)


def load_system(path: str, mode: str, args):
    """(models, task) of a checkpoint decoding in ``mode``, with ``--split`` loaded."""
    models, _, task = checkpoint_checks.load_model_ensemble_and_task(
        [path], arg_overrides={"data": args.data, "insertion_mode": mode, "slot_top_p": args.slot_top_p})
    task.load_dataset(args.split)
    return models, task


def decode_system(models, task, args, ids: List[int]):
    """{sentence id: (source text, [(word, step)], steps)} of the sentences ``ids``."""
    ds = task.dataset(args.split)
    gen = task.build_generator(models, Namespace(sampling=False, sampling_topk=-1, retain_iter_history=True))
    batch = ds.collater([ds[i] for i in ids])
    order = batch["id"].tolist()
    with torch.no_grad():
        hypos = task.inference_step(gen, models, batch)
    out = {}
    for row, sid in enumerate(order):
        h = hypos[row][0]
        eos = task.target_dictionary.eos()
        words = [(task.target_dictionary[t], s) for t, s in word_steps(h) if t != eos]
        src = task.source_dictionary.string(batch["net_input"]["src_tokens"][row], "subword_nmt")
        out[sid] = (src, words, int(h["steps"]))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--system", action="append", required=True, metavar="NAME=CHECKPOINT[:MODE]")
    p.add_argument("--split", default="test")
    p.add_argument("--sentences", type=int, default=6)
    p.add_argument("--ids", type=int, nargs="*", help="sentence ids (default: --sentences drawn with --seed)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slot-top-p", type=float, default=0.7)
    p.add_argument("--out", required=True, help="the HTML page to write")
    args = p.parse_args(argv)
    systems = []
    for spec in args.system:
        name, sep, rest = spec.partition("=")
        if not sep or not rest:
            p.error(f"--system {spec!r}: expected NAME=CHECKPOINT[:MODE]")
        path, _, mode = rest.rpartition(":") if rest.endswith((":sequential", ":parallel")) else (rest, "", "sequential")
        if not os.path.isfile(path):
            p.error(f"--system {name}: checkpoint {path} not found")
        systems.append((name, path, mode))
    loaded = [load_system(path, mode, args) for _, path, mode in systems]
    n = len(loaded[0][1].dataset(args.split))
    ids = args.ids or sorted(random.Random(args.seed).sample(range(n), args.sentences))
    results = [(name, mode, decode_system(models, task, args, ids))
               for (name, _, mode), (models, task) in zip(systems, loaded)]
    rows = []
    for sid in ids:
        src = results[0][2][sid][0]
        rows.append(f'<h3>{args.split} sentence {sid}: <span style="font-weight:normal">{html.escape(src) or "(no keywords)"}'
                    '</span></h3>\n<table>')
        print(f"== {args.split} {sid}: {src}")
        for name, mode, res in results:
            _, words, steps = res[sid]
            rows.append(f'<tr><td style="padding-right:1em;white-space:nowrap">{html.escape(name)} ({mode}, {steps} steps)'
                        f'</td><td style="line-height:1.9">{render(words)}</td></tr>')
            print(f"  {name} ({mode}, {steps} steps): " + " ".join(f"{w}/{s}" for w, s in words))
        rows.append("</table>")
    legend = render([("given", 0)] + [(f"step {s}", s) for s in range(1, 11)])
    page = ("<!doctype html><meta charset='utf-8'><title>InsNet insertion steps</title>"
            "<body style='font-family:sans-serif;max-width:70em'>"
            "<h2>Which step inserted each word</h2><p>Each word is coloured by the decoding step that inserted it "
            "(subscript: the step); framed words are given at the start (keywords, or constraints). " + legend +
            "</p>\n" + "\n".join(rows) + "\n</body>\n")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
