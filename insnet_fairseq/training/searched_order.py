"""InDIGO's searched adaptive order (SAO, paper 4.2): beam search, under the current model, over
the insertion orders of a known target.

A partial order is the set of target positions inserted so far (``<s>`` and ``</s>`` first). From
it, every remaining word has exactly one slot (between the nearest inserted positions), so a step
chooses which word comes next; its score is InDIGO's ``log p(word | H) + log p(slot | word, H)``.
The ``beam`` best partial orders of each sentence are kept (cumulative score), each extended by
one word per step, with the context of every hypothesis encoded incrementally (one new token per
step reading the cached keys and values, as in decoding). A sentence whose words are all placed
inserts its padding positions (score 0), so every order ends with the padding, as
:mod:`insnet_fairseq.geometry.orders` lays it out.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from insnet_fairseq.geometry.masks import causal_mask
from insnet_fairseq.geometry.offsets import offsets_from_rank, rank_matrix


@torch.no_grad()
def search_orders(model, src_tokens: Tensor, src_lengths: Tensor, target: Tensor, beam: int) -> Tensor:
    """The ``beam`` best orders of every sentence (InDIGO's heads; dropout as the model is set).

    Args:
        model: an ``indigo_*`` model.
        src_tokens, src_lengths: the fairseq source batch [B, L], [B].
        target: [B, n] ``<s> y </s>`` right-padded.
        beam: hypotheses kept per sentence.

    Returns:
        orders [B * beam, n]: row ``b * beam + i`` is sentence b's i-th best order (final position
        inserted at each step; a sentence with fewer distinct orders than ``beam`` repeats some).

    Example: "<s> a b </s>" with beam 2 gives the two orders [0, 3, 1, 2] and [0, 3, 2, 1] (a then b,
    b then a), the better one first.
    """
    decoder, heads = model.decoder, model.decoder.heads
    pad = decoder.padding_idx
    B, n = target.shape
    R, device = B * beam, target.device
    lengths = target.ne(pad).sum(1)
    row_len = lengths.repeat_interleave(beam)  # [R]
    tgt = target.repeat_interleave(beam, 0)  # [R, n]
    positions = torch.arange(n, device=device)
    orders = torch.zeros(R, n, dtype=torch.long, device=device)
    orders[:, 1] = row_len - 1  # <s> then </s>
    inserted = (positions.unsqueeze(0) == 0) | (positions.unsqueeze(0) == (row_len - 1).unsqueeze(1))  # [R, n]
    score = torch.full((B, beam), float("-inf"), device=device)
    score[:, 0] = 0.0  # one hypothesis to start from: no duplicates
    score = score.view(R)

    enc = model.encoder(src_tokens, src_lengths=src_lengths)
    source_kv, source_pad = decoder.encode_source(enc)
    source_kv = [(k.repeat_interleave(beam, 0), v.repeat_interleave(beam, 0)) for k, v in source_kv]
    source_pad = None if source_pad is None else source_pad.repeat_interleave(beam, 0)
    first = orders[:, :2]
    offsets = offsets_from_rank(rank_matrix(first, torch.zeros(R, 2, dtype=torch.bool, device=device)))
    h, cache = decoder.context(tgt.gather(1, first), offsets, causal_mask(2, device), source_kv, source_pad)

    rows = torch.arange(R, device=device)
    for t in range(1, n - 1):  # after step t (t + 1 tokens), choose step t + 1
        # slots of the partial sequence: inserted positions left to right, as steps
        step_of = torch.full((R, n), n, dtype=torch.long, device=device)  # final position -> step
        step_of.scatter_(1, orders[:, : t + 1], torch.arange(t + 1, device=device).expand(R, t + 1))
        by_pos = torch.where(inserted, positions.expand(R, n), torch.full_like(step_of, n)).sort(1).values[:, : t + 1]
        # [R, t + 1] steps left to right (clamped: dead hypotheses, score -inf, may hold repeats)
        nb_steps = step_of.gather(1, by_pos.clamp(max=n - 1)).clamp(max=t)
        left_nb, right_nb = nb_steps[:, :-1], nb_steps[:, 1:]  # [R, t] the t slots
        # candidates: every remaining real position (its word and its slot)
        real_left = ~inserted & (positions.unsqueeze(0) < (row_len - 1).unsqueeze(1))  # [R, n]
        slot_of = inserted.long().cumsum(1) - 1  # [R, n] slot of position p = #inserted left of p - 1
        h_last = h[:, t : t + 1]  # [R, 1, D]
        word_lp = F.log_softmax(heads.word_logits(h_last[:, 0]).float(), -1)  # [R, V + 1]
        cand_word = tgt  # [R, n] the word at every position
        left_key, right_key = heads.pointer_logits(h_last.expand(R, n, -1), cand_word, h)  # [R, n, t + 1]
        slot_logits = heads.slot_logits(left_key, right_key, left_nb.unsqueeze(1).expand(R, n, t),
                                        right_nb.unsqueeze(1).expand(R, n, t))  # [R, n(cand), t]
        slot_lp = F.log_softmax(slot_logits.float(), -1).gather(2, slot_of.clamp(0, t - 1).unsqueeze(2)).squeeze(2)
        cand = word_lp.gather(1, cand_word) + slot_lp  # [R, n]
        # a finished sentence inserts its next padding position at no cost
        done = ~real_left.any(1)  # [R]
        next_pad = torch.where(~inserted, positions.expand(R, n), torch.full_like(step_of, n)).min(1).values
        pad_move = done.unsqueeze(1) & (positions.unsqueeze(0) == next_pad.unsqueeze(1))
        cand = torch.where(real_left, cand, torch.where(pad_move, torch.zeros_like(cand), torch.full_like(cand, -1e30)))
        total = (score.unsqueeze(1) + cand).masked_fill(score.unsqueeze(1) == float("-inf"), float("-inf"))
        top, idx = total.view(B, beam * n).topk(beam, dim=1)  # [B, beam]
        parent = (idx // n + torch.arange(B, device=device).unsqueeze(1) * beam).view(R)
        chosen = (idx % n).view(R)
        score = top.view(R).masked_fill(top.view(R) < -1e29, float("-inf"))
        # the chosen hypotheses, extended by their word
        orders, inserted, h = orders[parent], inserted[parent], h[parent]
        cache = [(k[parent], v[parent]) for k, v in cache]
        orders[:, t + 1] = chosen
        inserted[rows, chosen] = True
        # the new token's offset row: ranks among the inserted positions, the new one included
        rank_pos = inserted.long().cumsum(1) - 1  # [R, n] rank of each inserted position
        ranks = rank_pos.gather(1, orders[:, : t + 2])  # [R, t + 2] by step
        new_offsets = (ranks - ranks[:, t + 1 :]).unsqueeze(1)  # [R, 1, t + 2]
        mask = torch.zeros(1, t + 2, dtype=torch.bool, device=device)
        h_new, cache = decoder.context(tgt.gather(1, chosen.unsqueeze(1)), new_offsets, mask, source_kv, source_pad,
                                       past=cache)
        h = torch.cat([h, h_new], 1)
    # the end of decoding: log p(<eod> | h of the last word), then the best order of each sentence first
    h_end = h.gather(1, (row_len - 1).view(R, 1, 1).expand(R, 1, h.size(-1))).squeeze(1)  # [R, D]
    score = score + F.log_softmax(heads.word_logits(h_end).float(), -1)[:, heads.eod_index]
    score, rank = score.view(B, beam).sort(1, descending=True)
    orders = orders.view(B, beam, n).gather(1, rank.unsqueeze(2).expand(B, beam, n))
    # a sentence with fewer distinct orders than beam repeats its best one
    alive = score > float("-inf")  # [B, beam]
    orders = torch.where(alive.unsqueeze(2), orders, orders[:, :1].expand(B, beam, n))
    return orders.reshape(R, n)
