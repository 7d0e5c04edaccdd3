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
"""
import argparse
import collections
import os
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from recipes.common import ROOT

READ_BACK = {"aten.nonzero.default", "aten._local_scalar_dense.default", "aten.is_nonzero.default",
             "aten.equal.default", "aten.masked_select.default", "aten._unique2.default",
             "aten.unique_consecutive.default", "aten.unique_dim.default", "aten.repeat_interleave.Tensor"}
BOOL_INDEXED = {"aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default", "aten._index_put_impl_.default"}


def reads_back(func, args) -> bool:
    """Whether the aten op ``func`` called with ``args`` needs a device value on the host."""
    name = str(func)
    if name in READ_BACK:
        return True
    if name in BOOL_INDEXED and len(args) > 1 and isinstance(args[1], (list, tuple)):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
    return False


class HostSyncs(TorchDispatchMode):
    """Counts the ops that read a device value back (:func:`reads_back`), and the calls of ``Tensor.tolist`` (a copy
    to the host on a GPU, no aten op on a CPU), by op and by the innermost call site in ``insnet_fairseq``
    (file:line function), while active: ``with HostSyncs() as syncs: ...; syncs.total``."""

    def __init__(self):
        super().__init__()
        self.sites = collections.Counter()
        self._tolist = None

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def _count(self, op: str) -> None:
        frames = [f for f in traceback.extract_stack() if "insnet_fairseq" in f.filename]
        site = (f"{os.path.relpath(frames[-1].filename, ROOT)}:{frames[-1].lineno} {frames[-1].name}"
                if frames else "(outside insnet_fairseq)")
        self.sites[(op, site)] += 1

    def __enter__(self):
        self._tolist = torch.Tensor.tolist
        tolist = self._tolist

        def counted_tolist(t, *args, **kwargs):
            self._count("tolist")
            return tolist(t, *args, **kwargs)

        torch.Tensor.tolist = counted_tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if reads_back(func, args):
            self._count(str(func).split(".")[1])
        return func(*args, **(kwargs or {}))


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
