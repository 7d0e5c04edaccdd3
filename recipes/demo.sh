#!/usr/bin/env bash
# make demo: Multi30k En->De end to end (on the GPU when there is one, else the CPU), sequential and parallel
# insertion, beside the autoregressive model trained in the same budget.
#   DEMO_MINUTES (15): training time in all;  MULTI30K_DIR: raw corpus (default ../shared/data/multi30k)
# Two runs train at once, one thread each, for DEMO_MINUTES of wall clock:
#   * InsNet (insnet_small): two thirds of the time left to right (decoded sequentially: one word per step), the
#     rest fine-tuning that model to the anchored order's parallel layers with the slot query stream (InsNet-uniform,
#     the `curriculum-query-kd` row of experiments/budget_table.sh without distillation), decoded in parallel:
#     several words per step, fewer steps than words;
#   * the autoregressive transformer of the same size (recipes/train.sh ar).
# Then benchmarks/frontier.py scores the three on the test set the same way (sacreBLEU, the 95% paired-bootstrap
# interval of the difference to AR greedy, decoder passes per output token, ms/sentence at batch 1 and 64 on one
# thread, timed interleaved): checkpoints/demo-frontier.{csv,png}.
set -euo pipefail
minutes=${DEMO_MINUTES:-15}
seq_minutes=$(python -c "print(round(${minutes} * 2 / 3, 2))")
data=data-bin/multi30k_en_de
raw=${MULTI30K_DIR:-../shared/data/multi30k}
# the raw reference: the local copy, else where `make multi30k` downloaded and assembled it
[ -f "$raw/test.de" ] || raw=work/multi30k_en_de/raw
[ -f "$raw/test.de" ] || raw=work/raw/multi30k_en_de
sentence="A man in an orange hat is looking at something ."
mkdir -p checkpoints logs

trajectory() {  # CHECKPOINT show_trajectory flags...
  local ckpt=$1; shift
  python recipes/show_trajectory.py --path "$ckpt" --data "$data" --bpe-codes work/multi30k_en_de/bpe.codes \
    --src en --tgt de "$@" "$sentence" 2>/dev/null
}

echo "== training for ${minutes} minutes, two runs at once, one thread each (fairseq-train; logs/demo-*.log)"
echo "   the autoregressive transformer: ${minutes} minutes"
THREADS=1 MINUTES=$minutes UPDATES=0 LR=${LR:-1e-3} WARMUP=${WARMUP:-400} bash recipes/train.sh ar "$data" \
  checkpoints/demo-ar --log-interval 20 >logs/demo-ar.log 2>&1 &
ar_pid=$!
echo "== 1/2: InsNet left to right for ${seq_minutes} minutes"
THREADS=1 MINUTES=$seq_minutes UPDATES=0 LR=${LR:-1e-3} WARMUP=${WARMUP:-400} bash recipes/train.sh insnet "$data" \
  checkpoints/demo --log-interval 20 2>&1 | tee logs/demo-insnet.log | grep --line-buffered "train_inner\|done training"
echo "== 2/2: fine-tuning it to parallel insertion (anchored order, InsNet-uniform layers) until ${minutes} minutes in all"
# the fine-tuning run inherits the first run's training time, so its time limit is the total
THREADS=1 MINUTES=$minutes UPDATES=0 SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$data" checkpoints/demo-parallel \
  --insertion-order anchored --layerization uniform --slot-query-stream \
  --finetune-from-model checkpoints/demo/checkpoint_last.pt --log-interval 20 2>&1 \
  | tee logs/demo-parallel.log | grep --line-buffered "train_inner\|done training"
wait $ar_pid || { echo "demo: the autoregressive run failed, see logs/demo-ar.log" >&2; exit 1; }
echo "   the autoregressive run: $(grep -o 'num_updates [0-9]*' logs/demo-ar.log | tail -1) in ${minutes} minutes"

echo "== the test set, every system scored and timed the same way (benchmarks/frontier.py, one thread)"
ins="--task insertion_translation"
printf 'AR greedy\t%s\t--beam 1\nInsNet l2r, sequential\t%s\t%s --insertion-mode sequential\nInsNet anchored, parallel\t%s\t%s --insertion-mode parallel\n' \
  checkpoints/demo-ar/checkpoint_last.pt checkpoints/demo/checkpoint_last.pt "$ins" \
  checkpoints/demo-parallel/checkpoint_last.pt "$ins" >checkpoints/demo-systems.tsv
python benchmarks/frontier.py --data "$data" --systems checkpoints/demo-systems.tsv --raw-ref "$raw/test.de" \
  --baseline "AR greedy" --threads 1 --out checkpoints/demo-frontier 2>logs/demo-frontier.log \
  || { tail -20 logs/demo-frontier.log >&2; exit 1; }
echo "   (checkpoints/demo-frontier.csv and .png; passes: decoder passes per output token)"

echo "== one sentence, step by step: sequential (l2r model), then parallel (fine-tuned model)"
trajectory checkpoints/demo/checkpoint_last.pt --mode sequential
trajectory checkpoints/demo-parallel/checkpoint_last.pt --mode parallel --slot-top-p 0.9 --skip-repeats
