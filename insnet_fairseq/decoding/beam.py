"""Beam search over sequential insertions (``--insertion-beam B``, ``--insertion-mode sequential``).

InsNet factorises a sequential trajectory as

    log p = sum_t [ log(1 - q(stop | h_t)) + log o(slot_t) + log p(word_t | slot_t) ] + log q(stop | h_T)

(the termination head is trained at every step: 0 until the last). Greedy decoding takes the best slot and
word and stops when q(stop) > 0.5; the beam keeps the B best partial trajectories of each sentence instead,
as fairseq's ``SequenceGenerator`` does for an autoregressive model: each hypothesis proposes its B most
probable slots x the B most probable words of each (B^2 insertions) and, where allowed, stopping; a stop
ranked among the sentence's B best candidates is a finished hypothesis, and the B best insertions are the next
beam. A sentence is done once it has B finished hypotheses (or nothing left to extend); at its step or
length cap every hypothesis stops. Finished hypotheses are ranked by their log-probability divided by
(steps + 1) ** lenpen (fairseq's ``--lenpen``: the steps are the insertions and the stop). A hypothesis's
``positional_scores`` hold, per output token, the log-probability of its step (continue, slot, word; given
tokens 0) and, on ``</s>``, log q(stop) at the end: they sum to the trajectory's log-probability, the
quantity ``model.forward`` scores in training (tested). ``--stop-threshold T`` (greedy: stop when q(stop) > T)
shifts the termination head's log-odds by -logit(T) in the beam as well, so q(stop) > T is where stopping
outscores going on; with T != 0.5 the scores are those of that recalibrated head (tested against the model with its
termination bias shifted).

The decoder state, the slot and word scores and the insertion itself are the steps'
(:class:`~insnet_fairseq.decoding.step.InsertionSteps`), the hypotheses the output's
(:class:`~insnet_fairseq.decoding.output.Output`); this module adds only the choice of the next beam (:func:`choose_beam`) and the bookkeeping of finished
hypotheses.
"""
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

NEG_INF = float("-inf")


def choose_beam(stop_scores: Tensor, ext_scores: Tensor, beam: int) -> Tuple[Tensor, Tensor, Tensor]:
    """One step's choice for every sentence, from raw (unnormalised) trajectory log-probabilities.

    stop_scores [S, B]: each hypothesis's score if it stops now (-inf: it may not, or it is dead);
    ext_scores [S, E]: the score of every extension of the sentence's hypotheses (-inf: none).
    Returns (finish bool [S, B]: the stops among the sentence's ``beam`` best candidates, stops and extensions
    together; pick [S, beam]: index into E of the ``beam`` best extensions; pick_scores [S, beam], -inf where the
    sentence has fewer finite extensions).

    Example (beam 2): stop [[-1.0, -5.0]], extensions [[-0.5, -2.0, -3.0]] -> the two best candidates are
    extension 0 (-0.5) and the first hypothesis's stop (-1.0): finish [[True, False]], pick [[0, 1]],
    pick_scores [[-0.5, -2.0]].
    """
    S, B = stop_scores.shape
    both = torch.cat([stop_scores, ext_scores], 1)  # [S, B + E]
    k = min(beam, both.size(1))
    top_scores, top = both.topk(k, dim=1)  # [S, k]
    is_stop = (top < B) & torch.isfinite(top_scores)  # [S, k]
    finish = torch.zeros(S, B + 1, dtype=torch.bool, device=stop_scores.device)
    finish.scatter_(1, torch.where(is_stop, top, torch.full_like(top, B)), True)  # extensions write column B
    finish = finish[:, :B].contiguous()
    k_ext = min(beam, ext_scores.size(1))
    pick_scores, pick = ext_scores.topk(k_ext, dim=1)  # [S, k_ext]
    if k_ext < beam:  # fewer extensions than the beam is wide: dead picks
        pad = beam - k_ext
        pick = torch.cat([pick, pick[:, :1].expand(S, pad)], 1)
        pick_scores = torch.cat([pick_scores, pick_scores.new_full((S, pad), NEG_INF)], 1)
    return finish, pick, pick_scores


