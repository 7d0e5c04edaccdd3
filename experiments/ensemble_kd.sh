#!/usr/bin/env bash
# Does a student distilled from an ensemble of two AR teachers beat one distilled from a single teacher? The whole
# experiment in one command, every run of a stage at once on one machine (a GPU, which the runs share):
#   1. two AR teachers (recipes/train.sh ar, seeds 1 and 2) train TEACHER_MINUTES (2.5) at once;
#   2. their ensemble (fairseq's a.pt:b.pt, checkpoint_best.pt each) distils the training set with beam 5
#      (recipes/distill.py, GEN_BATCH 256) into data-bin/multi30k_en_de-SUFFIX (SUFFIX: distill-gpuens);
#   3. the +KD students on that corpus, experiments/budget_table.sh's rows with its settings: insnet-l2r-kd trains
#      CURRICULUM_MINUTES (2), its checkpoint there is the base of curriculum-query-kd (anchored InsNet-uniform with
#      --slot-query-stream, fixed lr 5e-4), and both then train at once to STUDENT_MINUTES (4.5) of wall clock each
#      (fairseq counts the base's minutes in both, as budget_table.sh's curriculum rows do).
# The teachers' checkpoint_best.pt (the distilling ensemble) and the students' checkpoint_last.pt are also written to
# OUT, gzipped, as float16 without optimizer state (recipes/average_checkpoints.py --transfer), with the distilled
# corpus (corpus.tgz: the data-bin folder) and the logs (logs.tgz): what to copy to another machine that scores them
# (`bash experiments/ensemble_kd.sh unpack DIR` there, then `eval`, with budget_table.sh's decoding settings).
#
#   OUT=out/ensemble_kd [DEADLINE_S=555] bash experiments/ensemble_kd.sh   # DEADLINE_S: the students shrink to end by then
#   OUT=out/ensemble_kd bash experiments/ensemble_kd.sh baselines          # LevT +KD and InsT +KD on the same corpus,
#                                                                         # BASELINE_MINUTES (2.7) each, at once
#   bash experiments/ensemble_kd.sh unpack FILES_DIR     # OUT copied from elsewhere -> checkpoints/gpuens_*, the corpus
#   bash experiments/ensemble_kd.sh eval [RUN...]        # the test set -> results/ensemble_kd.{md,csv}
#   bash experiments/ensemble_kd.sh continue uniform|dinic   # the parallel student, CONTINUE_MINUTES (60) more
#
# On a CPU the same command runs too (THREADS=1 each: a smoke run at these budgets). Results: see results/MANIFEST.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/nat_decoding.sh"  # nat_decoding: how LevT / InsT are decoded
cd "$(dirname "$0")/.."
suffix=${DISTILL_SUFFIX:-distill-gpuens}; name=${NAME:-multi30k_en_de}; data=data-bin/$name; kd=data-bin/$name-$suffix
ck=checkpoints/gpuens; logs=logs/gpuens
# the InsNet +KD runs eval scores (the first stage's, then continue's) and the baselines stage's
insnet_runs=(l2r_kd curriculum_query_kd cqk_more dinic dinic_from_cqk_more dinic_from_dinic dinic_seed2)
baseline_runs=(levt_kd inst_kd)
teacher_min=${TEACHER_MINUTES:-2.5}; base_min=${CURRICULUM_MINUTES:-2}; student_min=${STUDENT_MINUTES:-4.5}

