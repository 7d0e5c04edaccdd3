#!/usr/bin/env python
"""Where a decoding step's time goes: torch profiler over InsNet and AR greedy decoding, batch 1 and 64.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/profile_decoding.py \
        --insnet checkpoints/t60_insnet_l2r/checkpoint_best.pt \
        --ar checkpoints/multi30k_en_de-teacher/checkpoint_best.pt [--mode parallel] [--sentences 64]

Decodes the same Multi30k test sentences (``benchmarks/decode_latency.py``'s batching) as a user gets them: InsNet
with the mode's defaults and the settings stored with the model (``--insertion-mode MODE`` alone), each flag given
replacing its default. Per batch size it first times both systems without the profiler, interleaved batch by batch
(:func:`timed_steps`), and prints the milliseconds per batched step and their ratio: what one InsNet step costs
against one AR step. Then, per system, once to warm up and once under ``torch.profiler``: wall ms per decoding step
(the profiler's own cost included), and the share of the time in model arithmetic (matrix products, oneDNN's
included, attention, softmax, layer norm, activations: the ops a step cannot do without) against the rest (indexing,
copies, concatenation, sorting, masks: bookkeeping), with the top ops by self CPU time. Also printed: op calls per
step, nested calls included. At batch 1 on a CPU a step's time is mostly the Python and dispatch around each call,
and the count, unlike the milliseconds, does not depend on what else the machine runs.

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
from insnet_fairseq.decoding.options import DecodingOptions, stored_decoding

ARITHMETIC = ("addmm", "mm", "bmm", "matmul", "linear", "scaled_dot_product", "softmax", "log_softmax",
              "layer_norm", "native_layer_norm", "relu", "gelu", "baddbmm", "_efficient_attention",
              "_flash_attention")


LEAF = ("aten::", "mkldnn::")  # the ops whose self time is counted: aten's, and oneDNN's products (packed_linear)
PRODUCTS = ("aten::addmm", "aten::mm", "mkldnn::_linear_pointwise")  # the matrix products by a weight


def is_arithmetic(name: str) -> bool:
    return any(k in name for k in ARITHMETIC)


def batch_steps(hyps) -> int:
    """A batch's decoding steps: its longest decoding (InsNet: insertion steps; AR: output tokens, </s> included)."""
    return max(h[0].get("steps", int(h[0]["tokens"].numel())) for h in hyps)


def timed_steps(systems, device="cpu", rounds: int = 3) -> list:
    """Unprofiled milliseconds per batched step of each of ``systems`` ((model, generator, samples), the same
    sentences in the same batches), timed interleaved: batch by batch, each batch decoded by every system in a rotating
    order, ``rounds`` times (the first untimed, a warm-up). Returns the ms per step of each system, in order."""
    spent, steps = [0.0] * len(systems), [0] * len(systems)
    with torch.no_grad():
        for r in range(rounds):
            for i in range(len(systems[0][2])):
                for j in [(i + r + k) % len(systems) for k in range(len(systems))]:
                    model, generator, samples = systems[j]
                    sync(device)
                    start = time.perf_counter()
                    hyps = generator.generate([model], samples[i])
                    sync(device)
                    if r > 0:
                        spent[j] += time.perf_counter() - start
                        steps[j] += batch_steps(hyps)
    return [1000 * t / max(1, n) for t, n in zip(spent, steps)]


def vocabulary_share(model, generator, samples, vocab: int) -> float:
    """Percent of the op time (aten's and oneDNN's) spent in matrix products with a dimension of the vocabulary's
    size (the output projection: both systems make it for every sentence at every step, so it bounds what a leaner
    step can gain), from a second profile of the samples that records shapes (which slows every op, so it is not
    timed)."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for s in samples:
            generator.generate([model], s)
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events if e.key.startswith(LEAF))
    spent = sum(e.self_cpu_time_total for e in events
                if e.key in PRODUCTS and any(vocab in (shape or []) for shape in e.input_shapes))
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
                n_steps += batch_steps(generator.generate([model], s))
            sync(device)
        wall = time.perf_counter() - start
    all_events = prof.key_averages()
    events = [e for e in all_events if not e.key.startswith("ProfilerStep")]
    leaf = [e for e in events if e.key.startswith(LEAF)]
    total = sum(e.self_cpu_time_total for e in leaf)
    arith = sum(e.self_cpu_time_total for e in leaf if is_arithmetic(e.key))
    calls = sum(e.count for e in leaf)  # every op call, nested ones included: the same count on any machine
    print(f"\n{name}: {1000 * wall / max(1, n_steps):.2f} ms per batched step ({n_steps} steps, profiler on), "
          f"{calls / max(1, n_steps):.0f} op calls per step; "
          f"op time {total / 1000:.0f} ms: arithmetic {100 * arith / max(1, total):.0f}% (the vocabulary "
          f"projection {vocabulary_share(model, generator, samples, vocab):.0f}%), "
          f"bookkeeping {100 * (total - arith) / max(1, total):.0f}%; Python outside the ops "
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
    p.add_argument("--slot-top-p", type=float, default=None, help="default: the mode's, or the model's stored one")
    p.add_argument("--skip-repeats", action="store_true", default=None,
                   help="InsNet parallel: --skip-repeats (the parallel mode's default)")
    p.add_argument("--no-skip-repeats", action="store_false", dest="skip_repeats",
                   help="InsNet parallel: --no-skip-repeats (a neighbour's repeat may be inserted)")
    p.add_argument("--fused", action="store_const", const="on", default="auto", dest="fuse",
                   help="--slot-query-stream models: the next step's slot queries in each step's pass "
                   "(--fuse-slot-queries)")
    p.add_argument("--two-passes", action="store_const", const="off", dest="fuse",
                   help="--no-fuse-slot-queries (neither flag: the default, fused at batch 1 on a CPU)")
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
    options = DecodingOptions.for_mode(args.mode, stored_decoding([insnet]), slot_top_p=args.slot_top_p,
                                       skip_repeats=args.skip_repeats, fuse_slot_queries=args.fuse)
    gen = InsertionGenerator(itask.target_dictionary, options)
    ar_gen = SequenceGenerator([ar], atask.target_dictionary, beam_size=1)
    print(f"{torch.get_num_threads()} thread(s), {args.sentences} Multi30k test sentences, InsNet {args.mode} "
          f"(slot top-p {options.slot_top_p}, skip repeats {options.skip_repeats}, stop check "
          f"{options.stop_check_prob}, slot queries fused: {options.fuse_slot_queries}), device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""))
    with profile(activities=[ProfilerActivity.CPU]):  # the profiler's one-time start-up, charged to no system
        torch.zeros(1).add_(1)
    for bsz in [int(b) for b in args.batch_sizes.split(",")]:
        vocab = len(itask.target_dictionary)
        ins_batches, ar_batches = batches(itask, ids, bsz, args.device), batches(atask, ids, bsz, args.device)
        ins_ms, ar_ms = timed_steps([(insnet, gen, ins_batches), (ar, ar_gen, ar_batches)], args.device)
        print(f"\nbatch {bsz}, unprofiled, the two timed interleaved: InsNet {args.mode} {ins_ms:.2f} ms per batched "
              f"step, AR greedy {ar_ms:.2f}: {ins_ms / ar_ms:.2f}x")
        profile_system(f"InsNet {args.mode}, batch {bsz}", insnet, gen, ins_batches, args.top, vocab, args.device)
        profile_system(f"AR greedy, batch {bsz}", ar, ar_gen, ar_batches, args.top, vocab, args.device)


if __name__ == "__main__":
    main()
