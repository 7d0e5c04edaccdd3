#!/usr/bin/env bash
# Multi30k En->De at equal wall-clock budgets: every system of the table trains MINUTES (60) of
# wall clock on THREADS (1) CPU thread(s), same size (3+3 layers, d=256, recipes/train.sh), same
# batch (MAX_TOKENS 4096), lr 1e-3 with inverse_sqrt after 400 warm-up updates, dropout DROPOUT (0.1, train.sh); two rows train at
# once on a 2-core machine. "+KD" rows train on data-bin/multi30k_en_de-distill, made from the AR
# row's own checkpoint (the teacher: `make distill-multi30k_en_de` with the same budget), so the
# teacher's time and the distillation's are extra and reported apart (logs/distill.log).
#
#   bash experiments/budget_table.sh train ROW     # train one row (resumes an interrupted run)
#   bash experiments/budget_table.sh eval [ROW...] # score the rows that exist -> results/budget_table.{md,csv}
#                                              # (checkpoint_last or _best, whichever scores higher on the
#                                              #  valid set; CKPT=last, CKPT=best: that one;
#                                              #  CKPT=avg: the average of the kept checkpoints)
#                                              # (BATCH1=0: skip the batch-1 timing; OUT=name: results/name.*;
#                                              #  MODES: InsNet decodings, "sequential parallel skip-repeats"
#                                              #  and "candidates": skip-repeats + --insertion-candidates CANDIDATES;
#                                              #  "stop-check": skip-repeats + --stop-check-prob STOP_CHECK;
#                                              #  "stop-check-candidates": both, STOP_CHECK_CANDIDATES;
#                                              #  "judge", "judge-stop-check": those with JUDGE_CANDIDATES
#                                              #  ("judge-sampled": sampled ones, JUDGE_SAMPLING; in every
#                                              #  judge* mode JUDGE_FINISH M: a sentence stops once M of its
#                                              #  candidates finished, CHANNEL_WEIGHT W: the judge adds W x
#                                              #  its channel model CHANNEL, the ar-rev row, --channel-weight;
#                                              #  MBR T: ranked by expected BLEU, --insertion-candidates-mbr)
#                                              #  candidates judged by the AR model JUDGE, the teacher's
#                                              #  checkpoint by default (--iter-decode-with-external-reranker);
#                                              #  "verify", "verify-stop-check": skip-repeats (+ the stop check) drafts
#                                              #  verified by the AR checkpoint JUDGE, --insertion-verify, VERIFY_TOLERANCE;
#                                              #  "beam": sequential with --insertion-beam BEAM (5), --lenpen LENPEN (1);
#                                              #  RESULTS_DIR: results/ by default)
#   bash experiments/budget_table.sh tune ROW      # InsNet parallel decoding on the valid set, --slot-top-p 0.5..0.95
#                                              # (GRID: ';'-separated decoding flag sets; TUNE_OUT: results/NAME.csv)
#   bash experiments/budget_table.sh rows          # list the rows
#
# Rows: ar (the teacher), ar-kd, ar-rev (De->En: the channel model of the AR judge, CHANNEL), insnet-l2r, insnet-l2r-kd, insnet-r2l, insnet-binary, insnet-random,
# insnet-anchored (InsNet-uniform over the anchored order's levels), insnet-anchored-kd, anchored-kd-query
# (the same with --slot-query-stream), anchored-seq-kd then
# dinic-kd (InsNet-Dinic: sequential anchored base, then Dinic fine-tuning, one budget), curriculum-kd
# (a curriculum: CURRICULUM_MINUTES (30) of insnet-l2r-kd, then anchored InsNet-uniform, one budget),
# curriculum-query-kd (the same, the second part with --slot-query-stream), dinic-student-kd (InsNet-Dinic from that
# student: DINIC_MINUTES (45) of --dinic-tau TAU --dinic-lagged --dinic-lagged-warm fine-tuning of its averaged
# checkpoint, one budget of MINUTES + DINIC_MINUTES, the student's MINUTES carried by its checkpoint), levt-kd, inst-kd, indigo-l2r and
# indigo-random (InDIGO, --arch indigo_small, no KD as in the InsNet paper's Table 4), indigo-sao (InDIGO's
# searched adaptive order, beam SAO_BEAM (2), bootstrapped from CURRICULUM_MINUTES of indigo-l2r, one budget).
# Decoding: AR greedy and beam 5; InsNet sequential and parallel (--slot-top-p TOP_P, 0.9: chosen
# on the valid set, see README), parallel also with --skip-repeats; LevT/InsT fairseq's iterative refinement (9 iterations).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/nat_decoding.sh"  # nat_decoding: how LevT / InsT are decoded
export MINUTES=${MINUTES:-60} THREADS=${THREADS:-1} UPDATES=0
data=data-bin/multi30k_en_de; kd=${KD_DATA:-data-bin/multi30k_en_de-distill}
# KD_DATA: another distilled corpus (recipes/distill.py --suffix), with KD_TAG naming its runs (checkpoints/t60TAG_ROW)
[ -n "${KD_DATA:-}" ] && [ -z "${KD_TAG:-}" ] && { echo "budget_table.sh: KD_DATA needs KD_TAG (e.g. KD_TAG=_kd120)" >&2; exit 2; }
raw=${MULTI30K_DIR:-../shared/data/multi30k}; [ -f "$raw/test.de" ] || raw=work/multi30k_en_de/raw
top_p=${TOP_P:-0.9}
modes=${MODES:-sequential parallel skip-repeats}  # InsNet decodings that eval scores (also: candidates, stop-check...)
candidates=${CANDIDATES:-2}  # MODES candidates: --skip-repeats with --insertion-candidates CANDIDATES (2: chosen on valid)
stop_check=${STOP_CHECK:-0.75}  # MODES stop-check: --skip-repeats --stop-check-prob STOP_CHECK; stop-check-candidates: with
stop_check_k=${STOP_CHECK_CANDIDATES:-0.6}  # --insertion-candidates too, STOP_CHECK_CANDIDATES (both chosen on the valid set:
# results/stop_check_valid.csv)
judge_k=${JUDGE_CANDIDATES:-8}  # MODES judge / judge-stop-check: K candidates, the AR checkpoint JUDGE picks one (8: the
# best of 2, 4, 8 on the valid set)
judge=${JUDGE:-checkpoints/multi30k_en_de-teacher/checkpoint_best.pt}
judge_finish=${JUDGE_FINISH:-0}  # MODES judge*: a sentence stops once JUDGE_FINISH of its candidates have finished
# (--insertion-candidates-finish; 0: all of them)
judge_sampling=${JUDGE_SAMPLING:-"--sampling-topk 8 --temperature 0.5"}  # MODES judge-sampled: the K candidates are
# samples (at most 0.5 steps/length: the j-th best first word of greedy candidates lengthens the slowest one;
# chosen on the valid set)
channel=${CHANNEL:-checkpoints/t60_ar_rev/checkpoint_best.pt}  # MODES judge* with CHANNEL_WEIGHT: the De->En model (row ar-rev)
channel_weight=${CHANNEL_WEIGHT:-0}  # MODES judge*: its --channel-weight (0: no channel model; 2 chosen on the valid set
# with JUDGE_FINISH 6 and the stop check)
verify_tolerance=${VERIFY_TOLERANCE:-0}  # MODES verify / verify-stop-check: the drafts (--skip-repeats, and the stop check)
# verified by the AR checkpoint JUDGE (--insertion-verify), with --verify-tolerance VERIFY_TOLERANCE (0: the output is JUDGE's greedy one)
mbr=${MBR:-0}  # MODES judge*: --insertion-candidates-mbr MBR, the judged candidates ranked by minimum Bayes risk (0: off)
beam=${BEAM:-5}  # MODES beam: InsNet sequential beam search (the AR rows decode with beam 5)
lenpen=${LENPEN:-1}  # MODES beam: its --lenpen (score / (steps + 1) ** LENPEN; choose it on the valid set)
tau=${TAU:-2.0}; base_minutes=${BASE_MINUTES:-40}; base_minutes_l2r=${CURRICULUM_MINUTES:-30}
dinic_minutes=${DINIC_MINUTES:-45}  # row dinic-student-kd: minutes of Dinic fine-tuning on top of the student's MINUTES (2 epochs: the first visits lay out every sentence)
batch1=--batch1; [ "${BATCH1:-1}" = 0 ] && batch1=  # BATCH1=0: no batch-1 timing (while other jobs run)
out=${RESULTS_DIR:-results}/${OUT:-budget_table}
# Save directories are checkpoints/t${MINUTES}_ROW. A longer budget (MINUTES > 60) starts from a copy of the
# 60-minute run when it exists and continues it: the lr schedules do not depend on the budget and fairseq
# resumes data order and time from checkpoint_last.pt, so this is the same run as training from scratch.
t=t$MINUTES${KD_TAG:-}

