#!/usr/bin/env python
"""How good are a parallel model's ``--insertion-candidates``? The model's own pick, the AR judge's pick, and the
oracle pick (per sentence the candidate of the highest sentence-BLEU against its reference: an upper bound of any
judge), each as a corpus sacreBLEU of the split.

    python experiments/candidate_oracle.py --path checkpoints/t60_curriculum_query_kd/checkpoint_last.pt \
        --judge checkpoints/multi30k_en_de-teacher/checkpoint_best.pt --candidates 8

With ``--channel REV.pt`` (a target -> source AR model) it also prints the picks of the noisy-channel judge, the AR
judge's score + W x log p(source | candidate) / |source|, for each W of ``--channel-weights``: two decodings give every
candidate's two scores (W = 0 and W = 1), so the grid costs no more decoding.

With ``--mbr`` it also prints minimum-Bayes-risk picks: per sentence the candidate with the highest expected
sentence-BLEU against the sentence's candidates, each weighted by softmax(judge score / T) for each T of
``--mbr-temperatures`` (inf: uniform weights, the candidates' consensus). The candidates are their own evidence, so it
needs no more decoding.

With ``--second-judge CKPT`` (another judge: an autoregressive model, or an InsNet model trained left to right, which
scores a candidate along the left-to-right trajectory, or with ``--second-judge-order anchored`` along the anchored
order's uniform levels, decoding/rerank.py: the parallel model can judge its own candidates) it also prints the second judge's picks
alone and those of judge + V x second judge's score (+ W x channel with ``--channel``), for each V of
``--second-weights``: one more decoding gives every candidate's second score.

With ``--fit`` it fits one log-linear reranker over every score those decodings gave (the judge's, plus weights x the
model's own score, the length in tokens, the channel's and the second judge's where given; coordinate ascent on the
split's corpus sacreBLEU, :func:`fit_weights`); ``--weights 'channel=0.5,length=0.05'`` scores given weights, so the
weights fit on valid are reported on test with ``--split test --raw-ref .../test.de``.

If the oracle is far above the judge, a better judge would help; if it is near it, the candidates are the limit
(the parallel model itself). Every candidate is read from fairseq-generate's ``--nbest`` output (detokenised D- lines).
"""
import argparse
import collections
import functools
import math
import subprocess
import sys

import sacrebleu


def candidates(data, path, split, k, decoding, judged, src="en", tgt="de", with_scores=False, extra=()):
    """{sentence id: its k detokenised candidates, best first by the model's (or the judge's) score}; with_scores:
    also {sentence id: [(candidate, its score, its length in model tokens)]}."""
    cmd = ["fairseq-generate", data, "--path", path, "--gen-subset", split, "--batch-size", "64", "--remove-bpe",
           "--tokenizer", "moses", "--source-lang", src, "--target-lang", tgt, "--user-dir", "insnet_fairseq",
           "--task", "insertion_translation",
           *decoding.split(), "--insertion-candidates", str(k), "--nbest", str(k), "--beam", str(k)]
    if judged:
        cmd.append("--iter-decode-with-external-reranker")
    cmd.extend(extra)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"fairseq-generate failed:\n{out.stderr[-1500:]}")
    hyps, scored = collections.defaultdict(list), collections.defaultdict(list)
    n_tokens = None
    for line in out.stdout.splitlines():
        if line.startswith("H-"):  # H-id, score, BPE tokens: the length in model tokens
            n_tokens = len(line.split("\t")[2].split()) if line.count("\t") >= 2 else 0
        elif line.startswith("D-"):
            fields = line.split("\t")
            text = fields[2] if len(fields) > 2 else ""
            hyps[int(fields[0][2:])].append(text)
            scored[int(fields[0][2:])].append((text, float(fields[1]), n_tokens))
    return (hyps, scored) if with_scores else hyps


