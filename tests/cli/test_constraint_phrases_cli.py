"""benchmarks/constraint_phrases.py on a tiny trained model: fairseq-interactive --constraints keeps every phrase
contiguous and whole words, in order, in every mode (its exit status and table)."""
import pytest
import os

from benchmarks import constraint_phrases


@pytest.mark.slow
def test_constraint_check_passes_through_fairseq_interactive(small_data, tiny_checkpoint, capsys):
    work = os.path.join(os.path.dirname(os.path.dirname(small_data)), "work", "small")  # prepare_bitext's BPE text
    rc = constraint_phrases.main(["--path", tiny_checkpoint, "--data", small_data, "--lines", "60",
                                  "--source", os.path.join(work, "test.bpe.en"),
                                  "--target", os.path.join(work, "test.bpe.de")])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.split() and line.split()[0] in constraint_phrases.MODES}
    assert set(rows) == set(constraint_phrases.MODES), out
    for mode, (lines, phrases, split, not_whole, hit) in rows.items():
        assert int(lines) >= 50 and int(phrases) >= int(lines), out
        assert (split, not_whole, hit) == ("0", "0", "0"), f"{mode}: {out}"
    assert rc == 0 and "PASS" in out


def test_bpe_word_helpers():
    assert constraint_phrases.bpe_words("a@@ b c".split()) == [["a@@", "b"], ["c"]]
    assert constraint_phrases.contiguous("x a@@ b y".split(), ["a@@", "b"])
    assert not constraint_phrases.contiguous("a@@ x b".split(), ["a@@", "b"])
    assert constraint_phrases.whole_in_order("x a@@ b y", ["a@@ b", "y"]) == [True, True]
    assert constraint_phrases.whole_in_order("xa@@ b y", ["b"]) == [False]  # glued: "xab"
    assert constraint_phrases.whole_in_order("y b", ["b", "y"]) == [True, False]  # out of order
