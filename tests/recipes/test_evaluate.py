"""recipes/evaluate.py scores fairseq-generate output exactly as sacrebleu does."""
import argparse

import sacrebleu


from recipes import evaluate

HYPS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch im Park."]
REFS = ["Ein Mann fährt ein Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest im Park ein Buch."]
TOK_HYPS = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee .", "Eine Frau liest ein Buch im Park ."]


def generate_stdout(steps=True):
    """fairseq-generate's output for the three sentences, out of order as fairseq prints it."""
    lines = []
    for i in (2, 0, 1):
        n = len(TOK_HYPS[i].split())
        lines += [f"S-{i}\tsource {i}", f"H-{i}\t-0.5\t{TOK_HYPS[i]}", f"D-{i}\t-0.5\t{HYPS[i]}",
                  f"P-{i}\t" + " ".join(["-0.5"] * (n + 1))]
        if steps:
            lines.append(f"I-{i}\t{i + 3}")
    return "\n".join(lines) + "\n"


def test_scores_a_known_pair_like_sacrebleu(tmp_path):
    raw, tok = tmp_path / "ref.txt", tmp_path / "ref.tok"
    raw.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    tok.write_text("\n".join(r.replace(".", " .") for r in REFS) + "\n", encoding="utf-8")
    args = argparse.Namespace(raw_ref=str(raw), tok_ref=str(tok), name="m", path="p")
    row = evaluate.score(args, *evaluate.parse_generate(generate_stdout()))
    bleu = sacrebleu.metrics.BLEU()
    expected = bleu.corpus_score(HYPS, [REFS])
    assert row["sacrebleu"] == round(expected.score, 2) and 0 < row["sacrebleu"] < 100
    assert row["signature"] == str(bleu.get_signature()) and row["signature"].startswith("nrefs:1|case:mixed")
    tok_refs = [r.replace(".", " .") for r in REFS]
    assert row["tok_bleu"] == round(sacrebleu.corpus_bleu(TOK_HYPS, [tok_refs], tokenize="none").score, 2)
    lengths = [len(h.split()) for h in TOK_HYPS]
    assert row["steps"] == round(sum([3, 4, 5]) / 3, 2)
    assert row["steps_per_token"] == round((12 / 3) / (sum(lengths) / 3), 3)
    # an autoregressive model prints no I- lines: one step per token and one for </s>
    ar = evaluate.score(args, *evaluate.parse_generate(generate_stdout(steps=False)))
    assert ar["steps"] == round(sum(lengths) / 3 + 1, 2) and ar["sacrebleu"] == row["sacrebleu"]


def test_timing_line_is_parsed():
    line = "2026-11-21 | INFO | fairseq_cli.generate | Translated 1,000 sentences (12,345 tokens) in 10.5s (95.2 sentences/s)"
    assert evaluate.ms_per_sentence(line) == 10.5
