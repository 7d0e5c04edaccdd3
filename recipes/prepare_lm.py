#!/usr/bin/env python
"""Prepare a one-sentence-per-line corpus for ``--task insertion_lm`` (the paper's lexically
constrained generation, section 4.1) and its keywords.

    python recipes/prepare_lm.py --name lm_multi30k --raw-dir ../shared/data/multi30k --ext en   # make lm-multi30k
    python recipes/prepare_lm.py --name yelp --raw-dir DIR                                       # make lm-custom

Reads ``{train,valid,test}.EXT`` from ``--raw-dir`` (EXT ``txt`` by default; Multi30k: the English
side, ``en``). Steps, each skipped when its output exists:

1. Text: lines end at a newline only (line-break characters inside a line become spaces); Moses/HTML
   escapes are unescaped when found (``--unescape auto``); sacremoses punctuation normalisation and
   tokenisation for ``--lang`` unless the corpus is already tokenised (``--tokenized auto``: under
   25% of 1,000 sampled training lines change under Moses, as recipes/prepare_bitext.py decides);
   then lowercased (``--lowercase yes``, default: the paper's keywords and outputs are lowercase).
   Empty lines are dropped and reported with their file and line; ``work/NAME/{split}.lines`` maps
   every kept sentence to its raw line. Word level, no BPE: a keyword is one word.
2. ``fairseq-preprocess --only-source``: ``data-bin/NAME/dict.txt`` (the training words seen at least
   ``--min-count`` (2) times; the rest become ``<unk>``) and ``{split}.bin/.idx``.
3. Keywords (YAKE, the ``yake`` package, as the paper) for every split, written next to the data:
   ``data-bin/NAME/{train,valid,test}.keywords`` (one line per sentence, space-separated; the training
   split's are read only by ``--insertion-order keywords`` and the AR baseline's bitext), with the
   references to score against, ``data-bin/NAME/{valid,test}.ref`` (the tokenised, lowercased
   sentences; BLEU and NIST are computed on these words). The rule (:func:`sentence_keywords`):
   YAKE run on the sentence alone with unigram candidates (``n=1``, YAKE's stopwords for
   ``--lang``, its defaults otherwise: ``dedup_lim`` 0.9, window 1, ``top`` 20); keep, best YAKE
   score first, the candidates that are words of the sentence (case-insensitively) and of
   ``dict.txt`` (never ``<unk>``), each once, at most ``--max-keywords`` (4); a sentence where YAKE
   finds none (only stopwords, one word) gets its longest dictionary word holding a letter or digit
   (the first of equals; any dictionary word if none holds one). The keywords are then written in
   the order of their first occurrence in the sentence: 1 to 4 per sentence (0 only for a sentence
   with no dictionary word at all, reported).
4. ``--ar yes`` (default): the autoregressive keywords-to-sentence baseline's bitext (Plan-And-Write
   static, paper Table 2): the keywords of every split as sources, and ``data-bin/NAME-ar``
   (``{split}.kw-sent.{kw,sent}``, both sides with ``dict.txt``), with the keyword and reference
   files copied beside it.
"""
import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
from collections import Counter

from recipes import prepare_bitext as pb

SPLITS = pb.SPLITS
HELD_OUT = ("valid", "test")
MAX_KEYWORDS = 4
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


def fail(message: str) -> None:
    sys.exit(f"prepare_lm: {message}")


# ---------------------------------------------------------------------------------------- keywords
def keyword_extractor(lang: str = "en"):
    import yake

    return yake.KeywordExtractor(lan=lang, n=1, top=20)


