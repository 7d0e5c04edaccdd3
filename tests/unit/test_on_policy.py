"""On-policy trajectories (--on-policy): the canvas's alignment to its reference against a naive dynamic programme,
the merged sequence's invariants, sampled layerings begun by a canvas, foreign words in the gap targets and in the
one pass against naive re-encoding, and the rollout against fairseq-generate's parallel decoding."""
import random

import pytest
import torch

from insnet_fairseq.decoding.core_options import CoreOptions
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.geometry.alignment import lcs_match, merge_canvas
from insnet_fairseq.geometry.gaps import gap_targets, sample_layers
from insnet_fairseq.geometry.layers import PAD_LAYER
from insnet_fairseq.reference import naive_gap_loss
from insnet_fairseq.tasks.criterion import gap_losses
from insnet_fairseq.training.on_policy import on_policy_trajectories, roll_out

from conftest import build_tiny_model, random_batch
from test_gap_objective import check_valid_layering

PAD, BOS, EOS = 1, 0, 2


def naive_lcs(a, b):
    dp = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            dp[i][j] = max(dp[i - 1][j], dp[i][j - 1], dp[i - 1][j - 1] + (a[i - 1] == b[j - 1]))
    return dp[-1][-1]


def random_pairs(seed, B=40, vocab=6):
    """Canvases and references "<s> w.. </s>" over a small vocabulary (many repeats), padded to different widths."""
    rng = random.Random(seed)
    canv = [[BOS] + [rng.randrange(4, 4 + vocab) for _ in range(rng.randrange(0, 9))] + [EOS] for _ in range(B)]
    refs = [[BOS] + [rng.randrange(4, 4 + vocab) for _ in range(rng.randrange(0, 12))] + [EOS] for _ in range(B)]

    def pad(rows, extra):
        w = max(map(len, rows)) + extra
        return torch.tensor([r + [PAD] * (w - len(r)) for r in rows]), torch.tensor([len(r) for r in rows])

    return canv, refs, *pad(canv, 1), *pad(refs, 2)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lcs_match_is_a_longest_common_subsequence(seed):
    canv, refs, c, cl, r, rl = random_pairs(seed)
    match = lcs_match(c, cl, r, rl)
    for b, (x, y) in enumerate(zip(canv, refs)):
        row = match[b].tolist()
        pairs = [(i, j) for i, j in enumerate(row) if j >= 0]
        assert all(i < len(x) for i, _ in pairs) and all(j < len(y) for _, j in pairs)
        assert all(x[i] == y[j] for i, j in pairs)
        assert all(j1 < j2 for (_, j1), (_, j2) in zip(pairs, pairs[1:]))
        assert len(pairs) == naive_lcs(x, y)
        assert row[0] == 0 and row[len(x) - 1] == len(y) - 1  # <s> and </s> always align
    # the docstring's example
    ex = lcs_match(torch.tensor([[0, 5, 9, 7, 2]]), torch.tensor([5]), torch.tensor([[0, 5, 6, 7, 2]]), torch.tensor([5]))
    assert ex.tolist() == [[0, 1, -1, 3, 4]]


