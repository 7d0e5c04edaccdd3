#!/usr/bin/env python
"""Print the insertion trajectory of one sentence, step by step (like the paper's Table 8).

    python recipes/show_trajectory.py --path ckpt.pt --data data-bin/multi30k_en_de \
        --bpe-codes work/multi30k_en_de/bpe.codes --src en --tgt de "A dog runs on the beach ." \
        [--mode parallel] [--keywords "Hund Strand"]

Raw text in: Moses tokenisation and BPE as in the recipes. ``--keywords`` starts from those
target words (constrained generation: they are kept, in order).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import insnet_fairseq  # noqa: E402,F401
from fairseq import checkpoint_utils  # noqa: E402
from insnet_fairseq.decoding.generator import InsertionGenerator  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentence")
    p.add_argument("--path", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--bpe-codes", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--mode", default="sequential", choices=["sequential", "parallel"])
    p.add_argument("--slot-top-p", type=float, default=0.7, help="parallel mode: slot probability mass filled per step")
    p.add_argument("--skip-repeats", action="store_true", help="do not insert a word equal to a neighbour of its slot")
    p.add_argument("--keywords", default="")
    args = p.parse_args()
    from sacremoses import MosesDetokenizer, MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    with open(args.bpe_codes, encoding="utf-8") as f:
        bpe = BPE(f)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([args.path], arg_overrides={"data": args.data})

    def encode(text, lang, dictionary, eos):
        toks = bpe.process_line(MosesTokenizer(lang=lang).tokenize(text, escape=False, return_str=True))
        return dictionary.encode_line(toks, add_if_not_exist=False, append_eos=eos).long()

    src = encode(args.sentence, args.src, task.source_dictionary, True).unsqueeze(0)
    keywords = [encode(args.keywords, args.tgt, task.target_dictionary, False).tolist()] if args.keywords else None
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}}
    gen = InsertionGenerator(task.target_dictionary, mode=args.mode, slot_top_p=args.slot_top_p, retain_history=True,
                             skip_repeats=args.skip_repeats)
    hypo = gen.generate(models, sample, initial_tokens=keywords)[0][0]
    detok = MosesDetokenizer(lang=args.tgt)
    for step, h in enumerate(hypo["history"]):
        text = task.target_dictionary.string(h["tokens"], "subword_nmt")
        print(f"step {step:2d}: {detok.detokenize(text.split())}")
    print(f"{hypo['steps']} steps, {len(hypo['tokens']) - 1} tokens")


if __name__ == "__main__":
    main()
