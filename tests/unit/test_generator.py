"""Decoding invariants: cached == uncached, batched == one by one, one token per sequential
step, parallel steps never fill one slot twice, constrained starts keep their tokens."""
import copy

import pytest
import torch
from torch._dynamo.utils import counters

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.state import HOLE, DecoderState, Picks, compact, group_offsets
from insnet_fairseq.decoding.step import InsertionSteps, Passes, auto_fuses, top_p_slots
from insnet_fairseq.decoding.stopping import StopCheck
from insnet_fairseq.measure import HostSyncs, PassCounter
from insnet_fairseq.reference import naive_offsets

from conftest import ROOT, build_tiny_ar, build_tiny_model, make_dictionary, random_batch, sample_of


def decode(model, d, src, src_lengths, **kw):
    gen = InsertionGenerator(d, DecodingOptions(**kw))
    return [h[0] for h in gen.generate([model], sample_of(src, src_lengths))]


@pytest.fixture(scope="module")
def model_and_batch():
    model, d = build_tiny_model(seed=7, vocab=30)
    # random weights never stop on their own; make the termination head fire after a while
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    return model, d, src, src_lengths


def test_group_offsets_docstring_example():
    # "<s> a </s>" + x, y -> "<s> x a y </s>"; insertion order <s>, </s>, a, x, y
    pos = torch.tensor([[0, 4, 2, 1, 3]])
    off = group_offsets(pos, torch.tensor([[1, 3]]), torch.tensor([[True, True]]))
    assert off[0, 0, :4].tolist() == [-1, 2, 1, 0]
    assert off[0, 1].tolist() == [-3, 1, -1, -2, 0]
    # the same rows as the offset matrix of the trajectory [0, 4, 2] then x (1), then y (3)
    full = naive_offsets([0, 4, 2, 1, 3])
    assert off[0, 1].tolist() == full[4]


def test_stopped_rows_are_read_at_once_as_each_row_alone():
    """Output.sequences (every stopped row from one sort, two gathers, three copies) against each row sorted alone: the docstring
    example "<s> </s> a" with a hole, a row with its tokens out of insertion order, and a subset of rows."""
    tokens = torch.tensor([[0, 2, 7, 1, 1], [0, 2, 5, 6, 9], [0, 2, 4, 1, 1]])
    positions = torch.tensor([[0, 2, 1, HOLE, HOLE], [0, 4, 3, 1, 2], [0, 2, 1, HOLE, HOLE]])
    state = DecoderState(tokens=tokens, positions=positions, real=positions.ne(HOLE), hidden=None, cache=[],
                         last=torch.tensor([2, 4, 2]), scores=torch.rand(3, 5), steps=torch.tensor([1, 3, 1]))
    gen = InsertionGenerator(make_dictionary(10), DecodingOptions())
    rows = torch.tensor([1, 0])
    got = gen.output.sequences(state, rows)
    assert [t.tolist() for t, _, _ in got] == [[0, 6, 9, 5, 2], [0, 7, 2]] and [k for _, _, k in got] == [3, 1]
    for (t, sc, _), row in zip(got, rows.tolist()):
        n = int(state.real[row].sum())
        idx = state.positions[row].argsort()[:n]  # the row alone: its tokens by position
        want_t, want_sc = state.tokens[row, idx], state.scores[row, idx]
        assert torch.equal(t, want_t) and torch.equal(sc, want_sc)


@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("use_cache", [True, False])
@torch.no_grad()
def test_the_plain_start_equals_the_general_start_of_empty_given_tokens(B, use_cache):
    """initial_state without given tokens builds every row's ``<s> </s>`` at once; it must be the state the general
    start (a row at a time) builds from empty given tokens, field by field (with the slot query stream: at B 1 the
    first step's queries come from the start's pass)."""
    model, d = build_tiny_model(seed=5, vocab=30, slot_query_stream=True)
    src, src_lengths, _ = random_batch(d, [5] * B, src_len=7, seed=2)
    decoder = model.decoder
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel", use_cache=use_cache))
    kv, pad = decoder.encode_source(model.forward_encoder(src, src_lengths))
    plain = gen.steps.initial_state(decoder, B, src.device, kv, pad)
    general = gen.steps.initial_state(decoder, B, src.device, kv, pad, initial_tokens=[[] for _ in range(B)])
    for name in ("tokens", "positions", "real", "hidden", "last", "scores", "steps", "slot_queries"):
        a, b = getattr(plain, name), getattr(general, name)
        assert (a is None and b is None) or torch.equal(a, b), name
    assert plain.open_right is None and general.open_right is None
    assert all(torch.equal(x, y) for (k1, v1), (k2, v2) in zip(plain.cache, general.cache) for x, y in ((k1, k2), (v1, v2)))
    assert all(torch.equal(x, y) for x, y in zip(plain.parts, general.parts))
    assert plain.tokens.tolist() == [[d.bos(), d.eos()]] * B and (plain.slot_queries is not None) == (B == 1 and use_cache)


def test_one_new_token_fast_paths_match_the_general_rule():
    """compact and group_offsets with at most one new token a sentence (every sequential step) take a short
    path: it must give what the general rule gives. compact: against the rank of each row's True (rows with
    none get a hole); group_offsets: against the offset matrix of the trajectory (naive_offsets)."""
    g = torch.Generator().manual_seed(0)
    chosen = torch.zeros(6, 9, dtype=torch.bool)
    cols = torch.randint(0, 9, (6,), generator=g)
    chosen[torch.arange(6), cols] = True
    chosen[2] = False  # a row that inserts nothing
    slot_of, real, count = compact(chosen)
    assert slot_of.shape == (6, 1) and real[:, 0].tolist() == [True, True, False, True, True, True]
    assert slot_of[real].tolist() == cols[torch.arange(6) != 2].tolist() and count.tolist() == chosen.sum(1).tolist()
    two = chosen.clone()
    two[0, (cols[0] + 1) % 9] = True  # the general path (G = 2) agrees on the rows with one slot
    assert compact(two)[0][1:, 0][real[1:, 0]].tolist() == slot_of[1:][real[1:]].tolist()
    for trajectory in ([0, 4, 2, 1, 3], [0, 3, 1, 2], [0, 5, 3, 4, 1, 2]):  # insertion order -> final positions
        pos = torch.tensor([trajectory])
        off = group_offsets(pos, pos[:, -1:], torch.tensor([[True]]))  # the last token, alone in its step
        assert off[0, 0].tolist() == naive_offsets(trajectory)[-1]


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_cached_equals_uncached(model_and_batch, mode):
    model, d, src, src_lengths = model_and_batch
    cached = decode(model, d, src, src_lengths, mode=mode, max_steps=25)
    uncached = decode(model, d, src, src_lengths, mode=mode, max_steps=25, use_cache=False)
    for a, b in zip(cached, uncached):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        assert a["steps"] == b["steps"]
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-4, rtol=0)
    assert len({tuple(h["tokens"].tolist()) for h in cached}) > 1  # not a degenerate output


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_batched_equals_one_by_one(model_and_batch, mode):
    """Outputs, scores and histories (--retain-iter-history), while the batch sheds its finished sentences."""
    model, d, src, src_lengths = model_and_batch
    batched = decode(model, d, src, src_lengths, mode=mode, max_steps=25, retain_history=True)
    assert len({h["steps"] for h in batched}) > 1  # sentences finish at different steps
    for b in range(len(src)):
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], mode=mode, max_steps=25,
                       retain_history=True)[0]
        assert alone["tokens"].tolist() == batched[b]["tokens"].tolist()
        assert alone["steps"] == batched[b]["steps"] == len(batched[b]["history"]) - 1
        assert [x["tokens"].tolist() for x in alone["history"]] == [x["tokens"].tolist() for x in batched[b]["history"]]
        torch.testing.assert_close(alone["positional_scores"], batched[b]["positional_scores"], atol=1e-4, rtol=0)


