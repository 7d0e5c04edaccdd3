#!/usr/bin/env bash
# Train InsNet with fairseq-train for a bounded wall-clock time.
#   recipes/train_insnet.sh DATA_BIN SAVE_DIR MINUTES [extra fairseq-train flags...]
# Environment: ARCH (insnet_small), ORDER (insertion order policy, task default if unset),
# MAX_TOKENS (4096), LR (5e-4), WARMUP (1000).
set -euo pipefail
data=${1:?DATA_BIN}; save=${2:?SAVE_DIR}; minutes=${3:?MINUTES}; shift 3
hours=$(python -c "print(${minutes} / 60)")
order_flag=()
[ -n "${ORDER:-}" ] && order_flag=(--insertion-order "$ORDER")
exec fairseq-train "$data" --user-dir insnet_fairseq --task insertion_translation \
  --arch "${ARCH:-insnet_small}" --criterion insnet_loss --label-smoothing 0.1 \
  --share-all-embeddings "${order_flag[@]}" \
  --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0 \
  --lr "${LR:-5e-4}" --lr-scheduler inverse_sqrt --warmup-updates "${WARMUP:-1000}" --warmup-init-lr 1e-7 \
  --max-tokens "${MAX_TOKENS:-4096}" --stop-time-hours "$hours" --max-epoch 1000 \
  --save-dir "$save" --no-epoch-checkpoints --save-interval-updates 200 --keep-interval-updates 1 \
  --log-format simple --log-interval 20 --num-workers 0 --seed 1 "$@"
