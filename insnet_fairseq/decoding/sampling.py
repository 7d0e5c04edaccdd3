"""Token sampling shared by the generators: fairseq's ``--sampling`` with ``--sampling-topk K`` (the K most
probable outcomes) or ``--sampling-topp P`` (nucleus sampling, Holtzman et al.: the smallest set of most
probable outcomes holding P of the mass), else the full distribution."""
from typing import Optional

import torch
from torch import Tensor


def sample(lprobs: Tensor, topk: int = -1, topp: float = -1.0, generator: Optional[torch.Generator] = None) -> Tensor:
    """lprobs [N, V] (log-probabilities; -inf for banned outcomes) -> sampled ids [N].

    ``topk`` > 0 keeps the K most probable outcomes; else 0 < ``topp`` < 1 keeps the nucleus: an outcome stays
    while the mass of the outcomes before it (in decreasing order) is below P, so the most probable always stays.
    Example: probabilities [0.5, 0.3, 0.2], topp 0.7 -> samples among the first two (0.5 < 0.7 before the third
    is reached: 0.8 >= 0.7 cuts it).
    """
    probs = lprobs.float().exp()
    if topk > 0:
        top, idx = probs.topk(min(topk, probs.size(-1)), dim=-1)
        return idx.gather(1, torch.multinomial(top, 1, generator=generator)).squeeze(1)
    if 0 < topp < 1:
        sorted_p, order = probs.sort(-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p >= topp  # [N, V] the mass before it already reaches P
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_p.masked_fill(outside, 0))
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)
