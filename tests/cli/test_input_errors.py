"""Every entry point screens its input on the tiny checkpoint (tiny_checkpoint, small_data): fairseq-interactive
(a bad flag or file is one line, no traceback; an unreadable source, a zero-width line and a step cap that cuts the
output are warned about, naming the line) and the Python hub interface (token ids that are no sentence, unordered
constraints, unreadable sources, over-long constraints, a missing BPE file)."""
import logging
import os

import pytest
import torch

from conftest import BIN, run  # noqa: F401  (fixtures small_data, tiny_checkpoint)

from insnet_fairseq.errors import DataError, FlagError


def interactive(data, ckpt, *flags, input="a man rides a horse .\n"):
    cmd = [os.path.join(BIN, "fairseq-interactive"), data, "--user-dir", "insnet_fairseq", "--task",
           "insertion_translation", "--path", ckpt, "--source-lang", "en", "--target-lang", "de", *flags]
    return run(cmd, input=input, timeout=300)


def hypotheses(stdout):
    """{sample id: hypothesis} of fairseq-interactive's H- lines."""
    return {int(l.split("\t")[0][2:]): l.split("\t")[2] for l in stdout.splitlines() if l.startswith("H-")}


# -- fairseq-interactive: refused in one line ------------------------------------------------------------------
@pytest.mark.parametrize("flags,message", [
    (("--constraints", "unordered"), "--constraints unordered is not supported by insertion decoding: constraint "
     "phrases are kept in the order given; use --constraints (ordered)"),
    (("--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", "{tmp}/missing.codes"),
     "--bpe-codes {tmp}/missing.codes: no such file"),
    (("--input", "{tmp}/missing.txt"), "--input {tmp}/missing.txt: no such file"),
    (("--batch-size", "0"), "--batch-size must be >= 1"),
    (("--slot-top-p", "0"), "--slot-top-p must be in (0, 1], got 0.0"),  # sequential mode too
    (("--insertion-mode", "parallel", "--slot-top-p", "1.5"), "--slot-top-p must be in (0, 1], got 1.5"),
    (("--unreadable-source", "guess"), "argument --unreadable-source: invalid choice: 'guess'"),
])
def test_interactive_refuses_in_one_line(small_data, tiny_checkpoint, tmp_path, flags, message):
    flags = [f.format(tmp=tmp_path) for f in flags]
    out = interactive(small_data, tiny_checkpoint, *flags)
    assert out.returncode != 0
    assert message.format(tmp=tmp_path) in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and not hypotheses(out.stdout)


def test_interactive_data_path_that_is_a_file(small_data, tiny_checkpoint):
    path = os.path.join(small_data, "dict.en.txt")
    out = interactive(path, tiny_checkpoint)
    assert out.returncode != 0
    assert f"data directory '{path}' is a file, not a directory" in out.stderr, out.stderr[-2000:]
    assert "does not exist" not in out.stderr and "Traceback" not in out.stderr


# -- fairseq-interactive: warned about, naming the line ----------------------------------------------------------
# (raw text is BPE-split as the training data was, with its vocabulary: 漢字 becomes the two unknown pieces 漢@@ 字)
@pytest.mark.parametrize("flags,line,message,empty", [
    ((), "漢字 😀", "input line 2 (sample id 1): all 3 source tokens are <unk> (not in the source dictionary); the "
     "output is the model's guess (--unreadable-source empty: an empty output)", False),
    (("--unreadable-source", "empty"), "漢字 😀", "input line 2 (sample id 1): all 3 source tokens are <unk> (not in "
     "the source dictionary), --unreadable-source empty; not translated, output is empty", True),
    ((), "漢字 😀 man", "input line 2 (sample id 1): 3 of 4 source tokens are <unk> (not in the source dictionary); "
     "the output may not translate it", False),
    ((), "\u200b\ufeff \u2060", "empty source sentence (sample id 1): nothing to translate, output is empty", True),
    (("--max-insertion-steps", "1"), "a man rides a horse on the street .", "sample id 1: stopped at the step cap "
     "(--max-insertion-steps 1) before the model stopped: its output may be cut short", False),
])
def test_interactive_warns_naming_the_line(small_data, tiny_checkpoint, flags, line, message, empty):
    """Line 1 is an ordinary line, line 2 the case: its warning names it, and its output is empty or the model's."""
    out = interactive(small_data, tiny_checkpoint, *flags, input=f"a man .\n{line}\n")
    assert out.returncode == 0, out.stderr[-2000:]
    hyps = hypotheses(out.stdout)
    assert sorted(hyps) == [0, 1] and "Traceback" not in out.stderr
    assert message in out.stderr, out.stderr[-2000:]
    if empty:
        assert hyps[1] == ""
    else:
        assert "not translated" not in out.stderr  # translated: the model's own output
    assert "input line 1 " not in out.stderr  # the ordinary line is not warned about


# -- the Python hub interface ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hub(small_data, tiny_checkpoint):
    from insnet_fairseq.models.insnet import InsNetModel

    return InsNetModel.from_pretrained(os.path.dirname(tiny_checkpoint), checkpoint_file="checkpoint_last.pt",
                                       data_name_or_path=small_data, source_lang="en", target_lang="de")


