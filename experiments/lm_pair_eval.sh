#!/usr/bin/env bash
# Score the constrained-generation pair's checkpoints (experiments/lm_pair.sh's OUT folder: ar_sSEED.pt, the AR
# keywords -> sentence model, and kd_sSEED.pt, InsNet keywords order +KD) the same way, with recipes/evaluate_lm.py:
# beam BEAM (5; AR: --beam; InsNet: sequential --insertion-beam) on valid at each --lenpen of LENPENS ("0.6 1 1.4 1.8 2.2
# 3 4"), the best on valid then on test; AR greedy on test as well. Both models get the same grid and the same choice.
#
#   bash experiments/lm_pair_eval.sh CKPT_FOLDER RESULTS_FOLDER
#
# Output: RESULTS_FOLDER/valid_lenpen.csv (every valid decoding), RESULTS_FOLDER/lm_table.{md,csv} (test); the AR
# and InsNet rows side by side, seed by seed and on average: python experiments/lm_pair_summary.py --ar FOLDER... --insnet FOLDER... A valid
# decoding already in valid_lenpen.csv (the same checkpoint name, beam and lenpen) is not run again, nor a test row already in lm_table.csv. Environment: LENPENS, AR_DATA (data-bin/lm_multi30k-ar),
# KD_DATA (data-bin/lm_multi30k-distill: the same valid and test sets and keywords), BATCH (64), BEAM (5).
set -euo pipefail
dir=${1:?CKPT_FOLDER (ar_sSEED.pt, kd_sSEED.pt)}; res=${2:?RESULTS_FOLDER}
lenpens=${LENPENS:-0.6 1 1.4 1.8 2.2 3 4}; ar_data=${AR_DATA:-data-bin/lm_multi30k-ar}; kd_data=${KD_DATA:-data-bin/lm_multi30k-distill}
batch=${BATCH:-64}; beam=${BEAM:-5}
mkdir -p "$res"
shopt -s nullglob
ckpts=("$dir"/ar_s*.pt "$dir"/kd_s*.pt)
[ ${#ckpts[@]} -gt 0 ] || { echo "lm_pair_eval.sh: no ar_sSEED.pt or kd_sSEED.pt in $dir" >&2; exit 2; }
for ckpt in "${ckpts[@]}"; do
  name=$(basename "$ckpt" .pt)
  case $name in
    ar_*) data=$ar_data; gen=(--user-dir insnet_fairseq --task translation --beam "$beam") ;;
    kd_*) data=$kd_data; gen=(--user-dir insnet_fairseq --task insertion_lm --insertion-mode sequential --insertion-beam "$beam") ;;
  esac
  for lp in $lenpens; do
    if [ -f "$res/valid_lenpen.csv" ] && grep -q "^$name beam $beam lenpen $lp," "$res/valid_lenpen.csv"; then continue; fi
    python recipes/evaluate_lm.py --data "$data" --path "$ckpt" --gen-subset valid --batch-size "$batch" \
      --name "$name beam $beam lenpen $lp" --csv "$res/valid_lenpen.csv" -- "${gen[@]}" --lenpen "$lp"
  done
  # the lenpen of the best valid BLEU-4 (the first of equals)
  best=$(python - "$res/valid_lenpen.csv" "$name beam $beam" <<'EOF'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["model"].startswith(sys.argv[2] + " lenpen ")]
print(max(rows, key=lambda r: float(r["bleu4"]))["model"].split()[-1])
EOF
)
  # a test row already in lm_table.csv (the same name: checkpoint, beam and chosen lenpen) is not decoded again
  if ! { [ -f "$res/lm_table.csv" ] && grep -q "^\"$name beam $beam, lenpen $best (valid)\"," "$res/lm_table.csv"; }; then
    python recipes/evaluate_lm.py --data "$data" --path "$ckpt" --batch-size "$batch" --name "$name beam $beam, lenpen $best (valid)" \
      --csv "$res/lm_table.csv" --markdown "$res/lm_table.md" -- "${gen[@]}" --lenpen "$best"
  fi
  if [ "${name%%_*}" = ar ] && ! { [ -f "$res/lm_table.csv" ] && grep -q "^$name greedy," "$res/lm_table.csv"; }; then
    python recipes/evaluate_lm.py --data "$data" --path "$ckpt" --batch-size "$batch" --name "$name greedy" \
      --csv "$res/lm_table.csv" --markdown "$res/lm_table.md" -- --user-dir insnet_fairseq --task translation --beam 1
  fi
done
cat "$res/lm_table.md"
