"""An autoregressive judge for insertion candidates: fairseq's ``--iter-decode-with-external-reranker`` (the
last ``--path`` checkpoint is an autoregressive model that rescores the outputs), the noisy parallel decoding
of Gu et al. (2018) with a teacher as judge. Each candidate costs one teacher-forced pass of the judge, all
candidates of a batch in one pass: no extra decoding steps.

The score is fairseq's: the candidate's mean log-probability per token under the judge, ``</s>`` included
(:func:`fairseq.iterative_refinement_generator.IterativeRefinementGenerator.rerank`). With a channel model
(``--channel-weight W``, ``--path INSNET.pt:AR.pt:REV.pt``, REV an autoregressive model trained target -> source) the
score adds W x the source's mean log-probability given the candidate, log p(x | y) / |x|: the noisy-channel
reranking of Yee et al. (2019), which penalises a candidate that drops (or invents) content.

The judge may also be an InsNet model (``--path INSNET.pt:JUDGE.pt`` with JUDGE an ``insnet_*`` checkpoint, best one
trained left to right): it scores a candidate along the left-to-right trajectory, one teacher-forced pass of its
:meth:`~insnet_fairseq.models.insnet.InsNetDecoder.forward`, by the mean log-probability of its named terms (token,
position and termination) per inserted token, ``</s>`` counted: the same normalisation as the autoregressive score.
"""
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import FairseqEncoderDecoderModel
from fairseq.models.nat import FairseqNATModel
from torch import Tensor

from insnet_fairseq.geometry.layers import trajectory, uniform_layers
from insnet_fairseq.geometry.orders import DEFAULT_ANCHOR_DEPTH, left_to_right


def is_insnet_judge(model) -> bool:
    """Whether a judge is an InsNet model (scored by :func:`insnet_scores`), not an autoregressive one."""
    return getattr(model, "judge_kind", None) == "insnet"


def check_reranker(reranker, tgt_dict, insnet_allowed: bool = True,
                   flag: str = "--iter-decode-with-external-reranker") -> None:
    """The judge must be an autoregressive encoder-decoder (fairseq's ``transformer`` family) or, where
    ``insnet_allowed``, an InsNet translation model (not InDIGO's, not the LM's), over the same target dictionary;
    anything else is refused with ``flag`` named."""
    name = type(reranker).__name__
    kind = getattr(reranker, "judge_kind", "autoregressive")  # the insertion models say theirs (models/insnet.py)
    insnet = kind == "insnet"
    autoregressive = kind == "autoregressive" and isinstance(reranker, FairseqEncoderDecoderModel) and \
        not isinstance(reranker, FairseqNATModel)
    if not (autoregressive or (insnet and insnet_allowed)):
        what = "an autoregressive encoder-decoder (e.g. --arch transformer)" + \
            (" or an InsNet translation model (--arch insnet_*)" if insnet_allowed else "")
        raise ValueError(
            f"{flag}: the judge checkpoint must be {what}, not {name}: pass --path INSNET.pt:AR.pt"
        )
    n = len(reranker.decoder.dictionary)
    if n != len(tgt_dict):
        raise ValueError(
            f"{flag}: the judge's target dictionary has {n} entries, the task's {len(tgt_dict)}: the judge must be "
            "trained on the same data-bin"
        )


def pad_hypotheses(hyps: Sequence[Tensor], pad: int, eos: int) -> Tensor:
    """Hypotheses (each [T_i], ending with ``</s>``) -> [N, 1 + max T_i]: ``</s>`` (fairseq's autoregressive start
    symbol), then the tokens, right-padded.

    Example: [[7, 2], [5, 6, 2]] with pad 1, eos 2 -> [[2, 7, 2, 1], [2, 5, 6, 2]].
    """
    out = torch.full((len(hyps), 1 + max(len(h) for h in hyps)), pad, dtype=torch.long)
    out[:, 0] = eos
    for i, h in enumerate(hyps):  # one copy per hypothesis, after decoding (not a per-token loop)
        out[i, 1 : 1 + len(h)] = h
    return out


@torch.no_grad()
def sequence_scores(model, src_tokens: Tensor, src_lengths: Tensor, seq: Tensor, pad: int) -> Tensor:
    """Mean log-probability per token of each target row under the autoregressive ``model``, one teacher-forced pass.

    src_tokens [N, S], src_lengths [N], seq [N, T + 1]: ``</s>`` (the start symbol), then the target, right-padded
    -> [N] float scores. Example: seq [</s>, a, </s>] scores (log p(a | </s>) + log p(</s> | </s> a)) / 2.
    """
    if any(m.training for m in model.modules()):
        model.eval()
    prev, target = seq[:, :-1], seq[:, 1:]  # [N, T] each: teacher forcing
    net_output = model(src_tokens, src_lengths, prev)
    lprobs = model.get_normalized_probs(net_output, log_probs=True)  # [N, T, V]
    real = target.ne(pad)  # [N, T]
    tok = lprobs.gather(2, target.unsqueeze(2)).squeeze(2).masked_fill(~real, 0.0)  # [N, T]
    return tok.sum(1) / real.sum(1).clamp(min=1).type_as(tok)


