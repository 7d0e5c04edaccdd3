#!/usr/bin/env bash
# Do two versions of the package decode the same test set into the same tokens? Every flag is given explicitly, so
# a change of defaults cannot hide a change of behaviour.
#
#   bash experiments/identical_outputs.sh OLD_DIR SEQ_CKPT PAR_CKPT [DATA]
#
# OLD_DIR holds the other version's insnet_fairseq/ (e.g. `git worktree add /tmp/old REV`; build its C++ kernel with
# `cp insnet_fairseq/modules/_offset_scores*.so` or leave it out: decoding does not use it); the current tree is the
# other side. SEQ_CKPT is decoded sequentially, PAR_CKPT in parallel (one candidate with the stop check, and 8
# candidates + MBR), each at batch 1 and at batch 64, by both
# versions (fairseq-generate, DATA: data-bin/multi30k_en_de, the test set); the hypotheses (H- lines, by sentence
# id) must be identical. Prints one line per run and exits 1 on any difference (the first differing lines shown).
set -euo pipefail
old=${1:?OLD_DIR: the other version (a folder with insnet_fairseq/)}; seq=${2:?SEQ_CKPT}; par=${3:?PAR_CKPT}
data=${4:-data-bin/multi30k_en_de}
old=$(realpath "$old"); seq=$(realpath "$seq"); par=$(realpath "$par"); data=$(realpath "$data")
cd "$(dirname "$0")/.."
[ -d "$old/insnet_fairseq" ] || { echo "identical_outputs.sh: no $old/insnet_fairseq" >&2; exit 2; }
out=$(mktemp -d)
common=(--user-dir insnet_fairseq --task insertion_translation --gen-subset test --max-insertion-steps 0
        --stop-threshold 0.5 --insertion-beam 1)
sequential=(--insertion-mode sequential --insertion-candidates 1)
parallel=(--insertion-mode parallel --slot-top-p 0.9 --skip-repeats --stop-check-prob 0.75 --min-token-prob 0)
status=0
for run in seq par mbr; do
  case $run in
    seq) ckpt=$seq; flags=("${sequential[@]}") ;;
    par) ckpt=$par; flags=("${parallel[@]}" --insertion-candidates 1) ;;
    mbr) ckpt=$par; flags=("${parallel[@]}" --insertion-candidates 8 --insertion-candidates-finish 6
                           --insertion-candidates-mbr 1) ;;
  esac
  for bsz in 1 64; do
    for version in old new; do
      dir=$PWD; [ $version = old ] && dir=$old
      # the version's own package: its folder first on the path, fairseq's --user-dir resolved there
      (cd "$dir" && PYTHONPATH="$dir" fairseq-generate "$data" --path "$ckpt" "${common[@]}" "${flags[@]}" \
        --batch-size $bsz 2>/dev/null) | grep '^H-' | sort -t- -k2 -n >"$out/$run.$bsz.$version"
    done
    n=$(wc -l <"$out/$run.$bsz.new")
    if [ "$n" -gt 0 ] && cmp -s "$out/$run.$bsz.old" "$out/$run.$bsz.new"; then
      echo "identical: $run ($ckpt) batch $bsz, $n hypotheses"
    else
      echo "DIFFERENT: $run ($ckpt) batch $bsz ($(wc -l <"$out/$run.$bsz.old") old, $n new hypotheses)"
      diff "$out/$run.$bsz.old" "$out/$run.$bsz.new" | head -6 || true
      status=1
    fi
  done
done
rm -rf "$out"
exit $status
