#!/usr/bin/env bash
# How do the systems of the results table compare at an equal budget on a GPU? The rows of experiments/budget_table.sh
# that the table reports, each trained MINUTES (12) of wall clock, ALL AT ONCE on the same GPU (so every row gets the
# same wall clock on the same, shared hardware), then scored by budget_table.sh's own eval (recipes/evaluate.py), and the
# batch-1 / batch-64 latencies measured side by side, alone on the GPU, by benchmarks/decode_latency.py.
# Same model size, batch and lr as the CPU table; only the budget's hardware differs.
#
#   bash experiments/gpu_table.sh start        # launch every row in the background (setsid), logs/gpu/ROW.log
#   bash experiments/gpu_table.sh wait SECONDS # print progress every 60 s until all rows are done or SECONDS pass
#   bash experiments/gpu_table.sh table        # results/gpu_table.{md,csv} from the rows' tables (logs/gpu/results/)
#   bash experiments/gpu_table.sh latency      # batch-1 / batch-64 latencies, alone on the GPU, after every row
#
# Rows: ar, ar-kd, insnet-l2r, insnet-l2r-kd, curriculum-query-kd (its first CURRICULUM_MINUTES (MINUTES/2)
# are insnet-l2r-kd's run: that row waits for the snapshot, then continues it; so for indigo-sao and indigo-l2r,
# which ROWS can add with indigo-random), then InsNet-Dinic: the
# curriculum row's last checkpoint fine-tuned DINIC_UPDATES (256, 2 epochs) with --dinic-tau DINIC_TAU (3, the
# best of the CPU tau spectrum) as experiments/tau_spectrum.sh does; levt-kd, inst-kd. Saves in checkpoints/tMINUTES_*.
# Environment: MINUTES, CURRICULUM_MINUTES, DINIC_TAU, DINIC_UPDATES, ROWS (a subset), CKPT (budget_table.sh's
# checkpoint choice: valid (default), last, best), MULTI30K_DIR (the raw test.de / valid.de, when ../shared is not
# beside the checkpoint), KD_DATA + KD_TAG (the +KD rows on another distilled corpus, e.g. the 120-minute CPU teacher's:
# KD_DATA=data-bin/multi30k_en_de-distill-t120 KD_TAG=_kd120; recipes/distill.py --suffix makes it), LATE_WORDS (the
# Dinic fine-tuning with --late-words LATE_WORDS; unset: without).
# Every row's process is started with setsid: it outlives the shell that started it.
set -euo pipefail
export MINUTES=${MINUTES:-12}
export CURRICULUM_MINUTES=${CURRICULUM_MINUTES:-$((MINUTES / 2))} BATCH1=0
raw=${MULTI30K_DIR:-../shared/data/multi30k}
tau=${DINIC_TAU:-3}; dinic_updates=${DINIC_UPDATES:-256}
rows=(${ROWS:-ar ar-kd insnet-l2r insnet-l2r-kd curriculum-query-kd levt-kd inst-kd})  # ROWS: a subset
kd=${KD_DATA:-data-bin/multi30k_en_de-distill}; export KD_DATA KD_TAG
[ -n "${KD_DATA:-}" ] && [ -z "${KD_TAG:-}" ] && { echo "gpu_table.sh: KD_DATA needs KD_TAG (as budget_table.sh)" >&2; exit 2; }
t=t$MINUTES${KD_TAG:-}; logs=logs/gpu; dinic_dir=checkpoints/spectrum_${t}_curriculum_query_kd_$tau
res=$logs/results; mkdir -p $res

