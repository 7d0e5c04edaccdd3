#!/usr/bin/env python
"""Where an InsNet model's decoder positions go: the target positions its context layers compute per output token,
split by the decoding stage that asked for them (benchmarks/frontier.py's ``positions_per_token``, taken apart).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/positions_by_caller.py --path DINIC.pt [--sentences 200] \
        [--no-stop-check] [--fused]

Decodes the first test sentences one at a time with ``--insertion-mode parallel`` (its defaults) and prints, per
stage, positions per output token: ``start`` (the pass over ``<s> </s>``), ``words`` (each step's new words),
``slot queries`` (each step's chosen slots: the slot query stream, or fused, every slot's query of the next step)
and ``stop check`` (``--stop-check-prob``: the queries of every open slot of a sentence the termination head
stops). A position is one target row of one call of the first context layer, as frontier.py counts it.
"""
import argparse
import collections
import sys
import traceback

import torch

from benchmarks.decode_latency import batches, load
from insnet_fairseq.measure import PassCounter
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions

STAGES = {"_encode_all": "start", "initial_state": "start", "insert": "words", "token_logits": "slot queries"}


def stage_of(method: str, frames) -> str:
    """The decoding stage of a call of ``method`` on the first layer, from the function names on the stack."""
    if "best_words" in frames:
        return "stop check"
    if method == "query" and "initial_state" in frames:
        return "slot queries"  # fused: the first step's queries
    return next((STAGES[name] for name in reversed(frames) if name in STAGES), "other")


class StagePositions(PassCounter):
    """frontier.py's pass counter, its positions also tallied by decoding stage."""

    def __init__(self, models):
        self.by_stage = collections.Counter()
        super().__init__(models)

    def count(self, method, dim, args, kwargs):
        super().count(method, dim, args, kwargs)
        x = args[0]  # [B, T, D]
        if method == "forward_with_queries":  # (xq [B, T + Q, D], T, ...): T new words and Q queries in one call
            n_new = int(args[1])
            self.by_stage["words"] += x.size(0) * n_new
            self.by_stage["slot queries"] += x.size(0) * (x.size(1) - n_new)
        else:
            frames = [f.name for f in traceback.extract_stack(limit=20)]
            self.by_stage[stage_of(method, frames)] += x.size(0) * x.size(1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--path", required=True, help="an InsNet checkpoint with the slot query stream")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--no-stop-check", action="store_true", help="--stop-check-prob 0")
    p.add_argument("--fused", action="store_true", help="--fuse-slot-queries")
    args = p.parse_args(argv)
    model, task = load(args.path, args.data, "cpu")
    counter = StagePositions([model])  # the first layer of every decoder stack, as frontier.py counts
    tally = counter.by_stage
    flags = dict(stop_check_prob=0.0) if args.no_stop_check else {}
    flags["fuse_slot_queries"] = "on" if args.fused else "off"
    gen = InsertionGenerator(task.target_dictionary, DecodingOptions.for_mode("parallel", **flags))
    tokens = 0
    with torch.no_grad():
        for sample in batches(task, list(range(args.sentences)), 1, "cpu"):
            tokens += sum(len(h[0]["tokens"]) - 1 for h in gen.generate([model], sample))  # words, not </s>
    print(f"{args.sentences} test sentences, {tokens} output tokens, parallel decoding"
          + (" without the stop check" if args.no_stop_check else "") + (", fused" if args.fused else ""))
    print("| stage | positions per output token |\n|---|---|")
    for stage in ("start", "words", "slot queries", "stop check", "other"):
        if tally[stage]:
            print(f"| {stage} | {tally[stage] / tokens:.2f} |")
    print(f"| all | {sum(tally.values()) / tokens:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
