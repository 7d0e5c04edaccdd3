#!/usr/bin/env python
"""Where InsNet-Dinic loses against AR greedy: in its anchors or in its gaps.

    python experiments/anchor_source.py --data data-bin/multi30k_en_de --insnet DINIC.pt [MORE.pt ...] \\
        [--names NAME ...] --ar AR.pt --raw-ref RAW/valid.de --subset valid --out results/anchor_source_frontier_dinic_valid

The anchored order (``--insertion-order anchored``, InsNet-Dinic's base order) inserts the top levels of a
sentence's balanced binary tree first: the middle word (depth 1), then the middle words of its two halves (depth 2).
They are predicted from the source alone, and they cost 4-5 nats each on valid where an l2r model's first words
cost 0.6-1.6 (experiments/nll_breakdown.py). The gaps between them are then filled left to right, all at once.
This decodes ``--subset`` at batch 64 with:

* ``AR greedy``: the baseline of every difference;
* ``InsNet-Dinic``: its own decoding (``--insertion-mode parallel`` and the settings stored with the checkpoint);
* ``InsNet-Dinic, AR greedy's anchors (depth D)``, for each of ``--depths``: the same model given, as a constrained
  start (the generator's ``initial_tokens`` and ``initial_order``), the anchors of depth < D of AR greedy's own
  output, in the anchored order's order; it decodes the rest. Nothing of the reference is read;
* ``InsNet-Dinic, the reference's anchors (depth D)``: the same with the reference's anchors, an oracle (an upper
  bound of what better anchors give, not a system).

If the model given AR greedy's anchors is level with AR greedy, the gap lies in the anchors; if it stays below, in
the gaps. ``--insnet`` takes several checkpoints (e.g. models trained with other ``--anchor-depth``), named by
``--names`` in their rows (one checkpoint: ``InsNet-Dinic``); AR greedy is decoded once for all. Writes OUT.csv
(``system``, ``sacrebleu``, ``diff``, ``diff_low``, ``diff_high``, ``p_value``: sacreBLEU's
paired bootstrap against AR greedy, as benchmarks/frontier.py; ``given_per_sentence``: anchors given;
``steps_per_token``: insertion steps per output word, the given ones included; ``tokens_per_sentence``) and prints
the table. Anchors are word pieces (BPE units, as the model inserts them).
"""
import argparse
import contextlib
import csv
import os
import sys
from typing import List, Sequence, Tuple

import sacrebleu
import torch

from benchmarks.frontier import System, batches, load, paired_bootstrap, record_outputs
from insnet_fairseq.geometry.orders import tree_depth

COLUMNS = ["system", "sacrebleu", "diff", "diff_low", "diff_high", "p_value", "given_per_sentence", "steps_per_token",
           "tokens_per_sentence"]


def anchors(words: Sequence[int], depth: int) -> Tuple[List[int], List[int]]:
    """The anchored order's anchors of depth < ``depth`` in ``words`` (a sentence's word ids, no ``<s>`` or ``</s>``):
    (their ids left to right, their insertion order as indices into that list: the middle word first, then each
    level left to right), the generator's ``initial_tokens`` and ``initial_order`` rows.

    Example: 7 words [a, b, c, d, e, f, g] (positions 1..7 between <s> 0 and </s> 8): depth 1 -> ([d], [0]);
    depth 2 -> ([b, d, f], [1, 0, 2]): d (depth 0) first, then b and f (depth 1)."""
    n = len(words) + 2
    level = tree_depth(torch.tensor([n]), n)[0].tolist()  # [n], -1 at <s> and </s>
    at = [p for p in range(1, n - 1) if level[p] < depth]  # positions, left to right
    order = sorted(range(len(at)), key=lambda i: (level[at[i]], at[i]))
    return [words[p - 1] for p in at], order


def decode(system: System, samples: list, given=None) -> float:
    """Decode ``samples`` with ``system`` (``given``: sentence id -> its constrained start (tokens, order), decoded by
    the InsNet generator), keeping the outputs (:func:`benchmarks.frontier.record_outputs`); the insertion steps
    taken in all (0 for the AR model)."""
    system.hyps, system.words = {}, {}
    steps = 0
    with torch.no_grad():
        for sample in samples:
            if given is None:
                hypos = system.task.inference_step(system.generator, system.models, sample)
            else:
                start = [given[i] for i in sample["id"].tolist()]
                hypos = system.generator.generate(system.models, sample, initial_tokens=[t for t, _ in start],
                                                  initial_order=[o for _, o in start])
            record_outputs(system, sample, hypos)
            steps += sum(int(h[0].get("steps", 0)) for h in hypos)
    return steps