def sentence_keywords(tokens, extractor, vocab, max_keywords: int = MAX_KEYWORDS):
    """The keywords of one tokenised sentence (list of words) -> words of the sentence, in sentence order.

    YAKE's unigram candidates, best first, that are words of the sentence (case-insensitively; the
    sentence's own spelling is kept) and of ``vocab``, each once, at most ``max_keywords``; when YAKE
    finds none, the longest vocabulary word holding a letter or digit (else any vocabulary word).
    Example: "a boston terrier is running on lush green grass in front of a white fence ." ->
    ["boston", "terrier", "running", "fence"] (YAKE ranks fence, boston, terrier, running first).
    """
    first = {}  # lowercased word -> (position of its first occurrence, spelling there)
    for i, w in enumerate(tokens):
        if w in vocab:
            first.setdefault(w.lower(), (i, w))
    chosen = []
    if first:
        for candidate, _ in extractor.extract_keywords(" ".join(tokens)):
            key = candidate.lower()
            if key in first and key not in chosen:
                chosen.append(key)
                if len(chosen) == max_keywords:
                    break
    if not chosen and first:
        keys = [k for k in first if any(c.isalnum() for c in k)] or list(first)
        keys.sort(key=lambda k: first[k][0])
        chosen = [max(keys, key=len)]
    return [first[k][1] for k in sorted(chosen, key=lambda k: first[k][0])]


_extractor = _vocab = None
_max_keywords = MAX_KEYWORDS


def _init_worker(lang, vocab, max_keywords):
    global _extractor, _vocab, _max_keywords
    _extractor, _vocab, _max_keywords = keyword_extractor(lang), vocab, max_keywords


def _line_keywords(line):
    return " ".join(sentence_keywords(line.split(), _extractor, _vocab, _max_keywords))


def read_vocab(dict_path):
    """The words of a fairseq dict.txt (its first column), without fairseq's padding symbols."""
    with open(dict_path, encoding="utf-8") as f:
        words = {line.rsplit(" ", 1)[0] if " " in line.rstrip("\n") else line.rstrip("\n") for line in f}
    return {w for w in words if w and w not in SPECIALS and not w.startswith("madeupword")}


def write_keywords(text_path, out_path, vocab, lang, max_keywords, workers):
    """Keywords of every line of ``text_path`` into ``out_path``; prints how many per sentence."""
    if os.path.exists(out_path):
        print(f"keywords {out_path}: done before, skipped", flush=True)
        return
    with open(text_path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers, _init_worker, (lang, vocab, max_keywords)) as pool:
            rows = pool.map(_line_keywords, lines, chunksize=500)
    else:
        _init_worker(lang, vocab, max_keywords)
        rows = [_line_keywords(line) for line in lines]
    with open(out_path + ".tmp", "w", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in rows))
    os.replace(out_path + ".tmp", out_path)
    counts = Counter(len(r.split()) for r in rows)
    mean = sum(k * v for k, v in counts.items()) / max(1, len(rows))
    print(f"keywords {out_path}: {len(rows):,} sentences; keywords per sentence "
          + ", ".join(f"{k}: {counts[k]:,}" for k in sorted(counts)) + f"; mean {mean:.2f}", flush=True)
    if counts.get(0):
        first = next(i for i, r in enumerate(rows, 1) if not r)
        print(f"{text_path}:{first}: {counts[0]} sentence(s) without a dictionary word get no keyword", flush=True)