def test_sequential_inserts_one_token_per_step(model_and_batch):
    model, d, src, src_lengths = model_and_batch
    for h in decode(model, d, src, src_lengths, max_steps=30, retain_history=True):
        assert h["steps"] == len(h["tokens"]) - 1  # tokens = words + </s>: steps == length - 2
        sizes = [len(x["tokens"]) for x in h["history"]]
        assert sizes == list(range(sizes[0], sizes[0] + len(sizes)))


def is_subsequence(small, big):
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def test_parallel_never_fills_a_slot_twice(model_and_batch):
    """Two tokens in one slot would be adjacent new tokens in the new sequence."""
    model, d, src, src_lengths = model_and_batch
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel", slot_top_p=0.9))
    dec = model.decoder
    with torch.no_grad():
        source_kv, source_pad = dec.encode_source(model.forward_encoder(src, src_lengths))
        state = gen.steps.initial_state(dec, len(src), src.device, source_kv, source_pad)
        widest = 0
        for _ in range(6):
            S = state.tokens.size(1)
            new = gen.steps.step(dec, state, source_kv, source_pad, max_len=200)
            for b in range(len(src)):
                seq = new.positions[b].argsort()[: int(new.lengths[b])]
                is_new = (seq >= S).tolist()
                assert not any(x and y for x, y in zip(is_new, is_new[1:]))
                assert not is_new[0] and not is_new[-1]  # never left of <s> or right of </s>
                assert new.tokens[b, seq].tolist()[:1] == [d.bos()] and new.tokens[b, seq].tolist()[-1] == d.eos()
                widest = max(widest, sum(is_new))
            state = new
    assert widest > 1  # parallel steps really inserted several tokens


def test_constrained_start_keeps_given_tokens_in_order(model_and_batch):
    model, d, src, src_lengths = model_and_batch
    gen = InsertionGenerator(d, DecodingOptions(max_steps=12))
    given = [[5, 9, 7], [11], [6, 6, 8, 10], [], [12, 5], [9]]
    orders = [[2, 0, 1], [0], [3, 1, 0, 2], [], [1, 0], [0]]
    hyps = gen.generate([model], sample_of(src, src_lengths), initial_tokens=given, initial_order=orders)
    for g, (h,) in zip(given, hyps):
        out = h["tokens"].tolist()
        assert out[-1] == d.eos()
        assert is_subsequence(g, out[:-1])
        assert h["steps"] == len(out) - 1 - len(g)
    with pytest.raises(ValueError, match="permutation"):
        gen.generate([model], sample_of(src[:1], src_lengths[:1]), initial_tokens=[[5, 6]], initial_order=[[0, 0]])


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_preallocated_cache_equals_uncached_with_constraints_and_growth(model_and_batch, mode, monkeypatch):
    """The in-place cache (its buffers made to start with room for 1 token, so they grow by doubling during
    decoding, and rows leave the batch as they stop) gives the uncached path's outputs token for token,
    from constrained starts; every step appends in place except when a buffer is full."""
    import insnet_fairseq.decoding.step as step_module
    from insnet_fairseq.decoding.cache import ColumnStore

    grown = []  # per reserve(): did it need new buffers
    made = []

    class TinyStore(ColumnStore):
        def __init__(self, tensors, capacity):
            size = next(iter(tensors.values())).size(1)
            super().__init__(tensors, size + 1 if not made else capacity)  # the first: room for one token
            made.append(1)

        def reserve(self, size, extra):
            out = super().reserve(size, extra)
            grown.append(out is not self)
            return out

    model, d, src, src_lengths = model_and_batch
    given = [[5, 9, 7], [11], [6, 6, 8, 10], [], [12, 5], [9]]
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=20)
    uncached = InsertionGenerator(d, DecodingOptions(use_cache=False, **kw)).generate([model], sample_of(src, src_lengths), initial_tokens=given)
    monkeypatch.setattr(step_module, "ColumnStore", TinyStore)
    cached = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample_of(src, src_lengths), initial_tokens=given)
    for (a,), (b,) in zip(cached, uncached):
        assert a["tokens"].tolist() == b["tokens"].tolist() and a["steps"] == b["steps"]
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-4, rtol=0)
    assert sum(grown) >= 2 and not all(grown)  # buffers grew during decoding; other steps wrote in place


def test_column_store_appends_in_place_grows_and_never_overwrites_a_newer_state():
    from insnet_fairseq.decoding.cache import ColumnStore

    t = torch.arange(6).view(2, 3)
    kv = torch.zeros(2, 1, 3, 2)
    store = ColumnStore({"tokens": t, "k0": kv}, capacity=8)  # docstring example: 3 of 8 columns
    assert store.capacity == 8 and store.buffers["k0"].shape == (2, 1, 8, 2)
    same = store.append(3, {"tokens": torch.full((2, 2), 7), "k0": torch.ones(2, 1, 2, 2)})
    views = same.views(5)
    assert same is store and views["tokens"].tolist() == [[0, 1, 2, 7, 7], [3, 4, 5, 7, 7]]
    assert views["k0"][:, :, 3:].eq(1).all() and views["tokens"].data_ptr() == store.buffers["tokens"].data_ptr()
    # appending to the older 3-column state again (a branch) copies: the 5-column views keep their 7s
    branch = store.append(3, {"tokens": torch.full((2, 1), 9), "k0": torch.ones(2, 1, 1, 2)})
    bviews = branch.views(4)
    assert branch is not store and views["tokens"][:, 3:].eq(7).all() and bviews["tokens"][:, 3].eq(9).all()
    # full: the next append doubles the capacity and keeps every column
    full = store.append(5, {"tokens": torch.full((2, 4), 8), "k0": torch.ones(2, 1, 4, 2)})
    fviews = full.views(9)
    assert full.capacity == 16 and fviews["tokens"][0].tolist() == [0, 1, 2, 7, 7, 8, 8, 8, 8]
    assert full.select(torch.tensor([1]), 9).views(9)["tokens"].tolist() == [[3, 4, 5, 7, 7, 8, 8, 8, 8]]
    # a row selection of the older 3-column state: its own buffers, 3 columns filled, appended in place
    older = store.select(torch.tensor([0]), 3)
    assert older.filled == 3 and older.capacity == 8 and older.views(3)["tokens"].tolist() == [[0, 1, 2]]
    assert older.append(3, {"tokens": torch.full((1, 1), 6), "k0": torch.ones(1, 1, 1, 2)}) is older
    assert older.views(4)["tokens"].tolist() == [[0, 1, 2, 6]] and views["tokens"][0].tolist() == [0, 1, 2, 7, 7]
    # a selection keeps the filled columns and room to grow, not a long empty tail: 3 of 64 -> 3 of 11
    roomy = ColumnStore({"tokens": t, "k0": kv}, capacity=64).select(torch.tensor([1, 0]), 3)
    assert roomy.capacity == 11 and roomy.buffers["k0"].shape == (2, 1, 11, 2)
    assert roomy.views(3)["tokens"].tolist() == [[3, 4, 5], [0, 1, 2]]
    assert roomy.append(3, {"tokens": torch.full((2, 8), 5), "k0": torch.ones(2, 1, 8, 2)}) is roomy
    grown = roomy.append(11, {"tokens": torch.full((2, 1), 4), "k0": torch.ones(2, 1, 1, 2)})
    assert grown.capacity == 22 and grown.views(12)["tokens"][0].tolist() == [3, 4, 5] + [5] * 8 + [4]
    with pytest.raises(ValueError, match="same number of columns"):
        ColumnStore({"tokens": t, "k0": torch.zeros(2, 1, 4, 2)}, capacity=8)


