"""Reference procedures the one-pass model is checked and timed against.

* :func:`naive_offsets`: the offset matrix by its definition, with Python loops.
* :func:`naive_trajectory_logprobs`: for every sentence and every step, re-encode the prefix
  from scratch (naive attention with materialised positions, loop-built offsets and slots) and
  score the next insertion: the O(n) re-encoding procedure of earlier insertion models.
* :func:`reencode_prefixes`: the same per-prefix re-encoding, batched over sentences with the
  fast attention: what training would cost without InsNet's computation sharing (benchmark).
* :func:`naive_gap_loss`: the end-of-slot objective (``--slot-objective gap``) by its definition: every layer
  end's context re-encoded from scratch, its gaps and their missing words listed with Python loops.

None of these is used in training or decoding.
"""
import contextlib
import math
from typing import Dict, List

import torch
import torch.nn.functional as F

from insnet_fairseq.geometry.masks import causal_mask
from insnet_fairseq.geometry.offsets import offset_matrix


def naive_offsets(order: List[int]) -> List[List[int]]:
    """offset[i][j] (j <= i) by definition: positions among the first i + 1 inserted tokens."""
    n = len(order)
    out = [[0] * n for _ in range(n)]
    for i in range(n):
        seen = sorted(order[: i + 1])
        for j in range(i + 1):
            out[i][j] = seen.index(order[j]) - seen.index(order[i])
    return out


@contextlib.contextmanager
def naive_attention(model):
    """Switch every offset self-attention of ``model`` to its materialised-P oracle."""
    layers = [m for m in model.modules() if hasattr(m, "naive")]
    for m in layers:
        m.naive = True
    try:
        yield
    finally:
        for m in layers:
            m.naive = False


def reencode_prefixes(model, src_tokens, src_lengths, target, order):
    """Loss of whole trajectories when every prefix is re-encoded (batched over sentences).

    Step t runs the context encoder on the first t + 1 tokens from scratch and scores the
    insertion of step t + 1. Returns the summed token + position + termination NLL (a scalar
    with gradient), equal to the one-pass objective without label smoothing.
    """
    decoder = model.decoder
    heads = decoder.heads
    pad = decoder.padding_idx
    B, n = target.shape
    lengths = target.ne(pad).sum(1)
    steps = torch.arange(n, device=target.device)
    step_pad = steps.unsqueeze(0) >= lengths.unsqueeze(1)
    offsets = offset_matrix(order, step_pad)
    tokens = target.gather(1, order)
    enc = model.encoder(src_tokens, src_lengths=src_lengths)
    source_kv, source_pad = decoder.encode_source(enc)
    total = 0.0
    for t in range(1, n):
        h, kv = decoder.context(
            tokens[:, : t + 1], offsets[:, : t + 1, : t + 1], causal_mask(t + 1, target.device), source_kv, source_pad
        )
        # slots after step t: sort the prefix by final position
        pos = order[:, : t + 1].masked_fill(step_pad[:, : t + 1], n + 1)
        by_position = pos.argsort(dim=1)  # [B, t + 1] steps in final order
        left, right = by_position[:, :-1], by_position[:, 1:]  # [B, t]
        g = h[:, t : t + 1].expand(-1, t, -1)
        e = heads.slot_repr(h.gather(1, left.unsqueeze(-1).expand(-1, -1, h.size(-1))),
                            h.gather(1, right.unsqueeze(-1).expand(-1, -1, h.size(-1))), g)  # [B, t, D]
        stop = heads.termination_logit(h[:, t])  # [B]
        alive = t <= lengths - 1
        last = t == lengths - 1
        total = total + F.binary_cross_entropy_with_logits(
            stop[alive], last[alive].to(stop.dtype), reduction="sum"
        )
        if t == n - 1:
            break
        predict = t < lengths - 1  # [B]
        nxt = order[:, t + 1].clamp(max=n - 1)
        k = (pos < nxt.unsqueeze(1)).sum(1) - 1  # [B]
        k = k.clamp(0, t - 1)
        pos_lp = torch.log_softmax(heads.position_logit(e), -1).gather(1, k.unsqueeze(1)).squeeze(1)
        e_k = e.gather(1, k.view(B, 1, 1).expand(-1, 1, e.size(-1))).squeeze(1)
        z = None
        if decoder.context.slot_query is not None:  # the slot query: offsets of the word once inserted at k
            r = (pos.unsqueeze(2) > pos.unsqueeze(1)).sum(2)  # [B, t + 1] ranks in the prefix
            p = (k + 1).unsqueeze(1)  # [B, 1]
            q_off = (r - p + (r >= p).long()).clamp(-t, t).unsqueeze(1)  # [B, 1, t + 1]
            z = decoder.context.query_stream(q_off, step_pad[:, None, : t + 1], kv, source_kv, source_pad)[:, 0]
        tok_lp = torch.log_softmax(heads.token_logits(e_k, z), -1).gather(1, tokens[:, t + 1 : t + 2]).squeeze(1)
        total = total - (pos_lp + tok_lp)[predict].sum()
    return total


