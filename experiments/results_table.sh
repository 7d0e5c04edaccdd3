#!/usr/bin/env bash
# The Multi30k En->De results table: every model of the same size (3+3 layers, d=256, recipes/train.sh),
# the same number of updates (UPDATES, default 300), batch (MAX_TOKENS 4096) and schedule (lr 1e-3,
# warmup WARMUP=200), trained unless its checkpoint exists, then scored by recipes/evaluate.py
# (test set, sacreBLEU + tokenised BLEU, steps, steps/length, ms/sentence at batch 64 and 1).
#   bash experiments/results_table.sh            -> results/multi30k_table.md and .csv
# InsNet parallel is decoded from PARALLEL_CKPT when given (a Dinic/uniform fine-tuned model, see
# experiments/tau_spectrum.sh); the l2r InsNet would make it identical to sequential decoding.
set -euo pipefail
export UPDATES=${UPDATES:-300} WARMUP=${WARMUP:-200}
data=${DATA:-data-bin/multi30k_en_de}; raw=${MULTI30K_DIR:-../shared/data/multi30k}
[ -f "$raw/test.de" ] || raw=work/multi30k_en_de/raw
out=results/multi30k_table; mkdir -p results; rm -f $out.md $out.csv
declare -A dir=([ar]=checkpoints/table_ar [inst]=checkpoints/table_inst [levt]=checkpoints/table_levt [insnet]=checkpoints/table_insnet)
for kind in ar inst levt insnet; do
  extra=(); [ "$kind" = insnet ] && extra=(--insertion-order l2r)
  [ -f "${dir[$kind]}/checkpoint_last.pt" ] || bash recipes/train.sh $kind "$data" "${dir[$kind]}" "${extra[@]}"
done
eval_row() {  # NAME CHECKPOINT fairseq-generate flags...
  local name=$1 ckpt=$2; shift 2
  python recipes/evaluate.py --data "$data" --path "$ckpt" --src en --tgt de --name "$name" --batch1 \
    --raw-ref "$raw/test.de" --tok-ref work/multi30k_en_de/test.clean.de --csv $out.csv --markdown $out.md -- "$@"
}
# --user-dir for every model: it also lets fairseq load its own checkpoints under torch >= 2.6
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/nat_decoding.sh"; nat=("${nat_decoding[@]}")
eval_row "AR transformer, beam 5" ${dir[ar]}/checkpoint_last.pt --user-dir insnet_fairseq --beam 5
eval_row "AR transformer, greedy" ${dir[ar]}/checkpoint_last.pt --user-dir insnet_fairseq --beam 1
eval_row "Insertion Transformer" ${dir[inst]}/checkpoint_last.pt "${nat[@]}"
eval_row "Levenshtein Transformer" ${dir[levt]}/checkpoint_last.pt "${nat[@]}"
ins=(--user-dir insnet_fairseq --task insertion_translation)
eval_row "InsNet (l2r) sequential" ${dir[insnet]}/checkpoint_last.pt "${ins[@]}" --insertion-mode sequential
eval_row "InsNet (l2r) parallel" ${dir[insnet]}/checkpoint_last.pt "${ins[@]}" --insertion-mode parallel
[ -n "${PARALLEL_CKPT:-}" ] && eval_row "InsNet-Dinic parallel (${PARALLEL_NAME:-$PARALLEL_CKPT})" "$PARALLEL_CKPT" \
  "${ins[@]}" --insertion-mode parallel
cat $out.md