@pytest.mark.parametrize("ids,message", [
    ("V", r"tokenized_sentences\[1\] holds \[{V}\]: not ids of the source dictionary \(0..{last}\)"),
    ("V+1000", r"tokenized_sentences\[1\] holds \[{V1000}\]: not ids of the source dictionary"),
    ("-1", r"tokenized_sentences\[1\] holds \[-1\]: not ids of the source dictionary"),
    ("float", r"tokenized_sentences\[1\] must be a 1-D sequence of integer token ids, got torch.float32 \(ids are not rounded\)"),
    ("2-D", r"tokenized_sentences\[1\] must be a 1-D sequence of integer token ids, got shape \(2, 3\)"),
    ("empty", r"tokenized_sentences\[1\] is empty: a sentence's ids end with </s>"),
])
def test_hub_generate_refuses_ids_that_are_no_sentence(hub, ids, message):
    V, eos = len(hub.src_dict), hub.src_dict.eos()
    row = {"V": [5, V, eos], "V+1000": [V + 1000, eos], "-1": [-1, eos], "float": [5.7, float(eos)],
           "2-D": torch.full((2, 3), 5), "empty": []}[ids]
    with pytest.raises(ValueError, match=message.format(V=V, V1000=V + 1000, last=V - 1)) as e:
        hub.generate([hub.encode("a man ."), row], beam=1)
    assert "\n" not in str(e.value)


def test_hub_generate_of_nothing_is_nothing(hub):
    assert hub.generate([], beam=1) == [] and hub.translate([]) == []


@pytest.mark.parametrize("call,message", [
    (lambda h: h.translate(None), "sentences must be a line (str or bytes) or a list of them, got NoneType"),
    (lambda h: h.translate(5), "sentences must be a line (str or bytes) or a list of them, got int"),
    (lambda h: h.sample(None), "sentences must be a line (str or bytes) or a list of them, got NoneType"),
    (lambda h: h.generate(None), "tokenized_sentences must be a list of 1-D token id sequences"),
    (lambda h: h.generate("a man"), "tokenized_sentences must be a list of 1-D token id sequences"),
    (lambda h: h.score(None), "sentences must be a str or a list of str, got NoneType"),
    (lambda h: h.encode(None), "sentence must be a str (one line of text), got NoneType"),
    (lambda h: h.encode(3), "sentence must be a str (one line of text), got int"),
    (lambda h: h.decode(None), "tokens must be a 1-D sequence of integer token ids, got NoneType"),
])
def test_hub_entry_points_name_the_argument_they_refuse(hub, call, message):
    with pytest.raises(ValueError) as e:
        call(hub)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("control", ["\x07", "\x00", "\x1b", "\x85"])
def test_a_control_character_in_a_constraint_phrase_is_a_space(hub, caplog, control):
    """Never deleted (which would join the words on either side): the phrase is encoded as with a space there."""
    from insnet_fairseq.decoding.inputs import screen_lines

    encode = hub._encode_text
    lines, refused = screen_lines([f"a man runs .\tein{control}Hund"], 0, encode, hub.src_dict, hub.tgt_dict,
                                  hub.max_positions, constrained=True)
    assert not refused and lines == ["a man runs .\tein Hund"]
    assert hub.translate([f"a man runs .\tein{control}Hund"], constraints="ordered") == \
        hub.translate(["a man runs .\tein Hund"], constraints="ordered")


def test_hub_refuses_unordered_constraints(hub):
    with pytest.raises(FlagError, match="--constraints unordered is not supported by insertion decoding"):
        hub.translate(["a man .\tein Mann"], constraints="unordered")


@pytest.mark.parametrize("unreadable,message,empty", [
    (None, "all 3 source tokens are <unk> (not in the source dictionary); the output is the model's guess", False),
    ("translate", "all 3 source tokens are <unk> (not in the source dictionary); the output is the model's guess",
     False),
    ("empty", "all 3 source tokens are <unk> (not in the source dictionary), --unreadable-source empty; not "
     "translated, output is empty", True),
])
def test_hub_warns_of_unreadable_sources(hub, caplog, unreadable, message, empty):
    with caplog.at_level(logging.WARNING):
        out = hub.translate(["a man .", "漢字\u200b 😀", "\ufeff\u200b"], unreadable_source=unreadable)
    assert len(out) == 3 and out[2] == ""  # a zero-width line is an empty line
    assert f"input line 2 (sample id 1): {message}" in caplog.text
    assert "empty source sentence (sample id 2)" in caplog.text
    if empty:
        assert out[1] == ""
    else:
        assert "not translated" not in caplog.text


def test_hub_refuses_a_bad_unreadable_source_value(hub):
    with pytest.raises(FlagError, match="--unreadable-source must be one of translate, empty, got 'guess'"):
        hub.translate(["a man ."], unreadable_source="guess")


def test_hub_generate_refuses_constraints_longer_than_the_output(hub, caplog):
    words = hub.max_positions[1] - 1
    phrase = hub.tgt_dict.encode_line("Mann", append_eos=False, add_if_not_exist=False).long()
    with caplog.at_level(logging.WARNING):
        hyps = hub.generate([hub.encode("a man ."), hub.encode("a dog .")], beam=1,
                            constraint_tokens=[[phrase.repeat(words + 1)], [phrase]])
    assert hyps[0][0]["tokens"].tolist() == [hub.tgt_dict.eos()]  # refused: empty, never past the limit
    assert hub.tgt_dict.index("Mann") in hyps[1][0]["tokens"].tolist()
    assert (f"input line 1 (sample id 0): its constraint phrases have {words + 1} tokens, more than the model's "
            f"output limit of {words} words (--max-target-positions); not translated, output is empty") in caplog.text


def test_hub_with_a_missing_bpe_codes_file(small_data, tiny_checkpoint, tmp_path):
    from insnet_fairseq.models.insnet import InsNetModel

    missing = str(tmp_path / "missing.codes")
    with pytest.raises(DataError, match=f"--bpe-codes {missing}: no such file"):
        InsNetModel.from_pretrained(os.path.dirname(tiny_checkpoint), checkpoint_file="checkpoint_last.pt",
                                    data_name_or_path=small_data, bpe="subword_nmt", bpe_codes=missing)
