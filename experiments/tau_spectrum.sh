#!/usr/bin/env bash
# The InsNet-Dinic tau spectrum (paper Figure 6) on Multi30k En->De: from one checkpoint (BASE),
# fine-tune UPDATES updates per setting (same batches, lr 5e-4 fixed) with --dinic-tau {-inf, 0.3, 1,
# 3, 10} and --layerization uniform, then decode the test set in parallel (--slot-top-p TOP_P, also
# with --skip-repeats; -inf also sequentially) and write results/tau_spectrum.csv and results/tau_spectrum.png.
#   bash experiments/tau_spectrum.sh BASE_CHECKPOINT [UPDATES=30]
# BASE must be trained with a parallelisable order, ORDER (anchored by default; binary, random), which
# the fine-tuning keeps (e.g. ORDER=anchored bash recipes/train.sh insnet ...); uniform layers are ORDER's levels.
# DATA: the data-bin (e.g. data-bin/multi30k_en_de-distill for a +KD base); MODEL_FLAGS: the base's model flags
# (e.g. "--slot-query-stream"). Checkpoints go to checkpoints/spectrum_TAG_SETTING (TAG: the base's
# directory name); an interrupted setting resumes from its last 32-update checkpoint. STEP=train (fine-tune only), eval (score what exists) or
# all (default); CSV (results/tau_spectrum.csv) and PNG (the CSV's name, .png) are where eval writes; SETTINGS picks settings (e.g. SETTINGS="-inf 0.3" and SETTINGS="1 3" in two shells, THREADS=1 each).
set -euo pipefail
base=${1:?BASE_CHECKPOINT}; updates=${2:-30}
order=${ORDER:-anchored}; step=${STEP:-all}; top_p=${TOP_P:-0.9}
data=${DATA:-data-bin/multi30k_en_de}; raw=${MULTI30K_DIR:-../shared/data/multi30k}
tag=${TAG:-$(basename "$(dirname "$base")")}
settings=(${SETTINGS:--inf 0.3 1 3 10 uniform})
csv=${CSV:-results/tau_spectrum.csv}; png=${PNG:-${csv%.csv}.png}
mkdir -p results
if [ "$step" != eval ]; then
  for setting in "${settings[@]}"; do
    save=checkpoints/spectrum_${tag}_$setting
    if [ "$setting" = uniform ]; then flags=(--layerization uniform); else flags=("--dinic-tau=$setting"); fi
    # resumes an interrupted setting (fairseq ignores --finetune-from-model once checkpoint_last.pt exists)
    UPDATES=$updates SCHEDULER=fixed LR=5e-4 bash recipes/train.sh insnet "$data" "$save" \
      --insertion-order "$order" "${flags[@]}" ${MODEL_FLAGS:-} --finetune-from-model "$base" \
      --disable-validation --log-interval 10 --save-interval-updates 32 --keep-interval-updates 1
  done
fi
[ "$step" = train ] && exit 0
rm -f "$csv"
for setting in -inf 0.3 1 3 10 uniform; do
  ckpt=checkpoints/spectrum_${tag}_$setting/checkpoint_last.pt
  [ -f "$ckpt" ] || { echo "tau_spectrum.sh: no $ckpt, skipped"; continue; }
  name="tau=$setting"; [ "$setting" = uniform ] && name=uniform
  runs=("parallel" "parallel --skip-repeats"); [ "$setting" = -inf ] && runs=("sequential" "${runs[@]}")
  for run in "${runs[@]}"; do
    read -r mode extra <<<"$run"
    label="$name $mode"; [ -n "$extra" ] && label="$label, skip repeats"
    python recipes/evaluate.py --data "$data" --path "$ckpt" --src en --tgt de \
      --name "$label" --raw-ref "$raw/test.de" --tok-ref work/multi30k_en_de/test.clean.de --csv "$csv" \
      -- --user-dir insnet_fairseq --task insertion_translation --insertion-mode "$mode" --slot-top-p "$top_p" $extra
  done
done
python experiments/plot_spectrum.py "$csv" "$png"