def mixed_picks(own_scored, judge_scored, weight, bonus):
    """{id: the candidate of the highest judge score + ``weight`` x the model's own score + ``bonus`` x its length
    in tokens}: a log-linear reranker of the two scores (both mean log-probabilities) and a word bonus
    (:func:`linear_picks` over :func:`feature_table`'s ``own`` and ``length``).

    Example: candidates ("a b", own -0.2, judge -1.0, 2 tokens) and ("a", own -0.1, judge -0.9, 1 token): weight 0,
    bonus 0 -> "a"; weight 0, bonus 0.2 -> "a b" (-1.0 + 0.4 > -0.9 + 0.2).
    """
    return linear_picks(feature_table(judge_scored, own_scored), {"own": weight, "length": bonus})


def rescored(base_scored, other_scored, combine):
    """{id: [(candidate, combine(its base score, its score in ``other_scored``), length)], best first (stable: ties
    keep the base order)}: the candidates of ``base_scored`` rescored with a second decoding's scores."""
    out = {}
    for i, cands in base_scored.items():
        other = {text: score for text, score, _ in other_scored[i]}
        out[i] = sorted([(text, combine(s, other[text]), n) for text, s, n in cands], key=lambda c: -c[1])
    return out


def channel_scored(judge_scored, both_scored, weight):
    """{id: [(candidate, judge score + ``weight`` x channel score, length)], best first}, where ``both_scored`` holds
    each candidate's score at channel weight 1 (judge + channel), so its channel score is the difference."""
    return rescored(judge_scored, both_scored, lambda s, both: s + weight * (both - s))


def added_scored(base_scored, other_scored, weight):
    """{id: [(candidate, base score + ``weight`` x its score in ``other_scored``, length)], best first}: a second
    judge's score added to the first's (both mean log-probabilities per token).

    Example: base ("a b", -1.0), ("a", -0.9); other ("a b", -0.5), ("a", -1.5); weight 0.5 -> ("a b", -1.25) first,
    then ("a", -1.65).
    """
    return rescored(base_scored, other_scored, lambda s, other: s + weight * other)


def channel_picks(judge_scored, both_scored, weight):
    """{id: the candidate of the highest judge score + ``weight`` x channel score} (see :func:`channel_scored`).

    Example: candidates ("a b", judge -1.0, both -1.5) and ("a", judge -0.9, both -2.0): weight 0 -> "a"; weight 0.5
    -> "a b" (-1.0 + 0.5 x -0.5 > -0.9 + 0.5 x -1.1).
    """
    return {i: cands[0][0] for i, cands in channel_scored(judge_scored, both_scored, weight).items()}


def feature_table(judge_scored, own_scored=None, both_scored=None, second_scored=None):
    """{id: [(candidate, {feature: value})]} in the judge's order, one row per distinct candidate: ``judge`` (the AR
    judge's mean log-probability), ``length`` (tokens) and, where their decodings were made, ``own`` (the model's own
    score; the same text reached twice: its better trajectory), ``channel`` (the channel model's score: the W = 1
    decoding's minus the judge's) and ``second`` (the second judge's).

    Example: judge ("a", -0.9, 1 token) and both ("a", -1.4) -> {0: [("a", {"judge": -0.9, "length": 1, "channel": -0.5})]}.
    """
    table = {}
    for i, cands in judge_scored.items():
        own = {}
        for text, score, _ in (own_scored or {}).get(i, []):
            own[text] = max(score, own.get(text, score))
        both = {text: score for text, score, _ in (both_scored or {}).get(i, [])}
        second = {text: score for text, score, _ in (second_scored or {}).get(i, [])}
        rows, seen = [], set()
        for text, score, n in cands:
            if text in seen:
                continue
            seen.add(text)
            f = {"judge": score, "length": float(n or 0)}
            if own:
                f["own"] = own.get(text, min(own.values()))
            if text in both:
                f["channel"] = both[text] - score
            if text in second:
                f["second"] = second[text]
            rows.append((text, f))
        table[i] = rows
    return table


