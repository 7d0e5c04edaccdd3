#!/usr/bin/env bash
# make demo: Multi30k En->De end to end (on the GPU when there is one, else the CPU): InsNet parallel, the product's
# parallel model, beside the autoregressive model trained for the same number of updates.
#   DEMO_UPDATES (1000): updates of each system;  MULTI30K_DIR: raw corpus (default ../shared/data/multi30k)
# Two runs train at once, one thread each, by update count (so two machines print the same figures within run-to-run
# noise, whatever their speed):
#   * InsNet parallel (insnet_small), as the frontier trains it: two thirds of the updates with the paper's l2r
#     objective, then the rest from that checkpoint with --slot-objective gap --layerization sampled
#     --slot-query-stream at a fixed lr 5e-4 (every slot of every layer of a sampled trajectory learns the words
#     missing in its gap, or end-of-slot); decoded with --insertion-mode parallel alone (every slot that is not done
#     filled, until all are);
#   * the autoregressive transformer of the same size (recipes/train.sh ar), decoded greedily.
# Then benchmarks/frontier.py scores both on the test set the same way (sacreBLEU, the 95% paired-bootstrap interval
# of the difference to AR greedy, decoder passes per output token, ms/sentence at batch 1 and 64 on one thread, timed
# interleaved): checkpoints/demo-frontier.{csv,png}. The script prints its own wall time at the end.
set -euo pipefail
updates=${DEMO_UPDATES:-1000}
base=$((updates * 2 / 3))  # InsNet's l2r updates; the rest fine-tune InsNet parallel from them
data=data-bin/multi30k_en_de
raw=${MULTI30K_DIR:-../shared/data/multi30k}
# the raw reference: the local copy, else where `make multi30k` downloaded and assembled it
[ -f "$raw/test.de" ] || raw=work/multi30k_en_de/raw
[ -f "$raw/test.de" ] || raw=work/raw/multi30k_en_de
sentence="A man in an orange hat is looking at something ."
started=$SECONDS
mkdir -p checkpoints logs

echo "== training ${updates} updates each, two runs at once, one thread each (fairseq-train; logs/demo-*.log)"
THREADS=1 UPDATES=$updates bash recipes/train.sh ar "$data" checkpoints/demo-ar --log-interval 50 \
  >logs/demo-ar.log 2>&1 &
ar_pid=$!
THREADS=1 UPDATES=$base bash recipes/train.sh insnet "$data" checkpoints/demo-l2r --log-interval 50 2>&1 \
  | tee logs/demo-l2r.log | grep --line-buffered "train_inner\|done training"
start=(); [ -f checkpoints/demo-parallel/checkpoint_last.pt ] \
  || start=(--finetune-from-model checkpoints/demo-l2r/checkpoint_last.pt)  # a resumed run: from its own checkpoint
THREADS=1 UPDATES=$((updates - base)) SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$data" \
  checkpoints/demo-parallel --slot-objective gap --layerization sampled --slot-query-stream --log-interval 50 \
  "${start[@]}" 2>&1 | tee logs/demo-parallel.log | grep --line-buffered "train_inner\|done training"
wait $ar_pid || { echo "demo: the autoregressive run failed, see logs/demo-ar.log" >&2; exit 1; }

echo "== the test set, every system scored and timed the same way (benchmarks/frontier.py, one thread)"
ins="--task insertion_translation"
printf 'AR greedy\t%s\t--beam 1\nInsNet parallel\t%s\t%s --insertion-mode parallel\n' \
  checkpoints/demo-ar/checkpoint_last.pt checkpoints/demo-parallel/checkpoint_last.pt "$ins" >checkpoints/demo-systems.tsv
python benchmarks/frontier.py --data "$data" --systems checkpoints/demo-systems.tsv --raw-ref "$raw/test.de" \
  --baseline "AR greedy" --threads 1 --out checkpoints/demo-frontier 2>logs/demo-frontier.log \
  || { tail -20 logs/demo-frontier.log >&2; exit 1; }
echo "   (checkpoints/demo-frontier.csv and .png; passes: decoder passes per output token)"

echo "== one sentence, step by step: InsNet parallel (every slot that is not done filled, until all are)"
python recipes/show_trajectory.py --path checkpoints/demo-parallel/checkpoint_last.pt --data "$data" \
  --bpe-codes work/multi30k_en_de/bpe.codes --src en --tgt de --mode parallel "$sentence" 2>/dev/null
echo "== done in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s"
