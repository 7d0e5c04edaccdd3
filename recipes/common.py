"""Helpers shared by the recipes, the benchmarks and the experiments.

    from recipes.common import ROOT, append_row, parse_generate, split_extra

``recipes`` is a package of the editable install (``make install``), so a script run as
``python recipes/X.py`` imports it without any sys.path edit.

- :data:`ROOT`, the checkout; :data:`BIN`, the folder of this Python (a virtual environment's ``bin``);
- :func:`tool_env` and :func:`fairseq_tool`: run fairseq's command-line tools of this environment;
- :func:`split_extra`: ``[own args] -- [fairseq args]``;
- :func:`parse_generate`, :func:`ms_per_sentence`: read fairseq-generate's output;
- :func:`read_lines`, :func:`append_row`: read a text file, append a result row to a CSV file / Markdown table.
"""
import csv
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def tool_env(**extra) -> dict:
    """The environment with :data:`BIN` first on PATH, so that ``fairseq-train`` and the other console scripts are
    this environment's; ``extra`` adds variables."""
    return dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), **extra)


def fairseq_tool(name: str) -> list:
    """The command that runs fairseq's ``fairseq-NAME``: the console script beside this Python (a virtual
    environment), else ``python -m fairseq_cli.NAME`` (fairseq importable without its console scripts)."""
    script = os.path.join(BIN, f"fairseq-{name}")
    return [script] if os.path.exists(script) else [sys.executable, "-m", f"fairseq_cli.{name}"]


def split_extra(argv):
    """``[own args] -- [fairseq args]`` -> (own args, fairseq args)."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


def parse_generate(stdout: str):
    """fairseq-generate output -> {id: detokenised hyp}, {id: tokenised hyp}, {id: steps}, {id: length}."""
    detok, tok, steps, ntok = {}, {}, {}, {}
    for line in stdout.splitlines():
        tag, _, rest = line.partition("\t")
        if tag.startswith(("D-", "H-")):
            text = rest.split("\t", 1)[1] if "\t" in rest else ""
            (detok if tag[0] == "D" else tok)[int(tag[2:])] = text
        elif tag.startswith("I-"):
            steps[int(tag[2:])] = int(rest)
        elif tag.startswith("P-"):
            ntok[int(tag[2:])] = len(rest.split()) - 1  # one score per output token, plus </s>
    return detok, tok, steps, ntok


def ms_per_sentence(stderr: str):
    """Milliseconds per sentence from fairseq-generate's ``Translated N sentences ... in Ts`` line (None without it)."""
    m = re.search(r"Translated ([\d,]+) sentences .* in ([\d.]+)s", stderr)
    return round(1000 * float(m.group(2)) / int(m.group(1).replace(",", "")), 1) if m else None


def read_lines(path):
    """The lines of a UTF-8 text file, without their newlines."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def append_row(row: dict, csv_path=None, markdown_path=None, cols=None):
    """Append ``row`` to a CSV file and/or a Markdown table (``cols`` of it; header when the file is new)."""
    if csv_path:
        new = not os.path.exists(csv_path)
        with open(csv_path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            if new:
                w.writeheader()
            w.writerow(row)
    if markdown_path:
        cols = list(row) if cols is None else cols
        new = not os.path.exists(markdown_path)
        with open(markdown_path, "a", encoding="utf-8") as f:
            if new:
                f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
            f.write("| " + " | ".join(str(row[c]) for c in cols) + " |\n")