def test_bad_mode_and_empty_source(model_and_batch, caplog):
    model, d, src, src_lengths = model_and_batch
    with pytest.raises(ValueError, match="--insertion-mode must be one of sequential, parallel"):
        InsertionGenerator(d, DecodingOptions(mode="beam"))
    src = src.clone()
    src[1] = d.pad()
    src[1, -1] = d.eos()
    src_lengths = src_lengths.clone()
    src_lengths[1] = 1
    hyps = decode(model, d, src, src_lengths, max_steps=5)
    assert hyps[1]["tokens"].tolist() == [d.eos()] and hyps[1]["steps"] == 0
    assert "empty source sentence (sample id 1)" in caplog.text
    assert len(hyps[0]["tokens"]) > 1


def test_bad_initial_tokens_are_refused_with_their_row(model_and_batch):
    model, d, src, src_lengths = model_and_batch
    gen = InsertionGenerator(d, DecodingOptions(max_steps=3))
    two = sample_of(src[:2], src_lengths[:2])
    V = len(d)
    for given, message in [([[5]], "1 rows for a batch of 2"),
                           ([[5], [d.pad()]], r"initial_tokens\[1\] holds \[1\]"),
                           ([[d.bos(), 5], [6]], r"initial_tokens\[0\] holds \[0\]"),
                           ([[5], [V]], rf"initial_tokens\[1\] holds \[{V}\]: not word ids .* \({V} symbols"),
                           ([[5], [-3]], r"initial_tokens\[1\] holds \[-3\]"),
                           ([[5.0], [6]], r"initial_tokens\[0\] must be a list of integer token ids")]:
        with pytest.raises(ValueError, match=message):
            gen.generate([model], two, initial_tokens=given)
    assert len(gen.generate([model], two, initial_tokens=[[d.unk(), 5], []])) == 2  # <unk> is a word


def test_decoding_flags_are_checked_where_they_apply():
    d = make_dictionary(10)
    with pytest.raises(ValueError, match="--max-insertion-steps must be >= 0"):
        InsertionGenerator(d, DecodingOptions(max_steps=-5))
    with pytest.raises(ValueError, match=r"--slot-top-p must be in \(0, 1\], got 1.5"):
        InsertionGenerator(d, DecodingOptions(mode="parallel", slot_top_p=1.5))
    with pytest.raises(ValueError, match=r"--slot-top-p must be in \(0, 1\], got 0"):  # in every mode
        InsertionGenerator(d, DecodingOptions(mode="sequential", slot_top_p=0))


def adjacent_repeats(tokens):
    return sum(a == b for a, b in zip(tokens, tokens[1:]))


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_skip_repeats_leaves_no_adjacent_duplicates(model_and_batch, mode):
    model, d, src, src_lengths = model_and_batch
    plain = decode(model, d, src, src_lengths, mode=mode, slot_top_p=0.9, max_steps=25)
    assert sum(adjacent_repeats(h["tokens"].tolist()) for h in plain) > 0  # the tiny model does repeat
    fixed = decode(model, d, src, src_lengths, mode=mode, slot_top_p=0.9, max_steps=25, skip_repeats=True)
    assert [adjacent_repeats(h["tokens"].tolist()) for h in fixed] == [0] * len(src)
    for b in range(len(src)):  # batched == one by one holds with the flag too
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], mode=mode, slot_top_p=0.9,
                       max_steps=25, skip_repeats=True)[0]
        assert alone["tokens"].tolist() == fixed[b]["tokens"].tolist()


def test_skip_repeats_leaves_the_repeating_slots_open_unless_nothing_is_left():
    """SkipRepeats on one step: "<s> 5 6 </s>", slots (<s>,5) (5,6) (6,</s>) chosen with 5, 7, 6: only 7 is
    inserted; with 5 and 6 alone chosen, the sentence keeps both slots, each with its best non-neighbour token."""
    from insnet_fairseq.decoding.state import DecoderState
    from insnet_fairseq.decoding.word_rules import SkipRepeats, StepWords

    d = make_dictionary(12)
    V = len(d)
    tokens = torch.tensor([[d.bos(), d.eos(), 5, 6]])
    positions = torch.tensor([[0, 3, 1, 2]])
    state = DecoderState(tokens=tokens, positions=positions, real=torch.ones(1, 4, dtype=torch.bool), hidden=None,
                         cache=None, last=torch.tensor([3]), scores=torch.zeros(1, 4), steps=torch.zeros(1, dtype=torch.long))
    chosen = torch.tensor([[True, True, True]])
    logits = torch.full((3, V), -10.0)
    for n, (first, second) in enumerate([(5, 8), (7, 9), (6, 10)]):
        logits[n, first], logits[n, second] = 5.0, 4.0
    picked = torch.tensor([5, 7, 6])
    lp = torch.log_softmax(logits, -1).gather(1, picked.unsqueeze(1)).squeeze(1)
    skip = SkipRepeats(InsertionGenerator(d, DecodingOptions(mode="parallel")).steps.choose_tokens)
    kept = skip(state, StepWords(chosen, Picks.of(chosen), picked, lp), logits, None)
    assert kept.chosen.tolist() == [[False, True, False]] and kept.tokens.tolist() == [7]
    two = torch.tensor([[True, False, True]])
    kept = skip(state, StepWords(two, Picks.of(two), picked[[0, 2]], lp[[0, 2]]), logits[[0, 2]], None)
    assert kept.chosen.tolist() == [[True, False, True]] and kept.tokens.tolist() == [8, 10]


@pytest.mark.parametrize("stream", [True, "untied", "last1"])
@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_slot_query_model_cached_uncached_and_batched_agree(mode, stream):
    """--slot-query-stream (its layers the tokens' or its own): the queries read the cache (holes included)
    exactly as a re-encoding does."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=stream)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    cached = decode(model, d, src, src_lengths, mode=mode, slot_top_p=0.9, max_steps=25)
    uncached = decode(model, d, src, src_lengths, mode=mode, slot_top_p=0.9, max_steps=25, use_cache=False)
    for b in range(len(src)):
        assert cached[b]["tokens"].tolist() == uncached[b]["tokens"].tolist()
        torch.testing.assert_close(cached[b]["positional_scores"], uncached[b]["positional_scores"], atol=1e-4, rtol=0)
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], mode=mode, slot_top_p=0.9, max_steps=25)[0]
        assert alone["tokens"].tolist() == cached[b]["tokens"].tolist()
    assert len({tuple(h["tokens"].tolist()) for h in cached}) > 1


@pytest.mark.parametrize("stream", [True, "untied", "last1"])
@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_fused_slot_queries_equal_the_separate_query_pass(mode, stream, monkeypatch):
    """--slot-query-stream, cached: a step's pass computes the next step's slot queries (fused) exactly as a
    separate query pass over the cache does: same tokens and scores, from constrained starts, with
    candidates, and with one pass per step, the initial state's included (the decoder's query_stream never runs).
    With untied query layers the pass runs each layer's tokens, then its queries."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=stream)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    given = [[5, 9], [11], [], [6, 8, 10], [12], []]
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=25, candidates=2)
    sample = sample_of(src, src_lengths)
    separate = InsertionGenerator(d, DecodingOptions(fuse_slot_queries="off", **kw)).generate([model], sample,
                                                                                              initial_tokens=given)
    calls = []
    query_stream = model.decoder.context.query_stream
    monkeypatch.setattr(model.decoder.context, "query_stream", lambda *a, **k: calls.append(1) or query_stream(*a, **k))
    fused = InsertionGenerator(d, DecodingOptions(fuse_slot_queries="on", **kw)).generate([model], sample, initial_tokens=given)
    assert [len(hyps) for hyps in fused] == [len(hyps) for hyps in separate] == [2] * 6  # every candidate, best first
    for a, b in zip((h for hyps in fused for h in hyps), (h for hyps in separate for h in hyps)):
        assert a["tokens"].tolist() == b["tokens"].tolist() and a["steps"] == b["steps"]
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-4, rtol=0)
    assert len(calls) == 0  # every pass computes the next step's queries, the initial state's too
    assert len({tuple(hyps[0]["tokens"].tolist()) for hyps in fused}) > 1


