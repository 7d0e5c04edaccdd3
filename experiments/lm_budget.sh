#!/usr/bin/env bash
# The paper's first experiment (section 4.1, Table 2, Figure 6) and its ablations (Table 6) at equal
# wall-clock budgets: every row trains MINUTES (60) on THREADS (1) CPU thread(s), 3 layers, d=256 (recipes/train.sh:
# insnet-lm = insnet_lm_small, ar = fairseq transformer 3+3), MAX_TOKENS 4096, lr 1e-3, inverse_sqrt after 400
# warm-up updates. One command per row:
#
#   bash experiments/lm_budget.sh train ROW [fairseq-train flags...]   # train one row (extra flags are appended)
#   bash experiments/lm_budget.sh eval [ROW...]                        # score the rows that exist (all by default)
#   bash experiments/lm_budget.sh eval-unconditional [ROW...]          # unconditional samples: BLEU-5 / self-BLEU-5
#   bash experiments/lm_budget.sh rows                                 # list the rows
#
# Lexically constrained generation on LM_DATA (data-bin/lm_multi30k, `make lm-multi30k`; the AR row reads
# LM_DATA-ar, the keywords->sentence bitext the same recipe builds from the keyword files):
#   seq-random, seq-binary        InsNet, sequential training, random / binary (middle word first) order
#   seq-keywords                  InsNet, sequential training, keywords order (the sentence's keywords first, as
#                                 decoding starts from them, then every gap left to right; LM_DATA/train.keywords)
#   dinic-10 dinic-3 dinic-1 dinic-0.3
#                                 InsNet-Dinic at that tau: the BASE row's checkpoint (seq-binary) fine-tuned with
#                                 --dinic-tau for FT_MINUTES (20) more at a fixed lr of 5e-4 (the paper's
#                                 "parallelization fine-tuning" after sequential training)
#   uniform                       InsNet-uniform (the binary tree's levels), fine-tuned from BASE the same way
#   dependency                    InsNet's syntactic order: uniform layers along each sentence's binarised dependency
#                                 parse (--insertion-order dependency, LM_DATA/{split}.deps: make lm-parse-multi30k),
#                                 fine-tuned from BASE the same way
#   expansion                     the iterative expansion LM (task expansion_lm, 4 layers, d=256), MINUTES from scratch;
#                                 unconditional: scored by eval-unconditional only
#   ar-lm                         fairseq's transformer_lm (3 layers, d=256), the unconditional autoregressive LM of the
#                                 expansion LM paper's comparison, MINUTES from scratch; eval-unconditional only
#   ar                            autoregressive transformer, keywords -> sentence (Plan-And-Write static)
#   levt                          fairseq's Levenshtein Transformer on the same bitext, decoded from the keywords
#                                 (insnet_fairseq/models/levt_keywords.py: starts from <s> keywords </s>, never
#                                 deletes a keyword; scored also with deletion allowed)
#   truncated, noglobal           ablations (Table 6): BASE's setting with --offset-clip 1 / --no-global-slot
# Multi30k En->De translation (MT_DATA, data-bin/multi30k_en_de, `make multi30k`; order MT_ORDER, l2r):
#   mt-insnet, mt-truncated, mt-noglobal
#
# Scoring: recipes/evaluate_lm.py on LM_DATA's test set: BLEU-2/4, NIST-2/4, steps, sequential ratio, keyword
# coverage, held-out token / position / termination NLL; InsNet rows decode as the paper (--paper-sampling: parallel,
# 70% of the slot mass, top-k sampling k = 1, 1, 3, 3, 5 for tau = 10, 3, 1, 0.3, -inf; sequential rows are tau = -inf;
# the uniform row greedy), averaged over SEEDS ("1 2 3"); sequential rows also greedy sequential decoding; AR greedy
# and beam 5; LevT 9 iterations, eos penalty 0. MT rows: recipes/evaluate.py (sacreBLEU, tokenised BLEU, greedy sequential) with --nll.
# Output: OUT_DIR/lm_table.{md,csv}, OUT_DIR/lm_ablation_mt.{md,csv} (OUT_DIR: results).
# Environment: MINUTES, FT_MINUTES, THREADS, UPDATES (0: no update limit; set it for a quick check), BASE (seq-binary),
# CKPT_DIR (checkpoints: rows train into CKPT_DIR/lm_<row>), LM_DATA, MT_DATA, MT_RAW (../shared/data/multi30k),
# MT_TOK_REF (work/multi30k_en_de/test.clean.de, for tokenised BLEU when present),
# CKPT (best: the best valid loss, else the last; last; avg: the average of the kept checkpoints), SEEDS, OUT_DIR,
# GEN_ARGS (more fairseq-generate flags for every InsNet row, e.g. --max-insertion-steps 20).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../recipes/nat_decoding.sh"  # nat_decoding: how LevT / InsT are decoded
export MINUTES=${MINUTES:-60} THREADS=${THREADS:-1} UPDATES=${UPDATES:-0}
ft_minutes=${FT_MINUTES:-20}
lm=${LM_DATA:-data-bin/lm_multi30k}; mt=${MT_DATA:-data-bin/multi30k_en_de}
mt_raw=${MT_RAW:-../shared/data/multi30k}; mt_order=${MT_ORDER:-l2r}
mt_tok_ref=${MT_TOK_REF:-work/multi30k_en_de/test.clean.de}; tok_ref=(); [ -f "$mt_tok_ref" ] && tok_ref=(--tok-ref "$mt_tok_ref")
base=${BASE:-seq-binary}; ckpts=${CKPT_DIR:-checkpoints}; out_dir=${OUT_DIR:-results}
seeds=${SEEDS:-1 2 3}
read -r -a gen_extra <<<"${GEN_ARGS:-}"
ROWS=(seq-random seq-binary seq-keywords dinic-10 dinic-3 dinic-1 dinic-0.3 uniform dependency ar levt truncated noglobal mt-insnet mt-truncated mt-noglobal expansion ar-lm)
UNCONDITIONAL_ROWS=(ar-lm expansion dependency uniform dinic-3 seq-binary)

