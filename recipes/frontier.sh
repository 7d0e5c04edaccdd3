#!/usr/bin/env bash
# The Multi30k En->De frontier: InsNet against the autoregressive model, both distilled from one teacher, trained at
# one budget, checkpoints and flags chosen on valid the same way, test scored once by benchmarks/frontier.py.
#
#   bash recipes/frontier.sh            # every stage below, each skipped once its output exists
#   bash recipes/frontier.sh STAGE...   # teacher | train | variants | choose | test | gpu
#
#   teacher  recipes/distill.py: the AR teacher (recipes/train.sh ar, TEACHER_UPDATES (2000) updates) and its beam-5
#            translation of the training set, DATA-KD_SUFFIX (data-bin/multi30k_en_de-distill)
#   train    on that corpus, UPDATES (1500) updates each, THREADS (1) per run, the runs of RUNS (all four) at once
#            (dinic and parallel from l2r_kd's update BASE_UPDATES on: alone, they wait for l2r_kd's checkpoint there):
#              ar_kd    fairseq's transformer (recipes/train.sh ar)
#              l2r_kd   InsNet, left-to-right order (decoded sequentially)
#              dinic    InsNet-Dinic: l2r_kd's checkpoint at BASE_UPDATES (1000), then UPDATES - BASE_UPDATES updates of
#                       Dinic fine-tuning (anchored order, slot query stream, --dinic-tau TAU (3) --dinic-lagged
#                       --dinic-lagged-warm, fixed lr 5e-4), so its total is UPDATES as well
#              parallel InsNet parallel, the product's parallel model: l2r_kd's checkpoint at BASE_UPDATES, then
#                       UPDATES - BASE_UPDATES updates of the end-of-slot objective on sampled layered trajectories with
#                       the slot query stream (--slot-objective gap --layerization sampled --slot-query-stream; each
#                       layer end scores the slots decoding asks, --gap-slots asked, the task's default) at
#                       dinic's fixed lr 5e-4 (the l2r model's position and termination heads dropped, the end-of-slot
#                       head and the slot queries new)
#            Every run keeps its last 4 checkpoints of those saved every 250 updates (recipes/train.sh KEEP_INTERVAL).
#            dinic starts from a copy of l2r_kd's checkpoint, CK/l2r_kd_at_BASE_UPDATES.pt, which the variants share.
#   variants the runs named in VARIANTS (none by default; all at once), each measured against the system it varies:
#            dinic's training plus one flag that learns what a decoding rule patches:
#              dinic_repeat  --repeat-penalty 1: the unlikelihood term against a word equal to its slot's neighbour
#                            (what --skip-repeats patches)
#              dinic_late    --late-words 0.5: last-layer words moved to a layer of their own, so q(stop) sees
#                            outputs that look finished but miss words (what the stop check patches)
#            the anchored order's depth (2 in dinic), which sets the layering's steps:
#              dinic_depth1  --anchor-depth 1: one anchor, two gaps (one hard first word, more steps)
#              dinic_depth3  --anchor-depth 3: seven anchors, eight gaps (fewer steps)
#            and the capacity of the parallel model:
#              dinic_untied  --untied-slot-queries: the slot query stream gets layers of its own (the same compute)
#              dinic_enc6    --encoder-layers 6: a deeper encoder (it runs once a sentence); a model of its own shape,
#                            so its l2r base is its own as well: l2r_kd_enc6, trained for BASE_UPDATES updates
#            and its learning rate, fixed at 5e-4 in dinic:
#              dinic_decay     decayed linearly from 5e-4 to 0 over the fine-tuning (fairseq's polynomial_decay)
#              dinic_decay_hi  the same from 1e-3
#            and InsNet parallel's components, each trained as parallel is with one change, measured against it:
#              parallel_every   --gap-slots every: a done slot scored at every layer end after it appears too (not
#                               only where it appears, the one layer end at which decoding asks it)
#              parallel_hard    --gap-temperature 0: each slot's target is its gap's middle word (not soft)
#              parallel_fixed   --layerization uniform --insertion-order binary: one fixed trajectory per sentence, the
#                               exact middles (not sampled)
#              parallel_noskip  --gap-skip 0: every open gap takes a word in every layer
#              parallel_query1  --slot-query-layers 1: every slot query through the decoder's last layer only (a
#                               third of the stream's cost a query in training and decoding)
#              parallel_query1_time  the same for 1.28x parallel's UPDATES - BASE_UPDATES updates: the training time
#                               of parallel's at the rate ratio measured on Multi30k, both scoring the slots decoding
#                               asks (results/train_throughput_asked_slots_cpu.txt)
#              parallel_last    --last-word-head: a head says a slot misses one word only; decoding shuts the two
#                               slots of that word and ends a sentence without the pass that would ask them
#              parallel_sampled --gap-slot-rate 0.25: each training pass scores a drawn quarter of the slots,
#                               weighted 4 (not every slot of every layer end: a quarter of the slot queries)
#              parallel_onpolicy  --on-policy 0.5: half the training sentences begin with the model's own parallel
#                               decoding, 1-4 steps (training/on_policy.py)
#              parallel_linear  no --slot-query-stream: the paper's slot representation, linear in the states beside
#                               the slot and the sentence's state
#              parallel_linear_onpolicy  parallel_linear with --on-policy 0.5
#              parallel_linear_scratch  parallel_linear trained from scratch for UPDATES updates (no l2r start)
#   choose   the checkpoint rule, one for every system: checkpoint_last.pt or the average of what the run kept,
#            whichever gives the higher valid sacreBLEU summed over the runs (benchmarks/frontier.py
#            --subset valid on the default decoding of each); the systems file of the test stage is written with it.
#            Then InsNet-Dinic's --stop-check-prob, the best on valid of STOP_CHECKS (0.3 0.4 0.5 0.6 0.75), is
#            stored with its checkpoint (recipes/store_decoding.py): its default, what --insertion-mode parallel alone
#            decodes; likewise InsNet parallel's --end-of-slot, the best on valid of END_OF_SLOT
#            (0.3 0.4 0.5 0.6 0.7 0.8 0.9), and parallel_last's --last-word then, the best of LAST_WORD (0.5 0.7 0.9);
#            the same for each variant; then each variant against the system it varies on valid,
#            CK/valid_variants.{csv,txt} (InsNet-Dinic's) and CK/valid_parallel_variants.{csv,txt} (InsNet parallel's)
#            (what decides whether a variant's flag becomes its system's training)
#   test     benchmarks/frontier.py on the test set, on the CPU -> OUT.{csv,png} (results/frontier_multi30k_cpu), its
#            printed table CK/test.txt
#   gpu      (not in the default list) the test stage's systems but the variants' and the no-skip-repeats rows, on a
#            CUDA GPU, the first GPU_SENTENCES (500) test sentences -> GPU_OUT (results/frontier_multi30k_gpu); their
#            checkpoints as decoding-only copies with fp16-stored weights, CK/half/RUN.pt
#            (recipes/inference_checkpoint.py --half: a sixth of the size to move; results/README.md compares their
#            scores with the fp32 files'), loaded into fp32
#
# Systems: AR+KD greedy (the baseline), AR+KD beam 5, InsNet l2r+KD sequential, InsNet parallel 1 candidate
# (--insertion-mode parallel and nothing else: its stored --end-of-slot), the same with every slot re-scored at every
# step (--reopen-done-slots: a slot that said done is not shut), InsNet-Dinic 1 candidate with the
# default flags (--insertion-mode parallel only: on the CPU slot queries fused at batch 1, two passes a step at 64; on
# a GPU fused), the same with the slot queries always fused (--fuse-slot-queries), never fused (--no-fuse-slot-queries:
# the same outputs) and without skip repeats, InsNet-Dinic 8 candidates + MBR (stop check 0.6, a sentence stops once 6
# have finished: the best multi-candidate decoding of results/README.md, chosen there on valid); each of VARIANTS with its default
# flags, and dinic_repeat also without skip repeats (--no-skip-repeats: does the loss replace the rule?).
# Environment: CK (checkpoints/frontier, logs in logs/<CK's last name>/), OUT (results/frontier_multi30k_cpu), DATA
# (data-bin/multi30k_en_de: its valid and test sets are scored; the teacher's corpus is DATA-KD_SUFFIX), KD_SUFFIX
# (distill; another names another teacher, trained with TEACHER_UPDATES and TEACHER_ARGS into
# checkpoints/NAME-KD_SUFFIX-teacher, and its corpus: e.g. KD_SUFFIX=distill-long TEACHER_UPDATES=4000
# TEACHER_ARGS="--dropout 0.3" CK=checkpoints/frontier_long), MULTI30K_DIR
# (the raw corpus: {valid,test}.de are the references), RUNS (ar_kd l2r_kd dinic parallel: the train stage's, e.g.
# RUNS="ar_kd l2r_kd" first on 2 cores), VARIANTS (none), GPU_OUT, GPU_SENTENCES.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${DATA:-data-bin/multi30k_en_de}; name=$(basename "$data"); suffix=${KD_SUFFIX:-distill}; kd=$data-$suffix
ck=${CK:-checkpoints/frontier}; out=${OUT:-results/frontier_multi30k_cpu}
updates=${UPDATES:-1500}; base_updates=${BASE_UPDATES:-1000}; threads=${THREADS:-1}
raw=${MULTI30K_DIR:-../shared/data/multi30k}; [ -f "$raw/test.de" ] || raw=work/$name/raw
stages=("$@"); [ ${#stages[@]} = 0 ] && stages=(teacher train variants choose test)
decay="--lr-scheduler polynomial_decay --end-learning-rate 0 --total-num-update $((updates - base_updates))"  # to 0
parallel_flags="--slot-objective gap --layerization sampled"  # InsNet parallel's objective
stream=--slot-query-stream  # and its slot representation
declare -A variant_flags=([dinic_repeat]="--repeat-penalty 1" [dinic_late]="--late-words 0.5"
  [dinic_depth1]="--anchor-depth 1" [dinic_depth3]="--anchor-depth 3"
  [dinic_untied]="--untied-slot-queries" [dinic_enc6]=""
  [dinic_decay]="$decay" [dinic_decay_hi]="--lr 1e-3 $decay"  # beside dinic's
  [parallel_every]="$stream --gap-slots every" [parallel_hard]="$stream --gap-temperature 0" [parallel_fixed]="$stream --layerization uniform --insertion-order binary"
  [parallel_noskip]="$stream --gap-skip 0" [parallel_onpolicy]="$stream --on-policy 0.5"
  [parallel_sampled]="$stream --gap-slot-rate 0.25" [parallel_query1]="$stream --slot-query-layers 1"
  [parallel_last]="$stream --last-word-head" [parallel_query1_time]="$stream --slot-query-layers 1"
  [parallel_linear]="" [parallel_linear_onpolicy]="--on-policy 0.5" [parallel_linear_scratch]="")  # beside $parallel_flags
declare -A variant_shape=([dinic_enc6]="--encoder-layers 6")  # the model's shape: its own l2r base's too
declare -A variant_name=([dinic_repeat]="repeat loss" [dinic_late]="late words" [dinic_depth1]="anchor depth 1"
  [dinic_depth3]="anchor depth 3" [dinic_untied]="untied slot queries" [dinic_enc6]="6-layer encoder"
  [dinic_decay]="lr decayed" [dinic_decay_hi]="lr 1e-3 decayed"
  [parallel_every]="every slot of every layer end" [parallel_hard]="hard middles" [parallel_fixed]="fixed trajectories" [parallel_noskip]="no waiting gaps"
  [parallel_onpolicy]="on-policy" [parallel_sampled]="a quarter of the slots scored"
  [parallel_query1]="slot queries through the last layer" [parallel_last]="last-word head"
  [parallel_query1_time]="slot queries through the last layer, the stream's training time"
  [parallel_linear]="paper's slot representation"
  [parallel_linear_onpolicy]="paper's slot representation, on-policy"
  [parallel_linear_scratch]="paper's slot representation, from scratch")  # its row
read -r -a runs <<<"${RUNS:-ar_kd l2r_kd dinic parallel}"
for r in "${runs[@]}"; do
  case $r in ar_kd|l2r_kd|dinic|parallel) ;; *) echo "frontier.sh: unknown run '$r' in RUNS (ar_kd l2r_kd dinic parallel)" >&2; exit 2;; esac