# ROW -> "KIND DATA SAVE_DIR [train flags...]"
spec() {
  case $1 in
    ar)                 if [ "$MINUTES" = 60 ]; then echo "ar $data checkpoints/multi30k_en_de-teacher"
                        else echo "ar $data checkpoints/${t}_ar"; fi ;;
    ar-kd)              echo "ar $kd checkpoints/${t}_ar_kd" ;;
    ar-rev)             echo "ar $data checkpoints/${t}_ar_rev --source-lang de --target-lang en" ;;
    insnet-l2r)         echo "insnet $data checkpoints/${t}_insnet_l2r --insertion-order l2r" ;;
    insnet-l2r-kd)      echo "insnet $kd checkpoints/${t}_insnet_l2r_kd --insertion-order l2r" ;;
    insnet-r2l)         echo "insnet $data checkpoints/${t}_insnet_r2l --insertion-order r2l" ;;
    insnet-binary)      echo "insnet $data checkpoints/${t}_insnet_binary --insertion-order binary" ;;
    insnet-random)      echo "insnet $data checkpoints/${t}_insnet_random --insertion-order random" ;;
    insnet-anchored)    echo "insnet $data checkpoints/${t}_insnet_anchored --insertion-order anchored --layerization uniform" ;;
    insnet-anchored-kd) echo "insnet $kd checkpoints/${t}_insnet_anchored_kd --insertion-order anchored --layerization uniform" ;;
    anchored-kd-query)  echo "insnet $kd checkpoints/${t}_anchored_kd_query --insertion-order anchored --layerization uniform" \
                          "--slot-query-stream" ;;
    anchored-seq-kd)    echo "insnet $kd checkpoints/${t}_anchored_seq_kd --insertion-order anchored" ;;
    dinic-kd)           echo "insnet $kd checkpoints/${t}_dinic_kd --insertion-order anchored --dinic-tau=$tau" \
                          "--finetune-from-model checkpoints/${t}_anchored_seq_kd/checkpoint_last.pt" ;;
    curriculum-kd)      echo "insnet $kd checkpoints/${t}_curriculum_kd --insertion-order anchored --layerization uniform" \
                          "--finetune-from-model checkpoints/${t}_insnet_l2r_kd/checkpoint_${base_minutes_l2r}min.pt" ;;
    curriculum-query-kd) echo "insnet $kd checkpoints/${t}_curriculum_query_kd --insertion-order anchored --layerization uniform" \
                          "--slot-query-stream --finetune-from-model checkpoints/${t}_insnet_l2r_kd/checkpoint_${base_minutes_l2r}min.pt" ;;
    dinic-student-kd)   echo "insnet $kd checkpoints/${t}_dinic_student_kd --insertion-order anchored --slot-query-stream" \
                          "--dinic-tau=$tau --dinic-lagged --dinic-lagged-warm" \
                          "--finetune-from-model checkpoints/${t}_curriculum_query_kd/checkpoint_avg.pt" ;;
    levt-kd)            echo "levt $kd checkpoints/${t}_levt_kd" ;;
    indigo-l2r)         echo "indigo $data checkpoints/${t}_indigo_l2r --insertion-order l2r" ;;
    indigo-random)      echo "indigo $data checkpoints/${t}_indigo_random --insertion-order random" ;;
    indigo-sao)         echo "indigo $data checkpoints/${t}_indigo_sao --searched-order-beam ${SAO_BEAM:-2}" \
                          "--finetune-from-model checkpoints/${t}_indigo_l2r/checkpoint_${base_minutes_l2r}min.pt" ;;
    inst-kd)            echo "inst $kd checkpoints/${t}_inst_kd --label-tau 1.0" ;;
    *) echo "budget_table.sh: unknown row '$1' (bash experiments/budget_table.sh rows)" >&2; exit 2 ;;
  esac
}
ROWS=(ar ar-kd ar-rev insnet-l2r insnet-l2r-kd insnet-r2l insnet-binary insnet-random insnet-anchored insnet-anchored-kd anchored-kd-query
      anchored-seq-kd dinic-kd curriculum-kd curriculum-query-kd dinic-student-kd levt-kd inst-kd indigo-l2r indigo-random indigo-sao)

