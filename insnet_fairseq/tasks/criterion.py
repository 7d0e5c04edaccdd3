"""Criterion ``insnet_loss``: the paper's sequential objective (3.3)

    sum_t  -log p(token | e_slot)  - log o(slot | step t)  - log q(stop_t | h_t)

with optional label smoothing on tokens. Each term is logged on its own, normalised per
inserted target token (base 2, like fairseq's other criteria).
"""
import math
from dataclasses import dataclass, field

import torch.nn.functional as F
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from .token_loss import smoothed_nll

TERMS = ("token", "position", "termination")


@dataclass
class InsNetLossConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.0, metadata={"help": "label smoothing on the token head"})


def term_losses(net_output, label_smoothing: float = 0.0):
    """Summed NLL of each named term; returns {name: (loss, nll)} (equal unless smoothing)."""
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
    return {"token": (tok_loss, tok_nll), "position": (pos_nll, pos_nll), "termination": (term_nll, term_nll)}


@register_criterion("insnet_loss", dataclass=InsNetLossConfig)
class InsNetLoss(FairseqCriterion):
    def __init__(self, task, label_smoothing=0.0):
        super().__init__(task)
        self.label_smoothing = label_smoothing

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        terms = term_losses(net_output, self.label_smoothing)
        loss = sum(t[0] for t in terms.values())
        nll = sum(t[1] for t in terms.values())
        sample_size = int(net_output["token"]["target"].numel())
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
