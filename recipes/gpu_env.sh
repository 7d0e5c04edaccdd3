# Sourced by the scripts that train or decode on a lent GPU machine (recipes/gpu_lm_pair.sh,
# benchmarks/gpu_compiled_decoding.sh): that machine has torch but no fairseq, so the package that
# recipes/gpu_pack.sh carried in gpu_carry/site goes on PYTHONPATH where $PYTHON has none, and where no fairseq-train is on the PATH,
# fairseq's command-line tools run as `$PYTHON -m fairseq_cli.TOOL` (PYTHON: python3; `python` is it too).
# Here (a checkout with .venv) it changes nothing.
py=${PYTHON:-python3}  # the Python the sourcing script runs its tools with
if [ -d gpu_carry/site ] && ! "$py" -c "import fairseq" 2>/dev/null; then  # (a carried site of another Python: unused)
  export PYTHONPATH=$PWD/gpu_carry/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! command -v fairseq-train >/dev/null; then
  shims=$(mktemp -d)
  for tool in train generate validate preprocess; do
    printf '#!/bin/sh\nexec %s -m fairseq_cli.%s "$@"\n' "$py" "$tool" >"$shims/fairseq-$tool"
  done
  printf '#!/bin/sh\nexec %s "$@"\n' "$py" >"$shims/python"
  chmod +x "$shims"/*
  export PATH=$shims:$PATH
fi