train_row() {
  read -r kind d save flags <<<"$(spec "$1")"
  local t60=${save/\/$t\_//t60${KD_TAG:-}_}; [ "$1" = ar ] && t60=checkpoints/multi30k_en_de-teacher
  if [ "$MINUTES" -gt 60 ] && [ ! -f "$save/checkpoint_last.pt" ] && [ -f "$t60/checkpoint_last.pt" ]; then
    echo "budget_table.sh: $save continues the 60-minute run $t60"; mkdir -p "$save"; cp "$t60"/checkpoint_last.pt "$save"/
  fi
  if [ "$1" = ar ] && [ "$MINUTES" = 60 ]; then  # the teacher, then the distilled corpus
    PATH=$PWD/.venv/bin:$PATH python recipes/distill.py multi30k_en_de
  else
    [ -d "$d" ] || { echo "budget_table.sh: $d missing (bash experiments/budget_table.sh train ar first)" >&2; exit 2; }
    # InsNet-Dinic shares one budget: BASE_MINUTES (40) of sequential anchored training, then the rest
    # of MINUTES fine-tuning with --dinic-tau TAU (2.0, the paper's MT value) at a fixed lr of 5e-4.
    # The fine-tuning run inherits the base's training time (fairseq keeps previous_training_time
    # in the checkpoint, also through --finetune-from-model), so its --stop-time-hours is MINUTES.
    # The curriculum's base is insnet-l2r-kd's checkpoint at CURRICULUM_MINUTES (made here when missing;
    # a later `train insnet-l2r-kd` continues that run to MINUTES).
    case $1 in
      anchored-seq-kd) export MINUTES=$base_minutes ;;
      dinic-kd|curriculum-kd|curriculum-query-kd|indigo-sao) export SCHEDULER=fixed LR=5e-4 ;;
      dinic-student-kd) export SCHEDULER=fixed LR=5e-4 MINUTES=$((MINUTES + dinic_minutes))
        local student=checkpoints/${t}_curriculum_query_kd
        [ -f "$save/checkpoint_last.pt" ] || python recipes/average_checkpoints.py --inputs "$student" \
          --output "$student/checkpoint_avg.pt" --reuse || exit 2 ;;
    esac
    local base=""  # a two-stage row's first stage: that row's checkpoint at CURRICULUM_MINUTES
    case $1 in curriculum*) base=insnet-l2r-kd ;; indigo-sao) base=indigo-l2r ;; esac
    if [ -n "$base" ]; then
      local base_dir; read -r _ _ base_dir _ <<<"$(spec "$base")"
      local snap=$base_dir/checkpoint_${base_minutes_l2r}min.pt
      if [ ! -f "$save/checkpoint_last.pt" ] && [ ! -f "$snap" ]; then
        (export MINUTES=$base_minutes_l2r SCHEDULER=inverse_sqrt LR=1e-3; train_row "$base")
        cp "$base_dir/checkpoint_last.pt" "$snap"
      fi
    fi
    # shellcheck disable=SC2086
    bash recipes/train.sh "$kind" "$d" "$save" $flags
  fi
}

