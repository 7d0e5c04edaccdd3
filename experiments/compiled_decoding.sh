#!/usr/bin/env bash
# Does --compile-decoder lower batch-1 decoding latency on a GPU? Eager and compiled side by side, for models trained
# here first: the AR transformer, l2r InsNet and a parallel model (anchored order, uniform levels, --slot-query-stream:
# the student's architecture, from scratch, no KD), each MINUTES (3) of wall clock, all at once on the GPU
# (recipes/train.sh, the tables' size and settings). Then benchmarks/decode_latency.py at batch 1: eager and compiled
# (COMPILE: "default"), the parallel model with fused slot queries and --skip-repeats; its output goes to
# OUT/compiled_latency.txt as it is printed.
#
#   make multi30k && bash experiments/compiled_decoding.sh
#
# The models are short-trained: the figures are per-step costs and their ratios, not the results tables' latencies.
# Environment: MINUTES, COMPILE, SENTENCES (100), ROUNDS (3), DEVICE (cuda), OUT (out/compiled_decoding),
# CKPT_DIR (checkpoints/compiled_decoding), DATA_BIN (data-bin/multi30k_en_de).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${MINUTES:-3}; out=${OUT:-out/compiled_decoding}; ckpts=${CKPT_DIR:-checkpoints/compiled_decoding}
data=${DATA_BIN:-data-bin/multi30k_en_de}; logs=logs/compiled_decoding
[ -f "$data/train.en-de.en.bin" ] || { echo "compiled_decoding.sh: $data has no training data (make multi30k)" >&2; exit 2; }
mkdir -p "$out" "$logs"
export MINUTES=$minutes UPDATES=0 THREADS=1
bash recipes/train.sh ar "$data" "$ckpts/ar" >"$logs/ar.log" 2>&1 &
bash recipes/train.sh insnet "$data" "$ckpts/l2r" --insertion-order l2r >"$logs/l2r.log" 2>&1 &
bash recipes/train.sh insnet "$data" "$ckpts/parallel" --insertion-order anchored --layerization uniform \
  --slot-query-stream >"$logs/parallel.log" 2>&1 &
wait
for r in ar l2r parallel; do
  [ -f "$ckpts/$r/checkpoint_last.pt" ] || { echo "compiled_decoding.sh: the $r run saved nothing:" >&2; tail -5 "$logs/$r.log" >&2; exit 1; }
  echo "$r: $(grep -oE 'num_updates[= ][0-9]+' "$logs/$r.log" | tail -1 | grep -oE '[0-9]+$') updates in $minutes minutes"
done | tee "$out/compiled_latency.txt"
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 python benchmarks/decode_latency.py --device "${DEVICE:-cuda}" --data "$data" --insnet "$ckpts/l2r/checkpoint_last.pt" \
  --insnet-parallel "$ckpts/parallel/checkpoint_last.pt" --ar "$ckpts/ar/checkpoint_last.pt" --skip-repeats \
  --slot-top-p 0.9 --fused --compile ${COMPILE:-default} --batch-sizes 1 --cached-only \
  --sentences "${SENTENCES:-100}" --rounds "${ROUNDS:-3}" 2>&1 | grep -v Warning | tee -a "$out/compiled_latency.txt"
