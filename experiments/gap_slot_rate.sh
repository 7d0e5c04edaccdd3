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
# The runs train at once, one thread each. Each is decoded on valid with --insertion-mode parallel and nothing else
# (end-of-slot 0.5, the default) and scored by benchmarks/frontier.py against `every`: sacreBLEU, the 95%
# paired-bootstrap interval, passes per token, ms at batch 1 and 64.
#
#   bash experiments/gap_slot_rate.sh [train|score]...   (default: both; train resumes unfinished runs)
#
# Environment: RATE (0.25), BASE (667), UPDATES (333), EARLY (none; < BASE, a multiple of 250 for the copy of the l2r
# run's checkpoint there), CK (checkpoints/gap_slot_rate), OUT (CK/valid), MULTI30K_DIR, SCORE_ARGS (more
# benchmarks/frontier.py flags, e.g. --score-only: BLEU, interval and passes without the timing).
# Wall time of each run: logs/gap_slot_rate/*.log ("done training in ... seconds").
set -euo pipefail
rate=${RATE:-0.25}
base=${BASE:-667}
updates=${UPDATES:-333}
early=${EARLY:-}
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

score() {
  : >"$ck/systems.tsv"
  for run in "${runs[@]}"; do
    case $run in
      every) name="InsNet parallel, every slot" ;;
      rate$rate) name="InsNet parallel, slot rate $rate" ;;
      *) name="InsNet parallel, slot rate $rate, from l2r update $early" ;;
    esac
    printf '%s\t%s\t--task insertion_translation --insertion-mode parallel\n' "$name" \
      "$ck/$run/checkpoint_last.pt" >>"$ck/systems.tsv"
  done
  python benchmarks/frontier.py --data "$data" --systems "$ck/systems.tsv" --subset valid --raw-ref "$raw/valid.de" \
    --baseline "InsNet parallel, every slot" --threads 1 --out "$out" ${SCORE_ARGS:-}
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
