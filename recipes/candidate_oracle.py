#!/usr/bin/env python
"""How good are a parallel model's ``--insertion-candidates``? The model's own pick, the AR judge's pick, and the
oracle pick (per sentence the candidate of the highest sentence-BLEU against its reference: an upper bound of any
judge), each as a corpus sacreBLEU of the split.

    python recipes/candidate_oracle.py --path checkpoints/t60_curriculum_query_kd/checkpoint_last.pt \
        --judge checkpoints/multi30k_en_de-teacher/checkpoint_best.pt --candidates 8

If the oracle is far above the judge, a better judge would help; if it is near it, the candidates are the limit
(the parallel model itself). Every candidate is read from fairseq-generate's ``--nbest`` output (detokenised D- lines).
"""
import argparse
import collections
import subprocess
import sys

import sacrebleu


def candidates(data, path, split, k, decoding, judged, src="en", tgt="de"):
    """{sentence id: its k detokenised candidates, best first by the model's (or the judge's) score}."""
    cmd = ["fairseq-generate", data, "--path", path, "--gen-subset", split, "--batch-size", "64", "--remove-bpe",
           "--tokenizer", "moses", "--source-lang", src, "--target-lang", tgt, "--user-dir", "insnet_fairseq",
           "--task", "insertion_translation",
           *decoding.split(), "--insertion-candidates", str(k), "--nbest", str(k), "--beam", str(k)]
    if judged:
        cmd.append("--iter-decode-with-external-reranker")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fairseq-generate failed:\n{out.stderr[-1500:]}")
    hyps = collections.defaultdict(list)
    for line in out.stdout.splitlines():
        if line.startswith("D-"):
            fields = line.split("\t")
            hyps[int(fields[0][2:])].append(fields[2] if len(fields) > 2 else "")
    return hyps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--path", required=True, help="the InsNet checkpoint")
    p.add_argument("--judge", required=True, help="the autoregressive judge's checkpoint")
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--split", default="valid")
    p.add_argument("--raw-ref", default="../shared/data/multi30k/valid.de")
    p.add_argument("--decoding", default="--insertion-mode parallel --slot-top-p 0.9 --skip-repeats")
    args = p.parse_args()
    refs = open(args.raw_ref, encoding="utf-8").read().splitlines()
    own = candidates(args.data, args.path, args.split, args.candidates, args.decoding, False, args.src, args.tgt)
    judged = candidates(args.data, f"{args.path}:{args.judge}", args.split, args.candidates, args.decoding, True,
                        args.src, args.tgt)
    if sorted(own) != list(range(len(refs))) or sorted(judged) != list(range(len(refs))):
        sys.exit(f"{args.raw_ref}: {len(refs)} references, but fairseq-generate decoded {len(own)} sentences")
    ids = range(len(refs))

    def bleu(pick):
        return sacrebleu.corpus_bleu([pick(i) for i in ids], [refs]).score

    oracle = {i: max(own[i], key=lambda h: sacrebleu.sentence_bleu(h, [refs[i]]).score) for i in ids}
    distinct = sum(len(set(own[i])) for i in ids) / len(refs)
    print(f"{args.candidates} candidates ({distinct:.2f} distinct per sentence), {args.split}: model's own pick "
          f"{bleu(lambda i: own[i][0]):.2f}, AR judge {bleu(lambda i: judged[i][0]):.2f}, oracle (sentence BLEU) "
          f"{bleu(lambda i: oracle[i]):.2f} sacreBLEU")


if __name__ == "__main__":
    main()
