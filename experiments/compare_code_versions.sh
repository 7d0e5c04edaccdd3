#!/usr/bin/env bash
# Did a change of the package make decoding faster? benchmarks/decode_latency.py of several versions of the package on
# one machine, one after the other, each with its own AR baseline (so every ratio is measured side by side within its
# run):
#   VERSIONS="before=DIR after=." bash experiments/compare_code_versions.sh DECODE_LATENCY_ARGS...
# DIR holds a version's insnet_fairseq/ and benchmarks/, e.g. `git archive REV insnet_fairseq benchmarks | tar -x -C DIR`;
# "." is the working tree. Each version runs with DIR first on PYTHONPATH, so that it imports its own insnet_fairseq.
set -euo pipefail
: "${VERSIONS:?VERSIONS=\"name=DIR ...\" (DIR holds insnet_fairseq/ and benchmarks/)}"
for pair in $VERSIONS; do
  name=${pair%%=*}; dir=${pair#*=}
  [ -f "$dir/benchmarks/decode_latency.py" ] || { echo "compare_code_versions.sh: no $dir/benchmarks/decode_latency.py (version $name)" >&2; exit 2; }
  echo "## version $name ($dir)"
  PYTHONPATH="$(cd "$dir" && pwd)${PYTHONPATH:+:$PYTHONPATH}" python "$dir/benchmarks/decode_latency.py" "$@" 2>&1 | grep -v -i "warn\|tensorboardX\|r = re.compile"
done
