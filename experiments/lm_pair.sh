#!/usr/bin/env bash
# The constrained-generation pair at equal update counts, every run at once on one machine (a GPU: they share it; a
# CPU: one thread each): the AR keywords -> sentence row (lm_budget.sh's `ar`) and the InsNet keywords-order +KD row
# (`seq-keywords` on the distilled corpus), SEEDS ("1 2") of each, UPDATES (3000) updates each; lm_budget.sh's
# settings otherwise (3 layers, d=256, dropout 0.1, 4096 tokens a batch, lr 1e-3).
# Each run's last AVG_LAST (4) checkpoints (saved every 250 updates) are averaged into OUT/ROW_sSEED.pt, in float16
# without optimizer state (recipes/average_checkpoints.py --transfer): the checkpoint is chosen before any score is seen.
#
#   make lm-multi30k; python recipes/distill_lm.py lm_multi30k --teacher AR.pt   # the data and its -distill corpus
#   bash experiments/lm_pair.sh                            # -> OUT/ROW_sSEED.pt, OUT/summary.txt
#   bash experiments/lm_pair_eval.sh OUT RESULTS_FOLDER    # score them (recipes/evaluate_lm.py)
#
# MINUTES (7) caps each run's wall clock as a guard (a run it stops has fewer updates: the summary says how many each
# made). ROWS ("ar kd") picks the rows: ROWS=kd trains the InsNet row only, e.g. on another distilled corpus (KD_DATA),
# to set beside the AR rows of an earlier run.
# Environment: ROWS, UPDATES, SEEDS, AVG_LAST, MINUTES, OUT (out/lm_pair), AR_DATA (data-bin/lm_multi30k: its -ar
# bitext), KD_DATA (data-bin/lm_multi30k-distill), CKPT_DIR (checkpoints/lm_pair), LOGS (logs/lm_pair).
set -euo pipefail
cd "$(dirname "$0")/.."
updates=${UPDATES:-3000}; seeds=${SEEDS:-1 2}; avg_last=${AVG_LAST:-4}; out=${OUT:-out/lm_pair}
ar_data=${AR_DATA:-data-bin/lm_multi30k}; kd_data=${KD_DATA:-data-bin/lm_multi30k-distill}
ckpts=${CKPT_DIR:-checkpoints/lm_pair}; logs=${LOGS:-logs/lm_pair}; rows=${ROWS:-ar kd}
row_run() {  # ROW SEED -> "LM_DATA CKPT_DIR LM_BUDGET_ROW DATA_FOLDER": the row's lm_budget.sh run, the data it reads
  case $1 in
    ar) echo "$ar_data $ckpts/s$2 ar $ar_data-ar" ;;
    kd) echo "$kd_data $ckpts/kd_s$2 seq-keywords $kd_data" ;;
    *) echo "lm_pair.sh: ROWS must list ar and/or kd, not '$1'" >&2; return 2 ;;
  esac
}
[ -n "${rows// /}" ] || { echo "lm_pair.sh: ROWS is empty (ar, kd or both)" >&2; exit 2; }
for row in $rows; do
  run=$(row_run "$row" 0) || exit 2
  read -r _ _ _ need <<<"$run"
  [ -d "$need" ] || { echo "lm_pair.sh: $need missing (make lm-multi30k makes data-bin/lm_multi30k and its -ar bitext; recipes/distill_lm.py the -distill corpus)" >&2; exit 2; }
done
mkdir -p "$out" "$logs"
export UPDATES=$updates KEEP_INTERVAL=$avg_last MINUTES=${MINUTES:-7} THREADS=1 CKPT_DIR=$ckpts
runs=()
for s in $seeds; do  # every run at once: the same wall clock on the same, shared hardware
  for row in $rows; do
    read -r data save lm_row _ <<<"$(row_run "$row" "$s")"
    LM_DATA=$data CKPT_DIR=$save bash experiments/lm_budget.sh train "$lm_row" --seed "$s" >"$logs/${row}_s$s.log" 2>&1 &
    runs+=("$!:$row:$s")
  done
done
failed=0
for r in "${runs[@]}"; do
  IFS=: read -r pid row s <<<"$r"
  wait "$pid" || { echo "lm_pair.sh: the $row run of seed $s failed (its log: $logs/${row}_s$s.log):" >&2
                   tail -5 "$logs/${row}_s$s.log" >&2; failed=1; }
done
[ $failed = 0 ] || exit 1
for s in $seeds; do
  for row in $rows; do
    read -r _ save lm_row _ <<<"$(row_run "$row" "$s")"
    dir=$save/lm_$lm_row
    # the interval checkpoints fairseq kept (the last AVG_LAST) and the last one (often the same state: counted once)
    mapfile -t kept < <(ls "$dir"/checkpoint_[0-9]*_[0-9]*.pt 2>/dev/null)
    python recipes/average_checkpoints.py --inputs "${kept[@]}" "$dir/checkpoint_last.pt" --output "$out/${row}_s$s.pt" \
      --transfer
    last=$(grep -oE 'num_updates[= ][0-9]+' "$logs/${row}_s$s.log" | tail -1 | grep -oE '[0-9]+$' || true)
    echo "$row seed $s: ${last:-?} updates, $(grep -c '| valid on' "$logs/${row}_s$s.log") validations (each epoch's end and every 250 updates), valid loss at each:" \
      "$(grep '| valid on' "$logs/${row}_s$s.log" | grep -oE '\| loss [0-9.]+' | cut -d' ' -f3 | tr '\n' ' ')"
  done
done | tee "$out/summary.txt"
