"""insnet-fairseq: InsNet insertion-based generation as a fairseq extension.

torch and fairseq are deliberately not in install_requires: fairseq-fixed's metadata asks for
torchaudio and an unpinned torch, and which torch build fits (CPU or CUDA) depends on the machine.
`make install` installs torch==2.13.0 (the CPU or the CUDA build: TORCH_VARIANT in the Makefile) and
fairseq-fixed==0.12.3.1 (--no-deps) first, then this package, editable, with --no-build-isolation, so
that the C++ kernel below builds against that torch.

recipes/, benchmarks/ and experiments/ are packages too, so that their scripts import the shared helpers
(recipes/common.py) and each other as ``recipes.common``, ``benchmarks.decode_latency``, ... with no
sys.path edits; they are run from the checkout, e.g. ``python recipes/evaluate.py``.

C++ extension: insnet_fairseq.modules._offset_scores, the offset term of one-pass training on the
CPU for the unblocked pairs only (insnet_fairseq/modules/offset_scores.py says where it is used;
without it, training falls back to the dense gather).
"""
from setuptools import find_packages, setup

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # no torch yet: the package installs without the kernel
    extensions, commands = [], {}
else:
    extensions = [CppExtension("insnet_fairseq.modules._offset_scores", ["insnet_fairseq/modules/offset_scores.cpp"],
                               extra_compile_args=["-O3"])]
    commands = {"build_ext": BuildExtension}

setup(
    name="insnet-fairseq",
    version="0.1.0",
    description="InsNet (Lu, Meng, Peng): efficient insertion-based text generation for fairseq",
    packages=find_packages(include=["insnet_fairseq", "insnet_fairseq.*", "recipes", "benchmarks", "experiments"]),
    python_requires=">=3.9",
    install_requires=["sacremoses", "subword-nmt", "sacrebleu>=2.0"],
    ext_modules=extensions,
    cmdclass=commands,
)
