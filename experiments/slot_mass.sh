#!/usr/bin/env bash
# Does a trained InsNet-Dinic trade decoding steps for BLEU through the position mass it fills a step? Its valid
# sacreBLEU, decoder passes per output token and ms/sentence (batch 1 and 64, interleaved, THREADS (1) thread(s)) with
# one word a step (--insertion-mode sequential) and with --slot-top-p P for each P of TOP_P
# (0.3 0.5 0.7 0.8 0.9 0.95 0.99 1), beside AR+KD greedy, the baseline of every difference (benchmarks/frontier.py
# --subset valid). The models are those of recipes/frontier.sh's choose stage: CK/ar_kd/checkpoint_avg.pt and
# CK/dinic/checkpoint_avg.pt, which decodes with the stop check stored with it.
#
#   bash recipes/frontier.sh train choose && bash experiments/slot_mass.sh
#
# Environment: CK (checkpoints/frontier), OUT (results/slot_mass_frontier_dinic_valid: OUT.{csv,png,txt}), TOP_P,
# THREADS, DATA (data-bin/multi30k_en_de), MULTI30K_DIR (the raw corpus: valid.de is the reference), MAX_SENTENCES
# (0: all; N: the first N valid sentences).
set -euo pipefail
cd "$(dirname "$0")/.."
ck=${CK:-checkpoints/frontier}; out=${OUT:-results/slot_mass_frontier_dinic_valid}
data=${DATA:-data-bin/multi30k_en_de}
given=${MULTI30K_DIR:-../shared/data/multi30k}; raw=$given
[ -f "$raw/valid.de" ] || raw=work/$(basename "$data")/raw
ar=$ck/ar_kd/checkpoint_avg.pt; dinic=$ck/dinic/checkpoint_avg.pt
for f in "$ar" "$dinic"; do
  [ -f "$f" ] \
    || { echo "slot_mass.sh: $f missing: run CK=$ck bash recipes/frontier.sh train choose first" >&2; exit 2; }
done
[ -f "$raw/valid.de" ] \
  || { echo "slot_mass.sh: no valid.de in $given or $raw: set MULTI30K_DIR to the raw corpus" >&2; exit 2; }
ins="--task insertion_translation"
mkdir -p "$(dirname "$out")" "$ck"
{
  printf 'AR+KD greedy\t%s\t--beam 1\n' "$ar"
  printf 'InsNet-Dinic, one word a step\t%s\t%s --insertion-mode sequential\n' "$dinic" "$ins"
  for p in ${TOP_P:-0.3 0.5 0.7 0.8 0.9 0.95 0.99 1}; do
    printf 'InsNet-Dinic, slot top-p %s\t%s\t%s --insertion-mode parallel --slot-top-p %s\n' "$p" "$dinic" "$ins" "$p"
  done
} >"$ck/slot_mass.tsv"
python benchmarks/frontier.py --data "$data" --systems "$ck/slot_mass.tsv" --subset valid --raw-ref "$raw/valid.de" \
  --baseline "AR+KD greedy" --threads "${THREADS:-1}" --device cpu --max-sentences "${MAX_SENTENCES:-0}" --out "$out" \
  | tee "$out.txt"
