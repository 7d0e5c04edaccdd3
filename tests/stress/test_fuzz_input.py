"""Fuzzed input (benchmarks/fuzz_input.py on a tiny model): hostile lines of every category through
fairseq-interactive (plain from stdin, ``--constraints`` from ``--input FILE``) and the Python
interface (plain and with constraints): no traceback, one output per line in order, a warning
naming every line that needs one, refused lines empty. Plus the generator's part: empty sources and
over-long constraints answered without decoding, long constraints decoded apart from their batch."""
import argparse
import logging
import os

import pytest
import torch

from conftest import build_tiny_model, random_batch

from benchmarks import fuzz_input

from insnet_fairseq.decoding import generator as generator_module
from insnet_fairseq.decoding import step as step_module  # noqa: E402
from insnet_fairseq.decoding.generator import InsertionGenerator  # noqa: E402
from insnet_fairseq.decoding.options import DecodingOptions  # noqa: E402

N_LINES = 4 * len(fuzz_input.CATEGORIES)  # every category 4 times


@pytest.fixture(scope="module")
def fuzz(small_data, tiny_checkpoint):
    args = argparse.Namespace(path=tiny_checkpoint, data=small_data, source_lang="en", target_lang="de",
                              bpe_codes=None, batch_size=64, max_insertion_steps=4, extra="", timeout=900)
    hub = fuzz_input.load_hub(args)
    src_words = fuzz_input.read_words(os.path.join(small_data, "dict.en.txt"))
    tgt_words = fuzz_input.read_words(os.path.join(small_data, "dict.de.txt"))
    lines = fuzz_input.hostile_lines(N_LINES, 7, src_words, tgt_words, hub.max_positions[0], hub.max_positions[1] - 1)
    return args, hub, lines


def must_warn(lines, constrained):
    return sum(fuzz_input.CATEGORIES[c][1 if constrained else 0] for c, _ in lines)


@pytest.mark.parametrize("channel", ["interactive", "interactive-constraints", "api", "api-constraints"])
def test_hostile_lines(fuzz, channel):
    args, hub, lines = fuzz
    constrained = channel.endswith("-constraints")
    if channel.startswith("interactive"):
        # plain: stdin, and fairseq's --skip-invalid-size-inputs-valid-test (which used to drop long lines)
        extra = "" if constrained else "--skip-invalid-size-inputs-valid-test"
        args = argparse.Namespace(**{**vars(args), "extra": extra})
        outputs, log, rc, extra, _ = fuzz_input.run_interactive(args, lines, constrained, from_file=constrained)
    else:
        outputs, log, rc, extra, _ = fuzz_input.run_api(hub, lines, constrained)
    cats = [c for c, _ in lines]
    row, failures = fuzz_input.verdict(channel, cats, outputs, log, constrained, rc, extra)
    assert failures == [], "\n".join(failures[:10] + log[-20:])
    _, sent, received, with_reason, refused, tracebacks, order = row
    assert (sent, received, tracebacks, order) == (N_LINES, N_LINES, 0, "ok")
    assert with_reason >= must_warn(lines, constrained) and refused >= 12  # too long, huge, (constraints)
    if constrained and channel.startswith("interactive"):
        hyps = dict(outputs)
        ids = [i for i, (c, _) in enumerate(lines) if c == "empty_source_constraint"]
        assert all(hyps[i] for i in ids)  # an empty source keeps its constraints: they are its output


def test_verdict_catches_what_it_should():
    cats = ["normal", "empty", "too_long"]
    warn = "WARNING:x:input line {} (sample id {}): ...; not translated, output is empty"
    ok = [warn.format(2, 1), warn.format(3, 2)]
    assert fuzz_input.verdict("c", cats, [(0, "a"), (1, ""), (2, "")], ok, False)[1] == []
    _, f = fuzz_input.verdict("c", cats, [(0, "a"), (2, "")], ok, False)  # a line dropped
    assert any("2 outputs for 3 lines" in x for x in f)
    _, f = fuzz_input.verdict("c", cats, [(0, "a"), (2, ""), (1, "")], ok, False)  # out of order
    assert any("order" in x for x in f)
    _, f = fuzz_input.verdict("c", cats, [(0, "a"), (1, ""), (2, "")], ok[:1], False)  # no reason for line 3
    assert any("line 3 (sample id 2, too_long): no warning" in x for x in f)
    _, f = fuzz_input.verdict("c", cats, [(0, "a"), (1, ""), (2, "x")], ok, False)  # refused yet not empty
    assert any("refused but its output is not empty" in x for x in f)
    crashed = ok + ["Traceback (most recent call last):"]
    _, f = fuzz_input.verdict("c", cats, [(0, "a"), (1, ""), (2, "")], crashed, False)
    assert any("traceback" in x for x in f)


