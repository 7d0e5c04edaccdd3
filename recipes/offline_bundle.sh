#!/usr/bin/env bash
# Install insnet-fairseq on a machine without network access, from a folder of wheels made on one with network.
#
#   On a machine with network and the same Python version (major.minor), OS and CPU architecture as the offline one:
#     bash recipes/offline_bundle.sh pack DIR        # [TORCH_VARIANT=cpu|cuda] [TORCH_INDEX_URL=...] [MULTI30K_DIR=...]
#   Copy DIR and this repository to the offline machine; there, in the repository:
#     bash recipes/offline_bundle.sh install DIR     # make install, pip reading DIR only
#     make multi30k RAW_DIR=DIR/multi30k              # when the bundle holds the Multi30k raw files
#
# pack downloads into DIR:
#   - pip, setuptools and wheel (make install upgrades them first);
#   - torch==2.13.0 and its dependencies, the build of TORCH_VARIANT: the offline machine's (auto, the default, reads
#     this machine: cuda when `nvidia-smi -L` finds a GPU, else cpu). cuda comes from TORCH_INDEX_URL
#     (https://download.pytorch.org/whl/cu128), as in make install; cpu as pip's configured sources offer it
#     (TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu where pip's index has only the CUDA build);
#   - every package of requirements.txt and its dependencies, as wheels (`pip wheel`: a package published as source
#     only is built into a wheel here, so the offline machine needs no build tools for it);
#   - fairseq-fixed==0.12.3.1, the source distribution (make install builds it against the installed torch);
#   - the Multi30k raw files {train,valid,test}.{en,de} from MULTI30K_DIR (default ../shared/data/multi30k, the
#     Makefile's) into DIR/multi30k, when they are there;
#   - DIR/bundle.txt: the torch build and the Python it was made for (install checks them).
# PYTHON (.venv/bin/python when it exists, else python3) runs pip, so its version decides the wheels.
#
# install runs `make install TORCH_VARIANT=<the bundle's> PIP_OPTS="--no-index --find-links DIR"`: the same steps as
# an ordinary make install (a .venv already installed is left as it is; remove .venv to install again).
# Not in the bundle: the WMT/WAT corpora (recipes/corpora.py lists the files each needs; copy them and pass RAW_DIR)
# and what two recipes install on first use: spaCy 2 for make lm-parse-multi30k (recipes/parse_dependencies.py) and
# fugashi + unidic-lite for Japanese (recipes/japanese.py).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bash recipes/offline_bundle.sh pack|install DIR"
action=${1:?$usage}; dir=${2:?$usage}
fail() { echo "offline_bundle.sh: $*" >&2; exit 2; }
py=${PYTHON:-}
if [ -z "$py" ]; then if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi; fi
python_tag() { "$1" -c 'import sys, sysconfig; print(f"python {sys.version_info[0]}.{sys.version_info[1]} {sysconfig.get_platform()}")'; }

case $action in
  pack)
    variant=${TORCH_VARIANT:-auto}
    [ "$variant" = auto ] && { if nvidia-smi -L >/dev/null 2>&1; then variant=cuda; else variant=cpu; fi; }
    case $variant in cpu|cuda) ;; *) fail "TORCH_VARIANT is auto, cpu or cuda, not '$variant'" ;; esac
    index=${TORCH_INDEX_URL-}
    [ "$variant" = cuda ] && index=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu128}
    mkdir -p "$dir"
    pip=("$py" -m pip)
    echo "offline_bundle.sh: packing torch 2.13.0 ($variant build) for $(python_tag "$py") into $dir"
    "${pip[@]}" download -q -d "$dir" pip setuptools wheel
    "${pip[@]}" download -q -d "$dir" torch==2.13.0 ${index:+--index-url "$index"}
    "${pip[@]}" wheel -q -w "$dir" -r requirements.txt
    # fairseq-fixed's setup.py imports torch: with a torch installed, pip reads the sdist's metadata without building
    # an isolated environment (which would install torch into it first)
    isolation=(); "$py" -c "import torch" 2>/dev/null && isolation=(--no-build-isolation)
    "${pip[@]}" download -q -d "$dir" --no-deps --no-binary fairseq-fixed "${isolation[@]}" fairseq-fixed==0.12.3.1
    raw=${MULTI30K_DIR:-../shared/data/multi30k}
    if [ -f "$raw/train.en" ]; then
      mkdir -p "$dir/multi30k"
      for f in {train,valid,test}.{en,de}; do [ -f "$raw/$f" ] && cp "$raw/$f" "$dir/multi30k/"; done
      echo "offline_bundle.sh: Multi30k raw files from $raw -> $dir/multi30k"
    else
      echo "offline_bundle.sh: no Multi30k raw files in $raw (MULTI30K_DIR): the bundle has none"
    fi
    { echo "torch $variant"; python_tag "$py"; } >"$dir/bundle.txt"
    echo "offline_bundle.sh: $(find "$dir" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.tar.gz' \) | wc -l) files," \
      "$(du -sh "$dir" | cut -f1); on the offline machine: bash recipes/offline_bundle.sh install $dir" ;;
  install)
    [ -f "$dir/bundle.txt" ] || fail "$dir/bundle.txt missing: not a folder made by bash recipes/offline_bundle.sh pack"
    dir=$(cd "$dir" && pwd)
    variant=$(sed -n 's/^torch //p' "$dir/bundle.txt")
    want=$(grep '^python ' "$dir/bundle.txt")
    # the Python that make install's .venv has, or makes it from (the Makefile's PYTHON, python3)
    venv_py=.venv/bin/python; [ -x "$venv_py" ] || venv_py=${PYTHON:-python3}
    have=$(python_tag "$venv_py")
    [ "$have" = "$want" ] || fail "the bundle holds wheels for $want, but $venv_py is $have: pack it again with that Python"
    echo "offline_bundle.sh: make install from $dir (torch $variant build, $want)"
    exec make install TORCH_VARIANT="$variant" TORCH_INDEX_URL= PIP_OPTS="--no-index --find-links $dir" ;;
  *) fail "$usage" ;;
esac
