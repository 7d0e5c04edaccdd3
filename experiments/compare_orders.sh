#!/usr/bin/env bash
# Compare training insertion orders on Multi30k En->De: same model (insnet_small), same budget
# (UPDATES updates, lr 1e-3, warmup 200, max-tokens 4096), then test-set sacreBLEU, steps and
# steps/token in sequential and parallel decoding. Writes results/orders.csv.
#   bash experiments/compare_orders.sh [UPDATES=300]
set -euo pipefail
updates=${1:-300}
raw=${MULTI30K_DIR:-../shared/data/multi30k}
mkdir -p results
for order in binary l2r random; do
  ORDER=$order UPDATES=$updates LR=1e-3 WARMUP=200 bash recipes/train.sh insnet data-bin/multi30k_en_de \
    checkpoints/order_$order
  for mode in sequential parallel; do
    python recipes/evaluate.py --data data-bin/multi30k_en_de --path checkpoints/order_$order/checkpoint_last.pt \
      --src en --tgt de --name "$order $mode @${updates}" --raw-ref "$raw/test.de" \
      --tok-ref work/multi30k_en_de/test.clean.de --csv results/orders.csv \
      -- --user-dir insnet_fairseq --task insertion_translation --insertion-mode "$mode"
  done
done