# ---------------------------------------------------------------------------------------- text
def tokenized_fraction(path, lang, do_unescape):
    """Share of sampled non-empty lines of ``path`` that Moses tokenisation leaves unchanged (as
    prepare_bitext.tokenized_fraction, for any file name)."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    sample = []
    for line in pb.raw_lines(path):
        if line.strip():
            sample.append(pb.unescape(line) if do_unescape else line)
            if len(sample) == pb.DETECT_SAMPLE:
                break
    squash = lambda text: pb._APOSTROPHE.sub("'", " ".join(text.split()))  # noqa: E731
    same = sum(1 for l in sample if squash(l) == squash(tok.tokenize(l, escape=False, return_str=True)))
    return (same / len(sample) if sample else 0.0), len(sample)


def decide(raw_dir, ext, lang, tokenized, unescape_mode):
    do_unescape = unescape_mode == "yes"
    if unescape_mode == "auto":
        n, first, seen = pb.find_escapes(raw_dir, ext)
        do_unescape = n > 0
        if n:
            print(f"Moses/HTML escapes ({' '.join(seen)}) on {n:,} line(s), first {first}: unescaped", flush=True)
    is_tok = tokenized == "yes"
    if tokenized == "auto":
        same, sampled = tokenized_fraction(os.path.join(raw_dir, f"train.{ext}"), lang, do_unescape)
        is_tok = sampled > 0 and (1 - same) < pb.TOKENIZED_THRESHOLD
        print(f"{100 * (1 - same):.0f}% of {sampled} sampled training lines change under Moses tokenisation: "
              + ("already tokenised, kept as it is (whitespace only)" if is_tok else "raw text, Moses-tokenised"),
              flush=True)
    return do_unescape, is_tok


def line_text(raw_dir, ext, lang, tokenized, unescape_mode):
    """Line function: a raw line of the corpus -> its tokens as one string (unescaped and Moses-tokenised as
    :func:`decide` says, line breaks as spaces, single spaces), cased; ``prepare_text`` lowercases it."""
    do_unescape, is_tok = decide(raw_dir, ext, lang, tokenized, unescape_mode)
    tokenize = pb.make_line_tokenizer(lang, "pretokenized" if is_tok else "moses")

    def text(line):
        return " ".join(pb._LINE_BREAK.sub(" ", tokenize(pb.unescape(line) if do_unescape else line)).split())

    return text


def prepare_text(raw_dir, work, ext, lang, tokenized, unescape_mode, lowercase, max_lines):
    """{split}.EXT -> work/{split}.tok (tokenised, lowercased, no empty line) and {split}.lines."""
    outs = [os.path.join(work, f"{s}.{f}") for s in SPLITS for f in ("tok", "lines")]
    if all(os.path.exists(p) for p in outs):
        print("tokenise: done before, skipped", flush=True)
        return
    line_tokens = line_text(raw_dir, ext, lang, tokenized, unescape_mode)
    for split in SPLITS:
        raw = os.path.join(raw_dir, f"{split}.{ext}")
        tok, kept = os.path.join(work, f"{split}.tok"), os.path.join(work, f"{split}.lines")
        empty, n = [], 0
        with open(tok + ".tmp", "w", encoding="utf-8") as ft, open(kept + ".tmp", "w") as fl:
            for i, line in enumerate(pb.raw_lines(raw), 1):
                if max_lines and i > max_lines:
                    break
                text = line_tokens(line)
                if lowercase:
                    text = text.lower()
                if not text:
                    empty.append(f"{raw}:{i}")
                    continue
                ft.write(text + "\n")
                fl.write(f"{i}\n")
                n += 1
        if not n:
            fail(f"{raw}: no sentence left (every line is empty)")
        if empty:
            shown = ", ".join(empty[:20]) + (f", ... ({len(empty) - 20:,} more)" if len(empty) > 20 else "")
            print(f"{split}: dropped {len(empty):,} empty line(s): {shown}" + (
                f" (the references, {split}.ref, hold the {n:,} kept sentences; {kept} maps them to raw lines)"
                if split != "train" else ""), flush=True)
        os.replace(tok + ".tmp", tok)
        os.replace(kept + ".tmp", kept)
        print(f"tokenised {split}.{ext}: {n:,} sentences", flush=True)


def binarize(work, dest, min_count, workers):
    if os.path.exists(os.path.join(dest, "test.bin")):
        print(f"binarise: done before, skipped ({dest})", flush=True)
        return
    subprocess.run(["fairseq-preprocess", "--only-source", "--trainpref", os.path.join(work, "train.tok"),
                    "--validpref", os.path.join(work, "valid.tok"), "--testpref", os.path.join(work, "test.tok"),
                    "--destdir", dest, "--thresholdsrc", str(min_count), "--workers", str(workers)], check=True)


def ar_bitext(work, dest, ar_dest, workers):
    """The keywords-to-sentence bitext of the autoregressive baseline (source kw, target sent)."""
    ar_work = os.path.join(work, "ar")
    os.makedirs(ar_work, exist_ok=True)
    for split in SPLITS:
        for src, dst in ((os.path.join(dest, f"{split}.keywords"), f"{split}.kw"),
                         (os.path.join(work, f"{split}.tok"), f"{split}.sent")):
            if not os.path.exists(os.path.join(ar_work, dst)):
                shutil.copyfile(src, os.path.join(ar_work, dst))
    if not os.path.exists(os.path.join(ar_dest, "test.kw-sent.sent.bin")):
        dictionary = os.path.join(dest, "dict.txt")
        subprocess.run(["fairseq-preprocess", "--source-lang", "kw", "--target-lang", "sent",
                        "--trainpref", os.path.join(ar_work, "train"), "--validpref", os.path.join(ar_work, "valid"),
                        "--testpref", os.path.join(ar_work, "test"), "--destdir", ar_dest, "--srcdict", dictionary,
                        "--tgtdict", dictionary, "--workers", str(workers)], check=True)
    else:
        print(f"binarise AR bitext: done before, skipped ({ar_dest})", flush=True)
    for split in HELD_OUT:
        for suffix in ("keywords", "ref"):
            shutil.copyfile(os.path.join(dest, f"{split}.{suffix}"), os.path.join(ar_dest, f"{split}.{suffix}"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="data-bin/NAME (and work/NAME)")
    p.add_argument("--raw-dir", required=True, help="folder with {train,valid,test}.EXT, one sentence per line")
    p.add_argument("--ext", default="txt", help="file extension of the raw splits (default txt; Multi30k: en)")
    p.add_argument("--lang", default="en", help="language for Moses and YAKE's stopwords (default en)")
    p.add_argument("--tokenized", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--unescape", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--lowercase", choices=["yes", "no"], default="yes")
    p.add_argument("--min-count", type=int, default=2, help="dictionary: training words seen at least this often")
    p.add_argument("--max-keywords", type=int, default=MAX_KEYWORDS)
    p.add_argument("--ar", choices=["yes", "no"], default="yes", help="also the AR baseline's keywords->sentence bitext")
    p.add_argument("--max-lines", type=int, default=0, help="keep the first N lines of every split (tests)")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--dest-dir", default="data-bin")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    args = p.parse_args(argv)
    if not 1 <= args.max_keywords:
        fail(f"--max-keywords must be >= 1, got {args.max_keywords}")
    missing = [f"{s}.{args.ext}" for s in SPLITS if not os.path.isfile(os.path.join(args.raw_dir, f"{s}.{args.ext}"))]
    if missing:
        fail(f"raw corpus not found in {args.raw_dir!r}: missing {', '.join(missing)} (one sentence per line; "
             "--ext sets the extension)")
    for s in SPLITS:
        if pb.count_lines(os.path.join(args.raw_dir, f"{s}.{args.ext}")) == 0:
            fail(f"{os.path.join(args.raw_dir, f'{s}.{args.ext}')} is empty")
    work, dest = os.path.join(args.work_dir, args.name), os.path.join(args.dest_dir, args.name)
    os.makedirs(work, exist_ok=True)
    prepare_text(args.raw_dir, work, args.ext, args.lang, args.tokenized, args.unescape, args.lowercase == "yes",
                 args.max_lines)
    binarize(work, dest, args.min_count, args.workers)
    vocab = read_vocab(os.path.join(dest, "dict.txt"))
    print(f"dictionary {os.path.join(dest, 'dict.txt')}: {len(vocab):,} words (seen >= {args.min_count} times)", flush=True)
    for split in HELD_OUT:
        write_keywords(os.path.join(work, f"{split}.tok"), os.path.join(dest, f"{split}.keywords"), vocab, args.lang,
                       args.max_keywords, args.workers)
        shutil.copyfile(os.path.join(work, f"{split}.tok"), os.path.join(dest, f"{split}.ref"))
    # the training sentences' keywords: the AR baseline's sources and the keywords training order's (one rule)
    write_keywords(os.path.join(work, "train.tok"), os.path.join(dest, "train.keywords"), vocab, args.lang,
                   args.max_keywords, args.workers)
    if args.ar == "yes":
        ar_bitext(work, dest, dest + "-ar", args.workers)
        print(f"ready: {dest}-ar (AR baseline: keywords -> sentence)")
    print(f"ready: {dest}")
    return dest


if __name__ == "__main__":
    main()
