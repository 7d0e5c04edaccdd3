"""insnet-fairseq: InsNet insertion-based generation as a fairseq extension.

torch and fairseq are deliberately not in install_requires: fairseq-fixed's metadata asks for
torchaudio and an unpinned torch, which on a CPU machine would pull the multi-GB CUDA build.
`make install` installs torch==2.13.0 and fairseq-fixed==0.12.3.1 (--no-deps) first.
"""
from setuptools import find_packages, setup

setup(
    name="insnet-fairseq",
    version="0.1.0",
    description="InsNet (Lu, Meng, Peng): efficient insertion-based text generation for fairseq",
    packages=find_packages(include=["insnet_fairseq", "insnet_fairseq.*"]),
    python_requires=">=3.9",
    install_requires=["sacremoses", "subword-nmt", "sacrebleu>=2.0"],
)
