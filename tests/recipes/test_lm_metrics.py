"""recipes/evaluate_lm.py (and recipes/validate_nll.py) on known inputs: BLEU-2/4 and NIST-2/4 by hand
and against sacreBLEU / NLTK, keyword coverage, steps and the sequential ratio, output counts, the
paper's decoding per tau, and one whole run over a stubbed fairseq-generate."""
import math

import pytest
import sacrebleu


from recipes import evaluate_lm
from recipes import validate_nll

REFS = ["a man rides a brown horse on the beach .", "two dogs play in the snow .", "a woman reads a book in the park ."]
HYPS = ["a man rides a horse on the beach .", "two dogs are playing in snow .", "a woman is reading a book in a park ."]
KEYWORDS = ["man horse beach", "dogs snow", "woman book park"]


def words(lines):
    return [l.split() for l in lines]


def test_bleu_by_hand():
    # hyp "a b c d" vs ref "a b c e": unigram precision 3/4, bigram 2/3, trigram 1/2, no 4-gram; same length
    assert evaluate_lm.bleu([["a", "b", "c", "d"]], [["a", "b", "c", "e"]], 2) == pytest.approx(100 * math.sqrt(0.75 * 2 / 3))
    # no 4-gram match: 0 (NLTK counts it as the smallest float, so ~1e-75)
    assert evaluate_lm.bleu([["a", "b", "c", "d"]], [["a", "b", "c", "e"]], 4) == pytest.approx(0.0, abs=1e-12)
    # brevity penalty: hyp "a b" vs ref "a b c d": p1 = p2 = 1, BP = exp(1 - 4/2)
    assert evaluate_lm.bleu([["a", "b"]], [["a", "b", "c", "d"]], 2) == pytest.approx(100 * math.exp(-1))
    assert evaluate_lm.bleu([[], []], [["a"], ["b"]], 2) == 0.0


@pytest.mark.parametrize("n", [2, 4])
def test_bleu_equals_sacrebleu_with_that_ngram_order(n):
    expected = sacrebleu.metrics.BLEU(max_ngram_order=n, tokenize="none", smooth_method="none").corpus_score(HYPS, [REFS])
    assert evaluate_lm.bleu(words(HYPS), words(REFS), n) == pytest.approx(expected.score, abs=1e-9)
    assert 0 < expected.score < 100


def test_nist_by_hand():
    # ref "a b a", hyp "a b": information weights log2(3/2) (a), log2(3) (b), log2(2/1) ((a, b));
    # precisions (0.585 + 1.585) / 2 and 1 / 1; length ratio 4/6 (NLTK sums the lengths over the orders)
    info_a, info_b, info_ab = math.log2(1.5), math.log2(3), 1.0
    beta = math.log(0.5) / math.log(1.5) ** 2
    penalty = math.exp(beta * math.log(4 / 6) ** 2)
    expected = ((info_a + info_b) / 2 + info_ab) * penalty
    assert evaluate_lm.nist([["a", "b"]], [["a", "b", "a"]], 2) == pytest.approx(expected)
    assert evaluate_lm.nist([["a", "b"]], [["a", "b"]], 2) == pytest.approx(1.0)  # unigrams 1 bit each, bigram 0


def test_nist_is_nltks_and_orders_without_ngrams_add_nothing():
    from nltk.translate.nist_score import corpus_nist

    for n in (2, 4):
        assert evaluate_lm.nist(words(HYPS), words(REFS), n) == corpus_nist([[r] for r in words(REFS)], words(HYPS), n=n)
    short = [["a", "man"], ["two"], []]  # no output has 3 words: NIST-4 is NLTK's NIST-2 (NLTK itself divides by 0)
    assert evaluate_lm.nist(short, words(REFS), 4) == corpus_nist([[r] for r in words(REFS)], short, n=2)
    assert evaluate_lm.nist([[], []], [["a"], ["b"]], 4) == 0.0


def test_keyword_coverage_counts_keywords_in_order():
    assert evaluate_lm.lcs("a b c".split(), "c a x b".split()) == 2
    hyps = words(["c a x b", "y b z", "d"])
    keywords = words(["a b c", "b", ""])
    coverage, full = evaluate_lm.keyword_coverage(hyps, keywords)
    assert coverage == pytest.approx(100 * 3 / 4) and full == pytest.approx(100 * 2 / 3)
    assert evaluate_lm.keyword_coverage(words(HYPS), words(KEYWORDS)) == (100.0, 100.0)