@pytest.mark.parametrize("seed", [0, 1])
def test_merged_sequence_holds_the_reference_and_the_canvas_in_order(seed):
    canv, refs, c, cl, r, rl = random_pairs(seed)
    steps = torch.randint(1, 4, c.shape, generator=torch.Generator().manual_seed(seed))
    layers = steps.masked_fill(torch.arange(c.size(1)).unsqueeze(0) == 0, 0)
    layers = layers.masked_fill(torch.arange(c.size(1)).unsqueeze(0) == (cl - 1).unsqueeze(1), 0)
    match = lcs_match(c, cl, r, rl)
    merged, start, foreign = merge_canvas(c, layers, cl, r, rl, match, PAD)
    for b, (x, y) in enumerate(zip(canv, refs)):
        m = match[b].tolist()
        z, s, f = merged[b].tolist(), start[b].tolist(), foreign[b].tolist()
        n = len(y) + sum(1 for i in range(len(x)) if m[i] < 0)
        assert all(t == PAD for t in z[n:]) and all(v == PAD_LAYER for v in s[n:])
        assert [t for t, fo in zip(z[:n], f) if not fo] == y  # the reference, with the foreign words taken out
        # the canvas, in its order, at the positions whose start layer is known; each with its own layer
        known = [p for p in range(n) if s[p] >= 0]
        assert [z[p] for p in known] == x and [s[p] for p in known] == layers[b, : len(x)].tolist()
        # a foreign word right after its aligned left neighbour (or a foreign word after it)
        for p in range(n):
            if f[p]:
                q = p - 1
                while f[q]:
                    q -= 1
                assert s[q] >= 0, (z, s, f)
    ex = merge_canvas(torch.tensor([[0, 5, 9, 2]]), torch.tensor([[0, 1, 2, 0]]), torch.tensor([4]),
                      torch.tensor([[0, 5, 6, 2]]), torch.tensor([4]), torch.tensor([[0, 1, -1, 3]]), PAD)
    assert [t.tolist() for t in ex] == [[[0, 5, 9, 6, 2]], [[0, 1, 2, -1, 0]], [[False, False, True, False, False]]]


def test_sampled_layers_begun_by_a_canvas_keep_it_and_follow_its_last_layer():
    canv, refs, c, cl, r, rl = random_pairs(3)
    steps = sample_layers(cl, c.size(1), torch.Generator().manual_seed(0), 1.0, 0.0)  # a canvas's decoding steps
    merged, start, _ = merge_canvas(c, steps, cl, r, rl, lcs_match(c, cl, r, rl), PAD)
    lengths = merged.ne(PAD).sum(1)
    draws = [sample_layers(lengths, merged.size(1), torch.Generator().manual_seed(s), 1.0, 0.2, start=start)
             for s in (5, 5)]
    assert torch.equal(draws[0], draws[1])
    layers = draws[0]
    known = start.ge(0) & start.lt(PAD_LAYER)
    assert torch.equal(layers[known], start[known])
    last = start.masked_fill(~known, 0).max(1).values
    drawn = start.eq(-1)
    assert bool((layers[drawn] > last.unsqueeze(1).expand_as(layers)[drawn]).all())
    check_valid_layering(layers, lengths)


def naive_listing(layers, lengths, foreign):
    """Every (row, end, left, right, done) slot and (slot, word) missing word, foreign words never missing."""
    slots, pairs = [], []
    for b, (row, L) in enumerate(zip(layers.tolist(), lengths.tolist())):
        for end in range(max(row[:L]) + 1):
            context = [p for p in range(L) if row[p] <= end]
            for a, z in zip(context[:-1], context[1:]):
                missing = [i for i in range(a + 1, z) if not foreign[b, i]]
                pairs += [(len(slots), i) for i in missing]
                slots.append((b, end, a, z, not missing))
    return slots, pairs


def on_policy_batch(seed, B=6, k=2, bias=-1.0):
    """A tiny gap model, a batch, and its on-policy trajectories (every sentence rolled out ``k`` steps)."""
    model, d = build_tiny_model(seed=seed, vocab=12, slot_objective="gap")
    model.decoder.heads.done_proj.bias.data.fill_(bias)  # slots open for a few steps
    lengths = [random.Random(seed + i).randrange(2, 10) for i in range(B)]  # <s>, </s> included
    src, src_lengths, target = random_batch(d, lengths, seed=seed + 1)
    steps = InsertionSteps(d, CoreOptions(mode="parallel"))
    chosen = torch.ones(B, dtype=torch.bool)
    chosen[0] = False  # one sentence as without the flag
    out = on_policy_trajectories(model, steps, src, src_lengths, target, chosen, torch.full((B,), k),
                                 torch.full((B,), 12), torch.Generator().manual_seed(seed), 1.0, 0.1)
    return model, d, src, src_lengths, target, out


