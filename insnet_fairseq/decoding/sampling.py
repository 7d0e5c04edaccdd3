"""Token sampling shared by the generators: fairseq's ``--sampling`` with ``--sampling-topk K`` (the K most
probable outcomes) or ``--sampling-topp P`` (nucleus sampling, Holtzman et al.: the smallest set of most
probable outcomes holding P of the mass), else the full distribution; ``--temperature T`` samples from
softmax(log p / T) (T < 1 sharper, T > 1 flatter), before the top-k / top-p cut."""
from typing import Optional

import torch
from torch import Tensor

from insnet_fairseq.errors import FlagError


def check_temperature(temperature: float, sampling: bool) -> None:
    """Refuse a ``--temperature`` decoding cannot use, naming the flag: T <= 0, or T != 1 without ``--sampling``
    (greedy words do not depend on T, and the reported scores are the model's own log-probabilities)."""
    if not temperature > 0:
        raise FlagError(f"--temperature must be > 0, got {temperature}")
    if temperature != 1.0 and not sampling:
        raise FlagError(f"--temperature {temperature} shapes --sampling only (greedy decoding picks the same words "
                         "whatever the temperature): add --sampling, or leave --temperature at 1")


def sample(lprobs: Tensor, topk: int = -1, topp: float = -1.0, generator: Optional[torch.Generator] = None,
           temperature: float = 1.0) -> Tensor:
    """lprobs [N, V] (log-probabilities; -inf for banned outcomes) -> sampled ids [N].

    ``topk`` > 0 keeps the K most probable outcomes; else 0 < ``topp`` < 1 keeps the nucleus: an outcome stays
    while the mass of the outcomes before it (in decreasing order) is below P, so the most probable always stays.
    Example: probabilities [0.5, 0.3, 0.2], topp 0.7 -> samples among the first two (0.5 < 0.7 before the third
    is reached: 0.8 >= 0.7 cuts it). ``temperature`` T > 0 first rescales the distribution to softmax(lprobs / T):
    probabilities [0.5, 0.3, 0.2] at T 0.5 become [0.66, 0.24, 0.11] (squared, renormalised).
    """
    if temperature != 1.0:
        lprobs = (lprobs.float() / temperature).log_softmax(-1)  # -inf (banned) stays -inf
    probs = lprobs.float().exp()
    if topk > 0:
        top, idx = probs.topk(min(topk, probs.size(-1)), dim=-1)
        return idx.gather(1, torch.multinomial(top, 1, generator=generator)).squeeze(1)
    if 0 < topp < 1:
        sorted_p, order = probs.sort(-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p >= topp  # [N, V] the mass before it already reaches P
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_p.masked_fill(outside, 0))
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
