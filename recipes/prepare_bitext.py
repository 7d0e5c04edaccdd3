#!/usr/bin/env python
"""Prepare a raw parallel corpus for fairseq: sacremoses tokenisation, joint subword-nmt BPE,
fairseq-preprocess with a joined dictionary.

    python recipes/prepare_bitext.py --name multi30k_en_de --raw-dir ../shared/data/multi30k \
        --src en --tgt de --bpe-merges 10000

Reads {train,valid,test}.{src,tgt} from --raw-dir; writes work/<name>/ (tokenised and BPE text,
BPE codes) and data-bin/<name>/ (binarised). Idempotent: finished steps are skipped.
``--max-lines N`` keeps the first N lines of every split (tests, quick runs).
"""
import argparse
import os
import subprocess
import sys

SPLITS = ("train", "valid", "test")


def fail(message: str) -> None:
    sys.exit(f"prepare_bitext: {message}")


def check_raw(raw_dir: str, langs) -> None:
    missing = [f"{s}.{l}" for s in SPLITS for l in langs if not os.path.isfile(os.path.join(raw_dir, f"{s}.{l}"))]
    if missing:
        fail(f"raw corpus not found in {raw_dir!r}: missing {', '.join(missing)}")
    for split in SPLITS:
        counts = []
        for lang in langs:
            with open(os.path.join(raw_dir, f"{split}.{lang}"), encoding="utf-8") as f:
                counts.append(sum(1 for _ in f))
        if counts[0] != counts[1]:
            fail(f"{raw_dir}/{split}.{langs[0]} has {counts[0]} lines but {split}.{langs[1]} has {counts[1]}")


def tokenize(raw_dir, work, langs, max_lines):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    for lang in langs:
        norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
        for split in SPLITS:
            out = os.path.join(work, f"{split}.tok.{lang}")
            if os.path.exists(out):
                continue
            with open(os.path.join(raw_dir, f"{split}.{lang}"), encoding="utf-8") as fin:
                lines = [line.rstrip("\n") for _, line in zip(range(max_lines or 10 ** 12), fin)]
            text = [tok.tokenize(norm.normalize(line), escape=False, return_str=True) for line in lines]
            with open(out + ".tmp", "w", encoding="utf-8") as fout:
                fout.write("\n".join(text) + "\n")
            os.replace(out + ".tmp", out)
            print(f"tokenised {split}.{lang}: {len(text)} lines", flush=True)


def drop_empty_pairs(work, langs):
    """Empty lines on either side are removed from both (and reported), never binarised."""
    for split in SPLITS:
        paths = [os.path.join(work, f"{split}.tok.{l}") for l in langs]
        outs = [os.path.join(work, f"{split}.clean.{l}") for l in langs]
        if all(os.path.exists(p) for p in outs):
            continue
        pairs = list(zip(*(open(p, encoding="utf-8").read().split("\n")[:-1] for p in paths)))
        kept = [p for p in pairs if all(x.strip() for x in p)]
        if len(kept) < len(pairs):
            print(f"{split}: dropped {len(pairs) - len(kept)} pair(s) with an empty side", flush=True)
        for i, out in enumerate(outs):
            with open(out, "w", encoding="utf-8") as f:
                f.write("".join(p[i] + "\n" for p in kept))


def bpe(work, langs, merges):
    codes = os.path.join(work, "bpe.codes")
    if not os.path.exists(codes):
        subprocess.run(
            ["subword-nmt", "learn-joint-bpe-and-vocab", "-s", str(merges), "-o", codes + ".tmp",
             "--input"] + [os.path.join(work, f"train.clean.{l}") for l in langs]
            + ["--write-vocabulary"] + [os.path.join(work, f"vocab.{l}") for l in langs],
            check=True,
        )
        os.replace(codes + ".tmp", codes)
    for lang in langs:
        for split in SPLITS:
            out = os.path.join(work, f"{split}.bpe.{lang}")
            if os.path.exists(out):
                continue
            with open(os.path.join(work, f"{split}.clean.{lang}"), "rb") as fin, open(out + ".tmp", "wb") as fout:
                subprocess.run(
                    ["subword-nmt", "apply-bpe", "-c", codes, "--vocabulary", os.path.join(work, f"vocab.{lang}"),
                     "--vocabulary-threshold", "1"], stdin=fin, stdout=fout, check=True,
                )
            os.replace(out + ".tmp", out)


def binarize(work, dest, src, tgt):
    if os.path.exists(os.path.join(dest, f"test.{src}-{tgt}.{tgt}.bin")):
        return
    subprocess.run(
        ["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt,
         "--trainpref", os.path.join(work, "train.bpe"), "--validpref", os.path.join(work, "valid.bpe"),
         "--testpref", os.path.join(work, "test.bpe"), "--destdir", dest, "--joined-dictionary",
         "--workers", str(min(4, os.cpu_count() or 1))],
        check=True,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True)
    p.add_argument("--raw-dir", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--bpe-merges", type=int, default=10000)
    p.add_argument("--max-lines", type=int, default=0)
    p.add_argument("--work-dir", default="work")
    p.add_argument("--dest-dir", default="data-bin")
    args = p.parse_args(argv)
    langs = (args.src, args.tgt)
    check_raw(args.raw_dir, langs)
    work = os.path.join(args.work_dir, args.name)
    dest = os.path.join(args.dest_dir, args.name)
    os.makedirs(work, exist_ok=True)
    tokenize(args.raw_dir, work, langs, args.max_lines)
    drop_empty_pairs(work, langs)
    bpe(work, langs, args.bpe_merges)
    binarize(work, dest, args.src, args.tgt)
    print(f"ready: {dest}")


if __name__ == "__main__":
    main()