@pytest.mark.parametrize("seed", [0, 1])
def test_gap_targets_with_foreign_words_equal_a_naive_listing(seed):
    _, d, _, _, _, (merged, layers, foreign) = on_policy_batch(seed)
    assert bool(foreign.any())  # a random model writes words the reference lacks
    lengths = merged.ne(d.pad()).sum(1)
    check_valid_layering(layers, lengths)
    t = gap_targets(layers, lengths, foreign)
    slots, pairs = naive_listing(layers, lengths, foreign)
    assert list(zip(t.row.tolist(), t.end.tolist(), t.left.tolist(), t.right.tolist(), t.done.tolist())) == slots
    assert sorted(zip(t.slot.tolist(), t.word.tolist())) == sorted(pairs)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_one_pass_loss_of_an_on_policy_trajectory_equals_reencoding_every_layer_end(temperature):
    model, d, src, src_lengths, target, (merged, layers, foreign) = on_policy_batch(4)
    assert bool(foreign.any())
    with torch.no_grad():
        out = model(src, src_lengths, merged, None, layers=layers, foreign=foreign)["gap"]
        terms = gap_losses(out, 0.0, temperature)
    token, done, done_logits, _ = naive_gap_loss(model, src, src_lengths, merged, layers, temperature, foreign)
    torch.testing.assert_close(out["done_logits"], torch.tensor(done_logits), atol=1e-5, rtol=0)
    assert float(terms["slot_token"][0]) == pytest.approx(token, rel=1e-5)
    assert float(terms["slot_done"][0]) == pytest.approx(done, rel=1e-5)
    assert int(out["words"]) == int(target.ne(d.pad()).sum()) - 2 * target.size(0)  # the reference's words only


@pytest.mark.parametrize("stream", [False, True])
def test_the_rollout_is_parallel_decoding_and_its_own_reference_gives_its_own_trajectory(stream):
    """Rolled out to the end, the canvases are fairseq-generate's --insertion-mode parallel outputs (batch and
    cache as there); with those outputs as references, the trajectories are the decodings' own: no foreign word, no
    word left to lay out, the layers the decoding steps. Rolled out one step, every canvas word has layer 1. With
    the slot query stream as without."""
    model, d = build_tiny_model(seed=6, vocab=30, slot_objective="gap", slot_query_stream=stream)
    model.decoder.heads.done_proj.bias.data.fill_(-1.0)
    B = 16
    src, src_lengths, _ = random_batch(d, [4, 6, 3, 7] * 4, seed=3)
    sample = {"id": torch.arange(B), "net_input": {"src_tokens": src, "src_lengths": src_lengths}}
    hyps = [h[0]["tokens"].tolist() for h in
            InsertionGenerator(d, DecodingOptions.for_mode("parallel", end_of_slot=0.5)).generate([model], sample)]
    steps = InsertionSteps(d, CoreOptions(mode="parallel"))
    max_len = (src_lengths * 2 + 10 + 2).clamp(max=model.decoder.max_target_positions)
    canvas = roll_out(model, steps, src, src_lengths, torch.full((B,), 100), max_len)
    got = [row[1: int(n)].tolist() for row, n in zip(canvas.tokens, canvas.lengths)]  # without <s>, with </s>
    assert got == hyps
    assert len({len(h) for h in hyps}) > 1 and int(canvas.layers.max()) > 1
    target = canvas.tokens[:, : int(canvas.lengths.max())]
    merged, layers, foreign = on_policy_trajectories(model, steps, src, src_lengths, target, torch.ones(B, dtype=torch.bool),
                                                     torch.full((B,), 100), max_len, None, 1.0, 0.1)
    assert not bool(foreign.any()) and torch.equal(merged, target)
    real = target.ne(d.pad())
    assert torch.equal(layers[real], canvas.layers[:, : target.size(1)][real])
    one = roll_out(model, steps, src, src_lengths, torch.ones(B, dtype=torch.long), max_len)
    assert int(one.layers.max()) == 1 and torch.equal(one.lengths > 2, canvas.lengths > 2)
    assert model.training is False  # the mode it was in
