"""Criterion ``insnet_loss``: the paper's sequential objective (3.3)

    sum_t  -log p(token | e_slot)  - log o(slot | step t)  - log q(stop_t | h_t)

with optional label smoothing on tokens, and with ``--repeat-penalty W`` an unlikelihood term (Welleck et al.,
2020) against a slot's word repeating a neighbour of the slot:

    W * sum_t sum_{n in left, right of slot t, n != token_t}  -log(1 - p(n | e_slot))

so that the model learns what ``--skip-repeats`` patches at decoding.

A model trained with ``--slot-objective gap`` has two terms instead, over every slot of every layer end of its
trajectories (:meth:`insnet_fairseq.models.insnet.InsNetDecoder.forward_gaps`):

    slot_token = sum_{open slots} sum_{missing words i}  -w_i log p(y_i | e_slot)     (w: soft targets, sum 1)
    slot_done  = sum_{slots}  BCE(q(done | e_slot), gap empty)
    slot_last  = sum_{open slots}  BCE(q(last | e_slot), gap misses exactly one word)     (--last-word-head only)

with ``w_i`` proportional to exp(-|i - centre| / ``--gap-temperature``) (0: the middle words).

Each term is logged on its own, normalised per target word (base 2, like fairseq's other criteria).
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from insnet_fairseq.geometry.gaps import gap_weights

from .token_loss import smoothed_nll

TERMS = ("token", "position", "termination", "repeat", "slot_token", "slot_done", "slot_last")
NLL_TERMS = ("token", "position", "termination", "slot_token", "slot_done", "slot_last")  # the model's NLL (nll_loss, ppl)


@dataclass
class InsNetLossConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.0, metadata={"help": "label smoothing on the token head"})
    repeat_penalty: float = field(default=0.0, metadata={
        "help": "weight of an unlikelihood term against a slot's word equal to a neighbour of the slot (0: none)"})
    gap_temperature: float = field(default=1.0, metadata={
        "help": "--slot-objective gap: a slot's target weighs each missing word by exp(-distance to the gap's "
        "centre / T), in words (0: the middle word, or the two middle words equally)"})


def repeat_unlikelihood(logits, target, neighbours):
    """Summed -log(1 - p(n)) over each slot's neighbour words n that are not its target.

    logits [N, V], target [N], neighbours [2, N] (left, right) -> 0-dim float32. Example: logits zeros [1, 4] (p = 1/4
    each), target [2], neighbours [[1], [2]]: only the left neighbour counts (the right one is the target): -log(3/4).
    """
    logits = logits.float()
    lse = torch.logsumexp(logits, -1, keepdim=True)  # [N, 1]
    total = logits.new_zeros(())
    for n in neighbours:
        p = (logits.gather(1, n.unsqueeze(1)) - lse).exp().squeeze(1)  # [N]
        total = total - torch.log1p(-p.clamp(max=1 - 1e-6)).masked_fill(n == target, 0.0).sum()
    return total


def gap_losses(gap, label_smoothing: float = 0.0, temperature: float = 1.0):
    """Summed terms of the end-of-slot objective: {"slot_token": (loss, nll), "slot_done": (nll, nll)} (and
    "slot_last": (nll, nll) with ``--last-word-head``) from
    :meth:`~insnet_fairseq.models.insnet.InsNetDecoder.forward_gaps`' ``gap`` terms. Smoothing mixes each open
    slot's soft target with the uniform distribution: (1 - eps) x nll + eps x mean_v(-log p_v). A slot's terms are
    multiplied by its ``slot_weight`` (``--gap-slot-rate``: 1 / rate at each drawn slot), where there is one.

    Example: one open slot of uniform logits over V = 4 words, missing two words at distances 0.5 and 0.5: weights
    0.5 each, slot_token = log 4; a done logit 0 on a done slot adds log 2 to slot_done.
    """
    lprobs = F.log_softmax(gap["token_logits"].float(), dim=-1)  # [S_open, V]
    weight = gap_weights(gap["distance"], gap["pair_slot"], temperature)  # [P]
    slot_weight = gap.get("slot_weight")  # [S] or None
    open_weight = None if slot_weight is None else slot_weight[~gap["done"]]  # [S_open]
    if open_weight is not None:
        weight = weight * open_weight[gap["pair_slot"]]
    nll = -(weight * lprobs[gap["pair_slot"], gap["pair_target"]]).sum()
    uniform = lprobs.mean(-1) if open_weight is None else lprobs.mean(-1) * open_weight
    loss = nll if label_smoothing == 0 else (1 - label_smoothing) * nll - label_smoothing * uniform.sum()
    done = F.binary_cross_entropy_with_logits(gap["done_logits"].float(), gap["done"].float(), weight=slot_weight,
                                              reduction="sum")
    terms = {"slot_token": (loss, nll), "slot_done": (done, done)}
    if "last_logits" in gap:  # --last-word-head: an open slot's target is that it misses exactly one word
        one = torch.bincount(gap["pair_slot"], minlength=lprobs.size(0)).eq(1)  # [S_open]
        last = F.binary_cross_entropy_with_logits(gap["last_logits"].float(), one.float(), weight=open_weight,
                                                  reduction="sum")
        terms["slot_last"] = (last, last)
    return terms


def term_losses(net_output, label_smoothing: float = 0.0, repeat_penalty: float = 0.0):
    """Summed NLL of each named term; returns {name: (loss, nll)} (equal unless smoothing); with ``repeat_penalty``
    also ``repeat``: (weight x the unlikelihood term, the term)."""
    tok = net_output["token"]
    # [N, V] logits, real steps only: fairseq's label_smoothed_nll_loss with a one-pass backward
    tok_loss, tok_nll = smoothed_nll(tok["logits"], tok["target"], label_smoothing)

    pos = net_output["position"]
    pos_lprobs = F.log_softmax(pos["logits"][pos["mask"]].float(), dim=-1)  # [N, K]
    pos_nll = -pos_lprobs.gather(1, pos["target"][pos["mask"]].unsqueeze(1)).sum()

    term = net_output["termination"]
    term_nll = F.binary_cross_entropy_with_logits(
        term["logits"][term["mask"]].float(), term["target"][term["mask"]].float(), reduction="sum"
    )
    terms = {"token": (tok_loss, tok_nll), "position": (pos_nll, pos_nll), "termination": (term_nll, term_nll)}
    if repeat_penalty > 0:
        if "neighbours" not in tok:
            raise ValueError("--repeat-penalty needs the slots' neighbour words, which only InsNet models "
                             "(--arch insnet_*) give")
        rep = repeat_unlikelihood(tok["logits"], tok["target"], tok["neighbours"])
        terms["repeat"] = (repeat_penalty * rep, rep)
    return terms


@register_criterion("insnet_loss", dataclass=InsNetLossConfig)
class InsNetLoss(FairseqCriterion):
    def __init__(self, task, label_smoothing=0.0, repeat_penalty=0.0, gap_temperature=1.0):
        super().__init__(task)
        if repeat_penalty < 0:
            raise ValueError(f"--repeat-penalty {repeat_penalty}: must be >= 0")
        if gap_temperature < 0:
            raise ValueError(f"--gap-temperature {gap_temperature}: must be >= 0")
        self.label_smoothing, self.repeat_penalty = label_smoothing, repeat_penalty
        self.gap_temperature = gap_temperature

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        if "gap" in net_output:  # --slot-objective gap
            if self.repeat_penalty > 0:
                raise ValueError("--repeat-penalty scores the paper's token term: a --slot-objective gap model "
                                 "learns end-of-slot instead")
            terms = gap_losses(net_output["gap"], self.label_smoothing, self.gap_temperature)
            sample_size = int(net_output["gap"]["words"])
        else:
            terms = term_losses(net_output, self.label_smoothing, self.repeat_penalty)
            sample_size = int(net_output["token"]["target"].numel())
        loss = sum(t[0] for t in terms.values())
        nll = sum(t[1] for name, t in terms.items() if name in NLL_TERMS)  # the model's NLL, without the penalty
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "ntokens": sample_size,
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        for name, (_, term_nll) in terms.items():
            logging_output[f"{name}_nll"] = term_nll.data
        if "layers" in sample:  # layered training: parallel steps per sentence
            logging_output["layers"] = sample["layers"].sum().data
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        if sample_size == 0:
            return
        for key in ["loss", "nll_loss"] + [f"{t}_nll" for t in TERMS]:
            if not any(key in log for log in logging_outputs):  # a term this run does not train
                continue
            total = sum(log.get(key, 0) for log in logging_outputs)
            metrics.log_scalar(key, total / sample_size / math.log(2), sample_size, round=3)
        if any("layers" in log for log in logging_outputs):
            nsentences = sum(log.get("nsentences", 0) for log in logging_outputs)
            metrics.log_scalar("layers", sum(log.get("layers", 0) for log in logging_outputs) / max(nsentences, 1),
                               nsentences, round=2)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
