#!/usr/bin/env python
"""Prepare a raw parallel corpus for fairseq: sacremoses tokenisation, joint subword-nmt BPE,
fairseq-preprocess with a joined dictionary.

    python recipes/prepare_bitext.py --name multi30k_en_de --raw-dir ../shared/data/multi30k \
        --src en --tgt de --bpe-merges 10000

Reads {train,valid,test}.{src,tgt} from --raw-dir; writes work/<name>/ (tokenised and BPE text,
BPE codes) and data-bin/<name>/ (binarised). Idempotent: finished steps are skipped.
``--max-lines N`` keeps the first N lines of every split (tests, quick runs).
``--tokenizer LANG=NAME`` replaces the Moses tokenisation of one language by the hook in
recipes/NAME.py (``romanian``: WMT16 normalisation and diacritics removal, then Moses;
``japanese``: MeCab word segmentation). ``recipes/corpora.py`` runs this for every named corpus.
Files are streamed line by line; ``--workers`` tokenises and applies BPE in parallel.
"""
import argparse
import importlib
import multiprocessing
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


_line_tokenizer = None


def make_line_tokenizer(lang: str, hook: str = "moses"):
    """One line in, one tokenised line out. ``moses``: sacremoses punctuation normalisation and
    tokenisation (no escaping); any other name is a module beside this file whose
    ``make_tokenizer(lang)`` gives the line function (``romanian``, ``japanese``)."""
    if hook == "moses":
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
        return lambda line: tok.tokenize(norm.normalize(line), escape=False, return_str=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    return importlib.import_module(hook).make_tokenizer(lang)


def _tokenize_line(line):
    return _line_tokenizer(line.rstrip("\n"))


def tokenize(raw_dir, work, langs, max_lines, hooks=None, workers=1):
    """Stream {split}.{lang} through the language's line tokenizer (``hooks``: lang -> name,
    default moses) into {split}.tok.{lang}; ``workers`` > 1 tokenises in forked workers, in order."""
    global _line_tokenizer
    hooks = hooks or {}
    for lang in langs:
        todo = [s for s in SPLITS if not os.path.exists(os.path.join(work, f"{s}.tok.{lang}"))]
        if not todo:
            print(f"tokenise {lang}: done before, skipped", flush=True)
            continue
        _line_tokenizer = make_line_tokenizer(lang, hooks.get(lang, "moses"))  # workers inherit it
        pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
        try:
            for split in todo:
                out = os.path.join(work, f"{split}.tok.{lang}")
                n = 0
                with open(os.path.join(raw_dir, f"{split}.{lang}"), encoding="utf-8") as fin, \
                        open(out + ".tmp", "w", encoding="utf-8") as fout:
                    lines = (line for _, line in zip(range(max_lines or 10 ** 12), fin))
                    for text in (pool.imap(_tokenize_line, lines, chunksize=500) if pool else map(_tokenize_line, lines)):
                        fout.write(text + "\n")
                        n += 1
                os.replace(out + ".tmp", out)
                print(f"tokenised {split}.{lang}: {n} lines", flush=True)
        finally:
            if pool:
                pool.close()
                pool.join()


def drop_empty_pairs(work, langs, max_train_len=0, max_train_ratio=0.0):
    """Empty lines on either side are removed from both (and reported), never binarised.
    In the training split only, ``max_train_len`` > 0 also drops pairs with a side longer than
    that many tokens and ``max_train_ratio`` > 0 pairs whose token counts differ by more than that
    factor (Moses clean-corpus-n.perl, as fairseq's WMT preparation scripts use it)."""
    for split in SPLITS:
        paths = [os.path.join(work, f"{split}.tok.{l}") for l in langs]
        outs = [os.path.join(work, f"{split}.clean.{l}") for l in langs]
        if all(os.path.exists(p) for p in outs):
            print(f"clean {split}: done before, skipped", flush=True)
            continue
        empty = filtered = 0
        with open(paths[0], encoding="utf-8") as f0, open(paths[1], encoding="utf-8") as f1, \
                open(outs[0] + ".tmp", "w", encoding="utf-8") as o0, open(outs[1] + ".tmp", "w", encoding="utf-8") as o1:
            for a, b in zip(f0, f1):
                if not a.strip() or not b.strip():
                    empty += 1
                    continue
                if split == "train" and (max_train_len or max_train_ratio):
                    na, nb = len(a.split()), len(b.split())
                    if (max_train_len and max(na, nb) > max_train_len) or \
                            (max_train_ratio and max(na, nb) > max_train_ratio * min(na, nb)):
                        filtered += 1
                        continue
                o0.write(a)
                o1.write(b)
        if empty:
            print(f"{split}: dropped {empty} pair(s) with an empty side", flush=True)
        if filtered:
            print(f"{split}: dropped {filtered} pair(s) over the length limits (--max-train-len {max_train_len}, "
                  f"--max-train-ratio {max_train_ratio})", flush=True)
        for out in outs:
            os.replace(out + ".tmp", out)


def bpe(work, langs, merges, workers=1):
    codes = os.path.join(work, "bpe.codes")
    if not os.path.exists(codes):
        subprocess.run(
            ["subword-nmt", "learn-joint-bpe-and-vocab", "-s", str(merges), "-o", codes + ".tmp",
             "--input"] + [os.path.join(work, f"train.clean.{l}") for l in langs]
            + ["--write-vocabulary"] + [os.path.join(work, f"vocab.{l}") for l in langs],
            check=True,
        )
        os.replace(codes + ".tmp", codes)
    else:
        print("learn BPE: done before, skipped", flush=True)
    for lang in langs:
        for split in SPLITS:
            out = os.path.join(work, f"{split}.bpe.{lang}")
            if os.path.exists(out):
                print(f"apply BPE {split}.{lang}: done before, skipped", flush=True)
                continue
            subprocess.run(
                ["subword-nmt", "apply-bpe", "-c", codes, "--vocabulary", os.path.join(work, f"vocab.{lang}"),
                 "--vocabulary-threshold", "1", "--input", os.path.join(work, f"{split}.clean.{lang}"),
                 "--output", out + ".tmp", "--num-workers", str(workers)], check=True,
            )
            os.replace(out + ".tmp", out)


def binarize(work, dest, src, tgt):
    if os.path.exists(os.path.join(dest, f"test.{src}-{tgt}.{tgt}.bin")):
        print(f"binarise: done before, skipped ({dest})", flush=True)
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
    p.add_argument("--tokenizer", action="append", default=[], metavar="LANG=NAME",
                   help="per-language tokenizer hook: moses (default), romanian, japanese")
    p.add_argument("--max-train-len", type=int, default=0, help="drop training pairs longer than this (tokens)")
    p.add_argument("--max-train-ratio", type=float, default=0.0, help="drop training pairs with a larger length ratio")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    args = p.parse_args(argv)
    hooks = dict(h.split("=", 1) for h in args.tokenizer)
    langs = (args.src, args.tgt)
    check_raw(args.raw_dir, langs)
    work = os.path.join(args.work_dir, args.name)
    dest = os.path.join(args.dest_dir, args.name)
    os.makedirs(work, exist_ok=True)
    tokenize(args.raw_dir, work, langs, args.max_lines, hooks, args.workers)
    drop_empty_pairs(work, langs, args.max_train_len, args.max_train_ratio)
    bpe(work, langs, args.bpe_merges, args.workers)
    binarize(work, dest, args.src, args.tgt)
    print(f"ready: {dest}")
    return dest


if __name__ == "__main__":
    main()
