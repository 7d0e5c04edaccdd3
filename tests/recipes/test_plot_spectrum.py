"""The tau-spectrum plot's labels never overlap: experiments/plot_spectrum.py's spread()."""
import random


from experiments.plot_spectrum import main, spread


def test_worked_example():
    assert [round(y, 6) for y in spread([0.5, 0.51, 0.9], 0.05)] == [0.5, 0.55, 0.9]


def test_labels_keep_their_gap_inside_the_axes():
    rng = random.Random(0)
    for _ in range(200):
        k = rng.randint(1, 14)
        ys = [rng.choice([rng.random(), 0.97, 0.98, 0.02]) for _ in range(k)]  # clusters at the edges
        out = spread(ys, 1 / 14)
        assert all(0.0 <= y <= 1.0 + 1e-9 for y in out)
        s = sorted(out)
        assert all(b - a >= 1 / 14 - 1e-9 for a, b in zip(s, s[1:]))
        # the labels keep the points' vertical order
        assert [i for i, _ in sorted(enumerate(out), key=lambda p: (p[1], ys[p[0]]))] == \
            [i for i, _ in sorted(enumerate(ys), key=lambda p: (p[1], out[p[0]]))]


def test_plot_writes_a_png(tmp_path):
    src = tmp_path / "s.csv"
    src.write_text("model,sacrebleu,steps_per_token\nuniform parallel,25.1,0.41\ntau=10 parallel,25.1,0.41\n"
                   "tau=-inf sequential,30.0,1.0\n")
    main([str(src), str(tmp_path / "s.png")])
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_reads_other_columns_and_names_a_missing_one(tmp_path, capsys):
    import pytest

    src = tmp_path / "lm.csv"
    src.write_text("model,bleu4,seq_ratio\ndinic-3 (paper sampling),12.5,0.18\nseq-binary (sequential),12.8,0.6\n")
    main([str(src), str(tmp_path / "lm.png"), "--x", "seq_ratio", "--y", "bleu4", "--dinic-prefix", "dinic"])
    assert (tmp_path / "lm.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit, match="has no column 'steps_per_token'"):
        main([str(src), str(tmp_path / "x.png")])
