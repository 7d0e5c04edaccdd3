#!/usr/bin/env python
"""Prepare a raw parallel corpus for fairseq: sacremoses tokenisation, joint subword-nmt BPE,
fairseq-preprocess with a joined dictionary.

    python recipes/prepare_bitext.py --name multi30k_en_de --raw-dir ../shared/data/multi30k \
        --src en --tgt de --bpe-merges 10000

Reads {train,valid,test}.{src,tgt} from --raw-dir; writes work/<name>/ (tokenised and BPE text,
BPE codes) and data-bin/<name>/ (binarised, with preprocessing.json, the BPE codes and vocabularies:
how raw text is tokenised to match it, which fairseq-interactive and the hub interface apply). Idempotent:
finished steps are skipped.
``--max-lines N`` keeps the first N lines of every split (tests, quick runs).
``--tokenizer LANG=NAME`` replaces the Moses tokenisation of one language by the hook in
recipes/NAME.py (``romanian``: WMT16 normalisation and diacritics removal, then Moses;
``japanese``: MeCab word segmentation). ``recipes/corpora.py`` runs this for every named corpus,
``recipes/custom.py`` (``make custom``) for any corpus.
Files are streamed line by line; ``--workers`` tokenises and applies BPE in parallel.

Input checks (every corpus): {split}.{src} and {split}.{tgt} must have the same number of lines
(else the error names both files and the first line without a counterpart); lines end at a
newline only (a carriage return, U+2028 or another line-break character inside a line becomes a space and
is reported, so no tool downstream splits the line); a pair with an empty side is dropped from
both sides and reported with its file and line. For the test split the kept pairs are listed in
work/<name>/test.lines (raw line numbers) and their references written to work/<name>/test.ref.<lang>
(the text to score detokenised output against, aligned with the binarised test set) beside
test.clean.<lang> (tokenised), so dropping a test line never shifts the references.

``--unescape auto`` (default) finds Moses/HTML escapes (``&apos; &quot; &amp; &lt; &gt; &#124;
&#91; &#93;``, what the Moses tokeniser writes by default) and turns them back into characters
before tokenisation; ``--tokenized auto`` (default) finds sides that are already Moses-tokenised
(under 25% of the first 1,000 training lines change when tokenised again, spaces around
apostrophes aside) and does not tokenise them again (tokenising twice splits ``'s`` into ``' s``);
their test references are Moses-detokenised.
Both print what they found and did; ``yes`` / ``no`` force the decision for both sides.
"""
import argparse
import importlib
import multiprocessing
import os
import re
import subprocess
import sys

SPLITS = ("train", "valid", "test")
# what Moses' escape_special_chars writes, and its reverse (deescape-special-chars.perl)
ESCAPES = {"&amp;": "&", "&#124;": "|", "&lt;": "<", "&gt;": ">", "&apos;": "'", "&quot;": '"', "&#91;": "[",
           "&#93;": "]"}
_ESCAPE = re.compile("|".join(map(re.escape, ESCAPES)))
# characters str.splitlines (and so subword-nmt's codecs reader) ends a line at; files end lines at \n only
_LINE_BREAK = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_APOSTROPHE = re.compile(r"\s*'\s*")
TOKENIZED_THRESHOLD = 0.25  # a side is "already tokenised" when fewer sampled lines change under Moses
DETECT_SAMPLE = 1000


def fail(message: str) -> None:
    sys.exit(f"prepare_bitext: {message}")


def raw_lines(path):
    """The lines of a raw file as every step reads them: split at newlines only, line-break
    characters inside a line (carriage return, U+2028, ...) replaced by spaces, a byte-order mark
    dropped."""
    with open(path, encoding="utf-8", newline="\n") as f:
        for i, line in enumerate(f):
            line = line[:-1] if line.endswith("\n") else line
            if i == 0 and line.startswith("\ufeff"):
                line = line[1:]
            yield _LINE_BREAK.sub(" ", line)


def count_lines(path) -> int:
    n = last = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            n += chunk.count(b"\n")
            last = chunk[-1]
    return n + (1 if last and last != ord("\n") else 0)  # a last line without \n counts


