"""recipes/parse_dependencies.py (`make lm-parse-multi30k`): spaCy 2 dependency parses of a tiny fake
prepare_lm.py layout (work/NAME, data-bin/NAME, no raw dir). The first run installs .venv-parse as the
recipe does (about 60 MB): never skipped."""
import subprocess
import sys

from conftest import ROOT

from recipes import parse_dependencies

SENTENCES = ["a man is playing a guitar .", "two dogs run on the beach .", "the girl in a red dress smiles ."]


def fake_corpus(tmp, name="tiny", sentences=SENTENCES):
    """work/NAME/{split}.tok and .lines (every split: ``sentences``) and an empty data-bin/NAME."""
    work, dest = tmp / "work" / name, tmp / "bin" / name
    work.mkdir(parents=True)
    dest.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (work / f"{split}.tok").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
        (work / f"{split}.lines").write_text("".join(f"{i}\n" for i in range(1, len(sentences) + 1)))
    return ["--name", name, "--raw-dir", "", "--work-dir", str(tmp / "work"), "--dest-dir", str(tmp / "bin")]


def run_script(args):
    return subprocess.run([sys.executable, "recipes/parse_dependencies.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_parses_are_trees(tmp_path, capsys):
    args = fake_corpus(tmp_path)
    parse_dependencies.main(args)
    printed = capsys.readouterr().out
    assert "test: 3 sentences (0 parsed cased, 3 lowercased), 22 tokens" in printed, printed
    for split in ("train", "valid", "test"):
        rows = [line.split() for line in (tmp_path / "bin" / "tiny" / f"{split}.deps").read_text().splitlines()]
        assert len(rows) == len(SENTENCES)
        for sentence, row in zip(SENTENCES, rows):
            words = sentence.split()
            assert len(row) == len(words), (sentence, row)
            heads = [int(e.split(":")[0]) for e in row]
            labels = [e.split(":", 1)[1] for e in row]
            assert heads.count(0) == 1 and labels[heads.index(0)] == "root", row
            for i in range(1, len(heads) + 1):  # following heads from every token reaches the root, no cycle
                seen = set()
                while i:
                    assert i not in seen and 0 <= heads[i - 1] <= len(heads), row
                    seen.add(i)
                    i = heads[i - 1]
        words, entries = SENTENCES[0].split(), [e.split(":", 1) for e in rows[0]]
        parse = {w: (words[int(h) - 1] if int(h) else None, d) for w, (h, d) in zip(words, entries)}
        assert parse["playing"] == (None, "root"), rows[0]
        assert parse["man"] == ("playing", "nsubj"), rows[0]
        assert parse["guitar"] == ("playing", "dobj"), rows[0]
    parse_dependencies.main(args)  # done: every split skipped
    assert capsys.readouterr().out.count("skipped") == 3


def test_bad_layout_one_line_error(tmp_path):
    args = fake_corpus(tmp_path)
    (tmp_path / "work" / "tiny" / "valid.lines").write_text("1\n2\n")
    out = run_script(args)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()], out.stderr
    assert out.stderr.startswith("parse_dependencies: ") and "valid.tok has 3 lines" in out.stderr, out.stderr
    (tmp_path / "work" / "tiny" / "valid.lines").write_text("1\n2\n3\n")
    (tmp_path / "work" / "tiny" / "test.tok").unlink()
    out = run_script(args)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("parse_dependencies: ") and "test.tok not found" in out.stderr, out.stderr
    assert "make lm-multi30k" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