def test_reasons_leave_out_the_fuzz_step_cap_and_new_categories_are_made():
    step_cap = ("WARNING:g:sample id 0: stopped at the step cap (--max-insertion-steps 20) before the model stopped: "
                "its output may be cut short")
    unreadable = "WARNING:i:input line 2 (sample id 1): all 2 source tokens are <unk> (not in the source dictionary)"
    assert fuzz_input.reasons_of([step_cap, unreadable]) == {1: [unreadable]}
    lines = dict(fuzz_input.hostile_lines(len(fuzz_input.CATEGORIES), 3, ["a"], ["b"]))
    assert lines["zero_width"].decode().strip("\u200b\ufeff\u2060 ") == ""
    assert all(c in fuzz_input.SCRIPTS + " \u200b" for c in lines["unreadable"].decode())


# -- the generator's part ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_and_batch():
    model, d = build_tiny_model(seed=7, vocab=30)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)  # stop after a while
    src, src_lengths, _ = random_batch(d, [5] * 4, src_len=9, seed=3)
    return model, d, src, src_lengths


def sample_of(src, src_lengths):
    return {"id": torch.arange(10, 10 + len(src)), "net_input": {"src_tokens": src, "src_lengths": src_lengths}}


def test_empty_source_and_over_long_constraints_are_answered_without_decoding(model_and_batch, caplog):
    model, d, src, src_lengths = model_and_batch
    gen = InsertionGenerator(d, DecodingOptions(max_steps=6))
    src, src_lengths = src.clone(), src_lengths.clone()
    src[1], src_lengths[1] = d.pad(), 1
    src[1, -1] = d.eos()  # row 1: an empty source
    cap = 2 * int(src_lengths[2]) + 10
    given = [[5], [6, 7], [8] * (cap + 3), []]  # row 2: more constraint tokens than its output cap
    with caplog.at_level(logging.WARNING):
        hyps = gen.generate([model], sample_of(src, src_lengths), initial_tokens=given)
    assert hyps[1][0]["tokens"].tolist() == [6, 7, d.eos()] and hyps[1][0]["steps"] == 0
    assert hyps[2][0]["tokens"].tolist() == [8] * (cap + 3) + [d.eos()] and hyps[2][0]["steps"] == 0
    assert "empty source sentence (sample id 11): nothing to translate, output is its 2 constraint tokens only" \
        in caplog.text
    assert f"sample id 12: its {cap + 3} constraint tokens fill the output cap of {cap} words" in caplog.text
    alone = gen.generate([model], sample_of(src[[0, 3]], src_lengths[[0, 3]]), initial_tokens=[given[0], given[3]])
    assert [h[0]["tokens"].tolist() for h in alone] == [hyps[0][0]["tokens"].tolist(), hyps[3][0]["tokens"].tolist()]


def test_long_constraints_decode_in_their_own_group(model_and_batch, monkeypatch):
    assert InsertionGenerator.length_groups([0, 3, 100, 0, 300]) == [[0, 1, 3], [2], [4]]
    model, d, src, src_lengths = model_and_batch
    src = torch.cat([src[:, :1].expand(-1, 40).clone().fill_(d.pad()), src], 1)
    src[0, :40] = 5  # row 0: a long source, room for a long constraint
    src_lengths = src_lengths.clone()
    src_lengths[0] += 40
    given = [[9] * 40, [5], [], [6]]
    monkeypatch.setattr(generator_module, "GROUP_FREE", 8)  # the tiny model's outputs are short: group early
    assert InsertionGenerator.length_groups([len(g) for g in given]) == [[1, 2, 3], [0]]
    gen = InsertionGenerator(d, DecodingOptions(max_steps=4))
    batched = gen.generate([model], sample_of(src, src_lengths), initial_tokens=given)
    for b in range(len(src)):
        keep = src[b].ne(d.pad())
        alone = gen.generate([model], sample_of(src[b : b + 1, keep], src_lengths[b : b + 1]),
                             initial_tokens=given[b : b + 1])
        assert alone[0][0]["tokens"].tolist() == batched[b][0]["tokens"].tolist()
    assert batched[0][0]["steps"] == 4 and batched[0][0]["tokens"].tolist().count(9) >= 40
    monkeypatch.setattr(step_module, "ENCODE_CHUNK", 1)  # one row per encoding pass: the same output
    chunked = gen.generate([model], sample_of(src, src_lengths), initial_tokens=given)
    assert [h[0]["tokens"].tolist() for h in chunked] == [h[0]["tokens"].tolist() for h in batched]
