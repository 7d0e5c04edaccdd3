"""The decoding options: one frozen dataclass built from the command line's flags (DecodingOptions.from_args), with
the measured defaults of parallel decoding, explicit flags winning, and one line naming the flag for a bad value."""
import dataclasses
import os
from types import SimpleNamespace

import pytest
from fairseq import options

import insnet_fairseq
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import MODE_DEFAULTS, DecodingOptions, check_stored, stored_decoding
from insnet_fairseq.errors import FlagError

from conftest import make_dictionary

USER_DIR = os.path.dirname(os.path.abspath(insnet_fairseq.__file__))


def parse(*flags):
    """fairseq-generate's parsed flags (task insertion_translation), as the task and build_generator get them."""
    parser = options.get_generation_parser()
    return options.parse_args_and_arch(parser, ["data-bin", "--user-dir", USER_DIR, "--task", "insertion_translation",
                                                "--path", "model.pt", *flags])


def decoding(*flags):
    args = parse(*flags)
    return DecodingOptions.from_args(args, args)


def rules(o: DecodingOptions):
    return o.slot_top_p, o.skip_repeats, o.stop_check_prob


def test_parallel_mode_defaults_to_the_best_settings_measured_on_valid():
    assert rules(decoding("--insertion-mode", "parallel")) == (0.9, True, 0.75)
    assert MODE_DEFAULTS["parallel"] == dict(slot_top_p=0.9, skip_repeats=True, stop_check_prob=0.75, end_of_slot=0.5,
                                             last_word=0.5)


def test_sequential_mode_keeps_its_defaults():
    assert rules(decoding()) == rules(decoding("--insertion-mode", "sequential")) == (0.7, False, 0.0)
    assert decoding() == DecodingOptions()  # the flags' defaults are the dataclass's


@pytest.mark.parametrize("flags,expected", [
    (("--slot-top-p", "0.7", "--no-skip-repeats", "--stop-check-prob", "0"), (0.7, False, 0.0)),  # the paper's
    (("--stop-check-prob", "0.6"), (0.9, True, 0.6)),
    (("--no-skip-repeats",), (0.9, False, 0.75)),
    (("--slot-top-p", "0.95", "--skip-repeats"), (0.95, True, 0.75)),
])
def test_explicit_flags_win_over_the_parallel_defaults(flags, expected):
    assert rules(decoding("--insertion-mode", "parallel", *flags)) == expected


def test_explicit_flags_win_in_sequential_mode():
    assert rules(decoding("--skip-repeats", "--stop-check-prob", "0.5")) == (0.7, True, 0.5)


@pytest.mark.parametrize("flags,fuse", [((), "auto"), (("--fuse-slot-queries",), "on"),
                                        (("--no-fuse-slot-queries",), "off")])
def test_fused_slot_queries_by_default_only_while_one_row_is_decoded(flags, fuse):
    """Neither flag: auto (fused at one row, see InsertionSteps.fused), in both modes; either flag forces it."""
    for mode in ("sequential", "parallel"):
        assert decoding("--insertion-mode", mode, *flags).fuse_slot_queries == fuse


def test_settings_stored_with_the_model_fill_what_is_not_given_before_the_mode_defaults():
    """A model's stored settings (recipes/store_decoding.py) are its defaults: a flag given wins, the mode's defaults
    fill the rest, and another mode's settings are not read."""
    stored = {"parallel": {"stop_check_prob": 0.5, "slot_top_p": 0.95}}
    model = SimpleNamespace(args=SimpleNamespace(decoding_defaults=stored))
    assert stored_decoding([model]) == stored and stored_decoding([SimpleNamespace(args=SimpleNamespace())]) is None
    args = parse("--insertion-mode", "parallel")
    assert rules(DecodingOptions.from_args(args, args, stored=stored)) == (0.95, True, 0.5)
    args = parse("--insertion-mode", "parallel", "--stop-check-prob", "0.75")
    assert rules(DecodingOptions.from_args(args, args, stored=stored)) == (0.95, True, 0.75)  # the flag wins
    args = parse("--insertion-mode", "sequential")
    assert rules(DecodingOptions.from_args(args, args, stored=stored)) == (0.7, False, 0.0)  # parallel's only
    assert rules(DecodingOptions.for_mode("parallel", stored=None)) == (0.9, True, 0.75)


@pytest.mark.parametrize("stored,named", [({"beam": {"stop_check_prob": 0.5}}, "the mode 'beam'"),
                                          ({"parallel": {"insertion_beam": 2}}, "insertion_beam"),
                                          ({"parallel": {"stop_check_prob": 1.5}}, "--stop-check-prob")])
def test_stored_settings_decoding_cannot_use_are_refused_naming_them(stored, named):
    with pytest.raises(FlagError, match=named):
        DecodingOptions.for_mode("parallel", stored=stored)
    assert check_stored(None) == {}


def test_for_mode_fills_only_what_is_not_given():
    o = DecodingOptions.for_mode("parallel", skip_repeats=None, slot_top_p=0.7)
    assert rules(o) == (0.7, True, 0.75)
    assert rules(DecodingOptions(mode="parallel")) == (0.7, False, 0.0)  # the dataclass itself: as given