if [ "${1:-}" = eval ]; then  # [RUN...]: score the unpacked (or continued) runs -> results/OUT_NAME.{md,csv}
  # RUN: teachers (each greedy and beam 5, their ensemble beam 5), l2r_kd (sequential), and the parallel runs
  # curriculum_query_kd, cqk_more, dinic, dinic_from_cqk_more, dinic_from_dinic, dinic_seed2 (continue's SEED=2)
  # (--slot-top-p TOP_P --skip-repeats, alone and with the stop check, and 2 candidates with the stop check at 0.6:
  # budget_table.sh's settings, chosen on valid);
  # judged: the parallel run's candidates picked by the l2r +KD InsNet model; mbr: picked by minimum Bayes risk among
  # themselves; levt_kd, inst_kd: the baselines stage's LevT / InsT (9 iterations); default: every run there is (judged
  # and mbr left out).
  # SUBSET (test; valid: for choices), CKPT (last; avg: the parameter average of what the run kept, continued runs)
  raw=${MULTI30K_DIR:-../shared/data/multi30k}; [ -f "$raw/test.de" ] || raw=work/$name/raw
  subset=${SUBSET:-test}; res=results/${OUT_NAME:-ensemble_kd}; ar="--user-dir insnet_fairseq"
  par="--user-dir insnet_fairseq --task insertion_translation --insertion-mode parallel --slot-top-p ${TOP_P:-0.9} --skip-repeats"
  runs=("${@:2}")
  if [ ${#runs[@]} = 0 ]; then  # every run there is
    runs=(teachers)
    for r in "${insnet_runs[@]}" "${baseline_runs[@]}"; do
      [ -f "${ck}_$r/checkpoint_last.pt" ] && runs+=("$r")
    done
  fi
  score() {  # LABEL CHECKPOINT FLAGS
    # shellcheck disable=SC2086
    python recipes/evaluate.py --data "$data" --path "$2" --src en --tgt de --name "$1" --gen-subset "$subset" \
      --raw-ref "$raw/$subset.de" --tok-ref work/$name/$subset.clean.de --csv "$res.csv" --markdown "$res.md" -- $3
  }
  checkpoint_of() {  # RUN -> path: its checkpoint_last.pt, or (CKPT=avg) the average of what it kept; label: its name
    path=${ck}_$1/checkpoint_last.pt label="$1 +KD(ensemble)"
    [ -f "$path" ] || { echo "ensemble_kd.sh: $path missing" >&2; exit 2; }
    if [ "${CKPT:-last}" = avg ] && [ "$1" != l2r_kd ] && [ "$1" != curriculum_query_kd ]; then
      # (the first stage's runs, when unpacked, have their last checkpoint alone: nothing to average)
      python recipes/average_checkpoints.py --inputs "${ck}_$1" --output "${ck}_$1/checkpoint_avg.pt" --reuse
      path=${ck}_$1/checkpoint_avg.pt label="$label (avg)"
    fi
  }
  for run in "${runs[@]}"; do
    kind=$run  # the InsNet runs share a branch, the baselines another
    [[ " ${insnet_runs[*]} " = *" $run "* ]] && kind=insnet
    [[ " ${baseline_runs[*]} " = *" $run "* ]] && kind=baseline
    case $kind in
      teachers)
        for s in 1 2; do
          [ -f "${ck}_ar_s$s/checkpoint_last.pt" ] || { echo "ensemble_kd.sh: ${ck}_ar_s$s missing (unpack first)" >&2; exit 2; }
          score "AR teacher seed $s greedy" "${ck}_ar_s$s/checkpoint_last.pt" "$ar --beam 1"
          score "AR teacher seed $s beam 5" "${ck}_ar_s$s/checkpoint_last.pt" "$ar --beam 5"
        done
        score "AR ensemble of both beam 5 (the distilling teacher)" \
          "${ck}_ar_s1/checkpoint_last.pt:${ck}_ar_s2/checkpoint_last.pt" "$ar --beam 5" ;;
      insnet)
        checkpoint_of "$run"
        if [ "$run" = l2r_kd ]; then
          score "$label sequential" "$path" "--user-dir insnet_fairseq --task insertion_translation --insertion-mode sequential"
          continue
        fi
        score "$label parallel (top-p ${TOP_P:-0.9}, --skip-repeats)" "$path" "$par"
        score "$label parallel (top-p ${TOP_P:-0.9}, --skip-repeats --stop-check-prob 0.75)" "$path" "$par --stop-check-prob 0.75"
        score "$label parallel (top-p ${TOP_P:-0.9}, --skip-repeats --stop-check-prob 0.6 --insertion-candidates 2)" "$path" \
          "$par --stop-check-prob 0.6 --insertion-candidates 2" ;;
      judged)  # JUDGE_K (8) candidates of the parallel run PAR_RUN (curriculum_query_kd), stop check 0.75, a sentence
        # stops once JUDGE_FINISH (6) have finished, picked by the l2r +KD InsNet model (one teacher-forced pass along its left-to-right
        # trajectory, --iter-decode-with-external-reranker with an insnet judge: decoding/rerank.py): no AR model
        j=${ck}_l2r_kd/checkpoint_last.pt
        [ -f "$j" ] || { echo "ensemble_kd.sh: $j missing" >&2; exit 2; }
        checkpoint_of "${PAR_RUN:-curriculum_query_kd}"  # (CKPT=avg: its average)
        k=${JUDGE_K:-8} fin=${JUDGE_FINISH:-6}; [ "$fin" -le "$k" ] || fin=$k  # JUDGE_FINISH (6): at most K
        score "$label, $k candidates (first $fin finished, stop check 0.75) judged by l2r_kd" \
          "$path:$j" "$par --stop-check-prob 0.75 --insertion-candidates $k --insertion-candidates-finish $fin --iter-decode-with-external-reranker" ;;
      baseline)  # the baselines stage's runs, budget_table.sh's decoding of them (9 iterations, no EOS penalty)
        checkpoint_of "$run"
        score "$label" "$path" "${nat_decoding[*]}" ;;
      mbr)  # MBR_K (4) candidates of the parallel run PAR_RUN (curriculum_query_kd), stop check 0.6, a sentence stops once
        # MBR_FINISH (0: all) have finished, the output picked by minimum Bayes risk among them (--insertion-candidates-mbr
        # MBR_T (1): expected BLEU+1 against each other, weighted by softmax(own score / T); 0: the best own score, the
        # comparison): the parallel model alone
        checkpoint_of "${PAR_RUN:-curriculum_query_kd}"  # (CKPT=avg: its average)
        k=${MBR_K:-4} t=${MBR_T:-1} fin=${MBR_FINISH:-0} first="" pick="MBR T=${MBR_T:-1}"
        [ "$fin" -gt 0 ] && [ "$fin" -lt "$k" ] && first=", first $fin finished"
        [ "$t" = 0 ] && pick="its own best score"
        score "$label, $k candidates (stop check 0.6$first), $pick" "$path" \
          "$par --stop-check-prob 0.6 --insertion-candidates $k --insertion-candidates-finish $fin --insertion-candidates-mbr $t" ;;
      *) echo "ensemble_kd.sh: eval: RUN is teachers, judged, mbr or one of ${insnet_runs[*]} ${baseline_runs[*]}, not '$run'" >&2
         exit 2 ;;
    esac
  done
  cat "$res.md"; exit 0
