#!/usr/bin/env bash
# The InsNet-Dinic tau spectrum (paper Figure 6) on Multi30k En->De: from one sequential checkpoint
# (BASE), fine-tune UPDATES updates per setting (same batches, lr 5e-4 fixed) with
# --dinic-tau {-inf, 0.3, 1, 3, 10} and --layerization uniform, then decode the test set in parallel
# (and -inf also sequentially) and write results/tau_spectrum.csv and results/tau_spectrum.png.
#   bash recipes/tau_spectrum.sh BASE_CHECKPOINT [UPDATES=30]
# BASE must be trained with a parallelisable order, ORDER (anchored by default; binary, random), which
# the fine-tuning keeps (e.g. ORDER=anchored bash recipes/train.sh insnet ...); uniform layers are ORDER's levels.
# DATA: the data-bin (e.g. data-bin/multi30k_en_de-distill for a +KD base); MODEL_FLAGS: the base's model flags
# (e.g. "--slot-query-stream").
set -euo pipefail
base=${1:?BASE_CHECKPOINT}; updates=${2:-30}
order=${ORDER:-anchored}
data=${DATA:-data-bin/multi30k_en_de}; raw=${MULTI30K_DIR:-../shared/data/multi30k}
csv=results/tau_spectrum.csv
mkdir -p results; rm -f "$csv"
for setting in -inf 0.3 1 3 10 uniform; do
  save=checkpoints/spectrum_$setting
  if [ "$setting" = uniform ]; then flags=(--layerization uniform); else flags=("--dinic-tau=$setting"); fi
  [ -f "$save/checkpoint_last.pt" ] || UPDATES=$updates SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$data" "$save" \
    --insertion-order "$order" "${flags[@]}" ${MODEL_FLAGS:-} --finetune-from-model "$base" \
    --disable-validation --log-interval 10
  modes=(parallel); [ "$setting" = -inf ] && modes=(sequential parallel)
  for mode in "${modes[@]}"; do
    name="tau=$setting"; [ "$setting" = uniform ] && name=uniform
    python recipes/evaluate.py --data "$data" --path "$save/checkpoint_last.pt" --src en --tgt de \
      --name "$name $mode" --raw-ref "$raw/test.de" --tok-ref work/multi30k_en_de/test.clean.de --csv "$csv" \
      -- --user-dir insnet_fairseq --task insertion_translation --insertion-mode "$mode"
  done
done
python recipes/plot_spectrum.py "$csv" results/tau_spectrum.png