done
read -r -a variants <<<"${VARIANTS:-}"
for v in "${variants[@]}"; do
  [ -n "${variant_name[$v]:-}" ] || { echo "frontier.sh: unknown variant '$v' in VARIANTS (${!variant_name[*]})" >&2; exit 2; }
done

teacher() {
  [ -d "$data" ] || { echo "frontier.sh: $data missing: run make multi30k first" >&2; exit 2; }
  [ "$(dirname "$data")" = data-bin ] \
    || { echo "frontier.sh: the teacher stage distils data-bin/NAME (recipes/distill.py NAME), not DATA=$data" >&2; exit 2; }
  [ -f "$kd/train.en-de.de.bin" ] && { echo "frontier.sh: $kd exists, teacher stage skipped"; return; }
  DISTILL_SUFFIX=$suffix UPDATES=${TEACHER_UPDATES:-2000} python recipes/distill.py $name
}

train_run() {  # KIND SAVE UPDATES [flags]: resumes from SAVE/checkpoint_last.pt; skipped when done
  local kind=$1 save=$2 n=$3; shift 3
  [ -f "$save/done" ] && return
  local logs; logs=logs/$(basename "$ck"); mkdir -p "$save" "$logs"
  THREADS=$threads UPDATES=$n KEEP_INTERVAL=4 bash recipes/train.sh "$kind" "$kd" "$save" "$@" \
    >>"$logs/$(basename "$save").log" 2>&1
  touch "$save/done"
}