row_job() {  # ROW: train, then score (budget_table.sh eval, OUT=gpu/ROW); writes logs/gpu/ROW.status
  local r=$1 rc=0
  # a two-stage row (curriculum-query-kd, indigo-sao) trains its base row's first CURRICULUM_MINUTES: when both
  # rows run, the base row waits for that snapshot, then continues the same run
  local two_stage="" base_dir=""
  case $r in insnet-l2r-kd) two_stage=curriculum-query-kd base_dir=${t}_insnet_l2r_kd ;;
             indigo-l2r) two_stage=indigo-sao base_dir=${t}_indigo_l2r ;; esac
  if [ -n "$two_stage" ] && [[ " ${rows[*]} " = *" $two_stage "* ]]; then
    until [ -f checkpoints/$base_dir/checkpoint_${CURRICULUM_MINUTES}min.pt ]; do sleep 10; done
  fi
  bash experiments/budget_table.sh train "$r" || rc=$?
  if [ $rc = 0 ] && [ "$r" = curriculum-query-kd ]; then  # InsNet-Dinic from the curriculum base
    (unset MINUTES; STEP=train SETTINGS=$tau TAG=${t}_curriculum_query_kd DATA=$kd \
      MODEL_FLAGS="--slot-query-stream${LATE_WORDS:+ --late-words $LATE_WORDS}" bash experiments/tau_spectrum.sh \
      checkpoints/${t}_curriculum_query_kd/checkpoint_last.pt "$dinic_updates") || rc=$?
  fi
  echo "train $rc" >"$logs/$r.status"
  [ $rc = 0 ] || return $rc
  local modes="sequential beam"; [ "$r" = curriculum-query-kd ] && modes="parallel skip-repeats candidates stop-check stop-check-candidates"
  MODES=$modes RESULTS_DIR=$res OUT=$r bash experiments/budget_table.sh eval "$r" || rc=$?
  if [ $rc = 0 ] && [ "$r" = curriculum-query-kd ]; then
    local sc="--skip-repeats --stop-check-prob" sc1=${STOP_CHECK:-0.75} sc2=${STOP_CHECK_CANDIDATES:-0.6}
    for extra in "" --skip-repeats "--skip-repeats --insertion-candidates 2" "$sc $sc1" "$sc $sc2 --insertion-candidates 2"; do
      python recipes/evaluate.py --data "$kd" --path $dinic_dir/checkpoint_last.pt \
        --src en --tgt de --name "dinic-kd (tau $tau from curriculum-query-kd) parallel (top-p 0.9${extra:+, $extra})" \
        --raw-ref "$raw/test.de" --tok-ref work/multi30k_en_de/test.clean.de \
        --csv $res/dinic.csv --markdown $res/dinic.md \
        -- --user-dir insnet_fairseq --task insertion_translation --insertion-mode parallel --slot-top-p 0.9 $extra || rc=$?
    done
  fi
  echo "eval $rc" >>"$logs/$r.status"
}

case ${1:-} in
  start)
    for r in "${rows[@]}"; do
      rm -f "$logs/$r.status"
      setsid bash "$0" job "$r" >"$logs/$r.log" 2>&1 < /dev/null &
    done
    echo "gpu_table.sh: ${#rows[@]} rows started ($MINUTES minutes each), logs in $logs/" ;;
  job) row_job "${2:?ROW}" ;;
  wait)
    end=$((SECONDS + ${2:?SECONDS}))
    while :; do
      done_rows=0
      for r in "${rows[@]}"; do
        st=$(tr '\n' ' ' <"$logs/$r.status" 2>/dev/null || true)
        [[ "$st" = *eval* ]] && done_rows=$((done_rows + 1))
        last=$(grep -E '\| (train|valid) \||Traceback|Error' "$logs/$r.log" 2>/dev/null | tail -1 | cut -c1-150 || true)
        echo "$(date -u +%T) $r [${st:-running}] $last"
      done
      nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null || true
      [ $done_rows = ${#rows[@]} ] && { echo "all rows done"; break; }
      [ $SECONDS -ge $end ] && break
      sleep 60
    done ;;
  table)
    out=results/gpu_table
    ls $res/*.md >/dev/null 2>&1 || { echo "gpu_table.sh: no row scored yet ($res/*.md)" >&2; exit 1; }
    { head -2 "$(ls $res/*.md | head -1)"
      for r in "${rows[@]}" dinic; do [ -f $res/$r.md ] && tail -n +3 $res/$r.md; done; } >$out.md
    { head -1 "$(ls $res/*.csv | head -1)"
      for r in "${rows[@]}" dinic; do [ -f $res/$r.csv ] && tail -n +2 $res/$r.csv; done; } >$out.csv
    cat $out.md ;;
  latency)  # alone on the GPU, after every row is done
    python benchmarks/decode_latency.py --cached-only --sentences ${SENTENCES:-200} --rounds ${ROUNDS:-2} \
      --insnet checkpoints/${t}_insnet_l2r_kd/checkpoint_last.pt --insnet-parallel $dinic_dir/checkpoint_last.pt \
      --skip-repeats --slot-top-p 0.9 --stop-check-prob ${STOP_CHECK:-0.75} --ar checkpoints/${t}_ar/checkpoint_last.pt \
      --levt checkpoints/${t}_levt_kd/checkpoint_last.pt | tee results/gpu_latency.txt ;;
  *) echo "usage: bash experiments/gpu_table.sh start | wait SECONDS | table | latency" >&2; exit 2 ;;
esac