def check_raw(raw_dir: str, langs) -> None:
    """Every split of both sides present, not empty, and paired line by line (same line counts)."""
    missing = [f"{s}.{l}" for s in SPLITS for l in langs if not os.path.isfile(os.path.join(raw_dir, f"{s}.{l}"))]
    if missing:
        fail(f"raw corpus not found in {raw_dir!r}: missing {', '.join(missing)}")
    for split in SPLITS:
        paths = [os.path.join(raw_dir, f"{split}.{lang}") for lang in langs]
        counts = [count_lines(p) for p in paths]
        if counts[0] != counts[1]:
            (n_long, long_), (n_short, short) = sorted(zip(counts, paths), reverse=True)
            fail(f"line-count mismatch: {long_} has {n_long:,} lines but {short} has {n_short:,}: line {n_short + 1:,} "
                 f"of {long_} has no counterpart in {short} (the files pair line by line: a missing or extra line "
                 "shifts every pair after it; fix the files, then run again)")
        if counts[0] == 0:
            fail(f"{paths[0]} and {paths[1]} are empty: the {split} split has no sentence pairs")
        for path in paths:
            bad = []
            with open(path, encoding="utf-8", newline="\n") as f:
                for i, line in enumerate(f, 1):
                    if _LINE_BREAK.search(line.rstrip("\n").rstrip("\r")):  # a CRLF ending is fine
                        bad.append(i)
            if bad:
                print(f"{path}:{bad[0]}: {len(bad)} line(s) hold a carriage return or another line-break character "
                      "(U+2028, form feed, ...) inside the line: replaced by a space (lines end at \\n only)", flush=True)


def unescape(line: str) -> str:
    return _ESCAPE.sub(lambda m: ESCAPES[m.group(0)], line)


def find_escapes(raw_dir, lang):
    """(number of lines with Moses/HTML escapes, 'file:line' of the first, the escapes seen) over all splits."""
    n, first, seen = 0, None, set()
    for split in SPLITS:
        path = os.path.join(raw_dir, f"{split}.{lang}")
        for i, line in enumerate(raw_lines(path), 1):
            found = _ESCAPE.findall(line)
            if found:
                n += 1
                first = first or f"{path}:{i}"
                seen.update(found)
    return n, first, sorted(seen)


def tokenized_fraction(raw_dir, lang, do_unescape):
    """Share of sampled non-empty training lines that Moses tokenisation leaves unchanged."""
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    sample = []
    for line in raw_lines(os.path.join(raw_dir, f"train.{lang}")):
        if line.strip():
            sample.append(unescape(line) if do_unescape else line)
            if len(sample) == DETECT_SAMPLE:
                break
    if not sample:
        return 0.0, 0
    # tokenising tokenised text again still moves apostrophes ("'s" -> "' s"): spaces around them do not count
    squash = lambda text: _APOSTROPHE.sub("'", " ".join(text.split()))  # noqa: E731
    same = sum(1 for l in sample if squash(l) == squash(tok.tokenize(l, escape=False, return_str=True)))
    return same / len(sample), len(sample)


def decide_input(raw_dir, langs, hooks, tokenized="auto", unescape_mode="auto"):
    """Per language: (unescape?, already tokenised?), printing what was found and what is done."""
    decisions = {}
    for lang in langs:
        do_unescape = unescape_mode == "yes"
        if unescape_mode == "auto":
            n, first, seen = find_escapes(raw_dir, lang)
            do_unescape = n > 0
            if n:
                print(f"{lang}: Moses/HTML escapes ({' '.join(seen)}) on {n:,} line(s), first {first}: unescaped "
                      "before tokenisation", flush=True)
        is_tok = tokenized == "yes"
        if tokenized == "auto" and hooks.get(lang, "moses") == "moses":
            same, sampled = tokenized_fraction(raw_dir, lang, do_unescape)
            is_tok = sampled > 0 and (1 - same) < TOKENIZED_THRESHOLD
            print(f"{lang}: {100 * (1 - same):.0f}% of {sampled} sampled training lines change under Moses tokenisation: "
                  + ("already tokenised, kept as it is (whitespace only); test references are Moses-detokenised"
                     if is_tok else "raw text, Moses-tokenised"), flush=True)
        elif is_tok:
            print(f"{lang}: --tokenized yes: kept as it is (whitespace only); test references are Moses-detokenised",
                  flush=True)
        decisions[lang] = (do_unescape, is_tok)
    return decisions


_line_tokenizer = None
_unescape = False


def make_line_tokenizer(lang: str, hook: str = "moses"):
    """One line in, one tokenised line out. ``moses``: sacremoses punctuation normalisation and
    tokenisation (no escaping); ``pretokenized``: whitespace normalisation only; any other name is
    a module beside this file whose ``make_tokenizer(lang)`` gives the line function
    (``romanian``, ``japanese``)."""
    if hook == "pretokenized":
        return lambda line: " ".join(line.split())
    if hook == "moses":
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
        return lambda line: tok.tokenize(norm.normalize(line), escape=False, return_str=True)
    return importlib.import_module(f"recipes.{hook}").make_tokenizer(lang)


def _tokenize_line(line):
    text = _line_tokenizer(unescape(line) if _unescape else line)
    return _LINE_BREAK.sub(" ", text.replace("\n", " "))  # one line in, exactly one line out


