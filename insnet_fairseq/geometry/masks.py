"""Attention masks and offsets of the context encoder's two streams, as pure tensor functions.

* :func:`causal_mask`: the token stream is causal in insertion order (token i sees tokens 0..i);
* :func:`slot_query_geometry`: a slot query (``--slot-query-stream``) sits at the slot of the word it
  predicts and reads that word's context with the offsets the word will have once inserted.
"""
import torch
from torch import Tensor


def causal_mask(n: int, device) -> Tensor:
    """bool [n, n], True above the diagonal (token i may not see tokens inserted after it)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def slot_query_geometry(context_rank: Tensor, word: Tensor, ctx: Tensor):
    """Offsets and mask of slot queries (``--slot-query-stream``), for words seen from contexts.

    Args:
        context_rank: [B, Q, n], row ``ctx`` of the rank matrix per query: where every token is
            (or would go) in that context.
        word: [B, Q] the step of the word each query predicts; ctx: [B, Q] the last step of its context.

    Returns (offsets [B, Q, n], blocked [B, Q, n]): a context token ``j`` is seen from the word's
    future position ``p = context_rank[q, word]`` at ``r - p`` if left of it, ``r - p + 1`` if
    right (``r = context_rank[q, j]``); tokens after the context are blocked.
    Example: target "<s> a b </s>" inserted in the order <s>, </s>, a, b. The context of b is
    steps 0-2 at ranks [0, 2, 1]; b goes to rank p = 2, so the query sees <s> at -2, </s> at +1 and
    a at -1: b's own offset row once inserted.
    """
    n = context_rank.size(-1)
    p = context_rank.gather(2, word.unsqueeze(2))  # [B, Q, 1]
    offsets = (context_rank - p + (context_rank >= p).long()).clamp(-(n - 1), n - 1)  # bounded where blocked
    return offsets, torch.arange(n, device=ctx.device).view(1, 1, n) > ctx.unsqueeze(2)
