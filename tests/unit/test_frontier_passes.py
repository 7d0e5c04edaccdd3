"""The frontier's measures: the pass counter (insnet_fairseq/measure.py) counts one decoding of known length the
same for the autoregressive model and for InsNet; the Pareto front and the paired bootstrap on known inputs."""
import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from benchmarks.frontier import paired_bootstrap, pareto
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.measure import PassCounter

from conftest import build_tiny_ar, build_tiny_model, random_batch, sample_of


@pytest.mark.parametrize("length", [1, 4, 9])
def test_a_forced_trajectory_of_n_tokens_is_n_plus_one_passes_for_both_models(length):
    """n output tokens: AR runs n steps and the step that emits </s>; InsNet sequential, its initial pass over
    <s> </s> and n insertion steps (its termination head silenced, a step cap of n). Both: n + 1 passes of one
    row, counted at the first layer of every decoder stack."""
    model, d = build_tiny_model(seed=3, vocab=30)
    model.decoder.heads.termination_proj.bias.data.fill_(-1e4)  # never stops: the cap ends it
    ar = build_tiny_ar(d)
    src, src_lengths, _ = random_batch(d, [5], src_len=6, seed=1)
    sample = sample_of(src, src_lengths)

    counter = PassCounter([ar])
    out = SequenceGenerator([ar], d, beam_size=1, max_len_a=0, max_len_b=length, min_len=length).generate(
        [ar], sample)
    assert len(out[0][0]["tokens"]) == length + 1  # n tokens and </s>
    assert (counter.calls, counter.rows, counter.positions) == (length + 1, length + 1, length + 1)
    counter.remove()

    counter = PassCounter([model])
    gen = InsertionGenerator(d, DecodingOptions.for_mode("sequential", max_steps=length))
    hyp = gen.generate([model], sample)[0][0]
    assert hyp["steps"] == length and len(hyp["tokens"]) == length + 1  # n words and </s>
    assert (counter.calls, counter.rows) == (length + 1, length + 1)
    assert counter.positions == length + 2  # <s> </s>, then one word a step
    counter.remove()


@pytest.mark.parametrize("stream", [True, "untied"])
@pytest.mark.parametrize("fused", [False, True], ids=["two passes", "fused"])
def test_slot_queries_are_positions_of_their_own(fused, stream):
    """A slot-query-stream model decoding n words sequentially: n + 1 passes as without it, but each step's slot
    query is one more position (n of them: 2 + 2n), or, fused, every slot's query of the next step in the step's
    own pass: 1 pass a step, k + 1 queries after k words, and the start's pass makes the first step's query
    (1 + n passes, 2 + 1 + n + sum_k (k + 1) positions). The same with the stream's own (untied) layers: its
    separate pass is counted at its first layer, and a fused pass is one pass, its queries included."""
    model, d = build_tiny_model(seed=3, vocab=30, slot_query_stream=stream)
    model.decoder.heads.termination_proj.bias.data.fill_(-1e4)
    src, src_lengths, _ = random_batch(d, [5], src_len=6, seed=1)
    n = 4
    counter = PassCounter([model])
    fuse = "on" if fused else "off"
    gen = InsertionGenerator(d, DecodingOptions.for_mode("sequential", max_steps=n, fuse_slot_queries=fuse))
    hyp = gen.generate([model], sample_of(src, src_lengths))[0][0]
    assert hyp["steps"] == n
    if fused:  # the start's pass with its query (1 slot), then each step: 1 word + the next step's k + 1 slots
        assert (counter.calls, counter.positions) == (1 + n, 2 + 1 + sum(1 + k + 1 for k in range(1, n + 1)))
    else:
        assert (counter.calls, counter.positions) == (1 + 2 * n, 2 + 2 * n)
    counter.remove()


def test_rows_follow_the_batch_dimension_and_removing_restores_the_layer():
    """A batch of 3 sentences: every call is 3 rows (AR: T x B x C, InsNet: B x T x C); after remove() nothing
    more is counted."""
    model, d = build_tiny_model(seed=3, vocab=30)
    model.decoder.heads.termination_proj.bias.data.fill_(-1e4)
    ar = build_tiny_ar(d)
    src, src_lengths, _ = random_batch(d, [5, 5, 5], src_len=6, seed=1)
    src_lengths = torch.full_like(src_lengths, 6)  # no padding: all three rows decode every step
    src[:, :] = src[0]
    sample = sample_of(src, src_lengths)
    for m, run in ((ar, lambda: SequenceGenerator([ar], d, beam_size=1, max_len_a=0, max_len_b=3, min_len=3)
                    .generate([ar], sample)),
                   (model, lambda: InsertionGenerator(d, DecodingOptions.for_mode("sequential", max_steps=3))
                    .generate([model], sample))):
        counter = PassCounter([m])
        run()
        assert counter.calls == 4 and counter.rows == 12, (type(m).__name__, counter.calls, counter.rows)
        counter.remove()
        run()
        assert counter.calls == 4  # the layer is the model's own again


