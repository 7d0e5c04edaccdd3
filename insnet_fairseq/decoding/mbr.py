"""Minimum-Bayes-risk choice among a sentence's candidates (``--insertion-candidates-mbr T``).

Each sentence's K candidates are their own evidence: candidate a's expected utility is
``sum_b w_b BLEU+1(a | b)``, with ``w = softmax(score / T)`` over the sentence's candidates (score: the judge's with
``--iter-decode-with-external-reranker``, else the model's own mean log-probability; T = inf: uniform weights), and
the candidate of the highest expected utility is output first. The utility is BLEU+1 (Lin and Och 2004: add-one
smoothed 2-, 3- and 4-gram precisions, brevity penalty) on the model's tokens, computed for all K x K pairs of a
batch of sentences in a few tensor operations, with no loop over tokens or sentences.
"""
import math
from typing import List, Optional

import torch
from torch import Tensor

from insnet_fairseq.decoding.rerank import pad_hypotheses

MAX_ORDER = 4


def ngram_ids(tokens: Tensor, lengths: Tensor, max_order: int = MAX_ORDER):
    """The n-grams of each row as one integer each, for n = 1 .. ``max_order`` (yielded in turn): tokens [N, T]
    (right-padded), lengths [N] -> [N, T] int64 per n, -1 where no n-gram starts (past ``lengths - n``). Two n-grams
    of the batch get the same id iff their tokens are equal (exact: ids are renumbered after each order, so they
    never overflow, whatever the vocabulary).

    Example: tokens [[5, 6, 5, 6]], lengths [4]: n 1 -> [[5, 6, 5, 6]]; n 2 -> [[i, j, i, -1]] with i != j ("5 6",
    "6 5").
    """
    N, T = tokens.shape
    base = int(tokens.max()) + 1 if tokens.numel() else 1
    starts = torch.arange(T, device=tokens.device).unsqueeze(0)
    ids = tokens.long()
    for n in range(1, max_order + 1):
        if n > 1:  # n-gram at i = (its (n-1)-gram at i, token i + n - 1), renumbered
            key, m = torch.zeros_like(ids), max(0, T - n + 1)  # m: where an n-gram can start
            key[:, :m] = ids[:, :m] * base + tokens[:, n - 1 :]
            ids = torch.unique(key, return_inverse=True)[1]
        yield ids.masked_fill(starts > (lengths - n).unsqueeze(1), -1)


def pairwise_bleu(tokens: Tensor, lengths: Tensor) -> Tensor:
    """BLEU+1 of every candidate against every other of its sentence.

    tokens [G, K, T] (G sentences, K candidates each, right-padded), lengths [G, K] -> [G, K, K] float, entry
    [g, a, b] = BLEU+1 of candidate a with candidate b as its reference, in [0, 1] (1: a equals b, if it has at
    least 4 tokens). Clipped n-gram matches: sum over a's n-gram positions i of min(c_a, c_b) / c_a, c_x the count
    of the n-gram at i in x.

    Example: "a b c d" against itself: 1.0; against "a b c e": precisions 3/4, (2+1)/(3+1), (1+1)/(2+1), (0+1)/(1+1),
    brevity 1 -> (3/4 * 3/4 * 2/3 * 1/2) ** (1/4) = 0.658.
    """
    G, K, T = tokens.shape
    flat, flat_len = tokens.reshape(G * K, T), lengths.reshape(G * K)
    log_prec = torch.zeros(G, K, K, device=tokens.device)
    hyp_len = lengths.unsqueeze(2).float()  # [G, K, 1] candidate a
    for n, ids in enumerate(ngram_ids(flat, flat_len), start=1):
        ids = ids.view(G, K, T)  # [G, K, T]
        real = ids >= 0
        same = (ids.unsqueeze(2).unsqueeze(4) == ids.unsqueeze(1).unsqueeze(3)) & real.unsqueeze(2).unsqueeze(4) \
            & real.unsqueeze(1).unsqueeze(3)  # [G, a, b, i, j]: n-gram i of a equals n-gram j of b
        in_b = same.sum(4).float()  # [G, a, b, i] count in b of a's n-gram i
        in_a = in_b.diagonal(dim1=1, dim2=2).permute(0, 2, 1).unsqueeze(2).clamp(min=1)  # [G, a, 1, i] count in a
        matches = (torch.minimum(in_b, in_a) / in_a).sum(3)  # [G, a, b] clipped matches
        total = (hyp_len - n + 1).clamp(min=0)  # [G, a, 1] n-grams of a
        if n == 1:
            prec = matches / total.clamp(min=1)
        else:  # add-one smoothing (BLEU+1)
            prec = (matches + 1) / (total + 1)
        log_prec = log_prec + torch.log(prec.clamp(min=1e-9))
    ref_len = lengths.unsqueeze(1).float()  # [G, 1, b]
    brevity = torch.clamp(1 - ref_len / hyp_len.clamp(min=1), max=0)  # log BP
    return torch.exp(log_prec / MAX_ORDER + brevity)


def mbr_order(tokens: Tensor, lengths: Tensor, scores: Tensor, valid: Tensor, temperature: float) -> Tensor:
    """The candidates of each sentence, best expected utility first.

    tokens [G, K, T], lengths [G, K], scores [G, K] (any scale: mean log-probabilities), valid bool [G, K] (False:
    no candidate there, never chosen and weight 0), temperature > 0 (``inf``: uniform weights) -> [G, K] indices, a
    permutation of each row, invalid candidates last.

    Example: candidates "a b c d", "a b c e", "x y z w" with equal scores: the first two support each other, so
    one of them comes first and "x y z w" last.
    """
    if math.isinf(temperature):
        logits = torch.zeros_like(scores)
    else:
        logits = scores.float() / temperature
    weights = torch.softmax(logits.masked_fill(~valid, float("-inf")), dim=1)  # [G, K]
    utility = pairwise_bleu(tokens, lengths)  # [G, a, b]
    expected = (utility * weights.unsqueeze(1)).sum(2).masked_fill(~valid, float("-inf"))  # [G, a]
    return expected.argsort(dim=1, descending=True, stable=True)


def mbr_ranks(hyps: List[Optional[dict]], G: int, K: int, temperature: float, pad: int, eos: int) -> List[List[int]]:
    """The ranking of ``--insertion-candidates-mbr T``: ``hyps``, the K candidates of each of G sentences in turn (None:
    dropped unfinished) -> for each sentence, its finished candidates' places (among its finished ones, in their
    order) by expected BLEU+1 against the sentence's candidates, best first (:func:`mbr_order`).

    Example: a sentence's candidates "a b c d", None, "a b c e", "x y z w" (equal scores) -> [0, 1, 2] or [1, 0, 2]:
    the third finished one last.
    """
    ended = [torch.tensor([eos]) if h is None else h["tokens"] for h in hyps]  # each ends with </s>
    tokens = pad_hypotheses(ended, pad, eos)[:, 1:].view(G, K, -1)  # </s> and padding past each length
    lengths = torch.tensor([len(t) - 1 for t in ended]).view(G, K)  # words, without </s>
    valid = torch.tensor([h is not None for h in hyps]).view(G, K)
    scores = torch.tensor([0.0 if h is None else h["score"] for h in hyps]).view(G, K)
    order = mbr_order(tokens, lengths, scores, valid, temperature).tolist()  # [G, K] candidate indices
    place = (valid.long().cumsum(1) - 1).tolist()  # a finished candidate's index among its sentence's finished ones
    ok = valid.tolist()
    return [[place[g][k] for k in order[g] if ok[g][k]] for g in range(G)]