class BeamSearch:
    """Beam search of one decoding group (see :meth:`InsertionGenerator._decode_rows`) with ``steps`` and ``output``:
    the rows hold each sentence ``beam`` times; ``search`` returns per sentence its finished hypotheses, best first."""

    PRUNE = True  # False: score the words of every proposed slot (the tests' reference)

    def __init__(self, steps, output, beam: int, lenpen: float = 1.0):
        self.steps, self.output, self.beam, self.lenpen = steps, output, beam, lenpen

    def finished_hypothesis(self, state, row: int, stop_lprob: float, history) -> dict:
        """The output of hypothesis ``row``, stopped with log q(stop) ``stop_lprob`` (on ``</s>``)."""
        tokens, scores, steps = self.output.sequences(state, torch.tensor([row], device=state.tokens.device))[0]
        scores = scores.clone()
        scores[-1] = stop_lprob  # </s>: the termination term
        hyp = self.output.finalize(tokens, scores, steps, history)
        hyp["score"] = float(scores[1:].sum()) / (steps + 1) ** self.lenpen
        return hyp

    @torch.no_grad()
    def search(self, decoder, state, source_kv, source_pad, cap: Tensor, max_len: Tensor,
               min_len: Optional[Tensor]) -> List[List[dict]]:
        """``state``, ``source_kv`` and the per-row caps [R] hold every sentence ``beam`` times in a row
        (sentence-major); ``min_len`` [R]: ``--min-length-ratio``'s length before a stop (None: off)."""
        steps, W = self.steps, self.beam
        R = state.tokens.size(0)
        n_sent = R // W
        device = state.tokens.device
        sent = torch.arange(n_sent, device=device)  # [n] sentence of each group of W rows left
        cum = torch.full((n_sent, W), NEG_INF, device=device)
        cum[:, 0] = 0.0  # one live hypothesis to start with: the rows are copies
        cum = cum.view(-1)  # [R]
        finished: List[List[dict]] = [[] for _ in range(n_sent)]
        n_done = torch.zeros(n_sent, dtype=torch.long, device=device)  # [n_sent] finished hypotheses
        history = [[] for _ in range(R)] if self.output.retain_history else None
        self.record(history, state)
        while True:
            R = state.tokens.size(0)
            n = R // W
            # [R]; --stop-threshold shifts the log-odds
            t = steps.termination_logit(decoder, state) - steps.options.stop_logit
            log_stop, log_go = F.logsigmoid(t), F.logsigmoid(-t)
            alive = torch.isfinite(cum)
            must_stop = (state.steps >= cap) | (state.lengths >= max_len)  # [R]
            may_stop = torch.ones_like(must_stop) if min_len is None else must_stop | (state.lengths >= min_len)
            stop_scores = torch.where(alive & may_stop, cum + log_stop, cum.new_tensor(NEG_INF))  # [R]

            slots, pos_lprobs = steps.slot_distribution(decoder, state)  # [R, K]
            n_slots = min(W, pos_lprobs.size(1))
            top_pos, top_slot = pos_lprobs.topk(n_slots, dim=1)  # [R, Ns]
            valid = torch.isfinite(top_pos) & (alive & ~must_stop).unsqueeze(1)  # [R, Ns]
            n_words = min(W, len(steps.tgt_dict) - len(steps.banned))
            base = (cum + log_go).unsqueeze(1) + top_pos  # [R, Ns] an extension's score before its word's log-prob
            # the words of each hypothesis's best slot first: the sentence's W-th best of those extensions bounds
            # the beam from below, and a further slot whose score before the word (a word's log-prob is <= 0) is
            # below it cannot make the beam: its words are not scored (an l2r model: almost every further slot)
            first = valid & (torch.arange(n_slots, device=device) == 0)
            ext, words = self.extensions(decoder, state, slots, top_slot, first, base, n_words, source_kv, source_pad)
            rest = valid & ~first
            if self.PRUNE and bool(rest.any()):
                bound = ext.view(n, -1).topk(W, dim=1).values[:, -1]  # [n] the W-th best so far
                rest = rest & (base >= bound.repeat_interleave(W).unsqueeze(1))
            if bool(rest.any()):
                ext_r, words_r = self.extensions(decoder, state, slots, top_slot, rest, base, n_words, source_kv,
                                                 source_pad)
                ext, words = torch.where(rest.unsqueeze(2), ext_r, ext), torch.where(rest.unsqueeze(2), words_r, words)
            finish, pick, pick_scores = choose_beam(stop_scores.view(n, W), ext.view(n, -1), W)
            # finished hypotheses (a few rows a step), in the order of their scores, up to W per sentence
            if bool(finish.any()):  # one copy to the host per step with stops
                rows = finish.view(-1).nonzero().view(-1).tolist()
                scores, stop_lp, owner = stop_scores.tolist(), log_stop.tolist(), sent.tolist()
                for row in sorted(rows, key=lambda r: -scores[r]):
                    done_list = finished[owner[row // W]]
                    if len(done_list) < W:
                        done_list.append(self.finished_hypothesis(state, row, stop_lp[row],
                                                                  None if history is None else history[row]))
                        n_done[owner[row // W]] += 1
            go_on = (n_done[sent] < W) & torch.isfinite(pick_scores[:, 0])  # [n]
            if not bool(go_on.any()):
                break
            keep = go_on.nonzero().view(-1)  # [n'] sentences left
            pick, pick_scores = pick[keep], pick_scores[keep]  # [n', W]
            dead = ~torch.isfinite(pick_scores)  # a dead slot of the beam copies the sentence's best extension
            pick = torch.where(dead, pick[:, :1].expand_as(pick), pick)
            per_row = n_slots * n_words
            src_row = keep.unsqueeze(1) * W + pick // per_row  # [n', W] the hypothesis each extends
            j_slot = (pick % per_row) // n_words  # [n', W]
            j_word = pick % n_words
            src_row, j_slot, j_word = src_row.view(-1), j_slot.view(-1), j_word.view(-1)  # [R']
            slot = top_slot[src_row, j_slot]  # [R']
            word = words[src_row, j_slot, j_word]
            new_cum = pick_scores.view(-1)
            step_score = torch.where(dead.view(-1), torch.zeros_like(new_cum), new_cum - cum[src_row])
            state = state.select(src_row)
            source_kv = [(k[src_row], v[src_row]) for k, v in source_kv]
            source_pad = None if source_pad is None else source_pad[src_row]
            cap, max_len = cap[src_row], max_len[src_row]
            min_len = None if min_len is None else min_len[src_row]
            one = F.one_hot(slot, state.tokens.size(1) - 1).bool()  # [R', K]
            state = steps.insert(decoder, state, one, word, step_score, source_kv, source_pad)
            cum, sent = new_cum, sent[keep]
            if history is not None:
                history = [list(history[r]) for r in src_row.tolist()]
                self.record(history, state)
        return [sorted(hyps, key=lambda h: -h["score"]) for hyps in finished]

    def extensions(self, decoder, state, slots, top_slot: Tensor, use: Tensor, base: Tensor, n_words: int,
                   source_kv, source_pad) -> Tuple[Tensor, Tensor]:
        """Scores and words of the extensions through the slots ``use`` (bool [R, Ns] over ``top_slot`` [R, Ns]):
        ([R, Ns, Nw] ``base`` [R, Ns] + each of the slot's Nw best words' log-probs, -inf elsewhere; the words)."""
        R, n_slots = use.shape
        ext = base.new_full((R, n_slots, n_words), NEG_INF)
        words = torch.zeros(R, n_slots, n_words, dtype=torch.long, device=base.device)
        if not bool(use.any()):
            return ext, words
        chosen = torch.zeros(R, state.tokens.size(1) - 1, dtype=torch.bool, device=base.device).scatter(
            1, top_slot, use)  # [R, K], N True (row-major)
        logits = self.steps.token_logits(decoder, state, slots, chosen, source_kv, source_pad)  # [N, V]
        # the model's own word distribution (not renormalised over the insertable words, as greedy
        # decoding's choice may be): the scores are then the trajectory's log-probability
        lprobs = F.log_softmax(logits.float(), -1)
        lprobs[:, self.steps.banned_on(lprobs.device)] = NEG_INF
        word_lp, word = lprobs.topk(n_words, dim=1)  # [N, Nw]
        n_of = (chosen.view(-1).long().cumsum(0) - 1).view(chosen.shape).gather(1, top_slot).clamp(min=0)  # [R, Ns]
        ext = torch.where(use.unsqueeze(2), base.unsqueeze(2) + word_lp[n_of], ext)
        return ext, torch.where(use.unsqueeze(2), word[n_of], words)

    def record(self, history, state) -> None:
        if history is not None:
            self.output.record(history, state, torch.arange(len(history)))
