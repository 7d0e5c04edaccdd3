#!/usr/bin/env bash
# Does InsNet parallel keep its quality when each training pass scores only a drawn sample of its slots
# (--gap-slot-rate R, each slot with probability R, weighted 1/R) instead of every slot of every layer end, and does
# the cheaper update buy a better split of one update budget between the l2r start and the parallel objective?
# At make demo's scale on Multi30k En->De (no teacher), BASE + UPDATES updates in all for each run:
#   every          make demo's InsNet parallel: an InsNet l2r model (one thread, as make demo trains it) for BASE
#                  updates, then UPDATES updates of --slot-objective gap --layerization sampled --slot-query-stream
#                  from it at a fixed lr 5e-4;
#   rateR          the same with --gap-slot-rate RATE;
#   rateR_fromE    (with EARLY=E) --gap-slot-rate RATE from the same l2r run's update E, for BASE + UPDATES - E
#                  updates: more of the budget on the parallel objective.
# The runs train at once, one thread each. Each run's last checkpoint is decoded on valid with --insertion-mode
# parallel and nothing else (end-of-slot 0.5, the default) and scored by benchmarks/frontier.py against `every`:
# sacreBLEU, the 95% paired-bootstrap interval, passes per token, ms at batch 1 and 64.
#
#   bash experiments/gap_slot_rate.sh [train|score]...   (default: both; train resumes unfinished runs)
#
# Environment: RATE (0.25), BASE (667), UPDATES (333), EARLY (none; < BASE, a multiple of 250 for the copy of the l2r
# run's checkpoint there), AT (none; a multiple of 250 below UPDATES: every's and rateR's checkpoints of that update
# are scored too, every's as the baseline), CK
# (checkpoints/gap_slot_rate), OUT (CK/valid), MULTI30K_DIR, SCORE_ARGS (more benchmarks/frontier.py flags, e.g.
# --score-only: BLEU, interval and passes without the timing).
# Wall time of each run: logs/gap_slot_rate/*.log ("done training in ... seconds").
set -euo pipefail
rate=${RATE:-0.25}
base=${BASE:-667}
updates=${UPDATES:-333}
early=${EARLY:-}
at=${AT:-}
ck=${CK:-checkpoints/gap_slot_rate}
out=${OUT:-$ck/valid}
data=data-bin/multi30k_en_de
raw=${MULTI30K_DIR:-../shared/data/multi30k}
logs=logs/gap_slot_rate
mkdir -p "$ck" "$logs"
parallel=(--slot-objective gap --layerization sampled --slot-query-stream --log-interval 50)
runs=(every "rate$rate")
[ -z "$early" ] || runs+=("rate${rate}_from$early")

l2r() {  # the l2r run to update $1 (fairseq resumes it from its checkpoint_last.pt and stops there)
  THREADS=1 UPDATES=$1 bash recipes/train.sh insnet "$data" "$ck/l2r" --log-interval 50 >>"$logs/l2r.log" 2>&1
}

train() {
  if [ -n "$early" ] && [ ! -f "$ck/l2r_at_$early.pt" ]; then
    l2r "$early"
    cp "$ck/l2r/checkpoint_last.pt" "$ck/l2r_at_$early.pt"
  fi
  l2r "$base"
  local pids=()
  for run in "${runs[@]}"; do
    local flags=() from=$ck/l2r/checkpoint_last.pt steps=$updates start=()
    [ "$run" = every ] || flags=(--gap-slot-rate "$rate")
    if [ "$run" = "rate${rate}_from$early" ]; then
      from=$ck/l2r_at_$early.pt
      steps=$((base + updates - early))
    fi
    [ -f "$ck/$run/checkpoint_last.pt" ] || start=(--finetune-from-model "$from")  # else it resumes
    THREADS=1 UPDATES=$steps SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$data" "$ck/$run" \
      "${parallel[@]}" "${flags[@]}" "${start[@]}" >>"$logs/$run.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}

row() {  # row NAME CHECKPOINT: one system of the systems file, named with the updates its checkpoint trained
  local steps
  steps=$(python -c "import sys; from insnet_fairseq import checkpoint_safety as c
print(c.load(sys.argv[1])['optimizer_history'][-1]['num_updates'])" "$2")
  grep -q "^$1, $steps updates"$'\t' "$ck/systems.tsv" && return  # (AT: the run's last checkpoint is that one)
  printf '%s, %s updates\t%s\t--task insertion_translation --insertion-mode parallel\n' "$1" "$steps" "$2" \
    >>"$ck/systems.tsv"
}

score() {
  : >"$ck/systems.tsv"
  if [ -n "$at" ]; then  # every and rateR at their checkpoints of update AT first: every's is the baseline
    row "InsNet parallel, every slot" "$(ls "$ck"/every/checkpoint_*_"$at".pt)"
    row "InsNet parallel, slot rate $rate" "$(ls "$ck/rate$rate"/checkpoint_*_"$at".pt)"
  fi
  row "InsNet parallel, every slot" "$ck/every/checkpoint_last.pt"
  row "InsNet parallel, slot rate $rate" "$ck/rate$rate/checkpoint_last.pt"
  [ -z "$early" ] || row "InsNet parallel, slot rate $rate from l2r update $early" \
    "$ck/rate${rate}_from$early/checkpoint_last.pt"
  python benchmarks/frontier.py --data "$data" --systems "$ck/systems.tsv" --subset valid --raw-ref "$raw/valid.de" \
    --baseline "$(head -1 "$ck/systems.tsv" | cut -f1)" --threads 1 --out "$out" ${SCORE_ARGS:-}
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(train score)
for stage in "${stages[@]}"; do
  case $stage in
    train) train ;;
    score) score ;;
    *) echo "gap_slot_rate.sh: unknown stage '$stage' (train, score)" >&2; exit 2 ;;
  esac
done