def test_options_are_frozen_and_the_generator_reads_them():
    o = decoding("--insertion-mode", "parallel", "--insertion-candidates", "4", "--sampling", "--sampling-topk", "3",
                 "--beam", "1", "--nbest", "1", "--retain-iter-history")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.mode = "sequential"
    assert (o.candidates, o.sampling, o.sampling_topk, o.retain_history) == (4, True, 3, True)
    gen = InsertionGenerator(make_dictionary(10), o)
    assert gen.options is o
    assert [type(rule).__name__ for rule in gen.steps.word_rules] == ["SkipRepeats"]


def test_the_tasks_early_check_accepts_flags_that_need_generation_flags():
    """Before a model loads the task checks its own flags without fairseq's generation flags: --channel-weight is
    taken with the judge it needs; build_generator checks it again with the real ones."""
    args = parse("--insertion-candidates", "2", "--channel-weight", "0.5")
    assert DecodingOptions.from_args(args).reranking
    with pytest.raises(FlagError, match="--channel-weight weighs the channel model"):
        DecodingOptions.from_args(args, args)  # no --iter-decode-with-external-reranker
    args = parse("--insertion-candidates", "2", "--channel-weight", "0.5", "--iter-decode-with-external-reranker")
    assert DecodingOptions.from_args(args, args).channel_weight == 0.5


@pytest.mark.parametrize("flags,named", [
    (("--insertion-mode", "parallel", "--slot-top-p", "1.5"), "--slot-top-p"),
    (("--insertion-mode", "parallel", "--slot-top-p", "0"), "--slot-top-p"),
    (("--max-insertion-steps", "-1"), "--max-insertion-steps"),
    (("--min-token-prob", "1.0"), "--min-token-prob"),
    (("--min-token-prob", "-0.1"), "--min-token-prob"),
    (("--stop-threshold", "1.0"), "--stop-threshold"),
    (("--stop-threshold", "0"), "--stop-threshold"),
    (("--stop-check-prob", "1.0"), "--stop-check-prob"),
    (("--stop-check-prob", "-0.5"), "--stop-check-prob"),
    (("--min-length-ratio", "-1"), "--min-length-ratio"),
    (("--skip-repeats", "--no-skip-repeats"), "--no-skip-repeats"),
    (("--fuse-slot-queries", "--no-fuse-slot-queries"), "--no-fuse-slot-queries"),
    (("--insertion-candidates", "0"), "--insertion-candidates"),
    (("--insertion-candidates", "2", "--insertion-candidates-finish", "3"), "--insertion-candidates-finish"),
    (("--insertion-candidates-mbr", "1.0"), "--insertion-candidates-mbr"),
    (("--insertion-candidates", "2", "--insertion-candidates-mbr", "-1"), "--insertion-candidates-mbr"),
    (("--iter-decode-with-external-reranker",), "--iter-decode-with-external-reranker"),
    (("--insertion-candidates", "2", "--channel-weight", "-1", "--iter-decode-with-external-reranker"),
     "--channel-weight"),
    (("--insertion-candidates", "2", "--judge-order", "anchored"), "--judge-order"),
    (("--insertion-beam", "0"), "--insertion-beam"),
    (("--insertion-beam", "2", "--insertion-mode", "parallel"), "--insertion-beam"),
    (("--insertion-beam", "2", "--skip-repeats"), "--skip-repeats"),
    (("--insertion-beam", "2", "--stop-check-prob", "0.5"), "--stop-check-prob"),
    (("--insertion-beam", "2", "--min-token-prob", "0.5"), "--min-token-prob"),
    (("--insertion-verify", "--insertion-candidates", "2"), "--insertion-verify"),
    (("--verify-tolerance", "1"), "--verify-tolerance"),
    (("--insertion-verify", "--verify-tolerance", "-1"), "--verify-tolerance"),
    (("--temperature", "0.5"), "--temperature"),
    (("--sampling", "--temperature", "0", "--beam", "1", "--nbest", "1"), "--temperature"),
])
def test_each_bad_value_is_one_line_naming_its_flag(flags, named):
    with pytest.raises(FlagError) as e:
        decoding(*flags)
    assert named in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("field,value,named", [("mode", "beam", "--insertion-mode"),
                                                ("compile_decoder", "fast", "--compile-decoder"),
                                                ("fuse_slot_queries", True, "--fuse-slot-queries"),
                                                ("judge_order", "random", "--judge-order")])
def test_choices_are_checked_when_the_options_are_made_directly(field, value, named):
    """On the command line fairseq's parser refuses these choices; made directly, the options do, naming the flag."""
    with pytest.raises(FlagError, match=named):
        DecodingOptions(**{field: value})


@pytest.mark.parametrize("flag", ["--replace-repeats", "--dedupe", "--verify-redraft"])
def test_retired_flags_are_gone(flag, capsys):
    with pytest.raises(SystemExit):
        parse(flag, *(["fresh"] if flag == "--verify-redraft" else []))
    assert "unrecognized arguments" in capsys.readouterr().err


def test_last_word_is_a_probability_and_one_turns_it_off():
    assert DecodingOptions.for_mode("parallel").last_word == 0.5
    assert DecodingOptions.for_mode("parallel", last_word=1.0).last_word == 1.0
    assert DecodingOptions.for_mode("parallel", stored={"parallel": {"last_word": 0.7}}).last_word == 0.7
    for bad in (0.0, 1.5):
        with pytest.raises(FlagError, match=r"--last-word must be in \(0, 1\]"):
            DecodingOptions.for_mode("parallel", last_word=bad)