def judge_scores(reranker, src_tokens: Tensor, src_lengths: Tensor, hyps: Sequence[Tensor], pad: int,
                 eos: int) -> Tensor:
    """Mean log-probability per token of each hypothesis under the autoregressive ``reranker``, one pass.

    src_tokens [N, S] (as the batch has them), src_lengths [N], hyps N token tensors ending with ``</s>``
    -> [N] float scores. Example: a hypothesis [a, </s>] scores (log p(a | </s>) + log p(</s> | </s> a)) / 2.
    """
    seq = pad_hypotheses(hyps, pad, eos).to(src_tokens.device)  # [N, T + 1]
    return sequence_scores(reranker, src_tokens, src_lengths, seq, pad)


JUDGE_ORDERS = ("l2r", "anchored", "binary")


def check_judge_order(order: str) -> None:
    """An InsNet judge's trajectory (``--judge-order``) must be one of :data:`JUDGE_ORDERS`; else refused, flag named."""
    if order not in JUDGE_ORDERS:
        raise ValueError(f"--judge-order must be one of {', '.join(JUDGE_ORDERS)}, got '{order}'")


@torch.no_grad()
def insnet_scores(model, src_tokens: Tensor, src_lengths: Tensor, hyps: Sequence[Tensor], pad: int, bos: int,
                  eos: int, order: str = "l2r", anchor_depth: int = DEFAULT_ANCHOR_DEPTH) -> Tensor:
    """Mean log-probability per inserted token of each hypothesis under the InsNet ``model``, inserted left to
    right, one teacher-forced pass of ``model.forward`` for all rows. ``order`` "anchored" or "binary" scores it
    along that order's InsNet-uniform layering instead (the levels a layered model, e.g. the parallel student, was
    trained on: each layer's words at their slots in the earlier layers' context, one termination term per layer),
    with ``anchor_depth`` as in training (``--anchor-depth``).

    src_tokens [N, S], src_lengths [N], hyps N token tensors ending with ``</s>`` -> [N] float scores: per row the
    sum of the token and position log-probabilities of its |y| words and of the |y| + 1 termination decisions
    (continue after <s> </s> and each word but the last, stop after it), divided by |y| + 1 (the autoregressive
    score's count, ``</s>`` included). Example: a hypothesis [a, </s>] scores (log p(a | slot 0) + log o(slot 0) +
    log (1 - q(stop | <s> </s>)) + log q(stop | <s> </s> a)) / 2.
    """
    check_judge_order(order)
    if any(m.training for m in model.modules()):
        model.eval()
    target = pad_hypotheses(hyps, pad, eos).to(src_tokens.device)  # [N, n]: <s> y </s>, right-padded
    target[:, 0] = bos
    n = target.size(1)
    lengths = target.ne(pad).sum(1)  # [N] = |y| + 2
    if order == "l2r":
        out = model(src_tokens, src_lengths, target, left_to_right(lengths, n))
    else:  # the uniform layering of the order's levels: (insertion order, context of each step) [N, n] each
        steps, context = trajectory(uniform_layers(lengths, n, order, anchor_depth))
        out = model(src_tokens, src_lengths, target, steps, context=context)
    tok, pos, term = out["token"], out["position"], out["termination"]
    steps = pos["mask"]  # [N, T]: the real word steps, T = n - 2
    word = torch.zeros(steps.shape, dtype=torch.float, device=target.device)  # [N, T]
    word[steps] = torch.log_softmax(tok["logits"].float(), -1).gather(1, tok["target"].unsqueeze(1)).squeeze(1)
    slot = torch.log_softmax(pos["logits"].float(), -1).gather(2, pos["target"].unsqueeze(2)).squeeze(2)  # [N, T]
    word = word + torch.where(steps, slot, torch.zeros_like(slot))  # (a padded step's row is all -inf: nan)
    stop = -F.binary_cross_entropy_with_logits(term["logits"].float(), term["target"].float(), reduction="none")
    total = word.sum(1) + stop.masked_fill(~term["mask"], 0.0).sum(1)  # [N]
    return total / (lengths - 1).float()