base_checkpoint() {  # RUN: CK/RUN_at_BASE_UPDATES.pt, RUN's checkpoint at BASE_UPDATES, once it exists
  local run=$1 from=$ck/$1/checkpoint_*_${base_updates}.pt base=$ck/$1_at_${base_updates}.pt
  until [ -f "$base" ]; do  # the base run keeps its last 4 checkpoints only: the base is copied while it exists
    if compgen -G "$from" >/dev/null; then cp "$(compgen -G "$from" | head -1)" "$base.$$" && mv "$base.$$" "$base"
    elif [ -f "$(dirname "$from")/done" ]; then
      echo "frontier.sh: $base missing and $run no longer keeps its update $base_updates: train $run again to" \
           "that update (recipes/train.sh insnet, UPDATES=$base_updates) and copy its checkpoint there" >&2; exit 2
    else sleep 30; fi
  done
  echo "$base"
}

from_base_run() {  # SAVE BASE_RUN [flags]: UPDATES - BASE_UPDATES updates (FROM_BASE_STEPS where set) at the fixed
  # lr 5e-4, from BASE_RUN's weights at BASE_UPDATES (a resumed run: from its own checkpoint)
  local save=$1 run=$2 start=() base; shift 2
  if [ ! -f "$save/done" ] && [ ! -f "$save/checkpoint_last.pt" ]; then
    base=$(base_checkpoint "$run") || exit 2
    start=(--finetune-from-model "$base")
  fi
  SCHEDULER=fixed LR=5e-4 train_run insnet "$save" "${FROM_BASE_STEPS:-$((updates - base_updates))}" "${start[@]}" "$@"
}

