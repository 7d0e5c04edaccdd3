"""An autoregressive judge for insertion candidates: fairseq's ``--iter-decode-with-external-reranker`` (the
last ``--path`` checkpoint is an autoregressive model that rescores the outputs), the noisy parallel decoding
of Gu et al. (2018) with a teacher as judge. Each candidate costs one teacher-forced pass of the judge, all
candidates of a batch in one pass: no extra decoding steps.

The score is fairseq's: the candidate's mean log-probability per token under the judge, ``</s>`` included
(:func:`fairseq.iterative_refinement_generator.IterativeRefinementGenerator.rerank`). With a channel model
(``--channel-weight W``, ``--path INSNET.pt:AR.pt:REV.pt``, REV an autoregressive model trained target -> source) the
score adds W x the source's mean log-probability given the candidate, log p(x | y) / |x|: the noisy-channel
reranking of Yee et al. (2019), which penalises a candidate that drops (or invents) content.
"""
from typing import List, Sequence

import torch
from fairseq import utils
from torch import Tensor


def check_reranker(reranker, tgt_dict) -> None:
    """The judge must be an autoregressive encoder-decoder (fairseq's ``transformer`` family) over the same target
    dictionary; anything else is refused with the flag named."""
    from fairseq.models import FairseqEncoderDecoderModel
    from fairseq.models.nat import FairseqNATModel

    from insnet_fairseq.models.insnet import InsNetModel

    name = type(reranker).__name__
    if isinstance(reranker, (InsNetModel, FairseqNATModel)) or not isinstance(reranker, FairseqEncoderDecoderModel):
        raise ValueError(
            "--iter-decode-with-external-reranker: the last --path checkpoint must be an autoregressive "
            f"encoder-decoder (e.g. --arch transformer), not {name}: pass --path INSNET.pt:AR.pt"
        )
    n = len(reranker.decoder.dictionary)
    if n != len(tgt_dict):
        raise ValueError(
            f"--iter-decode-with-external-reranker: the reranker's target dictionary has {n} entries, the task's "
            f"{len(tgt_dict)}: the reranker must be trained on the same data-bin"
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
    """The candidates' judge: the autoregressive ``forward`` model's mean log-probability of a candidate, plus
    ``channel_weight`` x the ``channel`` model's of the source given it (no channel: the forward score alone).

    ``score(src_tokens [N, S], src_lengths [N], hyps N tensors) -> [N]``. Example: forward -0.5 and channel -1.0
    with weight 0.3 -> -0.8.
    """

    def __init__(self, forward, channel=None, channel_weight: float = 0.0):
        self.forward, self.channel, self.channel_weight = forward, channel, channel_weight

    @classmethod
    def from_models(cls, models, channel_weight: float, tgt_dict) -> "Judge":
        """The judge models at the end of ``--path``: the forward AR model, then the channel model when
        ``channel_weight`` > 0; each checked (:func:`check_reranker`)."""
        for m in models:
            check_reranker(m, tgt_dict)
        return cls(models[0], models[1] if channel_weight > 0 else None, channel_weight)

    def score(self, src_tokens: Tensor, src_lengths: Tensor, hyps: Sequence[Tensor], pad: int, eos: int) -> Tensor:
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