def channel_scores(channel, src_tokens: Tensor, hyps: Sequence[Tensor], pad: int, eos: int) -> Tensor:
    """Mean log-probability per token of each row's source given its hypothesis, under the autoregressive
    ``channel`` model (trained target -> source), one pass.

    src_tokens [N, S] (left-padded, as fairseq batches them, or right-padded; each row ending with ``</s>``), hyps N
    token tensors ending with ``</s>`` -> [N] float scores. Example: source [x, </s>] and hypothesis [a, </s>] score
    (log p(x | a </s>; </s>) + log p(</s> | a </s>; </s> x)) / 2: the channel's encoder reads the hypothesis.
    """
    sources = utils.convert_padding_direction(src_tokens, pad, left_to_right=True)  # [N, S], right-padded
    seq = torch.cat([sources.new_full((len(sources), 1), eos), sources], dim=1)  # [N, S + 1]
    hyp_tokens = torch.nn.utils.rnn.pad_sequence(list(hyps), batch_first=True, padding_value=pad).to(src_tokens.device)
    return sequence_scores(channel, hyp_tokens, hyp_tokens.ne(pad).sum(1), seq, pad)


class Judge:
    """The candidates' judge: the ``forward`` model's mean log-probability of a candidate (autoregressive, or InsNet
    along the left-to-right trajectory: :func:`insnet_scores`), plus ``channel_weight`` x the autoregressive
    ``channel`` model's of the source given it (no channel: the forward score alone).

    ``score(src_tokens [N, S], src_lengths [N], hyps N tensors) -> [N]``. Example: forward -0.5 and channel -1.0
    with weight 0.3 -> -0.8.
    """

    def __init__(self, forward, channel=None, channel_weight: float = 0.0, order: str = "l2r",
                 anchor_depth: int = DEFAULT_ANCHOR_DEPTH):
        self.forward, self.channel, self.channel_weight = forward, channel, channel_weight
        self.order, self.anchor_depth = order, anchor_depth  # an InsNet judge's trajectory (insnet_scores)

    @classmethod
    def split(cls, models, options, tgt_dict):
        """``--path INSNET.pt:JUDGE.pt[:REV.pt]`` -> ([the InsNet model], the judge): the forward model, then the channel
        model when ``--channel-weight`` > 0, each checked (:func:`check_reranker`); ``options``: the generator's
        :class:`~insnet_fairseq.decoding.options.DecodingOptions` (``judge_order``: the trajectory an InsNet judge
        scores along; an autoregressive judge takes only "l2r")."""
        weight, order = options.channel_weight, options.judge_order
        if weight > 0 and len(models) != 3:
            raise ValueError("--channel-weight needs three checkpoints, the InsNet model, the autoregressive judge "
                             f"and its channel model (target -> source): --path INSNET.pt:AR.pt:REV.pt (got {len(models)})")
        if weight == 0 and len(models) != 2:
            raise ValueError("--iter-decode-with-external-reranker needs two checkpoints, the InsNet model and "
                             f"the autoregressive judge: --path INSNET.pt:AR.pt (got {len(models)}; a third, the "
                             "channel model, needs --channel-weight)")
        judges = models[1:]
        for i, m in enumerate(judges):
            check_reranker(m, tgt_dict, insnet_allowed=i == 0)  # the channel reads the candidate as its source
        check_judge_order(order)
        if order != "l2r" and not is_insnet_judge(judges[0]):
            raise ValueError(f"--judge-order {order}: only an InsNet judge scores along an insertion order; an "
                             "autoregressive judge reads left to right (--judge-order l2r)")
        return models[:1], cls(judges[0], judges[1] if weight > 0 else None, weight, order, options.anchor_depth)

    def rescore(self, hyps: List[Optional[dict]], src_tokens: Tensor, src_lengths: Tensor, pad: int, eos: int) -> None:
        """Every candidate's score becomes the judge's (fairseq's rerank), one pass for all: ``hyps[i]`` is the
        candidate of source row i (None: dropped unfinished, skipped)."""
        rows = [i for i, h in enumerate(hyps) if h is not None]
        judged = self.score(src_tokens[rows], src_lengths[rows], [hyps[i]["tokens"] for i in rows], pad, eos)
        for i, s in zip(rows, judged.tolist()):
            hyps[i]["score"] = s

    def score(self, src_tokens: Tensor, src_lengths: Tensor, hyps: Sequence[Tensor], pad: int, eos: int) -> Tensor:
        if is_insnet_judge(self.forward):
            bos = self.forward.decoder.dictionary.bos()
            s = insnet_scores(self.forward, src_tokens, src_lengths, hyps, pad, bos, eos, self.order, self.anchor_depth)
        else:
            s = judge_scores(self.forward, src_tokens, src_lengths, hyps, pad, eos)
        if self.channel is not None:
            s = s + self.channel_weight * channel_scores(self.channel, src_tokens, hyps, pad, eos).to(s)
        return s


def best_of_groups(scores: Tensor, k: int) -> List[int]:
    """scores [G * K] of G groups of K consecutive candidates -> the index of each group's best (ties: the first).

    Example: scores [-1.0, -0.5, -0.2, -0.9], k 2 -> [1, 2].
    """
    g = scores.view(-1, k)
    return (g.argmax(1) + torch.arange(g.size(0), device=g.device) * k).tolist()