order_of() {  # sequential row -> its insertion order
  case $1 in seq-random) echo random ;; seq-binary) echo binary ;; seq-keywords) echo keywords ;;
    *) echo "lm_budget.sh: BASE must be seq-random, seq-binary or seq-keywords, not '$1'" >&2; exit 2 ;; esac
}

# ROW -> "KIND DATA [train flags...]" (checkpoints: $ckpts/lm_ROW)
spec() {
  local o; o=$(order_of "$base")
  case $1 in
    seq-random) echo "insnet-lm $lm --insertion-order random" ;;
    seq-binary) echo "insnet-lm $lm --insertion-order binary" ;;
    seq-keywords) echo "insnet-lm $lm --insertion-order keywords" ;;
    dinic-*)    echo "insnet-lm $lm --insertion-order $o --dinic-tau=${1#dinic-} --finetune-from-model $ckpts/lm_$base/checkpoint_last.pt" ;;
    uniform)    echo "insnet-lm $lm --insertion-order $o --layerization uniform --finetune-from-model $ckpts/lm_$base/checkpoint_last.pt" ;;
    dependency) echo "insnet-lm $lm --insertion-order dependency --layerization uniform --finetune-from-model $ckpts/lm_$base/checkpoint_last.pt" ;;
    expansion)  echo "expansion-lm $lm" ;;
    ar-lm)      echo "ar-lm $lm" ;;
    ar)         echo "ar $lm-ar" ;;
    levt)       echo "levt $lm-ar --arch levenshtein_transformer_keywords" ;;
    truncated)  echo "insnet-lm $lm --insertion-order $o --offset-clip 1" ;;
    noglobal)   echo "insnet-lm $lm --insertion-order $o --no-global-slot" ;;
    mt-insnet)  echo "insnet $mt --insertion-order $mt_order" ;;
    mt-truncated) echo "insnet $mt --insertion-order $mt_order --offset-clip 1" ;;
    mt-noglobal)  echo "insnet $mt --insertion-order $mt_order --no-global-slot" ;;
    *) echo "lm_budget.sh: unknown row '$1' (bash experiments/lm_budget.sh rows)" >&2; exit 2 ;;
  esac
}

