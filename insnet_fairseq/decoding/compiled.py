"""Compiled decoding (``--compile-decoder MODE``): the cached step's decoder passes through ``torch.compile``.

:class:`CompiledPasses` is the :class:`~insnet_fairseq.decoding.step.Passes` that the extras give the core's steps:
each pass compiled by ``torch.compile(mode=MODE, dynamic=True)``, once per model (the first steps compile it: a minute
or more; later shapes reuse it). Its outputs equal the eager pass's within float rounding. In ``reduce-overhead`` mode
(CUDA graphs) a pass must write none of its inputs: it is run functionally (:attr:`CompiledPasses.functional`).
:func:`passes_of` makes the passes of the extras' options.
"""
import torch

from insnet_fairseq.decoding.extra_options import ExtraOptions
from insnet_fairseq.decoding.step import Passes


class CompiledPasses(Passes):
    """The passes compiled in ``mode`` (one of :data:`~insnet_fairseq.decoding.extra_options.COMPILE_MODES` but off)
    with ``backend``; ``fuse`` as :class:`~insnet_fairseq.decoding.step.Passes`."""

    def __init__(self, mode: str, backend: str = "inductor", fuse: str = "auto"):
        super().__init__(fuse)
        self.mode, self.backend = mode, backend
        self.functional = mode == "reduce-overhead"
        self._compiled = {}  # (id(context), pass name) -> the compiled pass

    def get(self, decoder, name: str):
        key = (id(decoder.context), name)
        if key not in self._compiled:
            mode = None if self.mode == "default" else self.mode
            self._compiled[key] = torch.compile(super().get(decoder, name), mode=mode, dynamic=True,
                                                backend=self.backend)
        return self._compiled[key]


def passes_of(extras: ExtraOptions) -> Passes:
    """The decoder passes that ``extras`` ask for: compiled (``--compile-decoder``) or eager, fused as
    ``--fuse-slot-queries`` says."""
    if extras.compile_decoder == "off":
        return Passes(extras.fuse_slot_queries)
    return CompiledPasses(extras.compile_decoder, extras.compile_backend, extras.fuse_slot_queries)