@torch.no_grad()
def naive_trajectory_logprobs(model, src_tokens, src_lengths, target, order) -> List[Dict[str, List[float]]]:
    """Per sentence, per step, re-encode the prefix from scratch and score the next insertion.

    Returns one dict per sentence with lists ``token`` and ``position`` (steps t = 1..len-2:
    log-prob of the true next token at its slot and of that slot) and ``termination``
    (t = 1..len-1: log q(stop == [t is last])). A sequential trajectory is the layered one with
    one word per layer (step t in layer t - 1), so this is :func:`naive_layered_logprobs` on those.
    """
    pad = model.decoder.padding_idx
    layers = []
    for b in range(target.size(0)):
        L = int(target[b].ne(pad).sum())
        lay = [0] * L
        for t, p in enumerate(order[b, :L].tolist()):
            lay[p] = max(t - 1, 0)
        layers.append(lay)
    return _naive_layered(model, src_tokens, src_lengths, target, layers)


def naive_layered_logprobs(model, src_tokens, src_lengths, target, layers) -> List[Dict[str, List[float]]]:
    """The layered (InsNet-Dinic) objective by its definition, one sentence and layer at a time.

    ``layers`` [B, n] by position (see :mod:`insnet_fairseq.geometry.layers`). For layer l, the context is every
    token of the earlier layers, encoded from scratch in the layering's order (naive attention,
    loop-built offsets); each token of the layer is scored at its slot in that context, whose last
    token is the global vector. Returns per sentence ``token`` and ``position`` (one entry per
    word, in encoding order) and ``termination`` (one per layer, then the final one).
    """
    pad = model.decoder.padding_idx
    lists = [layers[b, : int(target[b].ne(pad).sum())].tolist() for b in range(target.size(0))]
    return _naive_layered(model, src_tokens, src_lengths, target, lists)