fi
if [ "${1:-}" = continue ]; then  # VARIANT: the first stage's parallel student trained on, CONTINUE_MINUTES (60) more,
  # one thread (THREADS), fixed lr CONTINUE_LR (5e-4: its stage's lr; Adam restarts: --finetune-from-model loads the parameters, no optimizer
  # state); KEEP_INTERVAL (1) of the checkpoints saved every 250 updates kept, for eval's CKPT=avg:
  #   uniform  the same objective (anchored InsNet-uniform, slot query stream) -> checkpoints/gpuens_cqk_more
  #   dinic    InsNet-Dinic fine-tuning as budget_table.sh's dinic-student-kd row (--dinic-tau TAU (3) --dinic-lagged
  #            --dinic-lagged-warm) -> checkpoints/gpuens_dinic
  variant=${2:?usage: bash experiments/ensemble_kd.sh continue uniform|dinic}
  # FROM_RUN (curriculum_query_kd): the run it starts from, e.g. cqk_more: Dinic after the uniform continuation,
  # saved in checkpoints/gpuens_dinic_from_cqk_more, or dinic: a second Dinic stage (e.g. at a lower CONTINUE_LR), saved in
  # checkpoints/gpuens_dinic_from_dinic. A save folder that has a checkpoint_last.pt continues it (to
  # CONTINUE_MINUTES of training in all: fairseq counts the minutes the run has had, and a FROM_RUN trained here
  # brings its own: FROM_RUN=dinic after 120 minutes and CONTINUE_MINUTES=195 trains 75 more).
  # SEED (1, fairseq's default): another seed (batch order, dropout) trains into a folder of its own, e.g. gpuens_dinic_seed2
  from_run=${FROM_RUN:-curriculum_query_kd}; sfx=""; [ "$from_run" = curriculum_query_kd ] || sfx=_from_$from_run
  seed=${SEED:-1}; [ "$seed" = 1 ] || sfx=${sfx}_seed$seed
  case $variant in
    uniform) save=${ck}_cqk_more$sfx; flags=(--layerization uniform) ;;
    dinic) save=${ck}_dinic$sfx; flags=(--dinic-tau="${TAU:-3}" --dinic-lagged --dinic-lagged-warm) ;;
    *) echo "ensemble_kd.sh: continue: VARIANT is uniform or dinic, not '$variant'" >&2; exit 2 ;;
  esac
  from=${ck}_$from_run/checkpoint_last.pt
  [ -f "$from" ] || { echo "ensemble_kd.sh: $from missing (bash experiments/ensemble_kd.sh unpack FILES_DIR)" >&2; exit 2; }
  export UPDATES=0 SCHEDULER=fixed LR=${CONTINUE_LR:-5e-4} THREADS=${THREADS:-1} MINUTES=${CONTINUE_MINUTES:-60}
  exec bash recipes/train.sh insnet "$kd" "$save" --insertion-order anchored --slot-query-stream "${flags[@]}" \
    --finetune-from-model "$from" --seed "$seed"