def test_pareto_front_and_paired_bootstrap_on_known_inputs():
    assert pareto([(1, 30), (2, 29), (3, 35)]) == [(1, 30), (3, 35)]
    assert pareto([(5, 10), (1, 10), (2, 12)]) == [(1, 10), (2, 12)]
    refs = ["the cat sat on the mat .", "a dog runs in the park .", "two men play football outside ."] * 20
    assert paired_bootstrap(refs, refs, refs, n_samples=100) == (0.0, 0.0, 0.0, 1.0)
    worse = [r.replace("the", "a") for r in refs]
    diff, low, high, p = paired_bootstrap(worse, refs, refs, n_samples=200)
    assert diff < 0 and low <= diff <= high < 0 and p < 0.05
    diff2, low2, high2, _ = paired_bootstrap(refs, worse, refs, n_samples=200)
    assert diff2 == pytest.approx(-diff)  # the difference is antisymmetric


def labelled(names, xs, ys, xlim=None, ylim=None):
    """frontier.py's place_labels on a log-x scatter of (xs, ys), drawn: the annotations, their texts' boxes (lines
    left out), the panel's box and the points in display coordinates; the figure is closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from benchmarks.frontier import place_labels

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(xs, ys)
    ax.set_xscale("log")
    if xlim:
        ax.set_xlim(*xlim)
    if ylim:
        ax.set_ylim(*ylim)
    notes = place_labels(ax, names, xs, ys)
    fig.canvas.draw()  # (an annotation's text is positioned when drawn)
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(note, renderer) for note in notes]
    panel, points = ax.get_window_extent(renderer), ax.transData.transform(list(zip(xs, ys)))
    plt.close(fig)
    return notes, boxes, panel, points


def test_labels_of_points_at_one_place_are_stacked_apart():
    """frontier.py's plot: the labels of systems with one BLEU and near-equal times (one output decoded three ways)
    do not overlap; the first stays beside its point, the others move down, each with a line back to its point."""
    names = ["InsNet-Dinic 1 candidate", "InsNet-Dinic 1 candidate, always fused", "two passes", "AR+KD greedy",
             "far away"]
    xs, ys = [55.8, 55.4, 63.5, 77.8, 300.0], [33.43, 33.43, 33.43, 37.23, 30.0]
    notes, boxes, _, _ = labelled(names, xs, ys)
    assert len(notes) == 5
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    moved = [note.arrow_patch is not None for note in notes]
    assert sum(moved) == 2  # two of the three labels at 33.43 moved down; the others stay where they were


def test_labels_at_the_panel_foot_move_up_and_leave_other_points_clear():
    """Three labels at the lowest BLEU: none leaves the panel at its foot (they stack upwards there), none overlaps
    another, and no label's text runs over another system's point (a point right of a label's start)."""
    names = ["InsNet-Dinic 1 candidate, always fused", "InsNet-Dinic 1 candidate", "two passes", "AR+KD beam 5"]
    xs, ys = [2.27, 2.91, 2.88, 2.26], [32.86, 32.86, 32.86, 37.24]
    _, boxes, panel, points = labelled(names, xs, ys, xlim=(1.8, 9.0), ylim=(32.5, 37.6))
    assert all(b.y0 >= panel.y0 for b in boxes)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    for i, b in enumerate(boxes):
        assert not any(b.x0 <= px <= b.x1 and b.y0 <= py <= b.y1 for j, (px, py) in enumerate(points) if j != i)


def test_a_label_that_would_leave_the_panel_on_the_right_goes_left_of_its_point():
    """A long name at the right edge of the panel (8 candidates + MBR at batch 64): its text ends inside the panel,
    left of its point; a label with room keeps the right side."""
    names = ["AR+KD greedy", "InsNet-Dinic 8 candidates + MBR"]
    _, boxes, panel, points = labelled(names, [5.7, 48.4], [36.62, 34.85], xlim=(4.4, 60.0))
    assert all(panel.x0 <= b.x0 and b.x1 <= panel.x1 for b in boxes)
    assert boxes[0].x0 > points[0][0]  # room on the right: right of its point
    assert boxes[1].x1 < points[1][0]  # none: left of it