def linear_picks(table, weights):
    """{id: the candidate of the highest judge score + sum of ``weights[f]`` x feature f} (ties: the judge's order).

    Example: ("a b", judge -1.0, length 2) and ("a", judge -0.9, length 1): {} -> "a"; {"length": 0.2} -> "a b".
    """
    def total(f):
        return f["judge"] + sum(w * f[name] for name, w in weights.items() if w)

    return {i: max(rows, key=lambda r: total(r[1]))[0] for i, rows in table.items()}


FEATURE_GRIDS = {"channel": (0, 0.1, 0.25, 0.5, 0.75, 1, 1.5), "second": (0, 0.25, 0.5, 1, 2),
                 "own": (0, 0.25, 0.5, 1), "length": (0, 0.02, 0.05, 0.1, 0.2)}


def fit_weights(table, bleu_of, sweeps=3):
    """Coordinate ascent over :data:`FEATURE_GRIDS` (the features ``table`` holds), from all weights 0: each feature in
    turn takes the grid value of the highest ``bleu_of(picks)`` with the others fixed (a tie keeps the current one),
    until a sweep changes nothing. Returns (weights, its score). A reranker of a few weights fit on the development
    set, as MERT fits a translation system's (Och, 2003): choose them on valid, report them on test."""
    names = [n for n in FEATURE_GRIDS if all(n in f for rows in table.values() for _, f in rows)]
    weights = {n: 0.0 for n in names}
    best = bleu_of(linear_picks(table, weights))
    for _ in range(sweeps):
        changed = False
        for n in names:
            for v in FEATURE_GRIDS[n]:
                trial = dict(weights, **{n: float(v)})
                score = bleu_of(linear_picks(table, trial))
                if score > best + 1e-9:
                    weights, best, changed = trial, score, True
        if not changed:
            break
    return weights, best


def parse_weights(text):
    """"channel=0.5,length=0.05" -> {"channel": 0.5, "length": 0.05}; an unknown feature is refused."""
    out = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        name, _, value = part.partition("=")
        if name not in FEATURE_GRIDS or not value:
            raise SystemExit(f"--weights: '{part}' is not FEATURE=VALUE with FEATURE one of {', '.join(FEATURE_GRIDS)}")
        out[name] = float(value)
    return out


@functools.lru_cache(maxsize=None)
def sentence_bleu(hyp: str, ref: str) -> float:
    """sacreBLEU's sentence BLEU of ``hyp`` against ``ref``, memoised: a grid of MBR temperatures and channel weights
    asks for the same pairs again."""
    return sacrebleu.sentence_bleu(hyp, [ref]).score


