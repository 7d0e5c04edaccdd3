#!/usr/bin/env bash
# How deep must the slot query stream be? InsNet-Dinic fine-tuned from one l2r base with the stream in every decoder
# layer (the recipe's) and in the last layer only (--slot-query-layers 1: a third of a query's arithmetic), then both
# decoded on valid with their default flags (--insertion-mode parallel): sacreBLEU, the paired-bootstrap interval of
# the difference to the full stream, decoder passes and positions per output token, ms/sentence at batch 1 and 64
# timed interleaved on THREADS (1) thread(s) (benchmarks/frontier.py --subset valid).
#
#   bash experiments/query_depth.sh
#
# A screen that needs no teacher: it trains on DATA (data-bin/multi30k_en_de, the original targets), the l2r base for
# BASE_UPDATES (500) updates (recipes/train.sh insnet), each fine-tuning FT_UPDATES (500) more at InsNet-Dinic's
# settings (recipes/frontier.sh's dinic: anchored order, --dinic-tau 3 --dinic-lagged --dinic-lagged-warm, fixed lr
# 5e-4), the two at once, THREADS each; each run's checkpoint_last.pt is decoded. Every run resumes from its
# checkpoint_last.pt and is skipped once done. The frontier's own measurement on the distilled corpus is its variant
# dinic_qtop (VARIANTS=dinic_qtop bash recipes/frontier.sh).
# Environment: CK (checkpoints/query_depth, logs in logs/query_depth/), OUT (results/query_depth_raw_valid:
# OUT.{csv,png,txt}), DATA, BASE_UPDATES, FT_UPDATES, THREADS, MULTI30K_DIR (the raw corpus: valid.de is the
# reference), MAX_SENTENCES (0: all).
set -euo pipefail
cd "$(dirname "$0")/.."
ck=${CK:-checkpoints/query_depth}; out=${OUT:-results/query_depth_raw_valid}; data=${DATA:-data-bin/multi30k_en_de}
base_updates=${BASE_UPDATES:-500}; threads=${THREADS:-1}; logs=logs/$(basename "$ck")
given=${MULTI30K_DIR:-../shared/data/multi30k}; raw=$given
[ -f "$raw/valid.de" ] || raw=work/$(basename "$data")/raw
[ -f "$raw/valid.de" ] \
  || { echo "query_depth.sh: no valid.de in $given or $raw: set MULTI30K_DIR to the raw corpus" >&2; exit 2; }
[ -d "$data" ] || { echo "query_depth.sh: $data missing: run make multi30k first" >&2; exit 2; }
mkdir -p "$ck" "$logs" "$(dirname "$out")"

train() {  # SAVE UPDATES [train.sh flags]: resumed from SAVE/checkpoint_last.pt, skipped when done
  local save=$1 n=$2; shift 2
  [ -f "$save/done" ] && return
  THREADS=$threads UPDATES=$n KEEP_INTERVAL=1 bash recipes/train.sh insnet "$data" "$save" "$@" \
    >>"$logs/$(basename "$save").log" 2>&1
  touch "$save/done"
}
train "$ck/l2r" "$base_updates"
dinic() {  # SAVE [flags]: from the l2r base (a resumed run: from its own checkpoint)
  local save=$1 start=(); shift
  [ -f "$save/checkpoint_last.pt" ] || start=(--finetune-from-model "$ck/l2r/checkpoint_last.pt")
  SCHEDULER=fixed LR=5e-4 train "$save" "${FT_UPDATES:-500}" --insertion-order anchored --slot-query-stream \
    --dinic-tau=3 --dinic-lagged --dinic-lagged-warm "${start[@]}" "$@"
}
dinic "$ck/dinic" & full=$!
dinic "$ck/dinic_qtop" --slot-query-layers 1 & top=$!
wait $full $top
ins="--task insertion_translation --insertion-mode parallel"
{
  printf 'InsNet-Dinic, slot queries in every layer\t%s\t%s\n' "$ck/dinic/checkpoint_last.pt" "$ins"
  printf 'InsNet-Dinic, slot queries in the last layer\t%s\t%s\n' "$ck/dinic_qtop/checkpoint_last.pt" "$ins"
} >"$ck/systems.tsv"
python benchmarks/frontier.py --data "$data" --systems "$ck/systems.tsv" --subset valid --raw-ref "$raw/valid.de" \
  --baseline "InsNet-Dinic, slot queries in every layer" --threads "$threads" --device cpu \
  --max-sentences "${MAX_SENTENCES:-0}" --out "$out" | tee "$out.txt"