train_row() {
  local row=$1; shift
  spec "$row" >/dev/null  # an unknown row stops here
  read -r kind d flags <<<"$(spec "$row")"
  [ -d "$d" ] || { echo "lm_budget.sh: $d missing (make lm-multi30k, or make multi30k for the mt-* rows)" >&2; exit 2; }
  case $row in dependency|expansion)
    [ -f "$d/train.deps" ] || { echo "lm_budget.sh: $d/train.deps missing: the $row row trains on dependency parses (make lm-parse-multi30k)" >&2; exit 2; } ;;
  esac
  case $row in
    dinic-*|uniform|dependency)
      [ -f "$ckpts/lm_$base/checkpoint_last.pt" ] || { echo "lm_budget.sh: train the base first: bash experiments/lm_budget.sh train $base" >&2; exit 2; }
      # the fine-tuning inherits the base's training time (fairseq keeps it through --finetune-from-model)
      export SCHEDULER=fixed LR=5e-4 MINUTES=$((MINUTES + ft_minutes)) ;;
  esac
  # shellcheck disable=SC2086
  bash recipes/train.sh "$kind" "$d" "$ckpts/lm_$row" $flags "$@"
}

checkpoint_of() {  # SAVE_DIR -> the checkpoint with the best valid loss, else the last one; CKPT=last: the last one;
  # CKPT=avg: the parameter average of every checkpoint the run kept (recipes/average_checkpoints.py, checkpoint_avg.pt)
  case ${CKPT:-best} in
    last) echo "$1/checkpoint_last.pt"; return ;;
    avg) if [ -f "$1/checkpoint_last.pt" ]; then
           python recipes/average_checkpoints.py --inputs "$1" --output "$1/checkpoint_avg.pt" --reuse >&2 || exit 2
         fi
         echo "$1/checkpoint_avg.pt"; return ;;
  esac
  if [ -f "$1/checkpoint_best.pt" ]; then echo "$1/checkpoint_best.pt"; else echo "$1/checkpoint_last.pt"; fi
}

lm_eval() {  # NAME CHECKPOINT DATA evaluate_lm flags... -- fairseq-generate flags
  local name=$1 ckpt=$2 d=$3; shift 3
  python recipes/evaluate_lm.py --data "$d" --path "$ckpt" --name "$name" --csv "$out_dir/lm_table.csv" \
    --markdown "$out_dir/lm_table.md" "$@"
}

eval_rows() {
  mkdir -p "$out_dir"; rm -f "$out_dir"/lm_table.{md,csv} "$out_dir"/lm_ablation_mt.{md,csv}
  local rows=("$@"); [ ${#rows[@]} -gt 0 ] || rows=("${ROWS[@]}")
  local insnet=(--user-dir insnet_fairseq --task insertion_lm "${gen_extra[@]}")
  for r in "${rows[@]}"; do spec "$r" >/dev/null; done  # unknown rows stop before anything runs
  for r in "${rows[@]}"; do
    read -r kind d flags <<<"$(spec "$r")"
    ckpt=$(checkpoint_of "$ckpts/lm_$r")
    [ -f "$ckpt" ] || { echo "skip $r: no $ckpt"; continue; }
    # shellcheck disable=SC2086
    case $r in
      seq-*|truncated|noglobal)
        lm_eval "$r (tau -inf, paper sampling)" "$ckpt" "$d" --paper-sampling=-inf --seeds $seeds --nll -- "${insnet[@]}"
        lm_eval "$r (sequential, greedy)" "$ckpt" "$d" -- "${insnet[@]}" --insertion-mode sequential ;;
      dinic-*)
        lm_eval "$r (paper sampling)" "$ckpt" "$d" --paper-sampling="${r#dinic-}" --seeds $seeds --nll -- "${insnet[@]}" ;;
      uniform|dependency)
        lm_eval "$r (parallel, 70% slot mass, greedy)" "$ckpt" "$d" --nll -- "${insnet[@]}" --insertion-mode parallel \
          --slot-top-p 0.7 ;;
      expansion|ar-lm) echo "skip $r: unconditional (bash experiments/lm_budget.sh eval-unconditional)" ;;
      ar)
        lm_eval "$r (greedy)" "$ckpt" "$d" --nll -- --user-dir insnet_fairseq --task translation --beam 1
        lm_eval "$r (beam 5)" "$ckpt" "$d" -- --user-dir insnet_fairseq --task translation --beam 5 ;;
      levt)
        local lev=("${nat_decoding[@]}")
        lm_eval "$r (from the keywords, kept)" "$ckpt" "$d" -- "${lev[@]}"
        lm_eval "$r (from the keywords, deletable)" "$ckpt" "$d" -- "${lev[@]}" \
          --model-overrides "{'delete_source_words': True}" ;;
      mt-*)
        python recipes/evaluate.py --data "$d" --path "$ckpt" --src en --tgt de --name "$r (sequential, greedy)" --nll \
          --raw-ref "$mt_raw/test.de" "${tok_ref[@]}" --csv "$out_dir/lm_ablation_mt.csv" --markdown "$out_dir/lm_ablation_mt.md" \
          -- --user-dir insnet_fairseq --task insertion_translation --insertion-mode sequential "${gen_extra[@]}" ;;
    esac
  done
  for f in "$out_dir"/lm_table.md "$out_dir"/lm_ablation_mt.md; do [ -f "$f" ] && cat "$f"; done
  return 0
}

