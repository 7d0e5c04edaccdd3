#!/usr/bin/env python
"""Where a decoding step's time goes: torch profiler over InsNet and AR greedy decoding, batch 1 and 64.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/profile_decoding.py \
        --insnet checkpoints/t60_insnet_l2r/checkpoint_best.pt \
        --ar checkpoints/multi30k_en_de-teacher/checkpoint_best.pt [--mode sequential] [--sentences 64]

Decodes the same Multi30k test sentences (``benchmarks/decode_latency.py``'s batching) once to
warm up, then once under ``torch.profiler``, and prints per system and batch size: wall ms per
decoding step, and the share of the time in model arithmetic (matrix products, attention, softmax,
layer norm, activations: the ops a step cannot do without) against the rest (indexing, copies,
concatenation, sorting, masks: bookkeeping), with the top ops by self CPU time. An InsNet step
should cost about an AR step: the table shows which part does not. Also printed: aten calls per
step, nested calls included. At batch 1 on a CPU a step's time is mostly the Python and dispatch around
each call, and the count, unlike the milliseconds, does not depend on what else the machine runs.

``--device cuda`` decodes on the GPU and adds, per step: the kernels launched, the host-device syncs (stream and
device synchronisations, and device-to-host copies, e.g. ``.item()``, ``.nonzero()``, ``.tolist()``), and the
GPU's busy time (the kernels' summed duration) against the wall time: at batch 1 a GPU step that is busy a small
part of its wall time is bound by the host (Python, dispatch, launches, syncs), not by arithmetic.
"""
import argparse
import sys
import time

import torch
from fairseq.sequence_generator import SequenceGenerator
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from benchmarks.decode_latency import batches, load, sync
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions

ARITHMETIC = ("addmm", "mm", "bmm", "matmul", "linear", "scaled_dot_product", "softmax", "log_softmax",
              "layer_norm", "native_layer_norm", "relu", "gelu", "baddbmm", "_efficient_attention",
              "_flash_attention")


def is_arithmetic(name: str) -> bool:
    return any(k in name for k in ARITHMETIC)


def vocabulary_share(model, generator, samples, vocab: int) -> float:
    """Percent of the aten time spent in matrix products with a dimension of the vocabulary's size (the output
    projection: both systems make it for every sentence at every step, so it bounds what a leaner step can gain),
    from a second profile of the samples that records shapes (which slows every op, so it is not timed)."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for s in samples:
            generator.generate([model], s)
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events if e.key.startswith("aten::"))
    spent = sum(e.self_cpu_time_total for e in events
                if e.key in ("aten::addmm", "aten::mm") and any(vocab in (shape or []) for shape in e.input_shapes))
    return 100 * spent / max(1.0, total)


LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def gpu_summary(events, n_steps: int, wall: float) -> str:
    """Kernels launched, host-device syncs and the GPU's busy share, per step, from a CPU + CUDA profile."""
    per = max(1, n_steps)
    launches = sum(e.count for e in events if e.key in LAUNCHES)
    syncs = sum(e.count for e in events if e.key in SYNCS)
    copies = sum(e.count for e in events if "Memcpy DtoH" in e.key)  # device-to-host copies (kernel-side name)
    busy = sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e6  # us -> s
    return (f"; GPU: {launches / per:.0f} kernel launches, {syncs / per:.1f} syncs and {copies / per:.1f} "
            f"device-to-host copies per step, kernels busy {1000 * busy / per:.2f} ms a step "
            f"({100 * busy / max(wall, 1e-9):.0f}% of the wall time)")


def profile_system(name, model, generator, samples, top, vocab, device="cpu"):
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.no_grad():
        for s in samples:  # warm-up
            generator.generate([model], s)
        n_steps = 0  # batched steps: the longest decoding of each batch (AR: its longest output, </s> included)
        sync(device)
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            for s in samples:
                hyps = generator.generate([model], s)
                n_steps += max(h[0].get("steps", int(h[0]["tokens"].numel())) for h in hyps)
            sync(device)
        wall = time.perf_counter() - start
    all_events = prof.key_averages()
    events = [e for e in all_events if not e.key.startswith("ProfilerStep")]
    leaf = [e for e in events if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in leaf)
    arith = sum(e.self_cpu_time_total for e in leaf if is_arithmetic(e.key))
    calls = sum(e.count for e in leaf)  # every aten call, nested ones included: the same count on any machine
    print(f"\n{name}: {1000 * wall / max(1, n_steps):.2f} ms per batched step ({n_steps} steps, profiler on), "
          f"{calls / max(1, n_steps):.0f} aten calls per step; "
          f"aten time {total / 1000:.0f} ms: arithmetic {100 * arith / max(1, total):.0f}% (the vocabulary "
          f"projection {vocabulary_share(model, generator, samples, vocab):.0f}%), "
          f"bookkeeping {100 * (total - arith) / max(1, total):.0f}%; Python outside aten "
          f"{100 * max(0.0, 1 - total / 1e6 / wall):.0f}% of the wall time"
          + (gpu_summary(all_events, n_steps, wall) if device == "cuda" else ""))
    print("| op | self ms | calls | kind |")
    print("|---|---|---|---|")
    for e in sorted(leaf, key=lambda e: -e.self_cpu_time_total)[:top]:
        kind = "arithmetic" if is_arithmetic(e.key) else "bookkeeping"
        print(f"| {e.key} | {e.self_cpu_time_total / 1000:.1f} | {e.count} | {kind} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--insnet", required=True)
    p.add_argument("--ar", required=True)
    p.add_argument("--mode", default="sequential", choices=["sequential", "parallel"])
    p.add_argument("--slot-top-p", type=float, default=0.9)
    p.add_argument("--skip-repeats", action="store_true", help="InsNet parallel: --skip-repeats")
    p.add_argument("--fused", action="store_true", help="--slot-query-stream models: the next step's slot queries "
                   "in each step's pass (--fuse-slot-queries)")
    p.add_argument("--batch-sizes", default="1,64")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: decode on the GPU, and print kernel launches, syncs and the GPU's busy share per step")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("profile_decoding.py: --device cuda, but torch sees no GPU")
    insnet, itask = load(args.insnet, args.data, args.device)
    ar, atask = load(args.ar, args.data, args.device)
    ids = list(range(args.sentences))
    gen = InsertionGenerator(itask.target_dictionary, DecodingOptions(mode=args.mode, slot_top_p=args.slot_top_p,
                             skip_repeats=args.skip_repeats, fuse_slot_queries="on" if args.fused else "off"))
    ar_gen = SequenceGenerator([ar], atask.target_dictionary, beam_size=1)
    print(f"{torch.get_num_threads()} thread(s), {args.sentences} Multi30k test sentences, InsNet {args.mode}, "
          f"device {args.device}" + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""))
    with profile(activities=[ProfilerActivity.CPU]):  # the profiler's one-time start-up, charged to no system
        torch.zeros(1).add_(1)
    for bsz in [int(b) for b in args.batch_sizes.split(",")]:
        vocab = len(itask.target_dictionary)
        profile_system(f"InsNet {args.mode}, batch {bsz}", insnet, gen, batches(itask, ids, bsz, args.device),
                       args.top, vocab, args.device)
        profile_system(f"AR greedy, batch {bsz}", ar, ar_gen, batches(atask, ids, bsz, args.device), args.top, vocab,
                       args.device)


if __name__ == "__main__":
    main()