def reference_words(system: System, subset: str) -> dict:
    """Sentence id -> the word ids of its reference (the data-bin's target side, ``</s>`` removed)."""
    dataset = system.task.dataset(subset)
    eos, pad = system.task.target_dictionary.eos(), system.task.target_dictionary.pad()
    return {i: [t for t in dataset[i]["target"].tolist() if t not in (eos, pad)] for i in range(len(dataset))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the fairseq data-bin both models decode")
    p.add_argument("--insnet", required=True, nargs="+", help="InsNet-Dinic checkpoints (anchored order)")
    p.add_argument("--names", nargs="+", help="each --insnet checkpoint's name in its rows (one checkpoint: "
                   "InsNet-Dinic)")
    p.add_argument("--ar", required=True, help="the AR checkpoint (fairseq's transformer, the same dictionary)")
    p.add_argument("--raw-ref", required=True, help="untokenised references of --subset, one line a sentence")
    p.add_argument("--subset", default="valid")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--depths", type=int, nargs="+", default=[1, 2], help="anchor depths given (1: the middle word)")
    p.add_argument("--max-sentences", type=int, default=0, help="only the sentences of id below N (0: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--out", required=True, help="OUT.csv")
    args = p.parse_args(argv)
    if any(d < 1 for d in args.depths):
        p.error(f"--depths must be 1 or more, got {args.depths}")
    names = args.names or (["InsNet-Dinic"] if len(args.insnet) == 1 else None)
    if names is None or len(names) != len(args.insnet) or len(set(names)) != len(names):
        p.error(f"--names must give each of the {len(args.insnet)} --insnet checkpoints its own name")
    paths = [("--insnet", path) for path in args.insnet] + [("--ar", args.ar), ("--raw-ref", args.raw_ref)]
    for flag, path in paths:
        if not os.path.isfile(path):
            sys.exit(f"anchor_source: {flag} {path} does not exist")
    torch.set_num_threads(args.threads)
    with open(args.raw_ref, encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f]

    ar = System("AR greedy", args.ar, ["--beam", "1"])
    insnets = [System(name, path, ["--task", "insertion_translation", "--insertion-mode", "parallel"])
               for name, path in zip(names, args.insnet)]
    with contextlib.redirect_stdout(sys.stderr):
        for s in [ar] + insnets:
            load(s, args.data, args.subset, args.src, args.tgt)
    samples = {s.name: batches(s, args.subset, 64, args.max_sentences) for s in [ar] + insnets}
    decode(ar, samples[ar.name])
    ids = sorted(ar.hyps)
    if not args.max_sentences and ids != list(range(len(refs))):
        sys.exit(f"anchor_source: {len(ids)} outputs for {len(refs)} reference lines in {args.raw_ref}: not the same set")
    refs = [refs[i] for i in ids]
    base = [ar.hyps[i] for i in ids]
    reference = reference_words(insnets[0], args.subset)
    given_ar = {d: {i: anchors(ar.words[i], d) for i in ids} for d in args.depths}
    given_ref = {d: {i: anchors(reference[i], d) for i in ids} for d in args.depths}

    runs = []  # (model, row name, the constrained starts or None)
    for ins in insnets:
        runs.append((ins, ins.name, None))
        runs += [(ins, f"{ins.name}, AR greedy's anchors (depth {d})", given_ar[d]) for d in args.depths]
        runs += [(ins, f"{ins.name}, the reference's anchors (depth {d})", given_ref[d]) for d in args.depths]
    rows = [{"system": ar.name, "sacrebleu": round(sacrebleu.metrics.BLEU().corpus_score(base, [refs]).score, 2),
             "diff": 0.0, "diff_low": 0.0, "diff_high": 0.0, "p_value": 1.0, "given_per_sentence": "",
             "steps_per_token": "", "tokens_per_sentence": round(sum(len(ar.words[i]) for i in ids) / len(ids), 2)}]
    for ins, name, given in runs:
        print(f"decoding: {name}", file=sys.stderr, flush=True)
        steps = decode(ins, samples[ins.name], given)
        hyps = [ins.hyps[i] for i in ids]
        diff, low, high, pval = paired_bootstrap(hyps, base, refs, args.bootstrap)
        words = sum(len(ins.words[i]) for i in ids)
        rows.append({"system": name, "sacrebleu": round(sacrebleu.metrics.BLEU().corpus_score(hyps, [refs]).score, 2),
                     "diff": round(diff, 2), "diff_low": round(low, 2), "diff_high": round(high, 2),
                     "p_value": round(pval, 4),
                     "given_per_sentence": round(sum(len(given[i][0]) for i in ids) / len(ids), 2) if given else 0.0,
                     "steps_per_token": round(steps / max(words, 1), 3),
                     "tokens_per_sentence": round(words / len(ids), 2)})
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"{args.subset}, {len(ids)} sentences; diff: BLEU minus AR greedy's, 95% paired-bootstrap interval")
    print(f"{'system':<68} {'BLEU':>6} {'diff [95% CI]':>22} {'given':>6} {'steps/tok':>9}")
    for r in rows:
        ci = f"{r['diff']:+.2f} [{r['diff_low']:+.2f}, {r['diff_high']:+.2f}]"
        print(f"{r['system']:<68} {r['sacrebleu']:>6.2f} {ci:>22} {r['given_per_sentence']!s:>6} "
              f"{r['steps_per_token']!s:>9}")
    return rows


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