@torch.no_grad()
def _naive_layered(model, src_tokens, src_lengths, target, layers: List[List[int]]) -> List[Dict[str, List[float]]]:
    decoder = model.decoder
    heads = decoder.heads
    pad = decoder.padding_idx
    results = []
    with naive_attention(model):
        for b, lay in enumerate(layers):
            L = len(lay)
            ordr = sorted(range(L), key=lambda p: (lay[p], p))
            toks = [int(target[b, p]) for p in ordr]
            keep = src_tokens[b].ne(pad)
            enc = model.encoder(src_tokens[b : b + 1, keep], src_lengths=src_lengths[b : b + 1])
            source_kv, source_pad = decoder.encode_source(enc)
            out = {"token": [], "position": [], "termination": []}
            m = max(lay)
            for l in range(1, m + 2):  # layer m + 1: only the final termination
                c = sum(1 for x in lay if x < l) - 1  # last step of the context
                off = torch.tensor(naive_offsets(ordr[: c + 1])).unsqueeze(0)
                x = torch.tensor(toks[: c + 1]).unsqueeze(0)
                h, kv = decoder.context(x, off, causal_mask(c + 1, x.device), source_kv, source_pad)
                h = h[0]
                stop = heads.termination_logit(h[c])
                out["termination"].append(float(F.logsigmoid(stop if l == m + 1 else -stop)))
                if l == m + 1:
                    break
                ctx_pos = sorted(ordr[: c + 1])
                by_position = [ordr.index(p) for p in ctx_pos]  # steps in final order
                e = torch.stack([heads.slot_repr(h[by_position[k]], h[by_position[k + 1]], h[c]) for k in range(c)])
                pos_lp = torch.log_softmax(heads.position_logit(e), -1)
                for step in range(c + 1, L):
                    p = ordr[step]
                    if lay[p] != l:
                        continue
                    k = sum(1 for q in ctx_pos if q < p) - 1
                    out["position"].append(float(pos_lp[k]))
                    z = None
                    if decoder.context.slot_query is not None:  # the word's own offset row, were it inserted now
                        q_off = torch.tensor(naive_offsets(ordr[: c + 1] + [p])[-1][: c + 1]).view(1, 1, c + 1)
                        seen = torch.zeros(1, 1, c + 1, dtype=torch.bool)
                        z = decoder.context.query_stream(q_off, seen, kv, source_kv, source_pad)[0, 0]
                    out["token"].append(float(torch.log_softmax(heads.token_logits(e[k], z), -1)[toks[step]]))
            results.append(out)
    return results


@torch.no_grad()
def naive_gap_loss(model, src_tokens, src_lengths, target, layers, temperature: float = 1.0, foreign=None,
                   weight=None):
    """The end-of-slot objective by its definition, one sentence and one layer end at a time.

    ``layers`` [B, n] by position. After layer l (l = 0 .. the last layer) the context is every token of layers <= l,
    encoded from scratch in the layering's order (naive attention, loop-built offsets). Each slot, between context
    tokens at final positions a < b, is scored by ``e = slot_repr(h_a, h_b, h_last)``; it is done when b = a + 1,
    else it misses y[a + 1 .. b - 1], each weighted exp(-|i - (a + b) / 2| / T) (T = 0: the nearest words equally),
    normalised over the gap; ``foreign`` [B, n] bool (optional): words never missing (a gap of foreign words only is
    done). With the slot query stream each slot's query reads the re-encoded context at the offsets of a word
    inserted in it. ``weight`` [B, L, n] (optional): the slot after layer l whose left token is at a counts
    ``weight[b, l, a]`` times, and not at all where that is 0. Returns (slot_token, slot_done, done logits in the order
    of :func:`insnet_fairseq.geometry.gaps.gap_targets`, slot_last) summed over the batch: slot_token = -sum w log
    p(y_i | e), slot_done = the binary cross-entropy of q(done | e), slot_last (``--last-word-head``; else 0) = that
    of q(last | e) at the slots that miss words, against "misses exactly one".
    """
    decoder, heads = model.decoder, model.decoder.heads
    pad = decoder.padding_idx
    token_nll, done_nll, done_logits, last_nll = 0.0, 0.0, [], 0.0
    with naive_attention(model):
        for b in range(target.size(0)):
            L = int(target[b].ne(pad).sum())
            lay = layers[b, :L].tolist()
            ordr = sorted(range(L), key=lambda p: (lay[p], p))
            toks = [int(target[b, p]) for p in ordr]
            keep = src_tokens[b].ne(pad)
            enc = model.encoder(src_tokens[b : b + 1, keep], src_lengths=src_lengths[b : b + 1])
            source_kv, source_pad = decoder.encode_source(enc)
            for l in range(max(lay) + 1):
                c = sum(1 for x in lay if x <= l) - 1  # last step of the context
                off = torch.tensor(naive_offsets(ordr[: c + 1])).unsqueeze(0)
                x = torch.tensor(toks[: c + 1]).unsqueeze(0)
                h, kv = decoder.context(x, off, causal_mask(c + 1, x.device), source_kv, source_pad)
                h = h[0]
                ctx = sorted(ordr[: c + 1])
                for a, z in zip(ctx[:-1], ctx[1:]):
                    u = 1.0 if weight is None else float(weight[b, l, a])
                    if u == 0:
                        continue
                    e = heads.slot_repr(h[ordr.index(a)], h[ordr.index(z)], h[c])
                    q = None
                    if decoder.context.slot_query is not None:  # the query of a word inserted between a and z
                        q_off = torch.tensor(naive_offsets(ordr[: c + 1] + [a + 0.5])[-1][: c + 1]).view(1, 1, c + 1)
                        seen = torch.zeros(1, 1, c + 1, dtype=torch.bool)
                        q = decoder.context.query_stream(q_off, seen, kv, source_kv, source_pad)[0, 0]
                    done = heads.done_logit(e, q)
                    done_logits.append(float(done))
                    missing = [i for i in range(a + 1, z) if foreign is None or not bool(foreign[b, i])]
                    done_nll += u * float(F.binary_cross_entropy_with_logits(done, torch.tensor(float(not missing))))
                    if not missing:
                        continue
                    if getattr(heads, "last_proj", None) is not None:
                        last = heads.last_logit(e, q)
                        last_nll += u * float(F.binary_cross_entropy_with_logits(last, torch.tensor(
                            float(len(missing) == 1))))
                    dist = [abs(i - (a + z) / 2) for i in missing]
                    if temperature > 0:
                        w = [math.exp(-d / temperature) for d in dist]
                    else:
                        w = [1.0 if d == min(dist) else 0.0 for d in dist]
                    lp = torch.log_softmax(heads.token_logits(e, q), -1)
                    token_nll -= u * sum(wi / sum(w) * float(lp[int(target[b, i])]) for wi, i in zip(w, missing))
    return token_nll, done_nll, done_logits, last_nll