# Unconditional generation, the expansion LM paper's evaluation (recipes/evaluate_unconditional.py): one sample per
# test sentence with nucleus sampling (--sampling-topp TOP_P, 0.9) for every row, SEEDS seeds; InsNet rows decode from
# <s> </s> (--no-keywords; the training sentences had no keywords either), the expansion LM from its root placeholder.
# Output: OUT_DIR/lm_unconditional.{md,csv}, with the held-out sentences' own figures (against the training set,
# LM_TRAIN_TEXT: work/NAME/train.tok); APPEND=1 adds rows to the files instead (no held-out row).
eval_unconditional() {
  mkdir -p "$out_dir"; [ "${APPEND:-0}" = 1 ] || rm -f "$out_dir"/lm_unconditional.{md,csv}
  local rows=("$@"); [ ${#rows[@]} -gt 0 ] || rows=("${UNCONDITIONAL_ROWS[@]}")
  local top_p=${TOP_P:-0.9} out=(--csv "$out_dir/lm_unconditional.csv" --markdown "$out_dir/lm_unconditional.md")
  local nucleus=(--sampling --sampling-topp "$top_p" --beam 1)
  for r in "${rows[@]}"; do spec "$r" >/dev/null; done
  local train_text=${LM_TRAIN_TEXT:-work/$(basename "$lm")/train.tok}
  if [ -f "$train_text" ] && [ "${APPEND:-0}" != 1 ]; then
    python recipes/evaluate_unconditional.py --data "$lm" --reference-rows "$train_text" "${out[@]}"
  fi
  for r in "${rows[@]}"; do
    ckpt=$(checkpoint_of "$ckpts/lm_$r")
    [ -f "$ckpt" ] || { echo "skip $r: no $ckpt"; continue; }
    # shellcheck disable=SC2086
    case $r in
      expansion)
        python recipes/evaluate_unconditional.py --data "$lm" --path "$ckpt" --name "$r (nucleus $top_p)" --seeds $seeds \
          "${out[@]}" -- --user-dir insnet_fairseq --task expansion_lm "${nucleus[@]}" ;;
      ar-lm)
        python recipes/evaluate_unconditional.py --data "$lm" --path "$ckpt" --name "$r (nucleus $top_p)" --seeds $seeds \
          "${out[@]}" -- --user-dir insnet_fairseq --task unconditional_language_modeling --sample-break-mode eos \
          "${nucleus[@]}" ;;
      seq-*|truncated|noglobal)
        python recipes/evaluate_unconditional.py --data "$lm" --path "$ckpt" --name "$r (sequential, nucleus $top_p)" \
          --seeds $seeds "${out[@]}" -- --user-dir insnet_fairseq --task insertion_lm --no-keywords \
          --insertion-mode sequential "${nucleus[@]}" "${gen_extra[@]}" ;;
      dinic-*|uniform|dependency)
        python recipes/evaluate_unconditional.py --data "$lm" --path "$ckpt" --name "$r (parallel 70%, nucleus $top_p)" \
          --seeds $seeds "${out[@]}" -- --user-dir insnet_fairseq --task insertion_lm --no-keywords \
          --insertion-mode parallel --slot-top-p 0.7 "${nucleus[@]}" "${gen_extra[@]}" ;;
      *) echo "skip $r: not an unconditional LM" ;;
    esac
  done
  cat "$out_dir/lm_unconditional.md"
}

case ${1:-} in
  train) shift; row=${1:?ROW}; shift; train_row "$row" "$@" ;;
  eval) shift; eval_rows "$@" ;;
  eval-unconditional) shift; eval_unconditional "$@" ;;
  rows) printf '%s\n' "${ROWS[@]}" ;;
  *) echo "usage: bash experiments/lm_budget.sh train ROW [fairseq-train flags] | eval [ROW...] | eval-unconditional [ROW...] | rows" >&2; exit 2 ;;
esac
