"""On-policy contexts for the end-of-slot objective (``--on-policy P``): trajectories that begin with the model's own
parallel decoding.

A sentence of a training batch is chosen with probability P. It is decoded for k steps, k drawn uniformly from
1 .. ``--on-policy-steps``: no gradient, dropout off, the cache, and ``--insertion-mode parallel``'s rule (every slot
whose q(done) is below 0.5 takes its best word, and a slot that said done is done for good;
:mod:`insnet_fairseq.decoding.gaps`). The canvas this leaves is aligned to the reference
(:func:`~insnet_fairseq.geometry.alignment.lcs_match`). A canvas word the alignment leaves out, one the reference
does not have there, stays where it is as a *foreign* word
(:func:`~insnet_fairseq.geometry.alignment.merge_canvas`): it is in the context from the step that wrote it, it is
never a word a gap misses, and a gap that holds nothing else is done. There is no deletion in an insertion model, so
the target after a wrong word is what is still missing around it. The reference's remaining words are laid out by
:func:`~insnet_fairseq.geometry.gaps.sample_layers` after the canvas's steps. The one pass then scores every layer
end: the canvas's own contexts, encoded in the order decoding encoded them, with targets recomputed against the
reference, and the contexts that follow.
"""
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from insnet_fairseq.decoding.gaps import Shut, fill_slots, open_slots, slot_done_logits, with_slot_queries
from insnet_fairseq.decoding.greedy import Rows
from insnet_fairseq.decoding.core_options import CoreOptions
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.geometry.alignment import lcs_match, merge_canvas
from insnet_fairseq.geometry.gaps import sample_layers

THRESHOLD = CoreOptions().end_of_slot  # q(done) below which a rollout's slot takes a word: --end-of-slot's default


@dataclass(frozen=True)
class Canvas:
    """Decoded partial outputs: ``tokens`` [B, C] left to right (``<s> ... </s>``, padding beyond ``lengths`` [B]),
    ``layers`` [B, C] the step that inserted each token (0 for ``<s>`` and ``</s>``)."""

    tokens: Tensor
    layers: Tensor
    lengths: Tensor


@torch.no_grad()
def roll_out(model, steps: InsertionSteps, src_tokens: Tensor, src_lengths: Tensor, k: Tensor, max_len: Tensor,
             threshold: float = THRESHOLD) -> Canvas:
    """Decode each sentence of a ``--slot-objective gap`` model in parallel for at most ``k`` [B] steps, as
    ``fairseq-generate --insertion-mode parallel --end-of-slot threshold`` does, stopping a sentence earlier where every
    slot is done or its canvas has ``max_len`` [B] tokens (``<s>``, ``</s>`` included). Runs in eval mode; the model's
    mode is restored. ``steps``: the core's step (:class:`~insnet_fairseq.decoding.step.InsertionSteps`, parallel
    mode, cache on). Returns the canvases (:class:`Canvas`)."""
    training = model.training
    model.eval()
    try:
        return _roll_out(model, steps, src_tokens, src_lengths, k, max_len, threshold)
    finally:
        model.train(training)