primary_flags() {  # ROW -> the decoding a row is known by (used to pick its checkpoint on the valid set)
  read -r kind d save flags <<<"$(spec "$1")"
  case $kind in
    ar) echo "--user-dir insnet_fairseq --beam 1" ;;
    levt|inst) echo "${nat_decoding[*]}" ;;
    indigo) echo "--user-dir insnet_fairseq --task insertion_translation --insertion-mode sequential" ;;
    insnet) if [[ " $flags " = *" --layerization "* || " $flags " = *" --dinic-tau"* ]]; then
              echo "--user-dir insnet_fairseq --task insertion_translation --insertion-mode parallel --slot-top-p $top_p --skip-repeats"
            else echo "--user-dir insnet_fairseq --task insertion_translation --insertion-mode sequential"; fi ;;
  esac
}

checkpoint_of() {  # ROW SAVE_DIR -> the checkpoint scored on the test set
  # CKPT=valid (default): of the model at the end of its budget (checkpoint_last.pt) and the one with the best
  # valid loss (checkpoint_best.pt), the one with the higher valid sacreBLEU under the row's primary decoding
  # (valid loss picks early checkpoints of +KD rows: it is measured on the real references); CKPT=last, CKPT=best;
  # CKPT=avg: the parameter average of every checkpoint the run kept (last, best, the latest --save-interval-updates
  # one: recipes/average_checkpoints.py), written to checkpoint_avg.pt
  local last=$2/checkpoint_last.pt best=$2/checkpoint_best.pt
  case ${CKPT:-valid} in
    last) echo "$last"; return ;;
    best) if [ -f "$best" ]; then echo "$best"; else echo "$last"; fi; return ;;
    avg) if [ -f "$last" ]; then
           python recipes/average_checkpoints.py --inputs "$2" --output "$2/checkpoint_avg.pt" --reuse >&2 || exit 2
         fi
         echo "$2/checkpoint_avg.pt"; return ;;
  esac
  if [ ! -f "$best" ] || cmp -s "$best" "$last"; then echo "$last"; return; fi
  local flags; flags=$(primary_flags "$1")
  score() {  # shellcheck disable=SC2086
    python recipes/evaluate.py --data "$data" --path "$1" --src en --tgt de --name "$2" --gen-subset valid \
      --raw-ref "$raw/valid.de" --csv results/checkpoint_choice.csv -- $flags | sed -n 's/.*: sacreBLEU \([0-9.]*\) .*/\1/p' | tail -1
  }
  local s_last s_best; local run; run=$(basename "$2")  # the save dir names the budget and the corpus (t120_kd120_...)
  s_last=$(score "$last" "$run last (valid)"); s_best=$(score "$best" "$run best-loss (valid)")
  echo "checkpoint of $1: valid sacreBLEU $s_last (last) vs $s_best (best valid loss)" >&2
  if python -c "import sys; sys.exit(0 if float('$s_last') >= float('$s_best') else 1)"; then echo "$last"; else echo "$best"; fi
}

