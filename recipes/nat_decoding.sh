# Sourced by the recipes that score fairseq's NAT baselines (LevT, InsT): the decoding every results table gives them,
# fairseq's documented 9 refinement iterations, no EOS penalty, one candidate. --user-dir: it also lets fairseq load its
# own checkpoints under torch >= 2.6.
# shellcheck disable=SC2034  # (used by the scripts that source it)
nat_decoding=(--user-dir insnet_fairseq --task translation_lev --iter-decode-max-iter 9 --iter-decode-eos-penalty 0 --beam 1)