@pytest.mark.parametrize("mode,slot_top_p,batch", [("sequential", 0.9, [0, 1, 2, 3, 4, 5]), ("parallel", 0.5, [0, 4])])
def test_auto_fusion_fuses_while_one_row_is_decoded(mode, slot_top_p, batch, monkeypatch):
    """The default (fuse_slot_queries auto, neither flag): a sentence decoded alone never runs the query stream (the
    pass over its start makes the first step's queries, every step's own pass the next step's), a batch runs it at
    every step until one row is
    left, then switches to fused; every way decodes what two passes a step decode (off), token for token. (Steps
    capped by the sources' lengths, which differ: the longest row decodes alone for a few steps.)"""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=True)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    kw = dict(mode=mode, slot_top_p=slot_top_p, max_steps=0)
    calls = []
    query_stream = model.decoder.context.query_stream
    monkeypatch.setattr(model.decoder.context, "query_stream", lambda *a, **k: calls.append(1) or query_stream(*a, **k))

    def run(fuse, rows):
        calls.clear()
        rows_src = src[rows]
        if len(rows) == 1:  # alone: without the batch's left padding
            rows_src = rows_src[:, rows_src[0].ne(d.pad())]
        sample = sample_of(rows_src, src_lengths[rows])
        hyps = InsertionGenerator(d, DecodingOptions(fuse_slot_queries=fuse, **kw)).generate([model], sample)
        return [h[0] for h in hyps], len(calls)

    off, off_calls = run("off", batch)
    auto, auto_calls = run("auto", batch)
    steps = [h["steps"] for h in off]
    assert off_calls == max(steps)  # two passes: the query stream at every batched step
    longest, second = sorted(steps)[-1], sorted(steps)[-2]
    assert longest > second + 1  # the last row decodes alone for more than one step
    assert auto_calls == second + 1  # batched until one row is left; its first step alone, then fused
    for a, b in zip(auto, off):
        assert a["tokens"].tolist() == b["tokens"].tolist() and a["steps"] == b["steps"]
        torch.testing.assert_close(a["positional_scores"], b["positional_scores"], atol=1e-4, rtol=0)
    for i, row in enumerate(batch):  # one sentence alone: no query-stream pass
        (alone,), n_calls = run("auto", [row])
        assert n_calls == 0
        assert alone["tokens"].tolist() == off[i]["tokens"].tolist() and alone["steps"] == off[i]["steps"]
    assert len({tuple(h["tokens"].tolist()) for h in off}) > 1


def test_auto_fusion_fuses_every_batch_on_a_gpu():
    """The default's rule (neither flag): on a CPU fused at one row only, on a GPU at any number of rows, an end-of-slot
    model at any number anywhere; the step reads the device from the decoder's weights; the flags override it, and a
    model without the slot query stream, or uncached decoding, never fuses."""
    assert auto_fuses(1, on_gpu=False) and not auto_fuses(2, on_gpu=False) and not auto_fuses(64, on_gpu=False)
    assert auto_fuses(1, on_gpu=True) and auto_fuses(64, on_gpu=True)
    assert auto_fuses(64, on_gpu=False, every_slot=True)  # an end-of-slot model reads every live slot's query
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=True)

    class GpuWeight:  # what the rule reads of a weight on a GPU, without one
        is_cuda = True

    def fused(fuse, rows, gpu, use_cache=True):
        steps = InsertionSteps(d, DecodingOptions(mode="parallel", use_cache=use_cache).core, Passes(fuse))
        decoder = copy.copy(model.decoder)
        context = copy.copy(decoder.context)
        object.__setattr__(context, "embed_tokens", type("E", (), {"weight": GpuWeight()})() if gpu
                           else context.embed_tokens)
        object.__setattr__(decoder, "context", context)
        return steps.fused(decoder, rows)

    assert [fused("auto", rows, gpu=False) for rows in (1, 8)] == [True, False]
    assert [fused("auto", rows, gpu=True) for rows in (1, 8)] == [True, True]
    assert not fused("off", 1, gpu=True) and fused("on", 8, gpu=False)
    assert not fused("auto", 1, gpu=True, use_cache=False)
    plain, d2 = build_tiny_model(seed=7, vocab=30, slot_query_stream=False)
    assert not InsertionSteps(d2, DecodingOptions(mode="parallel").core, Passes("on")).fused(plain.decoder, 1)
    gap, d3 = build_tiny_model(seed=7, vocab=30, slot_query_stream=True, slot_objective="gap")
    steps = InsertionSteps(d3, DecodingOptions(mode="parallel").core)
    assert steps.fused(gap.decoder, 64)  # an end-of-slot model: fused at any batch on a CPU too
    assert not InsertionSteps(d3, DecodingOptions(mode="parallel").core, Passes("off")).fused(gap.decoder, 1)


@pytest.mark.slow  # torch.compile traces every pass: the slowest unit test by far
def test_compiled_decoder_pass_decodes_as_the_eager_one():
    """--compile-decoder: the cached step's pass through torch.compile (dynamic shapes; here the aot_eager backend,
    which traces and functionalises the in-place cache writes as inductor does, without a C++ compiler) decodes a
    batch of 6 (padded sources, holes, several new tokens a step) token for token as the eager pass, with the fused
    slot queries in parallel mode and the tokens' pass alone in sequential mode, and in reduce-overhead mode (CUDA
    graphs on a GPU) with the pass that writes no input: the cache's new columns written after it; a bad mode is
    refused by its flag."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=True)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    sample = sample_of(src, src_lengths)
    for mode, fused, backend, compiled_mode in [("parallel", True, "aot_eager", "default"),
                                                ("sequential", False, "eager", "default"),
                                                ("parallel", True, "eager", "reduce-overhead")]:
        kw = dict(mode=mode, slot_top_p=0.9, max_steps=25, fuse_slot_queries="on" if fused else "off")
        eager = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample)
        gen = InsertionGenerator(d, DecodingOptions(compile_decoder=compiled_mode, compile_backend=backend, **kw))
        counters.clear()
        compiled = gen.generate([model], sample)
        assert list(gen.steps.passes._compiled) == [(id(model.decoder.context), "forward_with_queries" if fused else "forward")]
        # the pass was traced into graphs, with no part of it left to eager Python (a graph break)
        assert counters["stats"]["unique_graphs"] >= 1
        assert not counters["unimplemented"] and not counters["graph_break"], dict(counters["unimplemented"])
        for a, b in zip(compiled, eager):
            assert a[0]["tokens"].tolist() == b[0]["tokens"].tolist() and a[0]["steps"] == b[0]["steps"]
            torch.testing.assert_close(a[0]["positional_scores"], b[0]["positional_scores"], atol=1e-5, rtol=0)
        assert len({tuple(h[0]["tokens"].tolist()) for h in compiled}) > 1
    with pytest.raises(ValueError, match="--compile-decoder"):
        InsertionGenerator(d, DecodingOptions(compile_decoder="fast"))


def test_picks_select_what_boolean_indexing_selects():
    mask = torch.tensor([[False, True, True], [True, False, False]])
    p = Picks.of(mask)
    assert (p.rows.tolist(), p.cols.tolist(), p.n, p.widest) == ([0, 0, 1], [1, 2, 0], 3, 2)  # the docstring example
    g = torch.Generator().manual_seed(0)
    for B, K in [(4, 6), (1, 1), (1, 7), (5, 9), (0, 3)]:  # (one row: by nonzero)
        mask = torch.rand(B, K, generator=g) < 0.4
        y = torch.randn(B, K, 3, generator=g)  # a trailing dimension, as the slot queries [B, K, D]
        p = Picks.of(mask)
        assert torch.equal(p.take(y), y[mask])
        assert torch.equal(p.place(p.take(y), 0.0), y * mask.unsqueeze(2))
        if B and mask.any():
            for a, b in zip(compact(mask, p), compact(mask)):
                assert torch.equal(a, b)
    slot = torch.tensor([2, 0, 2])
    one = Picks.one_per_row(slot, 4)
    assert torch.equal(one.mask, torch.tensor([[0, 0, 1, 0], [1, 0, 0, 0], [0, 0, 1, 0]]).bool())
    y = torch.randn(3, 4)
    assert torch.equal(one.take(y), y[one.mask]) and (one.n, one.widest) == (3, 1)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
@pytest.mark.parametrize("query_stream", [False, True])
@pytest.mark.parametrize("rows", [1, 6])
def test_picks_path_equals_the_boolean_mask_path(mode, query_stream, rows, monkeypatch):
    """The step selects its chosen slots by index (:class:`Picks`; at batch 1 and one new token, without the
    all-clear attention mask): token for token and score for score what boolean indexing gives, in both modes,
    with repeats skipped, unsure words held back and the stop check's forced words."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=query_stream)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    src, src_lengths = src[:rows], src_lengths[:rows]
    if rows == 1:
        src = src[:, src[0].ne(d.pad())]
    settings = [dict(mode=mode, max_steps=25)]
    if mode == "parallel":
        settings += [dict(mode=mode, max_steps=25, skip_repeats=True, min_token_prob=0.2, stop_check_prob=0.3,
                          slot_top_p=0.9),
                     dict(mode=mode, max_steps=25, skip_repeats=True,
                          fuse_slot_queries="on" if query_stream else "off")]
    fast = [decode(model, d, src, src_lengths, **kw) for kw in settings]

    def by_mask(mask):  # the reference: nonzero and boolean indexing, what Picks spares
        count = mask.sum(1)
        idx = mask.nonzero()
        return Picks(mask, idx[:, 0], idx[:, 1], int(count.sum()), int(count.max()) if len(mask) else 0)

    def place(self, values, fill):
        out = values.new_full((*self.mask.shape, *values.shape[1:]), fill)
        out[self.mask] = values
        return out

    monkeypatch.setattr(Picks, "of", staticmethod(by_mask))
    monkeypatch.setattr(Picks, "take", lambda self, x: x[self.mask])
    monkeypatch.setattr(Picks, "place", place)
    monkeypatch.setattr(InsertionSteps, "picks_of", lambda self, chosen, forced=None: by_mask(chosen))
    for kw, by_index in zip(settings, fast):
        masked = decode(model, d, src, src_lengths, **kw)
        for a, b in zip(by_index, masked):
            assert a["tokens"].tolist() == b["tokens"].tolist() and a["steps"] == b["steps"]
            assert torch.equal(a["positional_scores"], b["positional_scores"])
    assert max(h["steps"] for h in fast[0]) > 3