def test_score_steps_sequential_ratio_and_counts(tmp_path):
    hyp = dict(enumerate(HYPS))
    row = evaluate_lm.score(hyp, {0: 6, 1: 4, 2: 9}, REFS, KEYWORDS)
    lengths = [len(h.split()) for h in HYPS]
    assert row["steps"] == pytest.approx(19 / 3) and row["length"] == pytest.approx(sum(lengths) / 3)
    assert row["seq_ratio"] == pytest.approx((19 / 3) / (sum(lengths) / 3))
    assert row["kw_coverage"] == 100.0 and row["kw_sentences"] == 100.0
    assert row["bleu4"] == pytest.approx(evaluate_lm.bleu(words(HYPS), words(REFS), 4))
    ar = evaluate_lm.score(hyp, {}, REFS, KEYWORDS)  # an autoregressive model prints no steps
    assert ar["steps"] == pytest.approx(sum(lengths) / 3 + 1)
    with pytest.raises(SystemExit, match=r"2 outputs .* for 3 sentences of refs.txt"):
        evaluate_lm.score({0: HYPS[0], 1: HYPS[1]}, {}, REFS, KEYWORDS, "refs.txt")
    with pytest.raises(SystemExit, match="refs.txt has 3 lines but kw.txt has 2"):
        evaluate_lm.score(hyp, {}, REFS, KEYWORDS[:2], "refs.txt", "kw.txt")


def test_paper_sampling_per_tau():
    expected = {10.0: "1", 3.0: "1", 1.0: "3", 0.3: "3", -math.inf: "5"}
    for tau, k in expected.items():
        args = evaluate_lm.paper_sampling_args(tau)
        assert args[args.index("--sampling-topk") + 1] == k and "--sampling" in args
        assert args[args.index("--insertion-mode") + 1] == "parallel" and args[args.index("--slot-top-p") + 1] == "0.7"
        assert args[args.index("--beam") + 1] == "1" and args[args.index("--nbest") + 1] == "1"
    with pytest.raises(ValueError, match="tau in"):
        evaluate_lm.paper_sampling_args(2.0)


def test_validate_log_is_parsed():
    log = ("2026-11-22 | INFO | valid | valid on 'test' subset | loss 8.912 | nll_loss 8.912 | token_nll 5.944 | "
           "position_nll 2.547 | termination_nll 0.421 | ppl 481.61 | wps 63128.1 | wpb 324.2 | bsz 25")
    assert validate_nll.parse_validate(log, "test") == {"loss": 8.912, "nll_loss": 8.912, "token_nll": 5.944,
                                                         "position_nll": 2.547, "termination_nll": 0.421}
    assert validate_nll.parse_validate(log, "valid") is None


def generate_stdout(hyps, steps=True):
    lines = []
    for i in reversed(range(len(hyps))):
        n = len(hyps[i].split())
        lines += [f"S-{i}\t{KEYWORDS[i]}", f"H-{i}\t-0.5\t{hyps[i]}", f"D-{i}\t-0.5\t{hyps[i]}",
                  f"P-{i}\t" + " ".join(["-0.5"] * (n + 1))] + ([f"I-{i}\t{i + 3}"] if steps else [])
    return "\n".join(lines) + "\n"


def test_a_whole_run_averages_seeds_and_writes_the_row(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.ref").write_text("".join(r + "\n" for r in REFS))
    (data / "test.keywords").write_text("".join(k + "\n" for k in KEYWORDS))
    outputs = {1: HYPS, 2: REFS}  # seed 2 reproduces the references
    calls = []

    class Out:
        def __init__(self, stdout):
            self.stdout, self.stderr = stdout, "Translated 3 sentences (30 tokens) in 0.3s (10 sentences/s)"

    def fake_generate(args, gen_args, seed):
        calls.append(gen_args)
        return Out(generate_stdout(outputs[seed])), 0.1

    monkeypatch.setattr(evaluate_lm, "generate", fake_generate)
    csv_path, md = tmp_path / "t.csv", tmp_path / "t.md"
    row = evaluate_lm.main(["--data", str(data), "--path", "ckpt.pt", "--name", "m", "--seeds", "1", "2",
                            "--paper-sampling=-inf", "--csv", str(csv_path), "--markdown", str(md), "--",
                            "--task", "insertion_lm"])
    assert calls[0][calls[0].index("--sampling-topk") + 1] == "5" and calls[0][-2:] == ["--task", "insertion_lm"]
    first = evaluate_lm.score(dict(enumerate(HYPS)), {0: 3, 1: 4, 2: 5}, REFS, KEYWORDS)
    assert row["bleu4"] == round((first["bleu4"] + 100.0) / 2, 2) and row["seeds"] == "1 2"
    assert row["steps"] == 4.0 and row["ms_per_sentence"] == 100.0 and row["kw_coverage"] == 100.0
    assert csv_path.read_text().splitlines()[0].startswith("model,bleu2,bleu4,nist2,nist4,steps,seq_ratio")
    assert md.read_text().splitlines()[2].startswith("| m | ")
    (data / "test.keywords").write_text(KEYWORDS[0] + "\n")
    with pytest.raises(SystemExit, match="has 3 lines but .*test.keywords has 1"):
        evaluate_lm.main(["--data", str(data), "--path", "ckpt.pt"])
