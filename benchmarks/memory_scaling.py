#!/usr/bin/env python
"""Peak memory against target length: InsNet vs fairseq's autoregressive ``transformer`` of the same
size (3+3 layers, d=256, the results table's), side by side in one run.

    python benchmarks/memory_scaling.py [--lengths 64 128 256 512 1024] [--decode]

For every length L and model, a fresh subprocess builds the model, warms up on a length-16 batch
(thread pools, Adam state), then runs one training step (forward + backward
+ Adam) on one sentence pair whose source and target both have L tokens, and reports the peak
memory it added. On a GPU that is ``torch.cuda.max_memory_allocated``. On CPU it is measured twice:
the peak of the bytes held by live tensors (the same step again under ``torch.profiler`` with
``profile_memory``, its allocation and free events summed in time order: activations, gradients and
the optimizer's temporaries; what ``max_memory_allocated`` counts on a GPU, and the same in every
run), which gives the InsNet/AR ratio; and the growth of the process's peak resident set
(``ru_maxrss``), which also counts the allocator's free lists and moves by 10-20% from run to run as
glibc reuses memory freed by the warm-up (its InsNet/AR ratio is the last column). InsNet trains
with a random insertion order (the one-pass objective over all L steps). With ``--decode``, InsNet
also decodes L words sequentially and in parallel (the termination head is switched off so the
output reaches L words; the AR model is not decoded: fairseq's beam search is not this package's).
The growth columns give the exponent between consecutive lengths, log(mem ratio) / log(length
ratio): 1 is linear, 2 quadratic.
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def peak_mb(device) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def peak_tensor_mb(work) -> float:
    """Peak bytes (MB) held by live CPU tensors during ``work()``, above what was held when it began: the
    profiler's allocation (+) and free (-) events, summed in time order.
    Example: allocate 4 MB, allocate 4 MB, free the first, allocate 1 MB -> 8 MB."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak / 2**20


def child(kind: str, length: int, data: str, device: str) -> dict:
    import torch

    from benchmarks import train_throughput as tt
    from fairseq.data import Dictionary

    d = Dictionary.load(os.path.join(data, "dict.en.txt"))
    tt.SIZE.update(max_source_positions=length + 2, max_target_positions=length + 2)
    model = tt.build("insnet" if kind.startswith("insnet") else "ar", d).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    to = lambda b: {k: (to(v) if isinstance(v, dict) else v.to(device)) for k, v in b.items()}  # noqa: E731

    def train_step(batch):  # the gradients are made anew: see free_gradients
        model.train()
        # plain NLL on both sides (label smoothing 0: fairseq's cross_entropy criterion for the AR model)
        tt.step_fn("ar" if kind == "ar" else "insnet", model, to(batch), d, 0.0).backward()
        opt.step()

    def decode(batch, words):  # insnet-sequential / insnet-parallel decoding of `words` words
        from insnet_fairseq.decoding.generator import InsertionGenerator
        from insnet_fairseq.decoding.options import DecodingOptions

        model.eval()
        model.decoder.heads.termination_proj.bias.data.fill_(-1e4)  # never stop before the cap
        gen = InsertionGenerator(d, DecodingOptions(mode=kind.split("-")[1], slot_top_p=0.9, max_steps=words))
        ni = to(batch)["net_input"]
        with torch.no_grad():
            hyp = gen.generate([model], {"id": torch.arange(1), "net_input": {
                "src_tokens": ni["src_tokens"], "src_lengths": ni["src_lengths"]}})[0][0]
        assert len(hyp["tokens"]) >= min(words, 8), len(hyp["tokens"])

    training = kind in ("ar", "insnet")
    work = train_step if training else lambda b: decode(b, b["target"].size(1) - 1)

    def free_gradients():
        """Before each measured call: a step's gradients count in its peak (as they do after ``zero_grad``), and the
        CPU profiler sees no free of a tensor made before it started."""
        if training:
            opt.zero_grad(set_to_none=True)

    work(tt.synthetic_batches(d, 16, 16, 1)[0])  # warm-up: thread pools, Adam state (training) exist
    batch = tt.synthetic_batches(d, length, length, 1)[0]
    free_gradients()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = peak_mb(device)
    work(batch)
    if device == "cuda":
        torch.cuda.synchronize()
    added = peak_mb(device) - before
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.grad is not None) / 2**20
    tensor_mb = added
    if device != "cuda":  # the same call again, its tensors counted by the profiler
        free_gradients()
        tensor_mb = peak_tensor_mb(lambda: work(batch))
    return {"kind": kind, "length": length, "added_mb": added, "tensor_mb": tensor_mb, "grad_mb": grads}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    p.add_argument("--decode", action="store_true", help="also InsNet sequential and parallel decoding")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--child", nargs=2, metavar=("KIND", "LENGTH"), help=argparse.SUPPRESS)
    args = p.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.data, device)))
        return
    if not os.path.exists(os.path.join(args.data, "dict.en.txt")):
        sys.exit(f"{args.data}/dict.en.txt not found: run `make multi30k` first")
    kinds = ["ar", "insnet"] + (["insnet-sequential", "insnet-parallel"] if args.decode else [])
    print(f"peak memory added by one training step (one sentence pair, source = target = L tokens), {device}, "
          f"torch threads {torch.get_num_threads()}\n")
    table, rss, grad_mb = {}, {}, {}
    for length in args.lengths:
        for kind in kinds:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, str(length), "--data", args.data,
                   "--device", device]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if out.returncode != 0:
                sys.exit(f"{kind} at length {length} failed:\n{out.stderr[-3000:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            table[kind, length], rss[kind, length] = res["tensor_mb"], res["added_mb"]
            if kind in ("ar", "insnet"):
                grad_mb[kind] = res["grad_mb"]
            print(f"L={length:5d} {kind:18s} +{table[kind, length]:8.1f} MB tensors  +{rss[kind, length]:8.1f} MB "
                  f"peak resident set", flush=True)
    head = " | ".join(f"{k} MB" for k in kinds)
    print(f"\npeak tensor memory (MB; a training step's includes its gradients: AR {grad_mb['ar']:.1f} MB, "
          f"InsNet {grad_mb['insnet']:.1f} MB)"
          f"{'' if device == 'cuda' else '; last column: the same ratio of peak resident sets'}")
    print(f"| target length | {head} | InsNet/AR | growth AR | growth InsNet |{'' if device == 'cuda' else ' InsNet/AR RSS |'}")
    print("|---" * (len(kinds) + 4 + (device != "cuda")) + "|")
    prev = None
    ratio = lambda t, n: t["insnet", n] / max(t["ar", n], 1e-3)  # noqa: E731
    for length in args.lengths:
        mems = " | ".join(f"{table[k, length]:.1f}" for k in kinds)
        growth = ["", ""]
        if prev is not None:
            growth = [f"{math.log(max(table[k, length], 1e-3) / max(table[k, prev], 1e-3)) / math.log(length / prev):.2f}"
                      for k in ("ar", "insnet")]
        print(f"| {length} | {mems} | {ratio(table, length):.2f}x | {growth[0]} | {growth[1]} |"
              + ("" if device == "cuda" else f" {ratio(rss, length):.2f}x |"))
        prev = length


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
