#!/usr/bin/env python
"""Where a decoding step would make the host wait for a GPU: the ops that read a device value back, counted
per step and by call site, on any machine (no GPU needed).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/host_syncs.py --path CKPT [--mode parallel --skip-repeats]
        [--fused] [--sentences 8]

On a GPU a batch-1 decoding step is bound by the host (``profile_decoding.py --device cuda``: the kernels are busy
a few percent of a step), and each op below stops the host until the device has run everything queued before it:
``.item()``, ``int()``, ``bool()`` of a tensor (``aten::_local_scalar_dense``, ``aten::is_nonzero``),
``.nonzero()``, boolean indexing ``x[mask]`` and ``x[mask] = y`` (they must learn how many elements are True),
``masked_select``, ``unique``, ``repeat_interleave`` by a tensor, ``.tolist()``. :class:`HostSyncs` is a
``TorchDispatchMode`` that sees every aten op as it is called, so it finds these sites on a CPU as well; a copy of a
CPU tensor to the GPU (also a wait, unless pinned) is not an aten op of the device and is not counted here.
:class:`HostSyncs` lives in :mod:`insnet_fairseq.measure`, where the tests use it too.
"""
import argparse

import torch

from insnet_fairseq.measure import HostSyncs

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--path", required=True, help="an InsNet checkpoint")
    p.add_argument("--mode", default="sequential", choices=["sequential", "parallel"])
    p.add_argument("--slot-top-p", type=float, default=0.9)
    p.add_argument("--skip-repeats", action="store_true")
    p.add_argument("--fused", action="store_true", help="--fuse-slot-queries (slot-query-stream models)")
    p.add_argument("--sentences", type=int, default=8, help="Multi30k test sentences, decoded one at a time")
    args = p.parse_args(argv)
    from benchmarks.decode_latency import batches, load
    from insnet_fairseq.decoding.generator import InsertionGenerator
    from insnet_fairseq.decoding.options import DecodingOptions

    model, task = load(args.path, args.data, "cpu")
    gen = InsertionGenerator(task.target_dictionary, DecodingOptions(mode=args.mode, slot_top_p=args.slot_top_p,
                             skip_repeats=args.skip_repeats, fuse_slot_queries="on" if args.fused else "off"))
    samples = list(batches(task, list(range(args.sentences)), 1, "cpu"))  # collated before counting
    steps = 0
    with torch.no_grad(), HostSyncs() as syncs:
        for sample in samples:
            steps += gen.generate([model], sample)[0][0]["steps"]
    print(f"InsNet {args.mode}{' fused' if args.fused else ''}, {args.sentences} test sentences at batch 1, "
          f"{steps} steps: {syncs.total / max(1, steps):.2f} device reads per step")
    print("| per step | op | call site |")
    print("|---|---|---|")
    for (op, site), n in syncs.sites.most_common():
        print(f"| {n / max(1, steps):.2f} | {op} | {site} |")


if __name__ == "__main__":
    main()