def reference_lines(lines, lang, do_unescape, is_tokenized):
    """The test references to score detokenised output against: the raw line (unescaped when the
    corpus is), Moses-detokenised when the side came tokenised."""
    detok = None
    if is_tokenized:
        from sacremoses import MosesDetokenizer

        detok = MosesDetokenizer(lang=lang)
    for line in lines:
        line = unescape(line) if do_unescape else line
        yield detok.detokenize(line.split()) if detok else " ".join(line.split())


def tokenize(raw_dir, work, langs, max_lines, hooks=None, workers=1, decisions=None):
    """Stream {split}.{lang} through the language's line tokenizer (``hooks``: lang -> name,
    default moses; ``decisions``: lang -> (unescape, already tokenised) from decide_input) into
    {split}.tok.{lang}, and the test references into test.orig.{lang}; ``workers`` > 1 tokenises
    in forked workers, in order."""
    global _line_tokenizer, _unescape
    hooks, decisions = hooks or {}, decisions or {}
    for lang in langs:
        do_unescape, is_tok = decisions.get(lang, (False, False))
        hook = "pretokenized" if is_tok else hooks.get(lang, "moses")
        todo = [s for s in SPLITS if not os.path.exists(os.path.join(work, f"{s}.tok.{lang}"))
                or (s == "test" and not os.path.exists(os.path.join(work, f"test.orig.{lang}")))]
        if not todo:
            print(f"tokenise {lang}: done before, skipped", flush=True)
            continue
        _line_tokenizer, _unescape = make_line_tokenizer(lang, hook), do_unescape  # workers inherit them
        pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
        try:
            for split in todo:
                raw = os.path.join(raw_dir, f"{split}.{lang}")
                out = os.path.join(work, f"{split}.tok.{lang}")
                n = 0
                with open(out + ".tmp", "w", encoding="utf-8") as fout:
                    lines = (line for _, line in zip(range(max_lines or 10 ** 12), raw_lines(raw)))
                    for text in (pool.imap(_tokenize_line, lines, chunksize=500) if pool else map(_tokenize_line, lines)):
                        fout.write(text + "\n")
                        n += 1
                if split == "test":
                    ref = os.path.join(work, f"test.orig.{lang}")
                    with open(ref + ".tmp", "w", encoding="utf-8") as fref:
                        lines = (line for _, line in zip(range(max_lines or 10 ** 12), raw_lines(raw)))
                        for text in reference_lines(lines, lang, do_unescape, is_tok):
                            fref.write(text + "\n")
                    os.replace(ref + ".tmp", ref)
                os.replace(out + ".tmp", out)
                print(f"tokenised {split}.{lang}: {n} lines", flush=True)
        finally:
            if pool:
                pool.close()
                pool.join()


def drop_empty_pairs(work, langs, max_train_len=0, max_train_ratio=0.0, raw_dir=None):
    """Empty lines on either side are removed from both (and reported with their raw file and
    line), never binarised. In the training split only, ``max_train_len`` > 0 also drops pairs
    with a side longer than that many tokens and ``max_train_ratio`` > 0 pairs whose token counts
    differ by more than that factor (Moses clean-corpus-n.perl, as fairseq's WMT preparation
    scripts use it). For the test split, test.lines lists the raw line number of every kept pair and
    test.ref.{lang} holds their references (from test.orig.{lang}), aligned with test.clean.{lang}."""
    for split in SPLITS:
        paths = [os.path.join(work, f"{split}.tok.{l}") for l in langs]
        outs = [os.path.join(work, f"{split}.clean.{l}") for l in langs]
        if split == "test":
            refs_in = [os.path.join(work, f"test.orig.{l}") for l in langs]
            refs_out = [os.path.join(work, f"test.ref.{l}") for l in langs]
            line_map = os.path.join(work, "test.lines")
            extra = refs_out + [line_map]
        else:
            refs_in, refs_out, line_map, extra = [], [], None, []
        if all(os.path.exists(p) for p in outs + extra):
            print(f"clean {split}: done before, skipped", flush=True)
            continue
        where = [os.path.join(raw_dir, f"{split}.{l}") if raw_dir else p for l, p in zip(langs, paths)]
        counts = [count_lines(p) for p in paths]
        if counts[0] != counts[1]:  # tokenisation writes one line per raw line: never expected
            fail(f"{paths[0]} has {counts[0]:,} lines but {paths[1]} has {counts[1]:,}: the tokenised sides are out of "
                 "alignment; delete them and run again")
        empty, filtered, kept = [], 0, 0
        files = [open(p, encoding="utf-8", newline="\n") for p in paths + refs_in]
        writers = [open(o + ".tmp", "w", encoding="utf-8") for o in outs + refs_out + ([line_map] if line_map else [])]
        try:
            for i, rows in enumerate(zip(*files), 1):
                a, b = rows[0], rows[1]
                if not a.strip() or not b.strip():
                    empty.append(" and ".join(f"{w}:{i}" for w, t in zip(where, (a, b)) if not t.strip()))
                    continue
                if split == "train" and (max_train_len or max_train_ratio):
                    na, nb = len(a.split()), len(b.split())
                    if (max_train_len and max(na, nb) > max_train_len) or \
                            (max_train_ratio and max(na, nb) > max_train_ratio * min(na, nb)):
                        filtered += 1
                        continue
                for w, text in zip(writers, rows):
                    w.write(text)
                if line_map:
                    writers[-1].write(f"{i}\n")
                kept += 1
        finally:
            for f in files + writers:
                f.close()
        if not kept:
            fail(f"{split}: no sentence pair is left once pairs with an empty side are dropped "
                 f"({len(empty):,} dropped, first {empty[0] if empty else '-'}): is one side of the {split} split empty?")
        if empty:
            shown = ", ".join(empty[:20]) + (f", ... ({len(empty) - 20:,} more)" if len(empty) > 20 else "")
            note = ""
            if split == "test":
                note = (f"; DROPPED FROM THE TEST SET: score against {refs_out[1]} (aligned with what is binarised; "
                        f"{line_map} maps each kept pair to its raw line), not against the raw {where[1]}")
            print(f"{split}: dropped {len(empty):,} pair(s) with an empty side: {shown}{note}", flush=True)
        if filtered:
            print(f"{split}: dropped {filtered} pair(s) over the length limits (--max-train-len {max_train_len}, "
                  f"--max-train-ratio {max_train_ratio})", flush=True)
        for out in outs + extra:
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
            clean = os.path.join(work, f"{split}.clean.{lang}")
            if count_lines(out + ".tmp") != count_lines(clean):
                fail(f"apply-bpe wrote {count_lines(out + '.tmp'):,} lines for the {count_lines(clean):,} of {clean}: "
                     "a line break inside a line? (nothing binarised)")
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