eval_row() {  # ROW NAME CHECKPOINT fairseq-generate flags...
  local name=$2 ckpt=$3; shift 3
  [ -f "${ckpt%%:*}" ] || { echo "skip $name: no ${ckpt%%:*}"; return 0; }  # CKPT or CKPT:JUDGE
  python recipes/evaluate.py --data "$data" --path "$ckpt" --src en --tgt de --name "$name" $batch1 \
    --raw-ref "$raw/test.de" --tok-ref work/multi30k_en_de/test.clean.de --csv $out.csv --markdown $out.md -- "$@"
}

insnet_decoding() {  # MODE -> "LABEL<TAB>decoding flags" of an InsNet row (the labels the results files have)
  local par="--insertion-mode parallel --slot-top-p $top_p" label="parallel (top-p $top_p, --skip-repeats"
  local k="$judge_k candidates" kflags="--insertion-candidates $judge_k"
  if [ "$judge_finish" != 0 ]; then k="$judge_k candidates, first $judge_finish finished"
    kflags="$kflags --insertion-candidates-finish $judge_finish"; fi
  local j="AR judge" jflags="--iter-decode-with-external-reranker"
  if [ "$channel_weight" != 0 ]; then j="AR judge + $channel_weight x channel"
    jflags="$jflags --channel-weight $channel_weight"; fi
  if [ "$mbr" != 0 ]; then j="$j, MBR T $mbr"; jflags="$jflags --insertion-candidates-mbr $mbr"; fi
  case $1 in
    sequential) printf '%s\t%s' "sequential" "--insertion-mode sequential" ;;
    beam) if [ "$lenpen" = 1 ]; then printf '%s\t%s' "sequential, beam $beam" "--insertion-mode sequential --insertion-beam $beam"
          else printf '%s\t%s' "sequential, beam $beam, lenpen $lenpen" \
            "--insertion-mode sequential --insertion-beam $beam --lenpen $lenpen"; fi ;;
    parallel) printf '%s\t%s' "parallel (top-p $top_p)" "$par" ;;
    skip-repeats) printf '%s\t%s' "$label)" "$par --skip-repeats" ;;
    candidates) printf '%s\t%s' "$label, $candidates candidates)" "$par --skip-repeats --insertion-candidates $candidates" ;;
    stop-check) printf '%s\t%s' "$label, --stop-check-prob $stop_check)" "$par --skip-repeats --stop-check-prob $stop_check" ;;
    stop-check-candidates) printf '%s\t%s' "$label, --stop-check-prob $stop_check_k, $candidates candidates)" \
      "$par --skip-repeats --stop-check-prob $stop_check_k --insertion-candidates $candidates" ;;
    judge) printf '%s\t%s' "$label, $k, $j)" "$par --skip-repeats $kflags $jflags" ;;
    judge-sampled) printf '%s\t%s' "$label, ${k/ candidates/ sampled candidates} ($judge_sampling), $j)" \
      "$par --skip-repeats $kflags $jflags --sampling $judge_sampling --beam 1" ;;
    judge-stop-check) printf '%s\t%s' "$label, --stop-check-prob $stop_check, $k, $j)" \
      "$par --skip-repeats --stop-check-prob $stop_check $kflags $jflags" ;;
    verify) printf '%s\t%s' "$label, verified by the AR model, tolerance $verify_tolerance)" \
      "$par --skip-repeats --insertion-verify --verify-tolerance $verify_tolerance" ;;
    verify-stop-check) printf '%s\t%s' "$label, --stop-check-prob $stop_check, verified by the AR model, tolerance $verify_tolerance)" \
      "$par --skip-repeats --stop-check-prob $stop_check --insertion-verify --verify-tolerance $verify_tolerance" ;;
  esac
}

