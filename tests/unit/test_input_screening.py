"""Inputs screened where they enter: the generator's initial_tokens / initial_order, the decoding flags
(--constraints unordered, --slot-top-p in every mode, --unreadable-source), the raw-line screening of unreadable
sources and zero-width lines, and the warning of a step cap that cuts outputs. Each failure is one line naming the
argument or flag."""
import logging
import os

import pytest
import torch
from fairseq import options

import insnet_fairseq
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.inputs import drop_format_chars, screen_lines
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.errors import FlagError

from conftest import build_tiny_model, make_dictionary, random_batch, sample_of

USER_DIR = os.path.dirname(os.path.abspath(insnet_fairseq.__file__))


@pytest.fixture(scope="module")
def model_and_batch():
    model, d = build_tiny_model(seed=7, vocab=30)  # max_target_positions 64: outputs of at most 62 words
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)  # stops after a while
    src, src_lengths, _ = random_batch(d, [5] * 2, src_len=9, seed=3)
    return model, d, sample_of(src, src_lengths)


# -- the generator's initial_tokens / initial_order ---------------------------------------------------------------
@pytest.mark.parametrize("given,message", [
    (dict(initial_tokens=[[5, 6], [7]], initial_order=[[1, 0]]), "initial_order has 1 rows for a batch of 2 sentences"),
    (dict(initial_order=[[0], [0]]), "initial_order orders the tokens of initial_tokens: pass initial_tokens"),
    (dict(initial_tokens=[[5, 6], [7]], initial_order=[[0, 0], [0]]), r"initial_order\[0\] must be a permutation of 0..1"),
    (dict(initial_tokens=[[5, 6], [7]], initial_order=[[0, 2], [0]]), r"initial_order\[0\] must be a permutation of 0..1"),
    (dict(initial_tokens=[[5, 6], [7]], initial_order=[[1.0, 0.0], [0]]),
     r"initial_order\[0\] must be a permutation of 0..1, got torch.float32 \(ids are not rounded\)"),
    (dict(initial_tokens=[[5] * 2000, [7]]),
     r"initial_tokens\[0\] has 2000 tokens, more than the model's output limit of 62 words \(--max-target-positions 64\)"),
    (dict(initial_tokens=[[5] * 63, [7]]), r"initial_tokens\[0\] has 63 tokens, more than the model's output limit"),
])
def test_bad_initial_tokens_and_order_are_one_line(model_and_batch, given, message):
    model, d, sample = model_and_batch
    gen = InsertionGenerator(d, DecodingOptions(max_steps=3))
    with pytest.raises(ValueError, match=message) as e:
        gen.generate([model], sample, **given)
    assert "\n" not in str(e.value)


def test_initial_tokens_at_the_output_limit_are_kept(model_and_batch):
    """62 words (the limit of max_target_positions 64) are accepted and output whole: never past the limit."""
    model, d, sample = model_and_batch
    gen = InsertionGenerator(d, DecodingOptions(max_steps=3))
    hyps = gen.generate([model], sample, initial_tokens=[[5] * 62, [7, 8]], initial_order=[list(range(62)), [1, 0]])
    assert hyps[0][0]["tokens"].tolist() == [5] * 62 + [d.eos()]
    assert len(hyps[0][0]["tokens"]) <= model.decoder.max_target_positions - 1
    it = iter(hyps[1][0]["tokens"].tolist())
    assert all(t in it for t in (7, 8))  # kept, left to right, though inserted 8 first


@pytest.mark.parametrize("decoding", [dict(), dict(mode="sequential", beam=2)], ids=["greedy", "beam"])
def test_a_step_cap_that_cuts_outputs_is_warned_about(model_and_batch, caplog, decoding):
    model, d, sample = model_and_batch
    with caplog.at_level(logging.WARNING):
        hyps = InsertionGenerator(d, DecodingOptions(max_steps=1, **decoding)).generate([model], sample)
    capped = [sid for sid, h in enumerate(hyps) if h[0]["steps"] == 1]  # the others stopped before the cap
    assert capped == [0, 1] if not decoding else capped, [h[0]["steps"] for h in hyps]
    for sid in (0, 1):
        said = (f"sample id {sid}: stopped at the step cap (--max-insertion-steps 1) before the model stopped: its "
                "output may be cut short") in caplog.text
        assert said == (sid in capped)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        InsertionGenerator(d, DecodingOptions(**decoding)).generate([model], sample)  # the default cap: no warning
    assert "--max-insertion-steps" not in caplog.text


