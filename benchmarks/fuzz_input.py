#!/usr/bin/env python
"""Fuzzed input: hostile lines through fairseq-interactive (plain and ``--constraints``) and the
Python interface (``InsNetModel.from_pretrained(...).translate``, plain and with constraints).

    .venv/bin/python benchmarks/fuzz_input.py --path checkpoints/demo/checkpoint_last.pt \
        --data data-bin/multi30k_en_de [--lines 1000] [--seed 1] [--bpe-codes work/multi30k_en_de/bpe.codes]
    make fuzz CKPT=checkpoints/demo/checkpoint_last.pt [DATA=data-bin/multi30k_en_de]

The lines (seeded, built from the model's own dictionaries) cycle through the categories of
:data:`CATEGORIES`: empty lines, whitespace only, zero-width characters only (U+200B, U+FEFF: an
empty line), control characters, invalid UTF-8, very long lines (within and beyond the source
limit, and beyond what is worth tokenising), unknown words only, unreadable lines (other scripts
and emoji only: every token ``<unk>``), special symbols, stray tabs, constraint phrases absent
from the vocabulary, constraint phrases longer than the output may be, and ordinary lines. A
channel passes when:

* it exits cleanly and prints no traceback;
* it answers every line once, in input order (``H-0``, ``H-1``, ... / one string per line);
* every line of a category that must be warned about, or refused, gets a warning naming it
  (``sample id N``, N counted from 0 over the whole input), and every refused line
  ("not translated") has an empty output;
* (fairseq-interactive ``--constraints``) every constraint it printed (``C-`` lines) appears in its
  hypothesis, in order.

fairseq-interactive reads the plain run from stdin (under ``PYTHONIOENCODING=utf-8:strict``, as in
a strict UTF-8 locale) and the constrained run from ``--input FILE``, both in batches (and
buffers) of ``--batch-size`` (64) lines. Raw text goes in, as a user would type it, tokenised as the data-bin's
preprocessing.json says (recipes/prepare_bitext.py); ``--bpe-codes`` names the codes instead (``--tokenizer moses
--moses-no-escape --moses-no-dash-splits --bpe subword_nmt``, as the recipe tokenises).
Printed per channel (interactive: plain; interactive-constraints; api and api-constraints: the
hub): lines in, outputs out, lines warned (a warning names them), lines refused ("not
translated"), tracebacks, order/count; the exit status is 1 when any check fails. The warning of
the fuzz's own ``--max-insertion-steps`` cap is not counted. Decoding is capped at
``--max-insertion-steps`` (20) steps per sentence to keep long lines cheap; ``--extra`` passes more
flags to fairseq-interactive.
"""
import argparse
import logging
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)

# category -> (must a plain run name the line?, must a constrained run name it?)
CATEGORIES = {
    "empty": (True, True),
    "whitespace": (True, True),
    "zero_width": (True, True),  # only U+200B / U+FEFF / U+2060: an empty line
    "control": (False, False),
    "invalid_utf8": (True, True),
    "long_ok": (False, False),  # long but within the source limit
    "too_long": (True, True),  # more tokens than the source limit
    "huge": (True, True),  # more characters than is worth tokenising
    "unknown_words": (False, False),  # letters of the dictionary may make it partly readable
    "unreadable": (True, True),  # CJK, emoji, other scripts only: every token <unk>, warned about
    "special_symbols": (False, False),
    "stray_tabs": (False, False),
    "unknown_constraint": (False, True),
    "special_constraint": (False, True),
    "long_constraint": (False, True),  # fills the output cap: output is the constraints only
    "long_source_and_constraint": (False, False),  # fits the cap of its long source: decoded
    "too_long_constraint": (False, True),  # more words than the model's target limit: refused
    "empty_source_constraint": (False, True),  # plain: the tab is a space, the phrase the source
    "normal": (False, False),
}


def read_words(path):
    """Whole words of a fairseq dictionary (no BPE continuation, no special symbols)."""
    words = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            w = line.split(" ")[0]
            # no BPE pieces, no Moses escapes (&amp; @-@), which a tokeniser would not give back
            if w and "@" not in w and "&" not in w and not w.startswith("madeupword") and w.isprintable():
                words.append(w)
    return words or ["a"]

# characters no dictionary of a European language pair holds: CJK, Hangul, Thai, Devanagari, Arabic, emoji
SCRIPTS = "漢字語日本中文한국어ไทยहिन्दीالعربية😀🚀🎉"


