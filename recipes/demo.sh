#!/usr/bin/env bash
# make demo: Multi30k En->De end to end on CPU.
#   DEMO_MINUTES (15): training time;  MULTI30K_DIR: raw corpus (default ../shared/data/multi30k)
set -euo pipefail
minutes=${DEMO_MINUTES:-15}
data=data-bin/multi30k_en_de
save=checkpoints/demo
raw=${MULTI30K_DIR:-../shared/data/multi30k}
# the raw reference: the local copy, else where `make multi30k` downloaded and assembled it
[ -f "$raw/test.de" ] || raw=work/multi30k_en_de/raw
[ -f "$raw/test.de" ] || raw=work/raw/multi30k_en_de

echo "== training insnet_small for ${minutes} minutes (fairseq-train; log lines every 20 updates)"
MINUTES=$minutes UPDATES=0 LR=${LR:-1e-3} WARMUP=${WARMUP:-400} bash recipes/train.sh insnet "$data" "$save" \
  --log-interval 20
ckpt=$save/checkpoint_last.pt

for mode in sequential parallel; do
  echo "== decoding the test set, ${mode} insertion"
  python recipes/evaluate.py --data "$data" --path "$ckpt" --src en --tgt de --name "insnet ${mode}" \
    --raw-ref "$raw/test.de" --tok-ref work/multi30k_en_de/test.clean.de \
    -- --user-dir insnet_fairseq --task insertion_translation --insertion-mode "$mode"
done

echo "== one insertion trajectory (sequential, then parallel)"
for mode in sequential parallel; do
  python recipes/show_trajectory.py --path "$ckpt" --data "$data" --bpe-codes work/multi30k_en_de/bpe.codes \
    --src en --tgt de --mode "$mode" "A man in an orange hat is looking at something ." 2>/dev/null
done