@torch.no_grad()
def naive_indigo_logprobs(model, src_tokens, src_lengths, target, order) -> List[Dict[str, List[float]]]:
    """InDIGO by its definition (paper eqs. 8, 9, 11), re-encoding every prefix of every sentence.

    Returns one dict per sentence: ``word`` (t = 1..len-1: log p of the next word, <eod> last) and
    ``position`` (t = 1..len-2: log p of the next word's slot, the sum of the pointer probabilities
    of the two keys that name it, softmax over the 2(t + 1) keys without left-of-<s> and right-of-</s>).
    """
    decoder, heads = model.decoder, model.decoder.heads
    pad = decoder.padding_idx
    out = []
    for b in range(target.size(0)):
        L = int(target[b].ne(pad).sum())
        steps = order[b, :L].tolist()
        tokens = target[b, :L][order[b, :L]]
        enc = model.encoder(src_tokens[b : b + 1], src_lengths=src_lengths[b : b + 1])
        source_kv, source_pad = decoder.encode_source(enc)
        offsets = torch.tensor(naive_offsets(steps)).unsqueeze(0)
        words, positions = [], []
        for t in range(1, L):
            h, _ = decoder.context(tokens[None, : t + 1], offsets[:, : t + 1, : t + 1],
                                   causal_mask(t + 1, target.device), source_kv, source_pad)
            word = heads.eod_index if t == L - 1 else int(tokens[t + 1])
            words.append(float(torch.log_softmax(heads.word_logits(h[0, t]), -1)[word]))
            if t == L - 1:
                break
            left_key, right_key = heads.pointer_logits(h[:, t : t + 1], tokens[None, t + 1 : t + 2], h)
            keys = torch.cat([left_key[0, 0], right_key[0, 0]])  # [2(t + 1)]: left of j, then right of j
            by_pos = sorted(range(t + 1), key=lambda j: steps[j])
            keys[by_pos[0]] = float("-inf")  # left of <s>
            keys[t + 1 + by_pos[-1]] = float("-inf")  # right of </s>
            p = torch.softmax(keys, -1)
            final = steps[t + 1]
            left = max((j for j in range(t + 1) if steps[j] < final), key=lambda j: steps[j])
            right = min((j for j in range(t + 1) if steps[j] > final), key=lambda j: steps[j])
            positions.append(float(torch.log(p[t + 1 + left] + p[right])))
        out.append({"word": words, "position": positions})
    return out
