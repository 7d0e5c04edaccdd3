"""Japanese word segmentation for the WAT ASPEC recipe: MeCab through ``fugashi`` with the
``unidic-lite`` dictionary (UniDic 2.1.2), the pair that Hugging Face's Japanese BERT tokenizers
default to. fugashi is maintained, ships manylinux wheels with MeCab compiled in (no system
MeCab, no compiler), and unidic-lite is pure data installed from PyPI, so the pair installs with
pip alone. It is not part of ``make install`` (unidic-lite unpacks to about 250 MB):
``ensure_installed`` pip-installs it into the running interpreter's environment the first time the
recipe needs it.

``make_tokenizer`` is the hook used by ``prepare_bitext.py --tokenizer ja=japanese``: one line in,
its words separated by single spaces out (MeCab's wakati output), e.g.
"私は東京大学で研究しています。" -> "私 は 東京 大学 で 研究 し て い ます 。".
"""
import importlib
import subprocess
import sys

PACKAGES = ["fugashi>=1.3,<2", "unidic-lite==1.0.8"]


def ensure_installed() -> None:
    """Import fugashi and unidic_lite, pip-installing them first if either is missing."""
    try:
        importlib.import_module("fugashi")
        importlib.import_module("unidic_lite")
        return
    except ImportError:
        pass
    print(f"japanese: installing {' '.join(PACKAGES)} (first use; about 50 MB download)", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *PACKAGES])
    if done.returncode != 0:
        sys.exit(f"japanese: could not install {' '.join(PACKAGES)} with pip; install them into "
                 f"{sys.prefix} by hand and run the recipe again")
    importlib.invalidate_caches()
    importlib.import_module("fugashi")


def make_tokenizer(lang: str = "ja"):
    """Line function: MeCab (unidic-lite) word segmentation, words joined by single spaces."""
    ensure_installed()
    import fugashi

    tagger = fugashi.Tagger("-Owakati")
    return lambda line: " ".join(tagger.parse(line).split())