fi
if [ "${1:-}" = unpack ]; then  # FILES_DIR: an OUT folder copied from the machine that trained
  src=${2:?usage: bash experiments/ensemble_kd.sh unpack FILES_DIR}
  [ -d "$src" ] || { echo "ensemble_kd.sh: unpack: $src is not a folder" >&2; exit 2; }
  compgen -G "$src/*.pt.gz" >/dev/null || { echo "ensemble_kd.sh: no *.pt.gz in $src (not a ensemble_kd.sh OUT)" >&2; exit 2; }
  [ -f "$src/corpus.tgz" ] && tar xzf "$src/corpus.tgz"  # (a baselines OUT has none)
  [ -f "$src/logs.tgz" ] && tar xzf "$src/logs.tgz"
  for f in "$src"/*.pt.gz; do
    run=$(basename "$f" .pt.gz); mkdir -p "$ck"_"$run"
    gunzip -c "$f" >"$ck"_"$run"/checkpoint_last.pt
    echo "$f -> ${ck}_$run/checkpoint_last.pt"
  done
  exit 0
fi

out=${OUT:?OUT: the folder the results go to}
mkdir -p "$out" "$logs"
export UPDATES=0
start=$SECONDS
stamp() { echo "ensemble_kd.sh: $(( SECONDS - start )) s: $*"; }
run_bg() {  # LOG CMD...: in the background, its pid in $!
  local log=$1; shift
  "$@" >"$logs/$log.log" 2>&1 &
}
wait_all() {  # PID:NAME...: fail naming the log of the first run that failed
  local failed=0
  for p in "$@"; do
    wait "${p%%:*}" || { echo "ensemble_kd.sh: ${p#*:} failed:" >&2; tail -5 "$logs/${p#*:}.log" >&2; failed=1; }
  done
  return $failed
}
updates_of() { grep -oE 'num_updates[= ][0-9]+' "$logs/$1.log" | tail -1 | grep -oE '[0-9]+$' || echo "?"; }
pack() {  # RUN:WHICH...: checkpoints/gpuens_RUN/checkpoint_WHICH.pt -> OUT/RUN.pt.gz, float16, no optimizer state
  for r in "$@"; do
    python recipes/average_checkpoints.py --inputs "${ck}_${r%%:*}/checkpoint_${r#*:}.pt" --output "$out/${r%%:*}.pt" \
      --transfer >/dev/null 2>&1
    gzip -f "$out/${r%%:*}.pt"
  done
}

if [ "${1:-}" = baselines ]; then  # LevT +KD and InsT +KD (budget_table.sh's levt-kd, inst-kd) on the ensemble corpus
  # (data-bin/multi30k_en_de-SUFFIX, made by the first stage or unpacked), at once, BASELINE_MINUTES (2.7: the InsNet students') each
  [ -d "$kd" ] || { echo "ensemble_kd.sh: baselines: $kd missing (run the first stage, or unpack its OUT)" >&2; exit 2; }
  m=${BASELINE_MINUTES:-2.7}
  stamp "baselines: LevT +KD and InsT +KD at once, $m minutes each"
  run_bg levt_kd env MINUTES="$m" bash recipes/train.sh levt "$kd" "${ck}_levt_kd"; pids=("$!:levt_kd")
  run_bg inst_kd env MINUTES="$m" bash recipes/train.sh inst "$kd" "${ck}_inst_kd" --label-tau 1.0; pids+=("$!:inst_kd")
  wait_all "${pids[@]}"
  stamp "baselines done: LevT $(updates_of levt_kd), InsT $(updates_of inst_kd) updates"
  pack levt_kd:last inst_kd:last
  tar czf "$out/logs.tgz" "$logs/levt_kd.log" "$logs/inst_kd.log"
  ls -la "$out"
  exit 0
fi

[ -d "$data" ] || { echo "ensemble_kd.sh: $data missing (make multi30k)" >&2; exit 2; }
stamp "teachers: 2 AR runs at once, $teacher_min minutes each"
pids=()
for s in 1 2; do
  run_bg ar_s$s env MINUTES="$teacher_min" bash recipes/train.sh ar "$data" "${ck}_ar_s$s" --seed $s; pids+=("$!:ar_s$s")
done
wait_all "${pids[@]}"
stamp "teachers done: $(updates_of ar_s1) and $(updates_of ar_s2) updates"

TEACHER=${ck}_ar_s1/checkpoint_best.pt:${ck}_ar_s2/checkpoint_best.pt GEN_BATCH=${GEN_BATCH:-256} \
  python recipes/distill.py "$name" --suffix "$suffix" >"$logs/distill.log" 2>&1 \
  || { tail -20 "$logs/distill.log" >&2; exit 1; }
grep -E "distill: (corpus|wrote|kept|empty)" "$logs/distill.log" || true
tar czf "$out/corpus.tgz" "$kd"
stamp "distilled: $kd"
if [ -n "${DEADLINE_S:-}" ]; then  # fit the students into what is left of DEADLINE_S (packing takes PACK_S, 60)
  read -r base_min student_min < <(python -c "
left = max(($DEADLINE_S - $SECONDS + $start - ${PACK_S:-60} - 30) / 60, 1.0)  # 30 s: two fairseq start-ups
s = min($student_min, left); print(round(min($base_min, 0.45 * s), 2), round(s, 2))")
  stamp "students fitted into DEADLINE_S $DEADLINE_S: base $base_min, total $student_min minutes"
fi

l2r=(insnet "$kd" "${ck}_l2r_kd" --insertion-order l2r)
run_bg l2r_kd_base env MINUTES="$base_min" bash recipes/train.sh "${l2r[@]}"
wait_all "$!:l2r_kd_base"
cp "${ck}_l2r_kd/checkpoint_last.pt" "${ck}_l2r_kd/checkpoint_base.pt"
stamp "l2r +KD base: $(updates_of l2r_kd_base) updates"
run_bg l2r_kd env MINUTES="$student_min" bash recipes/train.sh "${l2r[@]}"; pids=("$!:l2r_kd")
run_bg curriculum_query_kd env MINUTES="$student_min" SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$kd" \
  "${ck}_curriculum_query_kd" --insertion-order anchored --layerization uniform --slot-query-stream \
  --finetune-from-model "${ck}_l2r_kd/checkpoint_base.pt"; pids+=("$!:curriculum_query_kd")
wait_all "${pids[@]}"
stamp "students done: l2r +KD $(updates_of l2r_kd), curriculum $(updates_of curriculum_query_kd) updates"

# OUT: four checkpoints (the teachers as distilled, checkpoint_best.pt, and the students' last), the corpus and the logs
pack ar_s1:best ar_s2:best l2r_kd:last curriculum_query_kd:last
tar czf "$out/logs.tgz" "$logs"
ls -la "$out"
stamp "done"