# -- decoding flags ------------------------------------------------------------------------------------------------
def parse(*flags):
    parser = options.get_generation_parser()
    return options.parse_args_and_arch(parser, ["data-bin", "--user-dir", USER_DIR, "--task", "insertion_translation",
                                                "--path", "model.pt", *flags])


@pytest.mark.parametrize("flags,message", [
    (("--constraints", "unordered"), "--constraints unordered is not supported by insertion decoding"),
    (("--slot-top-p", "0"), r"--slot-top-p must be in \(0, 1\], got 0.0"),  # sequential mode too
    (("--slot-top-p", "1.5"), r"--slot-top-p must be in \(0, 1\], got 1.5"),
    (("--insertion-mode", "parallel", "--slot-top-p", "-0.2"), r"--slot-top-p must be in \(0, 1\]"),
])
def test_decoding_flags_refused_in_one_line(flags, message):
    args = parse(*flags)
    with pytest.raises(FlagError, match=message) as e:
        DecodingOptions.from_args(args, args)
    assert "\n" not in str(e.value)


def test_ordered_constraints_and_unreadable_source_choices_are_accepted():
    for flags in (("--constraints",), ("--constraints", "ordered"), ("--unreadable-source", "empty")):
        args = parse(*flags)
        DecodingOptions.from_args(args, args)
    assert DecodingOptions.from_args(parse("--unreadable-source", "empty")).unreadable_source == "empty"
    with pytest.raises(FlagError, match="--unreadable-source must be one of translate, empty, got 'guess'"):
        DecodingOptions(unreadable_source="guess")


# -- raw lines: zero-width characters, unreadable sources ----------------------------------------------------------
@pytest.fixture(scope="module")
def dictionary():
    return make_dictionary(10)  # words w0 .. w9


def screen(d, lines, unreadable="translate", constrained=False):
    return screen_lines(lines, 0, lambda s: s, d, d, (64, 63), constrained=constrained, unreadable=unreadable)


def test_zero_width_and_format_characters_are_removed(dictionary):
    assert drop_format_chars("\ufeffw1 w2\u200b") == "w1 w2" and drop_format_chars("\u200b \u2060\ufeff") == ""
    lines, refused = screen(dictionary, ["\u200b", "\ufeff\u200b", "w1\u200b w2", "\u200b\tw3"], constrained=True)
    assert lines == ["", "", "w1 w2", "\tw3"] and refused == {}  # empty lines: the generator's empty-source path


@pytest.mark.parametrize("line,unreadable,output,message", [
    ("漢字 😀", "translate", "漢字 😀",
     "input line 1 (sample id 0): all 2 source tokens are <unk> (not in the source dictionary); the output is the "
     "model's guess (--unreadable-source empty: an empty output)"),
    ("漢字\u200b 😀", "empty", "",
     "input line 1 (sample id 0): all 2 source tokens are <unk> (not in the source dictionary), --unreadable-source "
     "empty; not translated, output is empty"),
    ("漢字 😀 w1", "empty", "漢字 😀 w1",
     "input line 1 (sample id 0): 2 of 3 source tokens are <unk> (not in the source dictionary); the output may not "
     "translate it"),
    ("漢字 w1", "translate", "漢字 w1", None),  # half: no warning
])
def test_unreadable_sources_are_warned_about(dictionary, caplog, line, unreadable, output, message):
    with caplog.at_level(logging.WARNING):
        lines, refused = screen(dictionary, [line], unreadable)
    assert lines == [output] and (0 in refused) == (unreadable == "empty" and output == "")
    if message is None:
        assert "<unk>" not in caplog.text
    else:
        assert message in caplog.text
