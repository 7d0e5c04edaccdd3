#!/usr/bin/env bash
# make demo: Multi30k En->De end to end on CPU, sequential and parallel insertion.
#   DEMO_MINUTES (15): training time in all;  MULTI30K_DIR: raw corpus (default ../shared/data/multi30k)
# Two thirds of the time train insnet_small left to right (decoded sequentially: one word per step);
# the rest fine-tunes that model to the anchored order's parallel layers with the slot query stream
# (InsNet-uniform, the `curriculum-query-kd` row of recipes/budget_table.sh without distillation),
# decoded in parallel: several words per step, fewer steps than words.
set -euo pipefail
minutes=${DEMO_MINUTES:-15}
seq_minutes=$(python -c "print(round(${minutes} * 2 / 3, 2))")
data=data-bin/multi30k_en_de
raw=${MULTI30K_DIR:-../shared/data/multi30k}
# the raw reference: the local copy, else where `make multi30k` downloaded and assembled it
[ -f "$raw/test.de" ] || raw=work/multi30k_en_de/raw
[ -f "$raw/test.de" ] || raw=work/raw/multi30k_en_de
sentence="A man in an orange hat is looking at something ."

evaluate() {  # NAME CHECKPOINT generate-flags...
  local name=$1 ckpt=$2; shift 2
  python recipes/evaluate.py --data "$data" --path "$ckpt" --src en --tgt de --name "$name" \
    --raw-ref "$raw/test.de" --tok-ref work/multi30k_en_de/test.clean.de \
    -- --user-dir insnet_fairseq --task insertion_translation "$@"
}
trajectory() {  # CHECKPOINT show_trajectory flags...
  local ckpt=$1; shift
  python recipes/show_trajectory.py --path "$ckpt" --data "$data" --bpe-codes work/multi30k_en_de/bpe.codes \
    --src en --tgt de "$@" "$sentence" 2>/dev/null
}

echo "== 1/2: training insnet_small left to right for ${seq_minutes} minutes (fairseq-train; log lines every 20 updates)"
MINUTES=$seq_minutes UPDATES=0 LR=${LR:-1e-3} WARMUP=${WARMUP:-400} bash recipes/train.sh insnet "$data" checkpoints/demo \
  --log-interval 20
echo "== decoding the test set, sequential insertion (one word per step)"
evaluate "insnet l2r, sequential" checkpoints/demo/checkpoint_last.pt --insertion-mode sequential

echo "== 2/2: fine-tuning it to parallel insertion (anchored order, InsNet-uniform layers) until ${minutes} minutes in all"
# the fine-tuning run inherits the first run's training time, so its time limit is the total
MINUTES=$minutes UPDATES=0 SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$data" checkpoints/demo-parallel \
  --insertion-order anchored --layerization uniform --slot-query-stream \
  --finetune-from-model checkpoints/demo/checkpoint_last.pt --log-interval 20
echo "== decoding the test set, parallel insertion (several words per step)"
evaluate "insnet anchored, parallel" checkpoints/demo-parallel/checkpoint_last.pt --insertion-mode parallel \
  --slot-top-p 0.9 --skip-repeats

echo "== one sentence, step by step: sequential (l2r model), then parallel (fine-tuned model)"
trajectory checkpoints/demo/checkpoint_last.pt --mode sequential
trajectory checkpoints/demo-parallel/checkpoint_last.pt --mode parallel --slot-top-p 0.9 --skip-repeats
