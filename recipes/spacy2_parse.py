#!/usr/bin/env python
"""Dependency-parse pre-tokenised English sentences with spaCy 2 (en_core_web_sm); runs inside
``.venv-parse`` (see recipes/parse_dependencies.py, which installs it and runs this script).

    .venv-parse/bin/python recipes/spacy2_parse.py [FILE] < sentences > deps

Reads one sentence per line (tokens separated by spaces; stdin, or FILE) and writes one line per
sentence: ``HEAD:DEPREL`` for every token, separated by single spaces. HEAD is the 1-based index of
the token's head in the line, 0 for the root; DEPREL is spaCy's label, lowercased (``root`` for the
root). The Doc is built from the given words, so the tokens are exactly the input's. When the
parser splits a line into several sentences (several roots), the first root stays the root and
every other root is attached to it as ``dep``: each line is one tree. An empty line gives an empty
line. Imports only spaCy, the model and the standard library.
"""
import io
import itertools
import sys
import warnings

# the 2.2.5 model on spaCy 2.3.9: spaCy warns (W031) that the model was built for another version
warnings.filterwarnings("ignore", message=r"\[W031\]")

import en_core_web_sm  # noqa: E402
from spacy.tokens import Doc  # noqa: E402

BATCH = 1000  # sentences read, parsed and written at a time


def heads_and_labels(doc):
    """[(head, deprel)] of one parsed Doc: 1-based heads, 0 for the root, one tree (see module doc)."""
    roots = [t.i for t in doc if t.head.i == t.i]
    first = roots[0]
    out = []
    for t in doc:
        if t.i == first:
            out.append((0, "root"))
        elif t.head.i == t.i:
            out.append((first + 1, "dep"))
        else:
            label = t.dep_.lower()
            out.append((t.head.i + 1, "dep" if label in ("", "root") else label))
    return out


def parse_lines(nlp, lines):
    """Parsed output lines (no newline) of a batch of input lines."""
    words = [line.split() for line in lines]
    docs = (Doc(nlp.vocab, words=w) for w in words if w)
    for _, proc in nlp.pipeline:
        docs = proc.pipe(docs, batch_size=256)
    docs = iter(list(docs))
    out = []
    for w in words:
        if not w:
            out.append("")
            continue
        doc = next(docs)
        assert [t.text for t in doc] == w, (w, [t.text for t in doc])
        out.append(" ".join(f"{h}:{d}" for h, d in heads_and_labels(doc)))
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    source = (open(argv[0], encoding="utf-8", newline="\n") if argv
              else io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="\n"))
    nlp = en_core_web_sm.load(disable=["ner"])  # named entities do not change the parse
    lines = (line.rstrip("\n") for line in source)
    while True:
        batch = list(itertools.islice(lines, BATCH))
        if not batch:
            break
        sys.stdout.write("".join(row + "\n" for row in parse_lines(nlp, batch)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