dinic_run() {  # SAVE BASE_RUN [flags]: InsNet-Dinic's fine-tuning from BASE_RUN
  local save=$1 run=$2; shift 2
  from_base_run "$save" "$run" --insertion-order anchored --slot-query-stream --dinic-tau="${TAU:-3}" --dinic-lagged \
    --dinic-lagged-warm "$@"
}

train() {
  local r
  for r in dinic parallel; do
    if [[ " ${runs[*]} " == *" $r "* && " ${runs[*]} " != *" l2r_kd "* && ! -f "$ck/$r/done" \
          && ! -f "$ck/$r/checkpoint_last.pt" && ! -f "$ck/l2r_kd_at_${base_updates}.pt" ]] \
       && ! compgen -G "$ck/l2r_kd/checkpoint_*_${base_updates}.pt" >/dev/null; then
      echo "frontier.sh: $r starts from l2r_kd's update $base_updates, which does not exist: add l2r_kd to RUNS" >&2; exit 2
    fi
  done
  [ -f "$kd/train.en-de.de.bin" ] || { echo "frontier.sh: $kd missing: run the teacher stage first" >&2; exit 2; }
  [ "$base_updates" -lt "$updates" ] && [ $((base_updates % 250)) = 0 ] \
    || { echo "frontier.sh: BASE_UPDATES must be a multiple of 250 below UPDATES" >&2; exit 2; }
  local pids=()
  echo "frontier.sh: training ${runs[*]} (dinic and parallel from l2r_kd's update $base_updates; $updates updates each, $threads" \
       "thread(s) each; logs in logs/$(basename "$ck")/)"
  for r in "${runs[@]}"; do
    # shellcheck disable=SC2086
    case $r in
      ar_kd) train_run ar "$ck/ar_kd" "$updates" & pids+=($!);;
      l2r_kd) train_run insnet "$ck/l2r_kd" "$updates" & pids+=($!);;
      dinic) dinic_run "$ck/dinic" l2r_kd & pids+=($!);;
      parallel) from_base_run "$ck/parallel" l2r_kd $parallel_flags $stream & pids+=($!);;
    esac
  done
  wait "${pids[@]}"
}