@pytest.mark.parametrize("fuse", ["on", "off"])
def test_offsets_prepared_once_a_pass_decode_as_each_layers_own(fuse, monkeypatch):
    """A pass prepares its offsets' gather index once for all layers (InsNetContextEncoder.offset_index): the same
    outputs and scores, bit for bit, as each layer preparing its own, fused or with the query stream's own pass."""
    from insnet_fairseq.modules.decoder import InsNetContextEncoder

    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=True)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    kw = dict(mode="parallel", max_steps=25, skip_repeats=True, fuse_slot_queries=fuse)
    once = decode(model, d, src, src_lengths, **kw)
    monkeypatch.setattr(InsNetContextEncoder, "offset_index", lambda self, offsets, attn_mask, batch: None)
    for a, b in zip(once, decode(model, d, src, src_lengths, **kw)):
        assert a["tokens"].tolist() == b["tokens"].tolist() and a["steps"] == b["steps"]
        assert torch.equal(a["positional_scores"], b["positional_scores"])
    assert max(h["steps"] for h in once) > 3


@pytest.mark.parametrize("query_stream", [False, True])
def test_decoding_steps_read_the_device_only_to_count_words(query_stream, monkeypatch):
    """No op of a cached sequential step would make the host wait for a GPU (.item(), .nonzero(), boolean
    indexing: experiments/host_syncs.py); a parallel step reads once to learn how many words it chose, and once more
    for each rule that drops some (--skip-repeats: whether a sentence is left with none, and what is left). The
    loop's stop check, one read per step, is outside ``step``."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=query_stream)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    counts = []
    step = InsertionSteps.step

    def counted(self, *args, **kwargs):
        with HostSyncs() as syncs:
            out = step(self, *args, **kwargs)
        counts.append(syncs.total)
        return out

    monkeypatch.setattr(InsertionSteps, "step", counted)
    for kw, most in [(dict(), 0), (dict(mode="parallel"), 1), (dict(mode="parallel", skip_repeats=True), 3)]:
        counts.clear()
        decode(model, d, src, src_lengths, max_steps=25, **kw)
        assert len(counts) > 3 and max(counts) == most, (kw, counts)


def test_query_geometry_docstring_example():
    offsets, blocked = InsertionSteps.query_geometry(torch.tensor([[0, 2, 1]]), torch.tensor([[True] * 3]),
                                                         torch.tensor([[0]]))
    assert offsets.tolist() == [[[-1, 2, 1]]] and not blocked.any()


def test_min_token_prob_docstring_example():
    from insnet_fairseq.decoding.word_rules import MinTokenProb, StepWords

    chosen = torch.tensor([[True, True, True, False], [True, False, True, False]])
    tokens = torch.tensor([4, 5, 6, 7, 8])
    tok_lprobs = torch.tensor([0.9, 0.2, 0.6, 0.3, 0.2]).log()
    pos_lprobs = torch.tensor([[0.3, 0.3, 0.3, 0.1], [0.5, 0.1, 0.4, 0.0]]).log()
    kept = MinTokenProb(0.5)(None, StepWords(chosen, Picks.of(chosen), tokens, tok_lprobs), None, pos_lprobs)
    assert kept.chosen.tolist() == [[True, False, True, False], [True, False, False, False]]
    assert kept.tokens.tolist() == [4, 6, 7]
    torch.testing.assert_close(kept.lprobs, tok_lprobs[[0, 2, 3]])


def test_min_token_prob_leaves_unsure_slots_for_later_steps(model_and_batch):
    """A tiny random model is never sure of a word: with --min-token-prob 0.99 every parallel step
    inserts one token (its most likely insertion), and batched == one by one still holds."""
    model, d, src, src_lengths = model_and_batch
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25, retain_history=True)
    plain = decode(model, d, src, src_lengths, **kw)
    assert any(h["steps"] < len(h["tokens"]) - 1 for h in plain)  # without it, steps insert several tokens
    sure = decode(model, d, src, src_lengths, min_token_prob=0.99, **kw)
    for b, h in enumerate(sure):
        sizes = [len(x["tokens"]) for x in h["history"]]
        assert sizes == list(range(sizes[0], sizes[0] + len(sizes)))
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], min_token_prob=0.99, **kw)[0]
        assert alone["tokens"].tolist() == h["tokens"].tolist()
    with pytest.raises(ValueError, match=r"--min-token-prob must be in \[0, 1\), got 1.0"):
        InsertionGenerator(d, DecodingOptions(mode="parallel", min_token_prob=1.0))


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_stop_threshold_only_lengthens(model_and_batch, mode):
    """Decoding is deterministic: with a higher --stop-threshold a sentence follows the same steps
    and stops later, so every output contains the default one's words, in order."""
    model, d, src, src_lengths = model_and_batch
    model = copy.deepcopy(model)
    model.decoder.heads.termination_proj.bias.data.fill_(0.0)  # q(stop) near 0.5: stops early, by the row
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=25)
    default = decode(model, d, src, src_lengths, **kw)
    longer = decode(model, d, src, src_lengths, stop_threshold=0.8, **kw)
    for a, b in zip(default, longer):
        assert is_subsequence(a["tokens"].tolist(), b["tokens"].tolist()) and b["steps"] >= a["steps"]
    assert sum(len(b["tokens"]) for b in longer) > sum(len(a["tokens"]) for a in default)
    with pytest.raises(ValueError, match=r"--stop-threshold must be in \(0, 1\), got 1.0"):
        InsertionGenerator(d, DecodingOptions(stop_threshold=1.0))


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_min_length_ratio_holds_the_stop_until_the_length(model_and_batch, mode):
    """A model that wants to stop at once (q(stop) ~ 1) still writes ceil(ratio x source words) words,
    one per step while held back (parallel mode too); batched == one by one holds."""
    model, d, src, src_lengths = model_and_batch
    model = copy.deepcopy(model)
    model.decoder.heads.termination_proj.bias.data.fill_(8.0)  # stops at the first check
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=40)
    default = decode(model, d, src, src_lengths, **kw)
    assert all(len(h["tokens"]) == 1 for h in default)  # nothing but </s>
    held = decode(model, d, src, src_lengths, min_length_ratio=0.8, **kw)
    for b, h in enumerate(held):
        need = -(-int(src_lengths[b] - 1) * 8 // 10)  # ceil(0.8 x source words)
        words = len(h["tokens"]) - 1
        assert words == need  # held back, every step inserts one word: none beyond the length
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], min_length_ratio=0.8, **kw)[0]
        assert alone["tokens"].tolist() == h["tokens"].tolist()
    with pytest.raises(ValueError, match=r"--min-length-ratio must be >= 0"):
        InsertionGenerator(d, DecodingOptions(min_length_ratio=-1.0))


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_stop_check_gives_a_stopped_sentence_one_step_of_sure_words(model_and_batch, mode):
    """--stop-check-prob: a model that stops at once (q(stop) ~ 1) writes nothing by default; with a
    probability any best word reaches, it gets exactly one more step, filling its one slot; with one no
    word of a random model reaches, the output is the default's."""
    model, d, src, src_lengths = model_and_batch
    model = copy.deepcopy(model)
    model.decoder.heads.termination_proj.bias.data.fill_(8.0)  # stops at the first check
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=40)
    assert all(len(h["tokens"]) == 1 for h in decode(model, d, src, src_lengths, **kw))  # nothing but </s>
    once = decode(model, d, src, src_lengths, stop_check_prob=1e-6, **kw)
    assert all(len(h["tokens"]) == 2 and h["steps"] == 1 for h in once)  # one word, then stopped for good
    unsure = decode(model, d, src, src_lengths, stop_check_prob=0.99, **kw)  # a 30-word random model is never this sure
    assert all(len(h["tokens"]) == 1 and h["steps"] == 0 for h in unsure)
    with pytest.raises(ValueError, match=r"--stop-check-prob must be in \[0, 1\), got 1.0"):
        InsertionGenerator(d, DecodingOptions(stop_check_prob=1.0))