judged() {  # CHECKPOINT FLAGS -> the --path of a decoding: CHECKPOINT, or CHECKPOINT:JUDGE when FLAGS ask for the judge
  # (CHECKPOINT:JUDGE:CHANNEL when they give it a --channel-weight)
  if [[ " $2 " = *" --insertion-verify "* ]]; then  # the verifier: the AR checkpoint JUDGE
    [ -f "$judge" ] || { echo "budget_table.sh: no verifier $judge (JUDGE=path/to/ar.pt, or train the ar row)" >&2; exit 2; }
    echo "$1:$judge"
  elif [[ " $2 " = *" --iter-decode-with-external-reranker "* ]]; then
    [ -f "$judge" ] || { echo "budget_table.sh: no judge $judge (JUDGE=path/to/ar.pt, or train the ar row)" >&2; exit 2; }
    if [[ " $2 " = *" --channel-weight "* ]]; then
      [ -f "$channel" ] || { echo "budget_table.sh: no channel model $channel (CHANNEL=path/to/de-en.pt, or train the ar-rev row)" >&2; exit 2; }
      echo "$1:$judge:$channel"
    else echo "$1:$judge"; fi
  else echo "$1"; fi
}

eval_rows() {
  mkdir -p "$(dirname "$out")"; rm -f $out.md $out.csv
  local rows=("$@"); [ ${#rows[@]} -gt 0 ] || rows=("${ROWS[@]}")
  for r in "${rows[@]}"; do
    [ "$r" = ar-rev ] && { echo "skip ar-rev: De->En, the judge's channel model (CHANNEL_WEIGHT)"; continue; }
    read -r kind d save flags <<<"$(spec "$r")"
    ckpt=$(checkpoint_of "$r" "$save")
    case $kind in
      ar) eval_row "$r" "$r greedy" "$ckpt" --user-dir insnet_fairseq --beam 1
          eval_row "$r" "$r beam 5" "$ckpt" --user-dir insnet_fairseq --beam 5 ;;
      insnet) for m in sequential beam parallel skip-repeats candidates stop-check stop-check-candidates judge judge-sampled \
                       judge-stop-check verify verify-stop-check; do
                [[ " $modes " = *" $m "* ]] || continue
                IFS=$'\t' read -r label flags <<<"$(insnet_decoding "$m")"
                # shellcheck disable=SC2086
                eval_row "$r" "$r $label" "$(judged "$ckpt" "$flags")" --user-dir insnet_fairseq --task insertion_translation $flags
              done ;;
      indigo) eval_row "$r" "$r" "$ckpt" --user-dir insnet_fairseq --task insertion_translation \
                --insertion-mode sequential ;;
      levt|inst) eval_row "$r" "$r" "$ckpt" "${nat_decoding[@]}" ;;
    esac
  done
  cat $out.md
}

