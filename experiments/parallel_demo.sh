#!/usr/bin/env bash
# InsNet parallel's training changes at make demo's scale on Multi30k En->De (no teacher), each run against `every`
# (or BASELINE):
# an InsNet l2r model (one thread, as make demo trains it) for BASE updates, then UPDATES updates of --slot-objective
# gap --layerization sampled --slot-query-stream --gap-slots every (every slot of every layer end scored) from it at a
# fixed lr 5e-4. Every other run is the same with one change, named by RUNS (default: every rate0.25):
#   rateR          --gap-slot-rate R: each training pass scores a drawn sample of the slots, each with probability R;
#   rateR_fromE    the same from the l2r run's update E (< BASE, a multiple of 250: the copy of its checkpoint there),
#                  for BASE + UPDATES - E updates: more of the budget on the parallel objective;
#   queryK         --slot-query-layers K: slot queries through the decoder's last K layers only;
#   last           --last-word-head: a head that says a slot misses one word only (decoded at --last-word 0.5);
#   hard           --gap-temperature 0: each slot's target is its gap's middle word (not soft);
#   asked          --gap-slots asked: each layer end scores the slots decoding asks (a done slot once; the task's
#                  default, make demo's InsNet parallel);
# and changes joined by "+", all made in one run (query1+hard).
# The runs train at once, one thread each. Each run's last checkpoint is decoded on valid with --insertion-mode
# parallel and nothing else (end-of-slot 0.5, the default; `last` also with --last-word 1, its head not read) and
# scored by benchmarks/frontier.py against `every`:
# sacreBLEU, the 95% paired-bootstrap interval, passes per token, ms at batch 1 and 64.
#
#   bash experiments/parallel_demo.sh [train|score]...   (default: both; train resumes unfinished runs)
#
# Environment: RUNS, LAST_WORD (none; values of --last-word at which `last` is scored too), BASE (667), UPDATES (333),
# AT (none; a multiple of 250 below UPDATES: each run's checkpoint of that update is scored too, every's as the
# baseline), BASELINE (every: the run the others are scored against), CK (checkpoints/parallel_demo), OUT (CK/valid),
# MULTI30K_DIR,
# SCORE_ARGS (more benchmarks/frontier.py flags, e.g. --score-only: BLEU, interval and passes without the timing).
# Wall time of each run: logs/parallel_demo/*.log ("done training in ... seconds").
set -euo pipefail
runs=(${RUNS:-every rate0.25})
base=${BASE:-667}
updates=${UPDATES:-333}
at=${AT:-}
ck=${CK:-checkpoints/parallel_demo}
out=${OUT:-$ck/valid}
baseline=${BASELINE:-every}
data=data-bin/multi30k_en_de
raw=${MULTI30K_DIR:-../shared/data/multi30k}
logs=logs/parallel_demo
mkdir -p "$ck" "$logs"
parallel=(--slot-objective gap --layerization sampled --slot-query-stream --gap-slots every --log-interval 50)

l2r() {  # the l2r run to update $1 (fairseq resumes it from its checkpoint_last.pt and stops there)
  THREADS=1 UPDATES=$1 bash recipes/train.sh insnet "$data" "$ck/l2r" --log-interval 50 >>"$logs/l2r.log" 2>&1
}