@pytest.mark.parametrize("top_p", [1.0, 0.6])
def test_stop_check_only_adds_one_last_step_of_non_repeats(model_and_batch, top_p):
    """Decoding is deterministic, so with --stop-check-prob a sentence follows the default's steps up to
    its stop, then takes at most one more step: the default output is a subsequence of it, the step
    count grows by 0 or 1, the words added repeat neither neighbour, and batched == one by one; with the
    check reading only the top slots (--stop-check-top-p) too."""
    model, d, src, src_lengths = model_and_batch
    model = copy.deepcopy(model)
    model.decoder.heads.termination_proj.bias.data.fill_(0.0)  # q(stop) near 0.5: stops early, by the row
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25)
    default = decode(model, d, src, src_lengths, **kw)
    kw["stop_check_top_p"] = top_p
    checked = decode(model, d, src, src_lengths, stop_check_prob=0.02, **kw)
    grew = 0
    for b, (a, c) in enumerate(zip(default, checked)):
        short, long = a["tokens"].tolist(), c["tokens"].tolist()
        assert is_subsequence(short, long) and c["steps"] - a["steps"] in (0, 1)
        assert (c["steps"] == a["steps"]) == (short == long)
        if long != short:
            grew += 1
            i = j = 0  # walk the two outputs: every word of `long` not matched in `short` was added
            while j < len(long):
                if i < len(short) and short[i] == long[j]:
                    i, j = i + 1, j + 1
                    continue
                neighbours = ([long[j - 1]] if j > 0 else []) + [long[j + 1]]  # the last token is </s>
                assert long[j] not in neighbours
                j += 1
        keep = src[b].ne(d.pad())
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], stop_check_prob=0.02, **kw)[0]
        assert alone["tokens"].tolist() == long
    assert grew > 0  # the check did overrule some stops