tune_row() {  # the valid set, never the test set, picks the parallel decoding flags
  read -r kind d save flags <<<"$(spec "$1")"
  [ "$kind" = insnet ] || { echo "budget_table.sh: tune is for InsNet rows, not $1" >&2; exit 2; }
  ckpt=$(CKPT=${CKPT:-last} checkpoint_of "$1" "$save")
  # GRID: ';'-separated sets of decoding flags (default: --slot-top-p 0.5..0.95; a set with
  # --iter-decode-with-external-reranker decodes with the AR judge JUDGE)
  local grid=${GRID:-"--slot-top-p 0.5;--slot-top-p 0.7;--slot-top-p 0.8;--slot-top-p 0.9;--slot-top-p 0.95"}
  IFS=';' read -r -a sets <<<"$grid"
  local path
  for set in "${sets[@]}"; do
    path=$(judged "$ckpt" "$set")  # the row is named by it: checkpoint, and judge and channel model when used
    # shellcheck disable=SC2086
    python recipes/evaluate.py --data "$data" --path "$path" --src en --tgt de --name "$path valid $set" \
      --gen-subset valid --raw-ref "$raw/valid.de" --csv results/${TUNE_OUT:-top_p_valid}.csv -- --user-dir insnet_fairseq \
      --task insertion_translation --insertion-mode parallel $set
  done
}

case ${1:-} in
  train) train_row "${2:?ROW}" ;;
  tune) tune_row "${2:?ROW}" ;;
  eval) shift; eval_rows "$@" ;;
  rows) printf '%s\n' "${ROWS[@]}" ;;
  *) echo "usage: bash experiments/budget_table.sh train ROW | eval [ROW...] | tune ROW | rows" >&2; exit 2 ;;
esac