def mbr_picks(judge_scored, temperature, utility=None):
    """{id: the candidate of the highest expected utility against every candidate of its sentence (itself
    included), candidate j weighted by softmax over j of judge score_j / ``temperature`` (``inf``: uniform)}.
    ``utility(hyp, ref)``: sentence sacreBLEU by default. Ties go to the judge's order (its best first).

    Example: candidates "a b c" (judge -1.0), "a b d" (-1.1), "x y" (-0.5) with utility = shared words: uniform
    weights pick "a b c" (3 + 2 + 0 against 2 + 3 + 0 and 0 + 0 + 2: "a b c" comes first among the tied); T 0.01
    puts all weight on "x y", which then picks itself.
    """
    if utility is None:
        utility = sentence_bleu
    picks = {}
    for i, cands in judge_scored.items():
        texts = [c[0] for c in cands]
        if math.isinf(temperature):
            weights = [1.0] * len(cands)
        else:
            top = max(c[1] for c in cands)
            weights = [math.exp((c[1] - top) / temperature) for c in cands]
        gains = [sum(w * utility(h, r) for r, w in zip(texts, weights)) for h in texts]
        picks[i] = texts[max(range(len(texts)), key=lambda k: (gains[k], -k))]
    return picks


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--path", required=True, help="the InsNet checkpoint")
    p.add_argument("--judge", required=True, help="the autoregressive judge's checkpoint")
    p.add_argument("--candidates", type=int, default=8)
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--split", default="valid")
    p.add_argument("--raw-ref", default="../shared/data/multi30k/valid.de")
    p.add_argument("--decoding", default="--insertion-mode parallel --slot-top-p 0.9 --skip-repeats")
    p.add_argument("--mix", action="store_true", help="also rerank by the judge's score + WEIGHT x the model's own "
                   "+ BONUS x length in tokens, a grid of --mix-weights x --mix-bonuses")
    p.add_argument("--mix-weights", default="0,0.25,0.5,1,2")
    p.add_argument("--mix-bonuses", default="0,0.02,0.05,0.1,0.2")
    p.add_argument("--mbr", action="store_true", help="also the minimum-Bayes-risk picks (expected sentence-BLEU "
                   "against the candidates, weighted by the judge: --mbr-temperatures)")
    p.add_argument("--mbr-temperatures", default="inf,1,0.5,0.25,0.1")
    p.add_argument("--channel", help="a target -> source AR checkpoint: also the noisy-channel judge's picks")
    p.add_argument("--channel-weights", default="0,0.1,0.25,0.5,0.75,1,1.5,2")
    p.add_argument("--second-judge", help="another judge's checkpoint (autoregressive, or InsNet trained left to "
                   "right): also its picks alone and those of judge + V x its score (--second-weights)")
    p.add_argument("--second-weights", default="0.25,0.5,1,2")
    p.add_argument("--second-judge-order", default="l2r", help="the trajectory an InsNet second judge scores along "
                   "(--judge-order): l2r, or the anchored / binary order's uniform levels (e.g. the parallel model "
                   "judging its own candidates along the levels it was trained on)")
    p.add_argument("--fit", action="store_true", help="also fit a log-linear reranker on the split: judge + weights x "
                   "(own, length, and channel / second judge where given), coordinate ascent on corpus sacreBLEU")
    p.add_argument("--weights", help="also the picks of judge + these weights x features, e.g. "
                   "'channel=0.5,second=1,own=0.25,length=0.05' (the weights --fit chose on valid, applied to test)")
    args = p.parse_args()
    fixed = parse_weights(args.weights) if args.weights else None
    both_scored = second_scored = None
    refs = open(args.raw_ref, encoding="utf-8").read().splitlines()
    own, own_scored = candidates(args.data, args.path, args.split, args.candidates, args.decoding, False, args.src,
                                 args.tgt, with_scores=True)
    judged, judge_scored = candidates(args.data, f"{args.path}:{args.judge}", args.split, args.candidates,
                                      args.decoding, True, args.src, args.tgt, with_scores=True)
    if sorted(own) != list(range(len(refs))) or sorted(judged) != list(range(len(refs))):
        sys.exit(f"{args.raw_ref}: {len(refs)} references, but fairseq-generate decoded {len(own)} sentences")
    ids = range(len(refs))

    def bleu(pick):
        return sacrebleu.corpus_bleu([pick(i) for i in ids], [refs]).score

    oracle = {i: max(own[i], key=lambda h: sacrebleu.sentence_bleu(h, [refs[i]]).score) for i in ids}
    distinct = sum(len(set(own[i])) for i in ids) / len(refs)
    print(f"{args.candidates} candidates ({distinct:.2f} distinct per sentence), {args.split}: model's own pick "
          f"{bleu(lambda i: own[i][0]):.2f}, AR judge {bleu(lambda i: judged[i][0]):.2f}, oracle (sentence BLEU) "
          f"{bleu(lambda i: oracle[i]):.2f} sacreBLEU")
    if args.mix:  # the judge's score + WEIGHT x the model's own + BONUS x length: corpus sacreBLEU of each pick
        weights, bonuses = [float(w) for w in args.mix_weights.split(",")], [float(b) for b in args.mix_bonuses.split(",")]
        print("judge + weight x own + bonus x tokens, " + args.split + " sacreBLEU; rows: weight, columns: bonus")
        print("weight\\bonus " + " ".join(f"{b:>6}" for b in bonuses))
        for w in weights:
            row = []
            for b in bonuses:
                picks = mixed_picks(own_scored, judge_scored, w, b)
                row.append(bleu(lambda i: picks[i]))
            print(f"{w:>12} " + " ".join(f"{x:6.2f}" for x in row))
    if args.mbr:  # expected sentence-BLEU against the candidates, weighted by softmax(judge score / T)
        print(f"minimum Bayes risk over the {args.candidates} candidates, judge weights softmax(score / T), "
              f"{args.split} sacreBLEU")
        for t in [float(x) for x in args.mbr_temperatures.split(",")]:
            picks = mbr_picks(judge_scored, t)
            print(f"T {t:>5}: {bleu(lambda i: picks[i]):.2f}")
    if args.channel:  # the judge's score + W x the channel's: the W = 1 decoding gives each candidate's channel score
        _, both_scored = candidates(args.data, f"{args.path}:{args.judge}:{args.channel}", args.split, args.candidates,
                                    args.decoding, True, args.src, args.tgt, with_scores=True,
                                    extra=("--channel-weight", "1"))
        print(f"AR judge + W x channel ({args.channel}), {args.split} sacreBLEU")
        for w in [float(x) for x in args.channel_weights.split(",")]:
            picks = channel_picks(judge_scored, both_scored, w)
            print(f"W {w:>5}: {bleu(lambda i: picks[i]):.2f}")
        if args.mbr:  # MBR weighted by the noisy-channel judge's scores
            temps = [float(x) for x in args.mbr_temperatures.split(",") if not math.isinf(float(x))]
            print(f"minimum Bayes risk, weights softmax((judge + W x channel) / T), {args.split} sacreBLEU; "
                  "rows: W, columns: T")
            print("W\\T " + " ".join(f"{t:>6}" for t in temps))
            for w in [float(x) for x in args.channel_weights.split(",")]:
                scored = channel_scored(judge_scored, both_scored, w)
                row = []
                for t in temps:
                    picks = mbr_picks(scored, t)
                    row.append(bleu(lambda i: picks[i]))
                print(f"{w:>5} " + " ".join(f"{x:6.2f}" for x in row))
    if args.second_judge:  # judge (+ W x channel) + V x the second judge: one more decoding scores every candidate
        second, second_scored = candidates(args.data, f"{args.path}:{args.second_judge}", args.split, args.candidates,
                                           args.decoding, True, args.src, args.tgt, with_scores=True,
                                           extra=("--judge-order", args.second_judge_order))
        print(f"second judge ({args.second_judge}) alone: {bleu(lambda i: second[i][0]):.2f}; judge + W x channel + V "
              f"x second judge, {args.split} sacreBLEU; rows: W (0 only without --channel), columns: V")
        vs = [float(x) for x in args.second_weights.split(",")]
        print("W\\V " + " ".join(f"{v:>6}" for v in vs))
        for w in [float(x) for x in args.channel_weights.split(",")] if args.channel else [0.0]:
            base = channel_scored(judge_scored, both_scored, w) if args.channel else judge_scored
            row = []
            for v in vs:
                scored = added_scored(base, second_scored, v)
                row.append(bleu(lambda i: scored[i][0][0]))
            print(f"{w:>5} " + " ".join(f"{x:6.2f}" for x in row))
    if args.fit or fixed is not None:  # one log-linear reranker over every score the decodings above gave
        table = feature_table(judge_scored, own_scored, both_scored, second_scored)
        missing = sorted(n for n in (fixed or {}) if any(n not in f for rows in table.values() for _, f in rows))
        if missing:
            sys.exit(f"--weights: no scores for {', '.join(missing)} (channel needs --channel, second --second-judge)")
        if args.fit:
            weights, score = fit_weights(table, lambda picks: bleu(lambda i: picks[i]))
            print(f"fitted reranker on {args.split}: judge + " + ", ".join(f"{n}={w:g}" for n, w in weights.items())
                  + f": {score:.2f} sacreBLEU")
        if fixed is not None:
            picks = linear_picks(table, fixed)
            print(f"reranker judge + {args.weights} on {args.split}: {bleu(lambda i: picks[i]):.2f} sacreBLEU")


if __name__ == "__main__":
    main()