@pytest.mark.parametrize("query_stream", [False, True])
@pytest.mark.parametrize("candidates,finish", [(1, 0), (2, 0), (2, 1)])
@pytest.mark.parametrize("alone", [True, False])
def test_stop_checks_last_step_is_placed_without_a_pass(query_stream, candidates, finish, alone, monkeypatch):
    """The rows that end on the stop check's words leave the batch at once, their words placed without a decoder
    pass (with --insertion-candidates-finish, only where every row ends so): the same tokens, scores, steps and
    history as when the step encodes them, and fewer passes (decoding sentences alone, or a batch)."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=query_stream)
    model.decoder.heads.termination_proj.bias.data.fill_(0.0)  # q(stop) near 0.5: stops early, by the row
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25, stop_check_prob=0.02, retain_history=True,
              candidates=candidates, candidates_finish=finish)

    def run():
        counter = PassCounter([model])
        gen = InsertionGenerator(d, DecodingOptions(**kw))
        if alone:
            keep = [src[b].ne(d.pad()) for b in range(len(src))]
            outs = [gen.generate([model], sample_of(src[b : b + 1, keep[b]], src_lengths[b : b + 1]))[0]
                    for b in range(len(src))]
        else:
            outs = gen.generate([model], sample_of(src, src_lengths))
        counter.remove()
        return outs, counter.calls

    placed, n_placed = run()
    step = InsertionSteps.step
    monkeypatch.setattr(InsertionSteps, "step", lambda self, *a, encode=True, **k: step(self, *a, **k))
    encoded, n_encoded = run()
    for a, b in zip(placed, encoded):
        for h, g in zip(a, b):
            assert h["tokens"].tolist() == g["tokens"].tolist() and h["steps"] == g["steps"]
            assert torch.equal(h["positional_scores"], g["positional_scores"])
            assert [x["tokens"].tolist() for x in h["history"]] == [x["tokens"].tolist() for x in g["history"]]
    # some rows ended on the check's words, without their pass (with a finish count, only if all rows did at once)
    assert n_placed < n_encoded if finish == 0 else n_placed <= n_encoded


def test_top_p_slots_example():
    lp = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]]).log()
    assert top_p_slots(lp, 0.9).tolist() == [[True, True, True, False], [False, True, True, True]]
    assert top_p_slots(lp, 0.9, torch.tensor([2, 1])).tolist() == [[True, True, False, False],
                                                                  [False, False, False, True]]
    assert top_p_slots(lp, 0.1).tolist() == [[True, False, False, False], [False, False, False, True]]  # the best one
    closed = torch.tensor([[0.6, 0.4, 0.0, 0.0]]).log()  # closed / beyond-the-end slots (-inf) are never taken
    assert top_p_slots(closed, 1.0).tolist() == [[True, True, False, False]]


@torch.no_grad()
@pytest.mark.parametrize("query_stream,fused", [(False, "off"), (True, "off"), (True, "on")])
def test_stop_check_top_p_keeps_the_top_slots_of_the_full_check(query_stream, fused):
    """--stop-check-top-p P: the slots the check forces are exactly those the full check (every open slot) forces
    that lie in the top P of the position mass, with the same words: the check only skips computing the others
    (with the slot query stream: two passes, or every slot's query made by the step's pass)."""
    model, d = build_tiny_model(seed=7, vocab=30, slot_query_stream=query_stream)
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    decoder = model.decoder
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel", skip_repeats=True, fuse_slot_queries=fused))
    kv, pad = decoder.encode_source(model.forward_encoder(src, src_lengths))
    state = gen.steps.initial_state(decoder, len(src), src.device, kv, pad)
    for _ in range(3):
        state = gen.steps.step(decoder, state, kv, pad, 40)
    rows = torch.ones(len(src), dtype=torch.bool)
    rows[1] = False  # a row the check does not read
    full = StopCheck(0.02, len(src), src.device, top_p=1.0).confident_slots(gen.steps, decoder, state, kv, pad, rows)
    _, pos_lprobs = gen.steps.slot_distribution(decoder, state)
    for p in (0.5, 0.9):
        top = StopCheck(0.02, len(src), src.device, top_p=p).confident_slots(gen.steps, decoder, state, kv, pad, rows)
        expected = full.slots & top_p_slots(pos_lprobs, p)
        assert torch.equal(top.slots, expected) and bool(expected.any())
        assert torch.equal(top.words[expected], full.words[expected])
        assert torch.allclose(top.lprobs[expected], full.lprobs[expected], atol=1e-5)
    assert bool((full.slots & ~top_p_slots(pos_lprobs, 0.5)).any())  # the restriction left some slot out
    with pytest.raises(ValueError, match=r"--stop-check-top-p must be in \(0, 1\], got 0.0"):
        DecodingOptions(stop_check_top_p=0.0)


@torch.no_grad()
def first_words(model, d, src, src_lengths, k):
    """The k most probable words of the first parallel step from ``<s> </s>`` ([B, k]) and their log-probs."""
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel"))
    decoder = model.decoder
    kv, pad = decoder.encode_source(model.forward_encoder(src, src_lengths))
    state = gen.steps.initial_state(decoder, len(src), src.device, kv, pad)
    slots, pos_lprobs = gen.steps.slot_distribution(decoder, state)
    chosen = gen.steps.choose_slots(pos_lprobs, torch.full((len(src),), 99))
    assert chosen.sum(1).tolist() == [1] * len(src)  # one slot to start with
    logits = gen.steps.token_logits(decoder, state, slots, chosen, kv, pad).float()
    logits[:, gen.steps.banned] = float("-inf")
    return torch.log_softmax(logits, -1).topk(k, dim=-1)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_candidates_are_the_first_words_alternatives_and_the_best_scored_wins(model_and_batch, mode):
    """--insertion-candidates 3: candidate j starts with the j-th most probable first word, then decodes as
    a constrained start of that word does; the output is the candidate of highest mean log-prob per word,
    with the most steps any candidate took; batched == one by one."""
    model, d, src, src_lengths = model_and_batch
    kw = dict(mode=mode, slot_top_p=0.9, max_steps=25)
    out = decode(model, d, src, src_lengths, candidates=3, **kw)
    top_lp, top_w = first_words(model, d, src, src_lengths, 3)
    gen = InsertionGenerator(d, DecodingOptions(**dict(kw, max_steps=24)))  # a candidate takes one step to reach this start
    picked_other = 0
    for b in range(len(src)):
        keep = src[b].ne(d.pad())
        one = sample_of(src[b : b + 1, keep], src_lengths[b : b + 1])
        cands = []
        for j in range(3):  # the same decoding from the constrained start "<s> w_j </s>"
            h = gen.generate([model], one, initial_tokens=[[int(top_w[b, j])]])[0][0]
            words = h["positional_scores"][:-1].clone()
            assert int((words == 0).sum()) == 1  # the given word scores 0; as a candidate's first word ...
            words[words == 0] = float(top_lp[b, j])  # ... it scores its log-prob (its slot is the only one)
            cands.append((float(words.mean()), h["tokens"].tolist(), h["steps"] + 1))
        best = max(cands)
        assert out[b]["tokens"].tolist() == best[1]
        assert out[b]["steps"] == max(c[2] for c in cands)
        picked_other += best[1] != cands[0][1]
        alone = decode(model, d, src[b : b + 1, keep], src_lengths[b : b + 1], candidates=3, **kw)[0]
        assert alone["tokens"].tolist() == out[b]["tokens"].tolist() and alone["steps"] == out[b]["steps"]
    assert picked_other > 0  # a candidate other than the greedy one won somewhere: the choice is exercised
    greedy = decode(model, d, src, src_lengths, **kw)
    assert all(o["score"] >= g["score"] - 1e-5 for o, g in zip(out, greedy))  # the greedy output is a candidate
    with pytest.raises(ValueError, match="--insertion-candidates must be >= 1"):
        InsertionGenerator(d, DecodingOptions(candidates=0))


@pytest.mark.parametrize("kw", [dict(mode="parallel", candidates=3), dict(mode="sequential", beam=2)])
def test_each_source_is_encoded_once_for_its_candidates_or_beam_rows(model_and_batch, monkeypatch, kw):
    """K candidates (or beam rows) of a sentence share one encoding of its source: the encoder sees each sentence
    once, the decoded rows get its keys/values K times, and the outputs equal those of a decoding whose encoder ran
    on the K copies (as before the sharing)."""
    model, d, src, src_lengths = model_and_batch
    seen = []
    encode = model.forward_encoder

    def counted(tokens, lengths):
        seen.append(len(tokens))
        return encode(tokens, lengths)

    monkeypatch.setattr(model, "forward_encoder", counted)
    shared = InsertionGenerator(d, DecodingOptions(max_steps=12, **kw)).generate([model], sample_of(src, src_lengths))
    assert seen == [len(src)]
    K = kw.get("candidates", kw.get("beam"))

    def per_row(self, model, sample, todo, K):  # the former way: every decoded row's source encoded on its own
        rows = torch.tensor([b for b in todo for _ in range(K)])
        net = sample["net_input"]
        return model.decoder.encode_source(model.forward_encoder(net["src_tokens"][rows], net["src_lengths"][rows]))

    monkeypatch.setattr(InsertionGenerator, "encode_sources", per_row)
    copies = InsertionGenerator(d, DecodingOptions(max_steps=12, **kw)).generate([model], sample_of(src, src_lengths))
    assert seen[1:] == [len(src) * K]
    for a, b in zip(shared, copies):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        assert [h["score"] for h in a] == pytest.approx([h["score"] for h in b], abs=1e-5)


def test_ranked_candidates_docstring_example():
    from insnet_fairseq.decoding.candidates import Candidates

    a, b = dict(score=-0.9, steps=5), dict(score=-0.4, steps=7)
    assert Candidates.ranked([a, b]) == [dict(score=-0.4, steps=7, candidate_steps=7),
                                         dict(score=-0.9, steps=7, candidate_steps=5)]
    assert Candidates.ranked([dict(a, steps=9), b])[0] == dict(score=-0.4, steps=9, candidate_steps=7)


@pytest.mark.parametrize("judged", [False, True])
def test_candidates_finish_keeps_the_first_m_finished(judged):
    """--insertion-candidates-finish M: a sentence's candidates are those of the full K-candidate decoding that
    finished by the step its M-th finished (the others dropped unfinished), that step is its step count, the best
    of them (by the model's own score, or the AR judge's) is output; M = K changes nothing; a bad M is refused."""
    model, d = build_tiny_model(seed=7, vocab=30)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.0)  # candidates of a sentence stop at different steps
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    models = [model, build_tiny_ar(d)] if judged else [model]
    kw = dict(mode="parallel", slot_top_p=0.3, max_steps=25, candidates=4, reranking=judged)
    sample = sample_of(src, src_lengths)
    full = InsertionGenerator(d, DecodingOptions(**kw)).generate(models, sample)
    def summary(out):
        return [[(h["tokens"].tolist(), round(h["score"], 5), h["steps"]) for h in cands] for cands in out]

    assert summary(InsertionGenerator(d, DecodingOptions(candidates_finish=4, **kw)).generate(models, sample)) == summary(full)
    cut = InsertionGenerator(d, DecodingOptions(candidates_finish=2, **kw)).generate(models, sample)
    fewer = 0
    for whole, part in zip(full, cut):
        t = sorted(h["candidate_steps"] for h in whole)[1]  # the step the 2nd candidate finished
        kept = [h for h in whole if h["candidate_steps"] <= t]
        assert sorted(h["tokens"].tolist() for h in part) == sorted(h["tokens"].tolist() for h in kept)
        assert all(h["steps"] == t for h in part)
        best = max(kept, key=lambda h: h["score"])
        assert part[0]["tokens"].tolist() == best["tokens"].tolist() and part[0]["score"] == pytest.approx(best["score"])
        fewer += t < whole[0]["steps"]
    assert fewer > 0  # some sentence stopped before its slowest candidate: the cut is exercised
    for m in (-1, 5):
        with pytest.raises(ValueError, match="--insertion-candidates-finish"):
            InsertionGenerator(d, DecodingOptions(candidates=4, candidates_finish=m))


def test_history_insertion_indices_give_each_words_step(model_and_batch):
    """--retain-iter-history records each token's insertion index; experiments/generation_picture.py turns them
    into the step that inserted each word: given words step 0, and step s holds exactly the words step s added."""
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location(
        "generation_picture", pathlib.Path(ROOT) / "experiments" / "generation_picture.py")
    picture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(picture)
    fake = {"history": [{"inserted": torch.tensor([2]), "tokens": torch.tensor([7])},
                        {"inserted": torch.tensor([2, 3]), "tokens": torch.tensor([7, 8])},
                        {"inserted": torch.tensor([4, 2, 3]), "tokens": torch.tensor([9, 7, 8])}]}
    assert picture.word_steps(fake) == [(9, 2), (7, 0), (8, 1)]  # the docstring example
    model, d, src, src_lengths = model_and_batch
    given = [[5, 9], [11], [6, 8, 10], [], [12], [9]]
    gen = InsertionGenerator(d, DecodingOptions(mode="parallel", slot_top_p=0.9, max_steps=12, retain_history=True))
    for g, (h,) in zip(given, gen.generate([model], sample_of(src, src_lengths), initial_tokens=given)):
        steps = picture.word_steps(h)
        assert [t for t, _ in steps] == h["tokens"].tolist()
        words = [(t, s) for t, s in steps if t != d.eos()]
        assert [t for t, s in words if s == 0] == g  # the given words, in order, at step 0
        sizes = [len(x["tokens"]) for x in h["history"]]
        for s in range(1, len(sizes)):
            assert sum(1 for _, st in words if st == s) == sizes[s] - sizes[s - 1]
        assert max([s for _, s in words], default=0) <= h["steps"]


def test_show_trajectory_explains_every_state_with_the_generators_own_numbers(model_and_batch):
    """recipes/show_trajectory.py --explain: one note per partial output of the history (the start included), its
    q(stop) the termination head's, its slots sorted by mass (masses of one distribution: sum <= 1), and
    decoding itself unchanged by the notes."""
    import re

    from recipes.show_trajectory import ExplainingGenerator

    model, d, src, src_lengths = model_and_batch
    model = copy.deepcopy(model)
    model.decoder.heads.termination_proj.bias.data.fill_(0.0)  # q(stop) near 0.5: some rows stop on their own
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25, retain_history=True)
    stopped = longest = 0
    for b in range(6):
        keep = src[b].ne(d.pad())
        one = sample_of(src[b : b + 1, keep], src_lengths[b : b + 1])
        gen = ExplainingGenerator(d, DecodingOptions(**kw), top=50)
        hypo = gen.generate([model], one)[0][0]
        plain = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], one)[0][0]
        assert hypo["tokens"].tolist() == plain["tokens"].tolist()
        assert len(gen.notes) == len(hypo["history"])
        longest = max(longest, len(gen.notes))
        for note in gen.notes:
            masses = [float(m) for m in re.findall(r": ([0-9.]+) -> ", note)]
            assert note.startswith("q(stop) ") and masses == sorted(masses, reverse=True) and sum(masses) <= 1.02
        assert [f"{q:.2f}" for q in gen.q_stops] == [note.split()[1] for note in gen.notes]
        q_end = gen.q_stops[-1]
        at_cap = hypo["steps"] == 25 or len(hypo["tokens"]) - 1 >= 2 * int(src_lengths[b]) + 10  # step / length caps
        assert q_end > 0.5 or at_cap  # it stopped because q(stop) said so, or at a cap
        stopped += q_end > 0.5
    assert stopped > 0 and longest >= 3  # some sentence stopped on its own, some took several steps


def test_show_trajectory_explains_a_gap_models_slots():
    """recipes/show_trajectory.py --explain on a --slot-objective gap model: one note per partial output, every slot
    of it left to right with q(done), "*" exactly where decoding fills (q(done) < --end-of-slot, within the length
    cap: the canvases here reach it); the words the next
    state gained are the starred slots' best words; decoding unchanged by the notes."""
    import re

    from recipes.show_trajectory import ExplainingGenerator

    model, d = build_tiny_model(seed=6, vocab=30, slot_objective="gap")
    model.decoder.heads.done_proj.bias.data.fill_(-1.0)  # slots open for a few steps
    src, src_lengths, _ = random_batch(d, [4] * 4, seed=3)
    kw = dict(mode="parallel", retain_history=True, end_of_slot=0.5)
    longest = 0
    for b in range(4):
        keep = src[b].ne(d.pad())
        one = sample_of(src[b : b + 1, keep], src_lengths[b : b + 1])
        gen = ExplainingGenerator(d, DecodingOptions(**kw))
        hypo = gen.generate([model], one)[0][0]
        assert hypo["tokens"].tolist() == InsertionGenerator(d, DecodingOptions(**kw)).generate([model], one)[0][0][
            "tokens"].tolist()
        history = [h["tokens"].tolist() for h in hypo["history"]]
        assert len(gen.notes) == len(history)
        longest = max(longest, len(history))
        for k, note in enumerate(gen.notes):
            cells = re.findall(r"done ([0-9.]+)(\*?) -> (\S+) ", note)
            assert len(cells) == len(history[k])  # every slot: one more than the words, </s> counted among them
            assert all(float(q) < 0.505 for q, star, _ in cells if star)  # filled: below --end-of-slot
            filled = [w for _, star, w in cells if star]
            if k + 1 < len(history):
                gained = list(history[k + 1])
                for t in history[k]:
                    gained.remove(t)
                assert sorted(d[t] for t in gained) == sorted(filled)
            else:
                assert not filled  # the last state: every slot done
    assert longest >= 3  # several steps


def test_show_trajectory_notes_the_last_words_placed_without_a_pass():
    """A --last-word-head model whose words all say last: one step, its words placed without a pass; the explaining
    generator decodes what the plain one does and notes that last state as done, with nothing to score."""
    from recipes.show_trajectory import ExplainingGenerator

    model, d = build_tiny_model(seed=6, vocab=30, slot_objective="gap", last_word_head=True)
    model.decoder.heads.done_proj.bias.data.fill_(-1e4)
    model.decoder.heads.last_proj.bias.data.fill_(1e4)
    src, src_lengths, _ = random_batch(d, [4], seed=3)
    kw = dict(mode="parallel", retain_history=True)
    gen = ExplainingGenerator(d, DecodingOptions(**kw))
    hypo = gen.generate([model], sample_of(src, src_lengths))[0][0]
    plain = InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample_of(src, src_lengths))[0][0]
    assert hypo["tokens"].tolist() == plain["tokens"].tolist() and len(hypo["tokens"]) == 2
    assert len(gen.notes) == 2 and gen.notes[-1].startswith("every slot done") and "done 0.00*" in gen.notes[0]
