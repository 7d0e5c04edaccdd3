#!/usr/bin/env python
"""Decoding latency, side by side in one run, on the same Multi30k test sentences:

* InsNet sequential and parallel, with the cached context and without it (``--no-insertion-cache``);
* fairseq's autoregressive ``transformer`` (greedy) and ``levenshtein_transformer`` (fairseq's
  documented ``--iter-decode-max-iter 9``, ``--iter-decode-eos-penalty 0``, beam 1), same size;
* with ``--beam N``: InsNet sequential beam search (``--insertion-beam N``) and the AR model's beam N;
* with ``--candidates K --judge``: the parallel-trained model's K candidates judged by the ``--ar`` model
  (``--iter-decode-with-external-reranker``), the judge's pass included in the time; ``--candidates-finish M``
  stops a sentence once M of them have finished, ``--channel REV.pt --channel-weight W`` adds the judge's channel
  model (a target -> source AR checkpoint);
* with ``--candidates K --mbr T``: the parallel-trained model's own pick among its K candidates made by minimum Bayes
  risk (``--insertion-candidates-mbr T``: their expected BLEU+1 against each other), no second model;
* with ``--candidates K --judge-insnet L2R.pt``: the same candidates judged by an InsNet model (an l2r checkpoint scores
  each along its left-to-right trajectory, ``insnet_fairseq/decoding/rerank.py``), no AR model in the decoding;
* with ``--verify``: the parallel-trained model's drafts verified by the ``--ar`` model (``--insertion-verify``,
  ``--verify-tolerance B``), every verification pass in the time (the output is the AR model's greedy output at
  B = 0, with the same length limit as the AR system here);

Every model's linear layers decode through :mod:`insnet_fairseq.modules.packed_linear` (the autoregressive and
Levenshtein models' too: :func:`load` applies :func:`~insnet_fairseq.modules.packed_linear.pack_linears` to every
model alike): all systems use the same products.

    .venv/bin/python benchmarks/decode_latency.py --insnet checkpoints/table_insnet/checkpoint_last.pt \
        --insnet-parallel checkpoints/dinic_tau1/checkpoint_last.pt \
        --ar checkpoints/table_ar/checkpoint_last.pt [--levt checkpoints/table_levt/checkpoint_last.pt]

Every system decodes the same sentences at batch 1 and batch 64 (each with its own task's batching
of the test split, sentences sorted by length as fairseq-generate does); systems are interleaved
over ``--rounds`` rounds and the median wall time is kept. Printed: ms/sentence, average decoding
steps, steps/output length, and the ratios the goals are stated in (cached vs uncached at batch 64,
per source-length bucket; InsNet parallel vs AR at batch 1).
"""
import argparse
import os
import statistics
import sys
import time
from argparse import Namespace

import torch
from fairseq import utils
from fairseq.sequence_generator import SequenceGenerator

import insnet_fairseq  # noqa: F401  (registers the task/model and the fairseq fixes)
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.modules.packed_linear import pack_linears
from insnet_fairseq.tasks import checkpoint_checks


def load(path, data, device="cpu"):
    if not os.path.isfile(path):
        sys.exit(f"decode_latency: checkpoint {path} not found (train it first: see README, Benchmarks)")
    models, _, task = checkpoint_checks.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    model = pack_linears(models[0]).eval().to(device)  # every system on the same products
    task.load_dataset("test")
    return model, task


def src_sizes(ds):
    return ds.src_sizes if hasattr(ds, "src_sizes") else ds.dataset.src_sizes


def batches(task, ids, bsz, device="cpu"):
    """The given test sentences, sorted by length, in batches of ``bsz`` (fairseq's collater), on ``device``."""
    ds = task.dataset("test")
    sizes = src_sizes(ds)
    ids = sorted(ids, key=lambda i: (int(sizes[i]), i))
    return [utils.move_to_cuda(b) if device == "cuda" else b
            for b in (ds.collater([ds[i] for i in ids[k : k + bsz]]) for k in range(0, len(ids), bsz))]


