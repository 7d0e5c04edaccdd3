"""InsNet-Dinic layerization (paper 3.3): the layers learned under the current model.

The layer arithmetic (layerings by position, their trajectories, InsNet-uniform layers) is in
:mod:`insnet_fairseq.geometry.layers`; here are the passes that run the model.

:func:`layerize` is InsNet-Dinic: start from a given layering (fully sequential by default) and
promote a token from layer ``l`` to ``l - 1`` when (1) its slot in the context of layer ``l - 1``
holds no token of layer ``l - 1`` and (2) ``log p(x | e_slot^(l)) - log p(x | e_slot^(l-1)) <= tau``
under the current model; repeat while promotions happen. One *round* is one no-grad pass of
the context encoder under the current layering (over the sentences that changed in the
previous round), then every token of every layer is tested at
once (a Jacobi sweep): candidates that would land in the same slot of the same layer are
resolved left-most first, and a layer left empty is removed. Rounds are vectorised over the
batch and all tokens; the Python loop is over rounds only. By default the rounds run at ``tau``
until nothing moves; with ``ladder=True`` a layering that starts from the sequential one reaches
the fixpoint at each tolerance of :data:`LADDER` below ``tau`` first, then at ``tau`` (see
:func:`layerize`), which makes the number of layers non-increasing in ``tau`` at about three times
the rounds.

Simultaneous promotions keep every layering valid: a promotion only adds tokens to earlier
contexts, which splits slots and never merges them, so tokens of one layer stay in distinct
slots and every token's slot exists when its layer is inserted.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from insnet_fairseq.geometry.layers import compact, context_steps, encoding_order, sequential_layers
from insnet_fairseq.geometry.masks import causal_mask, slot_query_geometry
from insnet_fairseq.geometry.offsets import offsets_from_rank, rank_matrix, slot_neighbours
from insnet_fairseq.geometry.orders import positions

# Tolerances passed on the way up to tau when a layering starts from the sequential one.
LADDER = (0.0, 0.3, 1.0, 3.0, 10.0)
LAYERIZATIONS = ("sequential", "dinic", "uniform", "sampled")  # sampled: geometry.gaps.sample_layers


@torch.no_grad()
def promotions(decoder, target: Tensor, layers: Tensor, source_kv, source_pad, tau: float) -> Tensor:
    """One Dinic round: which tokens move one layer up.  Returns bool [B, n] by position.

    target [B, n] (``<s> y </s>``, right-padded), layers [B, n]; ``source_kv``/``source_pad`` from
    ``decoder.encode_source``. One no-grad pass of the context encoder under ``layers``, then
    :func:`promotions_from_states`.
    """
    B, n = target.shape
    lengths = target.ne(decoder.padding_idx).sum(1)
    order = encoding_order(layers)
    step_pad = positions(B, n, target.device) >= lengths.unsqueeze(1)
    rank = rank_matrix(order, step_pad)  # [B, n, n]
    tokens = target.gather(1, order)  # [B, n]
    h, kv = decoder.context(tokens, offsets_from_rank(rank), causal_mask(n, target.device), source_kv, source_pad)
    return promotions_from_states(decoder, layers, h, kv, rank, tokens, lengths, source_kv, source_pad, tau)


@torch.no_grad()
def promotions_from_states(decoder, layers: Tensor, h: Tensor, kv, rank: Tensor, tokens: Tensor, lengths: Tensor,
                           source_kv, source_pad, tau: float, current: Optional[Tensor] = None) -> Tensor:
    """:func:`promotions` from the context encoder's states of the trajectory of ``layers``: those of
    ``InsNetDecoder.encode_trajectory`` over ``encoding_order(layers)`` (h [B, n, D] in insertion order,
    per-layer k/v, rank [B, n, n], tokens [B, n] in insertion order, lengths [B]), e.g. the training
    forward's own (``--dinic-lagged``: no extra pass). ``current`` [B, n] (optional): each step's token
    log-probability at its slot now (the forward's token head: :func:`token_logprobs_by_step`), which
    spares computing it again. Returns bool [B, n] by position.
    """
    B, n = layers.shape
    device = layers.device
    order = encoding_order(layers)
    steps = positions(B, n, device)
    step_pad = steps >= lengths.unsqueeze(1)

    by_step = layers.gather(1, order)  # [B, n]
    c1 = context_steps(layers, order)  # current context: last step of the earlier layers
    c0 = ((by_step.unsqueeze(1) < by_step.unsqueeze(2) - 1).sum(2) - 1).clamp_min(0)  # the layer above's
    at = lambda m, c: m.gather(1, c.unsqueeze(1)).squeeze(1)  # noqa: E731  m[b, c[b, t], t]
    s1 = (at(rank, c1) - 1).clamp_min(0)  # slot in the current context
    s0 = (at(rank, c0) - 1).clamp_min(0)  # slot in the context of the layer above

    word = (steps >= 2) & ~step_pad
    movable = word & (by_step >= 2)  # layer 1 cannot go up: layer 0 is <s> </s>
    # (1) slots of the layer above already taken: (context, slot) of every token of that layer
    dump = n * n
    occupied = torch.zeros(B, dump + 1, dtype=torch.bool, device=device)
    occupied.scatter_(1, torch.where(word, c1 * n + s1, torch.full_like(c1, dump)), True)
    key0 = c0 * n + s0
    free = ~occupied.gather(1, key0)
    cand = movable & free

    # (2) token log-likelihood at its slot now vs one layer up, for the candidates only
    b, t = cand.nonzero(as_tuple=True)
    if len(b) and tau < math.inf:
        left_all, right_all = slot_neighbours(rank)  # [B, n, n]
        heads = decoder.heads
        if decoder.context.slot_query is not None:  # slot queries for the candidates only: Q per sentence
            count = cand.sum(1)  # [B]
            Q = int(count.max())
            cols = (~cand).to(torch.uint8).sort(dim=1, stable=True).indices[:, :Q]  # [B, Q] candidate steps first, in order
            real = torch.arange(Q, device=device).unsqueeze(0) < count.unsqueeze(1)  # [B, Q]; rows of (b, t)

        def slot_lp(c: Tensor, s: Tensor) -> Tensor:
            cc, ss = c[b, t], s[b, t]
            e = heads.slot_repr(h[b, left_all[b, cc, ss]], h[b, right_all[b, cc, ss]], h[b, cc])  # [N, D]
            z = None
            if decoder.context.slot_query is not None:
                cq = c.gather(1, cols)  # [B, Q] each candidate's context
                context_rank = rank.gather(1, cq.unsqueeze(2).expand(-1, -1, n))  # [B, Q, n]
                z = decoder.context.query_stream(*slot_query_geometry(context_rank, cols, cq), kv, source_kv, source_pad)
                z = z[real]  # [N, D], in the order of (b, t)
            lp = F.log_softmax(heads.token_logits(e, z).float(), -1)  # [N, V]
            return lp.gather(1, tokens[b, t].unsqueeze(1)).squeeze(1)

        now = slot_lp(c1, s1) if current is None else current[b, t]
        ok = now - slot_lp(c0, s0) <= tau
        cand = torch.zeros_like(cand).index_put_((b[ok], t[ok]), torch.ones_like(b[ok], dtype=torch.bool))
    # two candidates for one slot of one layer: the left-most (first step) goes up
    first = torch.full((B, dump + 1), n, dtype=torch.long, device=device)
    first.scatter_reduce_(1, torch.where(cand, key0, torch.full_like(key0, dump)), steps, reduce="amin")
    up = cand & (first.gather(1, key0) == steps)
    return torch.zeros_like(up).scatter_(1, order, up)  # by step -> by position


def token_logprobs_by_step(token_out, lengths: Tensor, n: int) -> Tensor:
    """The model forward's ``token`` output (logits [N, V] and target [N] of the real word steps, row-major)
    -> log p(token | its slot) [B, n] by step (0 at ``<s>``, ``</s>`` and padding).  lengths [B].

    Example: lengths [5, 3] (3 and 1 words): rows 0-2 are steps 2-4 of sentence 0, row 3 step 2 of sentence 1.
    """
    lp = F.log_softmax(token_out["logits"].detach().float(), -1).gather(1, token_out["target"].unsqueeze(1)).squeeze(1)
    steps = positions(len(lengths), n, lengths.device)
    real = (steps >= 2) & (steps < lengths.unsqueeze(1))  # [B, n] the word steps, as the forward's step_valid
    return torch.zeros(real.shape, dtype=lp.dtype, device=lp.device).masked_scatter(real, lp)


@torch.no_grad()
def layerize(
    model,
    src_tokens: Tensor,
    src_lengths: Tensor,
    target: Tensor,
    order: Tensor,
    tau: float,
    start: Optional[Tensor] = None,
    max_rounds: int = 0,
    ladder: bool = False,
) -> Tuple[Tensor, int]:
    """InsNet-Dinic: learned layers for a batch under the current model (no gradient).

    Args:
        model: an InsNet model (put in eval mode for the call, then restored).
        src_tokens, src_lengths: the fairseq source batch.
        target: [B, n] ``<s> y </s>``, right-padded; order: [B, n] the sequential insertion order
            that defines the start (ignored when ``start`` is given).
        tau: tolerance in nats; ``-inf`` keeps the sequential layering, ``inf`` promotes whenever
            the slot is free.
        start: optional [B, n] layering to continue from (e.g. the previous one of these sentences).
        max_rounds: at most this many rounds in all (0: until no token moves).
        ladder: from the sequential start (``start`` None), reach the fixpoint at every tolerance
            of :data:`LADDER` below ``tau`` before ``tau``: the number of layers then never grows
            with ``tau`` (for tolerances on the ladder), at about three times the rounds.

    Returns:
        (layers [B, n] by position, rounds run).
    """
    lengths = target.ne(model.decoder.padding_idx).sum(1)
    layers = sequential_layers(order, lengths) if start is None else compact(start)
    if tau == -math.inf:
        return layers, 0
    was_training = model.training
    model.eval()
    try:
        decoder = model.decoder
        source_kv, source_pad = decoder.encode_source(model.encoder(src_tokens, src_lengths=src_lengths))
        limit = max_rounds if max_rounds > 0 else target.size(1) * (len(LADDER) + 1)
        rounds = 0
        # the ladder: the fixpoint at every tolerance below tau, then at tau. The greedy rule is
        # path-dependent (an early promotion can take the slot of a later one); climbing makes a
        # larger tau continue from a smaller one's result, so the number of layers never grows
        # with tau (for tolerances on the ladder).
        tolerances = [g for g in LADDER if g < tau] + [tau] if ladder and start is None else [tau]
        for tolerance in tolerances:
            active = torch.arange(target.size(0), device=target.device)  # sentences still changing
            while rounds < limit and len(active):
                kv = [(k[active], v[active]) for k, v in source_kv]
                pad = None if source_pad is None else source_pad[active]
                up = promotions(decoder, target[active], layers[active], kv, pad, tolerance)
                rounds += 1
                layers[active] = compact(layers[active] - up.long())
                active = active[up.any(1)]
    finally:
        model.train(was_training)
    return layers, rounds