def _roll_out(model, steps, src_tokens, src_lengths, k, max_len, threshold) -> Canvas:
    decoder = model.decoder
    B, device = src_tokens.size(0), src_tokens.device
    source_kv, source_pad = decoder.encode_source(model.forward_encoder(src_tokens, src_lengths))
    state = steps.initial_state(decoder, B, device, source_kv, source_pad, capacity=int(max_len.max()))
    rows = Rows(torch.arange(B, device=device), k, max_len, None, source_kv, source_pad)  # cap: k steps
    column_step = torch.zeros(2, dtype=torch.long, device=device)  # the step of each state column
    finished = []  # (ids, tokens left to right, their steps)
    t = 0
    shut = Shut.start(state, steps.options.reopen_done_slots)
    while True:
        state = with_slot_queries(decoder, state, rows.source_kv, rows.source_pad, shut.cols)  # for both heads
        slots, done_logits = slot_done_logits(decoder, state, shut=shut.cols)
        chosen = open_slots(done_logits, threshold, (rows.max_len - state.lengths).clamp_min(0))  # [B, K]
        stop = ~chosen.any(1) | (state.steps >= rows.cap)
        if bool(stop.any()):
            seq = state.sequence_order()[stop]  # [b, S]
            finished.append((rows.ids[stop], state.tokens[stop].gather(1, seq), column_step[seq]))
            keep = (~stop).nonzero().view(-1)
            if len(keep) == 0:
                break
            state, rows, shut = state.select(keep), rows.select(keep), shut.select(keep)
            slots, done_logits, chosen = (slots[0][keep], slots[1][keep]), done_logits[keep], chosen[keep]
        before = state.tokens.size(1)
        shut = shut.close(slots, done_logits, threshold)
        state = fill_slots(steps, decoder, state, slots, done_logits, chosen, rows, shut.cols)
        shut = shut.grown(state)
        t += 1
        column_step = torch.cat([column_step, column_step.new_full((state.tokens.size(1) - before,), t)])
    C = max(tok.size(1) for _, tok, _ in finished)
    out_tok = torch.full((B, C), steps.pad, dtype=torch.long, device=device)
    out_lay = torch.zeros(B, C, dtype=torch.long, device=device)
    for rows, tok, lay in finished:
        out_tok[rows, : tok.size(1)], out_lay[rows, : lay.size(1)] = tok, lay
    return Canvas(out_tok, out_lay, out_tok.ne(steps.pad).sum(1))


def on_policy_trajectories(model, steps: InsertionSteps, src_tokens: Tensor, src_lengths: Tensor, target: Tensor,
                           chosen: Tensor, k: Tensor, max_len: Tensor, generator: Optional[torch.Generator],
                           spread: float, skip: float):
    """The layered trajectories of a training batch, the ``chosen`` [B] (bool) sentences' begun by :func:`roll_out`
    (``k`` [B] steps each, canvases of at most ``max_len`` [B] tokens), the others drawn by
    :func:`~insnet_fairseq.geometry.gaps.sample_layers` (``generator``, ``spread``, ``skip``) as without the flag.

    target [B, n] (``<s> y </s>``, padded) -> (target [B, N] with the canvases' foreign words in it, layers [B, N],
    foreign [B, N] bool), for :meth:`insnet_fairseq.models.insnet.InsNetDecoder.forward_gaps`.
    """
    pad = steps.pad
    B = target.size(0)
    lengths = target.ne(pad).sum(1)
    bounds = torch.stack([target[:, 0], target.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)], 1)  # <s>, </s>
    canvas, canvas_layers, canvas_len = bounds, torch.zeros_like(bounds), torch.full_like(lengths, 2)
    rows = chosen.nonzero().view(-1)
    if len(rows):
        c = roll_out(model, steps, src_tokens[rows], src_lengths[rows], k[rows], max_len[rows])
        width = max(2, c.tokens.size(1))
        canvas = torch.cat([canvas, canvas.new_full((B, width - 2), pad)], 1)
        canvas_layers = torch.cat([canvas_layers, canvas_layers.new_zeros(B, width - 2)], 1)
        canvas[rows, : c.tokens.size(1)], canvas_layers[rows, : c.tokens.size(1)] = c.tokens, c.layers
        canvas_len = canvas_len.index_copy(0, rows, c.lengths)
        canvas = canvas.masked_fill(torch.arange(width, device=canvas.device).unsqueeze(0) >= canvas_len.unsqueeze(1),
                                    pad)
    match = lcs_match(canvas, canvas_len, target, lengths)
    merged, start, foreign = merge_canvas(canvas, canvas_layers, canvas_len, target, lengths, match, pad)
    layers = sample_layers(merged.ne(pad).sum(1), merged.size(1), generator, spread, skip, start=start)
    return merged, layers, foreign