def sync(device):
    """Wait for the GPU's queued work, so that wall time covers it."""
    if device == "cuda":
        torch.cuda.synchronize()


class System:
    def __init__(self, name, model, generator, task, device="cpu", judges=()):
        self.name, self.model, self.generator, self.task, self.device = name, model, generator, task, device
        self.models = [model, *judges]  # the candidates' autoregressive reranker (and its channel model)

    def run(self, samples):
        """Decode the samples; returns (seconds, sentences, mean steps, mean output length)."""
        steps, lengths, n = [], [], 0
        sync(self.device)
        start = time.perf_counter()
        with torch.no_grad():
            for sample in samples:
                hyps = self.generator.generate(self.models, sample)
                for h in hyps:
                    best = h[0]
                    out_len = int(best["tokens"].numel())  # words + </s>
                    lengths.append(out_len - 1)
                    steps.append(best.get("steps", out_len))  # autoregressive: one step per token
                n += len(hyps)
        sync(self.device)
        return time.perf_counter() - start, n, statistics.mean(steps), statistics.mean(lengths)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--insnet", required=True, help="InsNet checkpoint (sequential and parallel decoding)")
    p.add_argument("--insnet-parallel", help="a parallel-trained InsNet checkpoint (Dinic / uniform), decoded in parallel")
    p.add_argument("--ar", required=True, help="fairseq transformer checkpoint")
    p.add_argument("--levt", help="fairseq levenshtein_transformer checkpoint (left out when not given)")
    p.add_argument("--slot-top-p", type=float, default=0.7, help="parallel decoding's slot mass (--slot-top-p)")
    p.add_argument("--skip-repeats", action="store_true", help="the parallel-trained model decodes with --skip-repeats")
    p.add_argument("--sentences", type=int, default=256, help="first N test sentences (by id)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu",
                   help="where every system decodes (default: cuda when there is a GPU)")
    p.add_argument("--fused", action="store_true",
                   help="also decode the parallel-trained (--slot-query-stream) model with --fuse-slot-queries, "
                        "its plain row then with --no-fuse-slot-queries (without --fused: the default, fused at "
                        "batch 1), and decode its candidate, stop-check, judged and verified systems with it (the "
                        "same outputs)")
    p.add_argument("--candidates", type=int, default=1,
                   help="also decode the parallel-trained model with --insertion-candidates N (N > 1)")
    p.add_argument("--judge", action="store_true",
                   help="with --candidates: also decode them with the --ar model as their judge "
                        "(--iter-decode-with-external-reranker)")
    p.add_argument("--judge-insnet", metavar="PATH",
                   help="with --candidates: also decode them judged by this InsNet checkpoint (an l2r model: one "
                        "teacher-forced pass along each candidate's left-to-right trajectory), no AR model")
    p.add_argument("--candidates-finish", type=int, default=0,
                   help="with --candidates: a sentence stops once M of them have finished (--insertion-candidates-finish), "
                        "in the judged systems and, with --mbr, the MBR ones")
    p.add_argument("--mbr", type=float, default=0.0, metavar="T",
                   help="with --candidates: the candidate and stop-check systems (not the judged ones) pick their output "
                        "by minimum Bayes risk among the candidates, --insertion-candidates-mbr T (inf: uniform weights)")
    p.add_argument("--channel", help="with --judge: the judge's channel model, a target -> source AR checkpoint")
    p.add_argument("--channel-weight", type=float, default=1.0, help="with --channel: its --channel-weight")
    p.add_argument("--stop-check-prob", type=float, default=0.0,
                   help="also decode the parallel-trained model with --stop-check-prob P (P > 0)")
    p.add_argument("--verify", action="store_true",
                   help="also decode the parallel-trained model's drafts verified by the --ar model (--insertion-verify; "
                   "with --stop-check-prob P, the drafts use it)")
    p.add_argument("--verify-tolerance", type=float, default=0.0, help="with --verify: its --verify-tolerance")
    p.add_argument("--beam", type=int, default=1,
                   help="also decode the --insnet model sequentially with --insertion-beam N and the AR model with beam N")
    p.add_argument("--compile", nargs="+", default=[], metavar="MODE", choices=["default", "reduce-overhead", "max-autotune"],
                   help="also decode InsNet sequentially, and the parallel-trained model (fused queries with --fused), "
                        "with --compile-decoder MODE, for each MODE; their warm-up decodes every batch once (the "
                        "compilation), the rounds are timed after it")
    p.add_argument("--cached-only", action="store_true",
                   help="leave out the uncached decodings and the length terciles (the latency comparison only)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = args.device

    insnet, ins_task = load(args.insnet, args.data, dev)
    tgt = ins_task.target_dictionary
    caches = [True] if args.cached_only else [True, False]

    ar, ar_task = load(args.ar, args.data, dev)
    judges, channel_weight = [ar], 0.0
    if args.channel:
        judges, channel_weight = [ar, load(args.channel, args.data, dev)[0]], args.channel_weight

    def insnet_systems(name, model, task, judge=False, verify=False, cached_only=False, judge_models=None, **flags):
        """Cached, then (unless --cached-only or ``cached_only``) uncached; with the judges (judge: the AR model and
        its channel, or ``judge_models``) or the AR verifier (verify) after."""
        own = judge_models is None
        return [System(f"{name} {'cached' if c else 'uncached'}", model,
                       InsertionGenerator(tgt, DecodingOptions(use_cache=c, reranking=judge,
                                          channel_weight=channel_weight if judge and own else 0.0, verify=verify, **flags)),
                       task, dev, (judges if own else judge_models) if judge else [ar] if verify else ())
                for c in ([True] if cached_only else caches)]

    systems = (insnet_systems("InsNet seq", insnet, ins_task, mode="sequential")
               + insnet_systems("InsNet par", insnet, ins_task, mode="parallel", slot_top_p=args.slot_top_p))
    for mode in args.compile:  # --compile-decoder: cached only (the uncached path re-encodes and is not compiled)
        systems += insnet_systems(f"InsNet seq, compiled {mode}", insnet, ins_task, cached_only=True, mode="sequential",
                                  compile_decoder=mode)
    if args.insnet_parallel:
        par, par_task = load(args.insnet_parallel, args.data, dev)
        fuse = "on" if args.fused else "auto"  # --fused: the compiled, candidate, stop-check, judged and verified systems
        systems += insnet_systems("InsNet-parallel-trained par", par, par_task, mode="parallel",
                                  slot_top_p=args.slot_top_p, skip_repeats=args.skip_repeats,
                                  fuse_slot_queries="off" if args.fused else "auto")  # --fused: against two passes
        if args.fused:  # the same decoding with the next step's slot queries in each step's pass
            systems += insnet_systems("InsNet-parallel-trained par, fused queries", par, par_task,
                                      mode="parallel", slot_top_p=args.slot_top_p, skip_repeats=args.skip_repeats,
                                      fuse_slot_queries="on")
        for mode in args.compile:
            systems += insnet_systems(f"InsNet-parallel-trained par{', fused queries' if args.fused else ''}, compiled {mode}",
                                      par, par_task, cached_only=True, mode="parallel", slot_top_p=args.slot_top_p,
                                      skip_repeats=args.skip_repeats, fuse_slot_queries=fuse, compile_decoder=mode)
        fused = ", fused queries" if args.fused else ""  # the systems below, with --fused: one pass per step
        mbr = args.mbr if args.candidates > 1 else 0.0  # the model's own pick among its candidates, or MBR's
        finish = args.candidates_finish if mbr else 0  # (the own-pick systems wait for all K, as before --mbr)
        picked = (f", first {finish} finished" if finish else "") + (f", MBR T={args.mbr:g}" if mbr else "")
        if args.candidates > 1:  # the same model with --insertion-candidates
            systems += insnet_systems(f"InsNet-parallel-trained par, {args.candidates} candidates{picked}{fused}", par,
                                      par_task, mode="parallel", slot_top_p=args.slot_top_p,
                                      skip_repeats=args.skip_repeats, candidates=args.candidates,
                                      candidates_finish=finish, candidates_mbr=mbr, fuse_slot_queries=fuse)
        if args.stop_check_prob > 0:  # the same model with --stop-check-prob (and, if asked, the candidates)
            label = f"InsNet-parallel-trained par, stop check {args.stop_check_prob}" + (
                f", {args.candidates} candidates{picked}" if args.candidates > 1 else "") + fused
            systems += insnet_systems(label, par, par_task,
                                      mode="parallel", slot_top_p=args.slot_top_p, skip_repeats=args.skip_repeats,
                                      stop_check_prob=args.stop_check_prob, candidates=args.candidates,
                                      candidates_finish=finish, candidates_mbr=mbr, fuse_slot_queries=fuse)
        # the candidates (and stop check, if asked) judged by the AR model (+ its channel), or by an InsNet model
        judged = ([("AR judge", f", + {channel_weight} x channel" if args.channel else "", None)] if args.judge else []) + (
            [("InsNet judge", "", [load(args.judge_insnet, args.data, dev)[0]])] if args.judge_insnet else [])
        for who, tail, judge_models in judged if args.candidates > 1 else []:
            label = f"InsNet-parallel-trained par, {args.candidates} candidates, {who}" + (
                f", stop check {args.stop_check_prob}" if args.stop_check_prob > 0 else "") + (
                f", first {args.candidates_finish} finished" if args.candidates_finish else "") + tail + fused
            systems += insnet_systems(label, par, par_task, judge=True, judge_models=judge_models,
                                      mode="parallel", slot_top_p=args.slot_top_p, skip_repeats=args.skip_repeats,
                                      stop_check_prob=args.stop_check_prob, candidates=args.candidates,
                                      candidates_finish=args.candidates_finish, fuse_slot_queries=fuse)
        if args.verify:  # the drafts (with the stop check, if asked) verified by the AR model, its limit below
            label = f"InsNet-parallel-trained par, AR-verified (tolerance {args.verify_tolerance})" + (
                f", stop check {args.stop_check_prob}" if args.stop_check_prob > 0 else "") + fused
            systems += insnet_systems(label, par, par_task, verify=True, verify_tolerance=args.verify_tolerance,
                                      verify_max_len=(2, 10), mode="parallel", slot_top_p=args.slot_top_p,
                                      skip_repeats=args.skip_repeats, stop_check_prob=args.stop_check_prob,
                                      fuse_slot_queries=fuse)
    systems.append(System("AR transformer greedy", ar, SequenceGenerator([ar], ar_task.target_dictionary, beam_size=1,
                                                                         max_len_a=2, max_len_b=10), ar_task, dev))
    if args.beam > 1:  # beam search side by side: InsNet sequential (--insertion-beam) and the AR model
        systems += insnet_systems(f"InsNet seq, beam {args.beam}", insnet, ins_task, mode="sequential", beam=args.beam)
        systems.append(System(f"AR transformer beam {args.beam}", ar, SequenceGenerator(
            [ar], ar_task.target_dictionary, beam_size=args.beam, max_len_a=2, max_len_b=10), ar_task, dev))
    if args.levt:
        levt, levt_task = load(args.levt, args.data, dev)
        systems.append(System("LevT", levt, levt_task.build_generator(
            [levt], Namespace(iter_decode_max_iter=9, iter_decode_eos_penalty=0.0)), levt_task, dev))

    ids = list(range(min(args.sentences, len(ins_task.dataset("test")))))
    sizes = src_sizes(ins_task.dataset("test"))
    by_len = sorted(ids, key=lambda i: (int(sizes[i]), i))
    third = len(by_len) // 3  # source-length terciles: is the cache's gain growing with length?
    buckets = {"short": by_len[:third], "medium": by_len[third : 2 * third], "long": by_len[2 * third :]}
    median_len = statistics.median(int(sizes[i]) for i in ids)
    results = {}  # (system, setting) -> (ms/sentence, steps, steps/length)
    # (setting, sentences, batch size, only InsNet): uncached decoding runs at batch > 1 only, and the
    # length terciles compare InsNet cached vs uncached
    plans = [(f"batch {b}", ids, b, False) for b in args.batch_sizes]
    if not args.cached_only:
        plans += [(f"batch 64, {k} sources ({int(sizes[v[0]])}-{int(sizes[v[-1]])} tokens)", v, 64, True)
                  for k, v in buckets.items()]
    for setting, sel, bsz, insnet_only in plans:
        runs = [s for s in systems if (bsz > 1 or "uncached" not in s.name)
                and (not insnet_only or s.name.startswith("InsNet"))]
        prepared = {s.task: batches(s.task, sel, bsz, dev) for s in runs}
        for s in runs:  # warm-up (a compiled system: every batch, so that its compilations are not timed)
            compiled = getattr(getattr(s.generator, "options", None), "compile_decoder", "off") != "off"
            s.run(prepared[s.task] if compiled else prepared[s.task][:1])
        times = {s.name: [] for s in runs}
        for _ in range(args.rounds):
            for s in runs:
                sec, n, steps, length = s.run(prepared[s.task])
                times[s.name].append(sec)
                results[(s.name, setting)] = (None, steps, steps / max(length, 1e-9), n)
        for name, ts in times.items():
            _, steps, ratio, n = results[(name, setting)]
            results[(name, setting)] = (1000 * statistics.median(ts) / n, steps, ratio, n)
        print(f"done: {setting}", file=sys.stderr, flush=True)

    print(f"\n{len(ids)} Multi30k test sentences (median source length {median_len} tokens with </s>), "
          f"{torch.get_num_threads()} threads, device {dev}"
          + (f" ({torch.cuda.get_device_name()})" if dev == "cuda" else "") + f", median of {args.rounds} rounds\n")
    print("| system | setting | ms/sentence | steps | steps/length |")
    print("|---|---|---|---|---|")
    for (name, setting), (ms, steps, ratio, n) in results.items():
        print(f"| {name} | {setting} | {ms:.1f} | {steps:.1f} | {ratio:.2f} |")
    print()

    def ms(name, setting):
        return results[(name, setting)][0]

    for prefix in ["InsNet seq", "InsNet par", "InsNet-parallel-trained par"]:
        for setting in [s for s, _, b, _ in plans if b == 64]:
            if (f"{prefix} cached", setting) in results and (f"{prefix} uncached", setting) in results:
                print(f"{prefix}, {setting}: cached is {ms(f'{prefix} uncached', setting) / ms(f'{prefix} cached', setting):.2f}x "
                      "faster than uncached")
    if "batch 1" in [s for s, _, _, _ in plans]:
        ar_ms = ms("AR transformer greedy", "batch 1")
        ar_step = ar_ms / results[("AR transformer greedy", "batch 1")][1]  # the per-step ratio: InsNet against AR
        for name in dict.fromkeys(n for n, _ in results):
            if name.startswith("InsNet") and not name.endswith("uncached") and (name, "batch 1") in results:
                step = ms(name, "batch 1") / results[(name, "batch 1")][1]
                print(f"batch 1, per step: {name} {step:.2f} ms, AR transformer greedy {ar_step:.2f} ms: "
                      f"{step / ar_step:.2f}x the AR model's step")
        for name in dict.fromkeys(n for n, _ in results):  # every system, once, in the order they ran
            if name != "AR transformer greedy" and not name.endswith("uncached") and (name, "batch 1") in results:
                print(f"batch 1: {name} is {ar_ms / ms(name, 'batch 1'):.2f}x the speed of the AR transformer "
                      f"({ms(name, 'batch 1'):.1f} vs {ar_ms:.1f} ms/sentence)")


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