variants_stage() {
  [ ${#variants[@]} = 0 ] && { echo "frontier.sh: no VARIANTS, variants stage skipped"; return; }
  [ -f "$kd/train.en-de.de.bin" ] || { echo "frontier.sh: $kd missing: run the teacher stage first" >&2; exit 2; }
  echo "frontier.sh: training ${variants[*]}, $threads thread(s) each (from l2r_kd's update $base_updates, or their own" \
       "l2r base's; parallel_linear_scratch from scratch)"
  local pids=() v
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2086
    if [ "$v" = parallel_linear_scratch ]; then  # from scratch, all UPDATES updates on the default schedule
      train_run insnet "$ck/$v" "$updates" $parallel_flags & pids+=($!)
    elif [ "$v" = parallel_query1_time ]; then  # as parallel_query1, for the time parallel's updates take
      FROM_BASE_STEPS=$(((updates - base_updates) * 128 / 100)) from_base_run "$ck/$v" l2r_kd $parallel_flags \
        ${variant_flags[$v]} & pids+=($!)
    elif [[ $v == parallel_* ]]; then  # from l2r_kd's update BASE_UPDATES, as parallel
      from_base_run "$ck/$v" l2r_kd $parallel_flags ${variant_flags[$v]} & pids+=($!)
    elif [ -n "${variant_shape[$v]:-}" ]; then  # its own l2r base, then InsNet-Dinic from it
      { train_run insnet "$ck/l2r_kd_${v#dinic_}" "$base_updates" ${variant_shape[$v]}
        dinic_run "$ck/$v" "l2r_kd_${v#dinic_}" ${variant_shape[$v]} ${variant_flags[$v]}; } & pids+=($!)
    else
      dinic_run "$ck/$v" l2r_kd ${variant_flags[$v]} & pids+=($!)
    fi
  done
  wait "${pids[@]}"
}

system_of() {  # VARIANT -> the system it varies
  if [[ $1 == parallel_* ]]; then echo "InsNet parallel"; else echo "InsNet-Dinic"; fi
}

checkpoint() {  # RUN RULE -> the path
  if [ "$2" = avg ]; then
    python recipes/average_checkpoints.py --inputs "$ck/$1" --output "$ck/$1/checkpoint_avg.pt" --reuse >&2
    echo "$ck/$1/checkpoint_avg.pt"
  else
    echo "$ck/$1/checkpoint_last.pt"
  fi
}

systems_file() {  # RULE FILE: the frontier's systems, with checkpoints by RULE
  local ar l2r dinic parallel; ar=$(checkpoint ar_kd "$1"); l2r=$(checkpoint l2r_kd "$1"); dinic=$(checkpoint dinic "$1")
  parallel=$(checkpoint parallel "$1")
  local ins="--task insertion_translation"
  {
    printf 'AR+KD greedy\t%s\t--beam 1\n' "$ar"
    printf 'AR+KD beam 5\t%s\t--beam 5\n' "$ar"
    printf 'InsNet l2r+KD sequential\t%s\t%s --insertion-mode sequential\n' "$l2r" "$ins"
    printf 'InsNet parallel 1 candidate\t%s\t%s --insertion-mode parallel\n' "$parallel" "$ins"
    printf 'InsNet parallel 1 candidate, every slot re-scored\t%s\t%s --insertion-mode parallel --reopen-done-slots\n' \
      "$parallel" "$ins"
    printf 'InsNet-Dinic 1 candidate\t%s\t%s --insertion-mode parallel\n' "$dinic" "$ins"
    printf 'InsNet-Dinic 1 candidate, always fused\t%s\t%s --insertion-mode parallel --fuse-slot-queries\n' "$dinic" "$ins"
    printf 'InsNet-Dinic 1 candidate, two passes\t%s\t%s --insertion-mode parallel --no-fuse-slot-queries\n' "$dinic" "$ins"
    printf 'InsNet-Dinic 1 candidate, no skip repeats\t%s\t%s --insertion-mode parallel --no-skip-repeats\n' "$dinic" "$ins"
    printf 'InsNet-Dinic 8 candidates + MBR\t%s\t%s --insertion-mode parallel --stop-check-prob 0.6 --insertion-candidates 8 --insertion-candidates-finish 6 --insertion-candidates-mbr 1\n' \
      "$dinic" "$ins"
    local v c
    for v in "${variants[@]}"; do
      c=$(checkpoint "$v" "$1")
      printf '%s 1 candidate, %s\t%s\t%s --insertion-mode parallel\n' "$(system_of "$v")" "${variant_name[$v]}" "$c" "$ins"
      [ "$v" != dinic_repeat ] || printf 'InsNet-Dinic 1 candidate, %s, no skip repeats\t%s\t%s --insertion-mode parallel --no-skip-repeats\n' \
        "${variant_name[$v]}" "$c" "$ins"
    done
  } >"$2"
}

choose() {
  mkdir -p "$ck"
  local best="" best_sum=-1 run
  for run in ar_kd l2r_kd dinic parallel "${variants[@]}"; do
    [ -f "$ck/$run/done" ] || { echo "frontier.sh: $ck/$run is not trained: run the train and variants stages first" >&2; exit 2; }
  done
  for rule in last avg; do  # the rule is chosen on the flags' own defaults: no settings stored by an earlier choice
    for run in dinic parallel "${variants[@]}"; do python recipes/store_decoding.py "$(checkpoint $run $rule)" --clear >/dev/null; done
  done
  for rule in last avg; do
    systems_file $rule "$ck/valid_$rule.tsv"
    grep -v -e "beam 5" -e "MBR" -e "no skip" -e "fused" -e "two passes" -e "re-scored" "$ck/valid_$rule.tsv" \
      >"$ck/valid_$rule.default.tsv"
    python benchmarks/frontier.py --data "$data" --systems "$ck/valid_$rule.default.tsv" --subset valid \
      --raw-ref "$raw/valid.de" --baseline "AR+KD greedy" --threads "$threads" --score-only \
      --out "$ck/valid_$rule" | tee "$ck/valid_$rule.txt"
    local sum; sum=$(python -c "import csv; print(sum(float(r['sacrebleu']) for r in csv.DictReader(open('$ck/valid_$rule.csv'))))")
    echo "frontier.sh: checkpoint rule $rule: valid sacreBLEU summed over the runs $sum"
    if python -c "import sys; sys.exit(0 if $sum > $best_sum else 1)"; then best=$rule; best_sum=$sum; fi
  done
  echo "frontier.sh: chosen on valid: $best"
  cp "$ck/valid_$best.tsv" "$ck/test.tsv"
  for run in dinic parallel "${variants[@]}"; do store_default "$(checkpoint $run "$best")" "$run"; done
  [ ${#variants[@]} = 0 ] || variants_on_valid
}

variants_on_valid() {  # each variant against the system it varies on valid, each with its stored setting ->
  # CK/valid_variants.* (InsNet-Dinic's), CK/valid_parallel_variants.* (InsNet parallel's)
  local system out v names
  for system in "InsNet-Dinic" "InsNet parallel"; do
    out=$ck/valid_variants; [ "$system" = "InsNet-Dinic" ] || out=$ck/valid_parallel_variants
    names=("$system 1 candidate")
    for v in "${variants[@]}"; do
      [ "$(system_of "$v")" = "$system" ] && names+=("$system 1 candidate, ${variant_name[$v]}")
    done
    [ ${#names[@]} -gt 1 ] || continue
    awk -F'\t' 'NR == FNR { keep[$0] = 1; next } ($1 in keep)' <(printf '%s\n' "${names[@]}") "$ck/test.tsv" >"$out.tsv"
    python benchmarks/frontier.py --data "$data" --systems "$out.tsv" --subset valid \
      --raw-ref "$raw/valid.de" --baseline "$system 1 candidate" --threads "$threads" --score-only \
      --out "$out" | tee "$out.txt"
  done
}

store_default() {  # CKPT RUN: its parallel decoding's setting chosen on valid, stored with CKPT as its default:
  # InsNet parallel's --end-of-slot (of END_OF_SLOT), InsNet-Dinic's --stop-check-prob (of STOP_CHECKS)
  # (and parallel_last's --last-word of LAST_WORD, given its --end-of-slot)
  if [[ $2 == parallel* ]]; then store_choice "$1" "$2" --end-of-slot "${END_OF_SLOT:-0.3 0.4 0.5 0.6 0.7 0.8 0.9}"
    [ "$2" != parallel_last ] || store_choice "$1" "$2" --last-word "${LAST_WORD:-0.5 0.7 0.9}" keep
  else store_choice "$1" "$2" --stop-check-prob "${STOP_CHECKS:-0.3 0.4 0.5 0.6 0.75}"; fi
}

store_choice() {  # CKPT RUN FLAG "VALUES" [keep]: the best of VALUES for FLAG on valid (parallel mode), stored with
  # CKPT (keep: beside the settings stored already, which the valid runs decode with; else they are cleared first)
  [ "${5:-}" = keep ] || python recipes/store_decoding.py "$1" --clear
  local p out; out=$ck/valid_$(echo "${3#--}" | tr - _)_$2  # e.g. CK/valid_stop_check_prob_dinic
  for p in $4; do
    printf '%s %s\t%s\t--task insertion_translation --insertion-mode parallel %s %s\n' "$3" "$p" "$1" "$3" "$p"
  done >"$out.tsv"
  python benchmarks/frontier.py --data "$data" --systems "$out.tsv" --subset valid \
    --raw-ref "$raw/valid.de" --baseline "$(tail -1 "$out.tsv" | cut -f1)" --threads "$threads" \
    --score-only --out "$out" | tee "$out.txt"
  p=$(python -c "import csv; rows = list(csv.DictReader(open('$out.csv')));
print(max(rows, key=lambda r: float(r['sacrebleu']))['system'].split()[-1])")
  echo "frontier.sh: $2's $3 chosen on valid: $p"
  python recipes/store_decoding.py "$1" --insertion-mode parallel "$3" "$p"
}

test_stage() {
  [ -f "$ck/test.tsv" ] || choose
  python benchmarks/frontier.py --data "$data" --systems "$ck/test.tsv" --raw-ref "$raw/test.de" \
    --baseline "AR+KD greedy" --threads "$threads" --device cpu --out "$out" | tee "$ck/test.txt"
}

gpu_stage() {
  [ -f "$ck/test.tsv" ] || choose
  local gpu_out=${GPU_OUT:-results/frontier_multi30k_gpu} name path flags half
  local keep='^(AR\+KD (greedy|beam 5)|InsNet l2r\+KD sequential|InsNet parallel 1 candidate|InsNet-Dinic 1 candidate(, always fused|, two passes)?'
  keep+='|InsNet-Dinic 8 candidates \+ MBR)'$'\t'
  mkdir -p "$ck/half"
  grep -E "$keep" "$ck/test.tsv" | while IFS=$'\t' read -r name path flags; do
    half=$ck/half/$(basename "$(dirname "$path")").pt
    [ "$half" -nt "$path" ] || python recipes/inference_checkpoint.py "$path" "$half" --half >&2
    printf '%s\t%s\t%s\n' "$name" "$half" "$flags"
  done >"$ck/gpu.tsv"
  python -c "import sys, torch; torch.cuda.is_available() or sys.exit('frontier.sh gpu: torch finds no GPU (a CUDA \
build of torch and a GPU: make install on a CUDA machine)')" || exit 2
  python benchmarks/frontier.py --data "$data" --systems "$ck/gpu.tsv" --raw-ref "$raw/test.de" \
    --baseline "AR+KD greedy" --threads 1 --device cuda --max-sentences "${GPU_SENTENCES:-500}" --out "$gpu_out" \
    | tee "$ck/gpu.txt"
}

for stage in "${stages[@]}"; do
  case $stage in
    teacher) teacher ;; train) train ;; variants) variants_stage ;; choose) choose ;; test) test_stage ;;
    gpu) gpu_stage ;;
    *) echo "frontier.sh: unknown stage '$stage' (teacher | train | variants | choose | test | gpu)" >&2; exit 2 ;;
  esac
done