# run NAME -> its flags (FLAGS), start (FROM, an l2r update or empty: BASE), updates (STEPS) and row name; a NAME of
# changes joined by "+" (e.g. query1+hard) makes them all
parse() {
  FLAGS=() FROM= STEPS=$updates
  local part names=()
  IFS=+ read -r -a parts <<<"$1"
  for part in "${parts[@]}"; do
    case $part in
      every) names+=("every slot") ;;
      rate*_from*) FROM=${part#*_from}; local r=${part#rate}; r=${r%_from*}; FLAGS+=(--gap-slot-rate "$r")
        STEPS=$((base + updates - FROM)); names+=("slot rate $r from l2r update $FROM") ;;
      rate*) FLAGS+=(--gap-slot-rate "${part#rate}"); names+=("slot rate ${part#rate}") ;;
      query1) FLAGS+=(--slot-query-layers 1); names+=("slot queries through the last layer") ;;
      query*) FLAGS+=(--slot-query-layers "${part#query}")
        names+=("slot queries through the last ${part#query} layers") ;;
      last) FLAGS+=(--last-word-head); names+=("the last-word head") ;;
      hard) FLAGS+=(--gap-temperature 0); names+=("hard middles") ;;
      asked) FLAGS+=(--gap-slots asked); names+=("the slots decoding asks") ;;
      *) echo "parallel_demo.sh: unknown run '$part' in '$1' (every, rateR, rateR_fromE, queryK, last, hard, asked;" \
          "joined by +)" >&2
        exit 2 ;;
    esac
  done
  NAME=$(IFS=,; echo "${names[*]}"); NAME=${NAME//,/, }
}

train() {
  for run in "${runs[@]}"; do
    parse "$run"
    if [ -n "$FROM" ] && [ ! -f "$ck/l2r_at_$FROM.pt" ]; then
      l2r "$FROM"
      cp "$ck/l2r/checkpoint_last.pt" "$ck/l2r_at_$FROM.pt"
    fi
  done
  l2r "$base"
  local pids=()
  for run in "${runs[@]}"; do
    parse "$run"
    local from=$ck/l2r/checkpoint_last.pt start=()
    [ -z "$FROM" ] || from=$ck/l2r_at_$FROM.pt
    [ -f "$ck/$run/checkpoint_last.pt" ] || start=(--finetune-from-model "$from")  # else it resumes
    THREADS=1 UPDATES=$STEPS SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$data" "$ck/$run" \
      "${parallel[@]}" "${FLAGS[@]}" "${start[@]}" >>"$logs/$run.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}

row() {  # row NAME CHECKPOINT [FLAGS]: one system of the systems file, named with the updates its checkpoint trained
  local steps
  steps=$(python -c "import sys; from insnet_fairseq import checkpoint_safety as c
print(c.load(sys.argv[1])['optimizer_history'][-1]['num_updates'])" "$2")
  grep -q "^$1, $steps updates"$'\t' "$ck/systems.tsv" && return  # (AT: the run's last checkpoint is that one)
  printf '%s, %s updates\t%s\t--task insertion_translation --insertion-mode parallel%s\n' "$1" "$steps" "$2" \
    "${3:+ $3}" >>"$ck/systems.tsv"
}

score() {
  : >"$ck/systems.tsv"
  local ordered=("$baseline") run
  for run in "${runs[@]}"; do [ "$run" = "$baseline" ] || ordered+=("$run"); done
  if [ -n "$at" ]; then  # each run's checkpoint of update AT first: every's is the baseline
    for run in "${ordered[@]}"; do
      parse "$run"
      row "InsNet parallel, $NAME" "$(ls "$ck/$run"/checkpoint_*_"$at".pt)"
    done
  fi
  for run in "${ordered[@]}"; do
    parse "$run"
    row "InsNet parallel, $NAME" "$ck/$run/checkpoint_last.pt"
    [ "$run" = last ] || continue
    for v in ${LAST_WORD:-}; do row "InsNet parallel, the last-word head at $v" "$ck/$run/checkpoint_last.pt" "--last-word $v"; done
    row "InsNet parallel, the last-word head not read" "$ck/$run/checkpoint_last.pt" "--last-word 1"
  done
  python benchmarks/frontier.py --data "$data" --systems "$ck/systems.tsv" --subset valid --raw-ref "$raw/valid.de" \
    --baseline "$(head -1 "$ck/systems.tsv" | cut -f1)" --threads 1 --out "$out" ${SCORE_ARGS:-}
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(train score)
for stage in "${stages[@]}"; do
  case $stage in
    train) train ;;
    score) score ;;
    *) echo "parallel_demo.sh: unknown stage '$stage' (train, score)" >&2; exit 2 ;;
  esac
done