def hostile_lines(n, seed, src_words, tgt_words, source_limit=1024, target_limit=1022):
    """``n`` lines as (category, bytes without the newline); line i is of the i-th category
    (cyclically), so any ``n >= len(CATEGORIES)`` covers them all. ``source_limit``: the model's
    source tokens with </s>; ``target_limit``: its output words."""
    rng = random.Random(seed)
    names = list(CATEGORIES)

    def words(vocab, k):
        return " ".join(rng.choice(vocab) for _ in range(k))

    def unknown(k):  # no dictionary (nor BPE unit) has these: every word holds a CJK character or emoji
        alphabet = "qxzjvkwßøæ"
        return " ".join(rng.choice("漢字😀") + "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 9)))
                        for _ in range(k))

    def make(cat):
        short = words(src_words, rng.randint(3, 12))
        if cat == "empty":
            return b"" if rng.random() < 0.7 else b"\r"
        if cat == "whitespace":
            return rng.choice([" ", "   ", "\t", " \t \t ", "\x0b\x0c", "\u3000\u00a0", "\x1c\x1f", "\x85 "]).encode()
        if cat == "zero_width":
            return "".join(rng.choice(["\u200b", "\ufeff", "\u2060", " "]) for _ in range(rng.randint(1, 6))).strip() \
                .encode() or "\u200b".encode()
        if cat == "unreadable":
            return " ".join("".join(rng.choice(SCRIPTS) for _ in range(rng.randint(1, 4))) + rng.choice(["", "\u200b"])
                            for _ in range(rng.randint(1, 8))).encode()
        if cat == "control":
            ctl = rng.choice(["\x00", "\x1b[31m", "\x07", "\x7f", "\u200b", "\u2028", "\r", "\x08\x08", "\ufeff"])
            return (short + ctl + words(src_words, 3) + rng.choice(["", ctl])).encode()
        if cat == "invalid_utf8":
            bad = rng.choice([b"\xff\xfe", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80\x80\x80"])
            return rng.choice([bad, short.encode() + b" " + bad, bad + b" " + short.encode()])
        if cat == "long_ok":
            return words(src_words, rng.randint(min(100, source_limit // 2), min(600, source_limit - 10))).encode()
        if cat == "too_long":
            return words(src_words, rng.randint(source_limit + 1, source_limit + 900)).encode()
        if cat == "huge":
            return ("x" * (64 * source_limit + rng.randint(1, 5000))).encode()
        if cat == "unknown_words":
            return unknown(rng.randint(1, 8)).encode()
        if cat == "special_symbols":
            return " ".join(rng.choice(["<s>", "</s>", "<pad>", "<unk>", rng.choice(src_words)])
                            for _ in range(rng.randint(1, 6))).encode()
        if cat == "stray_tabs":
            return rng.choice([short + "\t", "\t" + short, short.replace(" ", "\t", 2), short + "\t\t\t",
                               short + "\t\t" + words(tgt_words, 2)]).encode()
        if cat == "unknown_constraint":
            return (short + "\t" + unknown(rng.randint(1, 3)) + rng.choice(["", "\t" + words(tgt_words, 1)])).encode()
        if cat == "special_constraint":
            return (short + "\t" + words(tgt_words, 1) + " " + rng.choice(["<s>", "</s>", "<pad>"])).encode()
        if cat == "long_constraint":
            n = rng.randint(min(300, target_limit), min(700, target_limit))
            return (short + "\t" + words(tgt_words, n)).encode()
        if cat == "long_source_and_constraint":
            n = min(rng.randint(200, 400), source_limit // 3)
            return (words(src_words, n) + "\t" + words(tgt_words, rng.randint(n // 2, n))).encode()
        if cat == "too_long_constraint":
            return (short + "\t" + words(tgt_words, target_limit + rng.randint(1, 300))).encode()
        if cat == "empty_source_constraint":
            return ("\t" + words(tgt_words, rng.randint(1, 4))).encode()
        return (short + ("\t" + words(tgt_words, rng.randint(1, 3)) if rng.random() < 0.5 else "")).encode()

    return [(names[i % len(names)], make(names[i % len(names)])) for i in range(n)]


# ------------------------------------------------------------------------------------------------ checks
REASON = re.compile(r"WARNING.*?sample id (\d+)")
TRACEBACK = "Traceback (most recent call last)"
STEP_CAP = "stopped at the step cap (--max-insertion-steps"  # the fuzz's own cap, not a reason about the line


def reasons_of(log_lines):
    """{sample id: [warning lines]} of the warnings that name a line (the step cap's left out)."""
    found = {}
    for line in log_lines:
        m = REASON.search(line)
        if m and STEP_CAP not in line:
            found.setdefault(int(m.group(1)), []).append(line)
    return found


def verdict(name, cats, outputs, log_lines, constrained, rc=0, extra_failures=(), expect=CATEGORIES):
    """Check one channel; returns (row of figures, list of failures). ``expect``: category ->
    (must a plain run name the line?, must a constrained run?), :data:`CATEGORIES` by default."""
    n = len(cats)
    failures = list(extra_failures)
    if rc != 0:
        failures.append(f"exit status {rc}")
    tracebacks = sum(line.count(TRACEBACK) + line.count("--- Logging error ---") for line in log_lines)
    if tracebacks:
        failures.append(f"{tracebacks} traceback(s)")
    ids = [i for i, _ in outputs]
    in_order = ids == list(range(n))
    if not in_order:
        missing = sorted(set(range(n)) - set(ids))
        failures.append(f"{len(ids)} outputs for {n} lines (missing {missing[:10]}, order ok: {sorted(ids) == ids})")
    reasons = reasons_of(log_lines)
    hyps = dict(outputs)
    for i, cat in enumerate(cats):
        need = expect[cat][1 if constrained else 0]
        if need and i not in reasons:
            failures.append(f"line {i + 1} (sample id {i}, {cat}): no warning names it")
        if any("not translated" in r for r in reasons.get(i, [])) and hyps.get(i, "") != "":
            failures.append(f"line {i + 1} (sample id {i}, {cat}): refused but its output is not empty")
    refused = sum(any("not translated" in r for r in rs) for rs in reasons.values())
    row = (name, n, len(outputs), len(reasons), refused, tracebacks, "ok" if in_order else "MISMATCH")
    return row, failures


# ------------------------------------------------------------------------------------------------ channels
def run_interactive(args, lines, constrained, from_file=False):
    """One fairseq-interactive run over ``lines``: stdin (as under a strict UTF-8 locale), or with
    ``from_file`` a file given to ``--input``. Returns (outputs [(id, hypothesis)], log lines,
    exit status, failures of the constraint check, seconds)."""
    cmd = [os.path.join(BIN, "fairseq-interactive"), args.data, "--user-dir", os.path.join(ROOT, "insnet_fairseq"),
           "--task", "insertion_translation", "--path", args.path, "--batch-size", str(args.batch_size),
           "--buffer-size", str(args.batch_size), "--max-insertion-steps", str(args.max_insertion_steps)]
    if args.source_lang:
        cmd += ["--source-lang", args.source_lang, "--target-lang", args.target_lang]
    if args.bpe_codes:
        cmd += ["--tokenizer", "moses", "--moses-no-escape", "--moses-no-dash-splits", "--bpe", "subword_nmt",
                "--bpe-codes", args.bpe_codes]
    if constrained:
        cmd += ["--constraints", "ordered"]
    cmd += shlex.split(args.extra)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1",
               PYTHONIOENCODING="utf-8:strict")
    data = b"".join(raw + b"\n" for _, raw in lines)
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        if from_file:
            cmd += ["--input", os.path.join(tmp, "input.txt")]
            with open(cmd[-1], "wb") as f:
                f.write(data)
        try:
            out = subprocess.run(cmd, input=None if from_file else data, capture_output=True, cwd=ROOT, env=env,
                                 timeout=args.timeout)
            rc, stdout, stderr = out.returncode, out.stdout, out.stderr
        except subprocess.TimeoutExpired as e:
            rc, stdout, stderr = "timeout", e.stdout or b"", e.stderr or b""
    seconds = time.time() - start
    text = [l.decode("utf-8", "replace") for l in (stdout + b"\n" + stderr).split(b"\n")]
    outputs, constraints, extra = [], {}, []
    for line in stdout.split(b"\n"):
        m = re.match(rb"H-(\d+)\t[^\t]*\t?(.*)$", line)
        if m:
            outputs.append((int(m.group(1)), m.group(2).decode("utf-8", "replace")))
        m = re.match(rb"C-(\d+)\t(.*)$", line)
        if m:
            constraints.setdefault(int(m.group(1)), []).append(m.group(2).decode("utf-8", "replace"))
    hyps = dict(outputs)
    for i, phrases in constraints.items():
        it = iter(hyps.get(i, "").split())
        if not all(w in it for w in " ".join(phrases).split()):
            extra.append(f"line {i + 1} (sample id {i}): constraints {phrases!r:.80} not all in its output, in order")
    return outputs, text, rc, extra, seconds


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.levelname}:{record.name}:{record.getMessage()}")


def load_hub(args):
    from insnet_fairseq.models.insnet import InsNetModel

    overrides = dict(max_insertion_steps=args.max_insertion_steps, batch_size=args.batch_size)
    if args.source_lang:
        overrides.update(source_lang=args.source_lang, target_lang=args.target_lang)
    if args.bpe_codes:
        overrides.update(tokenizer="moses", moses_no_escape=True, moses_no_dash_splits=True, bpe="subword_nmt",
                         bpe_codes=args.bpe_codes)
    return InsNetModel.from_pretrained(os.path.dirname(os.path.abspath(args.path)),
                                       checkpoint_file=os.path.basename(args.path),
                                       data_name_or_path=os.path.abspath(args.data), **overrides)


def api_inputs(lines):
    """What a Python caller would pass: str where the bytes are UTF-8; for invalid UTF-8, the bytes
    themselves or (every other line) a str with lone surrogates, as ``surrogateescape`` gives."""
    items = []
    for i, (_, raw) in enumerate(lines):
        try:
            items.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            items.append(raw if i % 2 else raw.decode("utf-8", "surrogateescape"))
    return items


def run_api(hub, lines, constrained):
    collect = _Collect()
    root = logging.getLogger()
    root.addHandler(collect)
    tb, rc = [], 0
    start = time.time()
    try:
        outs = hub.translate(api_inputs(lines), constraints="ordered" if constrained else None)
        outputs = list(enumerate(outs)) if isinstance(outs, list) else []
        if not all(isinstance(o, str) for _, o in outputs):
            tb.append("translate returned something other than strings")
    except Exception:  # the check: there must be none
        import traceback

        tb = traceback.format_exc().splitlines()
        outputs, rc = [], 1
    finally:
        root.removeHandler(collect)
    return outputs, collect.lines + tb, rc, [], time.time() - start


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", required=True, help="InsNet checkpoint")
    p.add_argument("--data", required=True, help="its data-bin directory (dictionaries)")
    p.add_argument("--lines", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--source-lang", default=None, help="default: from the data directory's file names")
    p.add_argument("--target-lang", default=None)
    p.add_argument("--bpe-codes", default=None, help="decode raw text: Moses tokenisation + this subword-nmt BPE")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-insertion-steps", type=int, default=20)
    p.add_argument("--channels", default="interactive,interactive-constraints,api,api-constraints")
    p.add_argument("--extra", default="", help="more fairseq-interactive flags, e.g. '--insertion-mode parallel'")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per fairseq-interactive run")
    p.add_argument("--show", type=int, default=10, help="failures printed per channel")
    args = p.parse_args(argv)
    for path in (args.path, args.data):
        if not os.path.exists(path):
            sys.exit(f"fuzz_input: {path} not found")
    if bool(args.source_lang) != bool(args.target_lang):
        sys.exit("fuzz_input: give both --source-lang and --target-lang, or neither")
    if not args.source_lang:  # as fairseq does: from the file names <split>.<src>-<tgt>.<lang>.idx
        pair = next((f.split(".")[1].split("-") for f in sorted(os.listdir(args.data))
                     if len(f.split(".")) >= 3 and len(f.split(".")[1].split("-")) == 2), None)
        if pair is None:
            sys.exit(f"fuzz_input: cannot tell the language pair of {args.data}: give --source-lang and --target-lang")
        args.source_lang, args.target_lang = pair
    src, tgt = (os.path.join(args.data, f"dict.{lang}.txt") for lang in (args.source_lang, args.target_lang))
    for path in (src, tgt):
        if not os.path.isfile(path):
            sys.exit(f"fuzz_input: {path} not found")
    hub = load_hub(args)  # the Python channels' model; its limits shape the long lines
    source_limit, target_limit = hub.max_positions[0], hub.max_positions[1] - 1
    lines = hostile_lines(args.lines, args.seed, read_words(src), read_words(tgt), source_limit, target_limit)
    cats = [c for c, _ in lines]
    expect = dict(CATEGORIES)
    if args.bpe_codes:  # Moses escapes "<s>" (&lt; s &gt;): no special symbol reaches the dictionary
        expect["special_constraint"] = (False, False)
    print(f"{len(lines)} lines, seed {args.seed}, source limit {source_limit} tokens, output limit {target_limit} "
          f"words, {len(set(cats))} categories: "
          + ", ".join(f"{c} {cats.count(c)}" for c in CATEGORIES))

    rows, failed = [], False
    for channel in args.channels.split(","):
        constrained = channel.endswith("-constraints")
        if channel.startswith("interactive"):  # plain: stdin; with constraints: --input FILE
            outputs, log, rc, extra, seconds = run_interactive(args, lines, constrained, from_file=constrained)
        elif channel.startswith("api"):
            outputs, log, rc, extra, seconds = run_api(hub, lines, constrained)
        else:
            sys.exit(f"fuzz_input: unknown channel {channel!r}")
        row, failures = verdict(channel, cats, outputs, log, constrained, rc, extra, expect)
        rows.append(row + (f"{seconds:.0f}",))
        if failures:
            failed = True
            print(f"\n{channel}: {len(failures)} failure(s)")
            for f in failures[: args.show]:
                print("  " + f)
            tail = [l for l in log if l.strip()][-15:]
            if any(TRACEBACK in l for l in log):
                print("  log tail:\n    " + "\n    ".join(t[:200] for t in tail))
    header = ("channel", "lines in", "outputs out", "lines warned", "lines refused", "tracebacks", "order/count",
              "seconds")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print()
    for r in [header] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    sys.exit(main())
