#!/usr/bin/env bash
# Train one model of the results table with fairseq-train (recipes/train_packed.py: every kind on the package's linear
# layers, so that a MINUTES budget buys every kind the same products), all kinds under the same settings:
# 3+3 layers, d=256, 4 heads, FFN 1024, dropout DROPOUT (0.1), shared embeddings, Adam (0.9, 0.98), lr LR with
# inverse_sqrt after WARMUP updates, label smoothing 0.1, MAX_TOKENS per batch, UPDATES updates.
#
#   recipes/train.sh KIND DATA_BIN SAVE_DIR [extra fairseq-train flags...]
#
# KIND: insnet (task insertion_translation, insnet_small), indigo (the same task, indigo_small: InDIGO), insnet-lm (task insertion_lm, insnet_lm_small: the
#       same decoder without source or cross-attention; DATA from recipes/prepare_lm.py), ar (fairseq `transformer`),
#       levt (fairseq `levenshtein_transformer`, task translation_lev, criterion nat_loss),
#       inst (fairseq `insertion_transformer`, task translation_lev, criterion nat_loss),
#       infill (the text-infilling paper's Self-attn baseline, `infill_transformer_small`, task translation on
#       recipes/prepare_infill_seq2seq.py's data-bin), expansion-lm (the iterative expansion LM, task expansion_lm,
#       expansion_lm_small: 4 layers, d=256; the LM data with its parses, make lm-parse-multi30k; no label smoothing,
#       no encoder to share embeddings with), ar-lm (fairseq's `transformer_lm`, task language_modeling, one sentence per
#       sample: the unconditional autoregressive LM, 3 layers, d=256, tied input/output embeddings).
# Environment: UPDATES (500; 0: no limit), DROPOUT (0.1), MAX_TOKENS (4096), LR (1e-3), WARMUP (400), MINUTES (no limit),
# THREADS (torch threads; default: all cores), SCHEDULER (inverse_sqrt, or fixed: constant LR, for
# fine-tuning), KEEP_INTERVAL (1: how many of the checkpoints saved every 250 updates are kept, the inputs of
# recipes/average_checkpoints.py with checkpoint_last/_best). InsNet-only: ORDER (insertion order).
set -euo pipefail
kind=${1:?KIND: insnet|indigo|insnet-lm|ar|levt|inst|infill|expansion-lm|ar-lm}; data=${2:?DATA_BIN}; save=${3:?SAVE_DIR}; shift 3
[ -d "$data" ] || { echo "train.sh: data directory $data does not exist (run the data recipe first, e.g. make multi30k)" >&2; exit 2; }
dropout=${DROPOUT:-0.1}
size=(--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 256 --decoder-embed-dim 256
      --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024
      --encoder-attention-heads 4 --decoder-attention-heads 4 --dropout "$dropout")
shared=(--share-all-embeddings --label-smoothing 0.1)
case $kind in
  insnet)
    model=(--task insertion_translation --arch insnet_small --criterion insnet_loss)
    [ -n "${ORDER:-}" ] && model+=(--insertion-order "$ORDER") ;;
  indigo)
    model=(--task insertion_translation --arch indigo_small --criterion insnet_loss)
    [ -n "${ORDER:-}" ] && model+=(--insertion-order "$ORDER") ;;
  insnet-lm)
    model=(--task insertion_lm --arch insnet_lm_small --criterion insnet_loss)
    [ -n "${ORDER:-}" ] && model+=(--insertion-order "$ORDER") ;;
  ar)
    model=(--task translation --arch transformer --criterion label_smoothed_cross_entropy) ;;
  infill)
    model=(--task translation --arch infill_transformer_small --criterion label_smoothed_cross_entropy) ;;
  levt|inst)
    # fairseq's documented NAT flags (examples/nonautoregressive_translation)
    arch=levenshtein_transformer; [ "$kind" = inst ] && arch=insertion_transformer
    model=(--task translation_lev --arch $arch --criterion nat_loss --noise random_delete
           --decoder-learned-pos --encoder-learned-pos --apply-bert-init --ddp-backend legacy_ddp) ;;
  expansion-lm)
    model=(--task expansion_lm --arch expansion_lm_small --criterion expansion_lm_loss)
    size=(--layers 4 --embed-dim 256 --ffn-embed-dim 1024 --attention-heads 4 --dropout "$dropout"); shared=() ;;
  ar-lm)
    model=(--task language_modeling --arch transformer_lm --criterion cross_entropy --sample-break-mode eos)
    size=(--decoder-layers 3 --decoder-embed-dim 256 --decoder-ffn-embed-dim 1024 --decoder-attention-heads 4 --dropout "$dropout")
    shared=(--share-decoder-input-output-embed) ;;
  *) echo "train.sh: unknown KIND '$kind' (insnet|indigo|insnet-lm|ar|levt|inst|infill|expansion-lm|ar-lm)" >&2; exit 2 ;;
esac
sched=(--lr-scheduler inverse_sqrt --warmup-updates "${WARMUP:-400}" --warmup-init-lr 1e-7)
[ "${SCHEDULER:-inverse_sqrt}" = fixed ] && sched=(--lr-scheduler fixed)
limit=()
[ -n "${MINUTES:-}" ] && limit=(--stop-time-hours "$(python -c "print(${MINUTES} / 60)")")
[ -n "${THREADS:-}" ] && export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
# recipes/train_packed.py: fairseq-train with every kind on the package's linear layers (the same products for all)
exec python "$(dirname "$0")/train_packed.py" "$data" --user-dir insnet_fairseq \
  "${model[@]}" "${size[@]}" "${shared[@]}" \
  --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0 \
  --lr "${LR:-1e-3}" "${sched[@]}" \
  --max-tokens "${MAX_TOKENS:-4096}" --max-update "${UPDATES:-500}" --max-epoch 1000 "${limit[@]}" \
  --save-dir "$save" --no-epoch-checkpoints --save-interval-updates 250 --keep-interval-updates "${KEEP_INTERVAL:-1}" \
  --log-format simple --log-interval 50 --num-workers 0 --seed 1 "$@"