def record_preprocessing(work, dest, langs, hooks, decisions):
    """DEST/preprocessing.json, with the BPE codes and vocabularies beside it: how raw text is to be tokenised to
    match this data (fairseq-interactive and the hub interface read it; insnet_fairseq/data/preprocessing.py).
    A side that came tokenised is ``pretokenized``. Written once; an earlier preparation gets it on its next run."""
    from insnet_fairseq.data import preprocessing

    names = {}
    for lang in langs:
        names[lang] = "pretokenized" if decisions[lang][1] else hooks.get(lang, "moses")
    path = preprocessing.write(dest, langs[0], langs[1], names, os.path.join(work, "bpe.codes"),
                               {lang: os.path.join(work, f"vocab.{lang}") for lang in langs})
    print(f"raw-text settings: {path} ({', '.join(f'{l}: {n}' for l, n in names.items())}; BPE codes and "
          "vocabularies copied beside it)", flush=True)


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
    p.add_argument("--tokenized", choices=["auto", "yes", "no"], default="auto",
                   help="is the corpus already (Moses-)tokenised? auto: detect per side (default)")
    p.add_argument("--unescape", choices=["auto", "yes", "no"], default="auto",
                   help="turn Moses/HTML escapes (&apos; &quot; &amp; ...) back into characters; auto: when found")
    args = p.parse_args(argv)
    hooks = dict(h.split("=", 1) for h in args.tokenizer)
    langs = (args.src, args.tgt)
    if args.src == args.tgt:
        fail(f"--src and --tgt are both {args.src!r}: the files are {{split}}.{{src}} and {{split}}.{{tgt}}")
    check_raw(args.raw_dir, langs)
    work = os.path.join(args.work_dir, args.name)
    dest = os.path.join(args.dest_dir, args.name)
    os.makedirs(work, exist_ok=True)
    done = all(os.path.exists(os.path.join(work, f)) for l in langs for f in
               [f"{s}.tok.{l}" for s in SPLITS] + [f"test.orig.{l}"])
    decisions = {} if done else decide_input(args.raw_dir, langs, hooks, args.tokenized, args.unescape)
    tokenize(args.raw_dir, work, langs, args.max_lines, hooks, args.workers, decisions)
    drop_empty_pairs(work, langs, args.max_train_len, args.max_train_ratio, raw_dir=args.raw_dir)
    bpe(work, langs, args.bpe_merges, args.workers)
    binarize(work, dest, args.src, args.tgt)
    from insnet_fairseq.data.preprocessing import SETTINGS

    if not os.path.exists(os.path.join(dest, SETTINGS)):
        if not decisions:  # tokenised by an earlier run: its decisions are made again (they read the raw files)
            decisions = decide_input(args.raw_dir, langs, hooks, args.tokenized, args.unescape)
        record_preprocessing(work, dest, langs, hooks, decisions)
    print(f"ready: {dest}")
    return dest


if __name__ == "__main__":
    main()
