"""Parallel insertion drafts verified by an autoregressive model (``--insertion-verify``, ``--path INSNET.pt:AR.pt``).

Blockwise parallel decoding (Stern, Shazeer, Uszkoreit 2018) and speculative decoding with a non-autoregressive
drafter (Xia et al. 2023, SpecDec), with an InsNet model as the drafter:

1. the InsNet model decodes a draft of the whole sentence in parallel steps;
2. one teacher-forced pass of the autoregressive model over the draft gives, at every position, its greedy word
   given the draft's words before it; the longest prefix where the draft agrees is accepted, and at the first
   disagreement the autoregressive word is taken instead (the *correction*);
3. unless the draft was accepted to its ``</s>`` (or the correction is ``</s>``), the InsNet model drafts again
   from a canvas of the accepted prefix, the correction and the draft's words after the disagreement, inserting
   only after the correction (its blanks: the canvas's gaps from there on); the canvas's unverified words are
   verified by the next pass like any other.

With ``--verify-tolerance 0`` the output is the autoregressive model's greedy output (fairseq's
``SequenceGenerator`` at beam 1: no ``</s>`` as the first word, ``</s>`` forced at its length limit
``--max-len-a`` x source width + ``--max-len-b``): every round adds at least the correction, so it ends. With a
tolerance of B nats a draft word is accepted where its log-probability is within B of the greedy word's; the
output may then differ from the greedy one. A sentence's steps are everything sequential: its drafting steps, the
drafter's pass over each new canvas, and its verification passes (the log reports the passes apart).
"""
from typing import List, Optional

import torch
from torch import Tensor

from insnet_fairseq.decoding.rerank import check_reranker, pad_hypotheses


def accepted_lengths(lprobs: Tensor, target: Tensor, max_len: Tensor, tolerance: float, pad: int, eos: int):
    """How much of each draft the autoregressive model accepts, and its word at the first disagreement.

    lprobs [N, T, V]: the autoregressive log-probabilities at each position of the teacher-forced drafts; target
    [N, T]: the drafts' words (each ending with ``</s>``, right-padded); max_len [N]: the greedy decoder's length
    limit (``</s>`` is forced at position max_len). Greedy rules as fairseq's: no padding, no ``</s>`` first.
    Returns (accepted [N]: the number of leading draft words accepted, ``</s>`` included where reached; word [N]:
    the greedy word at position ``accepted`` (meaningless where the whole draft is accepted); its log-probability
    [N]; the drafts' words' log-probabilities [N, T]).

    Example (tolerance 0): draft "a b </s>" whose greedy words are "a c ..." -> accepted 1, word c.
    """
    N, T, V = lprobs.shape
    lprobs = lprobs.float().clone()
    lprobs[:, :, pad] = float("-inf")
    lprobs[:, 0, eos] = float("-inf")  # fairseq's min_len 1
    position = torch.arange(T, device=lprobs.device).unsqueeze(0)  # [1, T]
    forced = (position >= max_len.unsqueeze(1)).unsqueeze(2)  # [N, T, 1]: only </s> from the limit on
    keep_eos = torch.zeros(V, dtype=torch.bool, device=lprobs.device)
    keep_eos[eos] = True
    lprobs = lprobs.masked_fill(forced & ~keep_eos, float("-inf"))
    best_lp, best = lprobs.max(-1)  # [N, T]
    draft_lp = lprobs.gather(2, target.unsqueeze(2)).squeeze(2)  # [N, T]
    ok = target.eq(best)  # the greedy word (exact, whatever the ties' log-probabilities)
    if tolerance > 0:
        ok |= draft_lp >= best_lp - tolerance
    ok &= target.ne(pad)
    accepted = ok.long().cumprod(1).sum(1)  # [N]
    at = accepted.clamp(max=T - 1).unsqueeze(1)
    return accepted, best.gather(1, at).squeeze(1), best_lp.gather(1, at).squeeze(1), draft_lp


def next_canvas(draft: List[int], accepted: int, word: int) -> List[int]:
    """The words the drafter starts its next round from (without ``</s>``): the accepted prefix, the correction
    ``word``, then the draft's words after the disagreement, read as a substitution (the correction replaces the
    draft's word) or, where the correction is the draft's next word, a deletion (the draft's word was extra).

    Example: draft [a, b, c, d, </s>], accepted 1, word x -> [a, x, c, d]; word c -> [a, c, d].
    """
    rest = draft[accepted + 1 : -1]  # after the disagreement, </s> dropped
    if rest and rest[0] == word:
        rest = rest[1:]
    return draft[:accepted] + [word] + rest


def verified(drafter, models, sample, given) -> List[List[dict]]:
    """``--insertion-verify``: the drafts of ``drafter`` (an :class:`~insnet_fairseq.decoding.generator.InsertionGenerator`)
    verified, ``models`` being the InsNet model, then the autoregressive verifier; ``given``: {flag: value} of the
    inputs it does not take (each None)."""
    if len(models) != 2:
        raise ValueError("--insertion-verify needs two checkpoints, the InsNet model and the autoregressive "
                         f"verifier: --path INSNET.pt:AR.pt (got {len(models)})")
    for name, value in given.items():
        if value is not None:
            raise ValueError(f"--insertion-verify outputs what the autoregressive verifier accepts and does not "
                             f"take {name}: decode without --insertion-verify")
    options = drafter.options
    return Speculation(drafter, models[0], models[1], options.verify_tolerance, *options.verify_max_len).generate(sample)


class Speculation:
    """Decode a batch with ``drafter`` (an :class:`~insnet_fairseq.decoding.generator.InsertionGenerator` over
    ``model``) and the autoregressive ``verifier`` (see the module docstring)."""

    def __init__(self, drafter, model, verifier, tolerance: float = 0.0, max_len_a: float = 0.0,
                 max_len_b: int = 200):
        check_reranker(verifier, drafter.tgt_dict, insnet_allowed=False, flag="--insertion-verify")
        self.drafter, self.model, self.verifier = drafter, model, verifier
        self.tolerance, self.max_len_a, self.max_len_b = tolerance, max_len_a, max_len_b
        self.pad, self.eos = drafter.pad, drafter.eos

    @torch.no_grad()
    def verify(self, encoder_out, rows: Tensor, drafts: List[Tensor], max_len: Tensor):
        """One teacher-forced pass over ``drafts`` (of batch ``rows``): :func:`accepted_lengths` of each."""
        seq = pad_hypotheses(drafts, self.pad, self.eos).to(rows.device)  # [N, T + 1]: </s> (the start), draft
        enc = self.verifier.encoder.reorder_encoder_out(encoder_out, rows)
        net_output = self.verifier.decoder(seq[:, :-1], encoder_out=enc)
        lprobs = self.verifier.get_normalized_probs(net_output, log_probs=True)  # [N, T, V]
        return accepted_lengths(lprobs, seq[:, 1:], max_len[rows], self.tolerance, self.pad, self.eos)

    def draft(self, sample, rows: List[int], canvases: Optional[List[List[int]]], starts: Optional[List[int]],
              encoder_out):
        """The drafter's outputs for batch ``rows``: from nothing, or from ``canvases`` with insertions only in
        their gaps from ``starts`` on (token lists ending with ``</s>``, steps). ``encoder_out``: the drafter's
        encoding of the whole batch's sources, made once."""
        ni = sample["net_input"]
        index = torch.tensor(rows, device=ni["src_tokens"].device)
        sub = {"net_input": {"src_tokens": ni["src_tokens"][index], "src_lengths": ni["src_lengths"][index]},
               "encoder_out": self.model.encoder.reorder_encoder_out(encoder_out, index)}
        if sample.get("id") is not None:
            sub["id"] = sample["id"][index.to(sample["id"].device)]
        blanks = None if canvases is None else [list(range(s, len(c) + 1)) for c, s in zip(canvases, starts)]
        hyps = self.drafter.decode([self.model], sub, initial_tokens=canvases, blanks=blanks)
        return [h[0]["tokens"] for h in hyps], [h[0]["steps"] for h in hyps]

    @torch.no_grad()
    def generate(self, sample) -> List[List[dict]]:
        if any(m.training for m in self.verifier.modules()):
            self.verifier.eval()
        ni = sample["net_input"]
        src_tokens, src_lengths = ni["src_tokens"], ni["src_lengths"]
        B = src_tokens.size(0)
        limit = min(int(self.max_len_a * src_tokens.size(1) + self.max_len_b), self.verifier.max_decoder_positions() - 1)
        max_len = torch.full((B,), limit, dtype=torch.long, device=src_tokens.device)
        encoder_out = self.verifier.encoder(src_tokens, src_lengths=src_lengths)
        drafter_out = self.model.forward_encoder(src_tokens, src_lengths)
        drafts, steps = self.draft(sample, list(range(B)), None, None, drafter_out)
        passes = [0] * B
        final: List[Optional[dict]] = [None] * B
        active = list(range(B))
        while active:
            rows = torch.tensor(active, device=src_tokens.device)
            accepted, word, word_lp, draft_lp = self.verify(encoder_out, rows, [drafts[b] for b in active], max_len)
            accepted, word, word_lp, draft_lp = accepted.tolist(), word.tolist(), word_lp.cpu(), draft_lp.cpu()
            again, canvases, starts = [], [], []
            for i, b in enumerate(active):  # per sentence and round (a handful of rounds), not per word
                passes[b] += 1
                d = drafts[b].tolist()
                a = accepted[i]
                if a == len(d):  # accepted to its </s>
                    final[b] = self.hypothesis(d, draft_lp[i, :a], steps[b], passes[b])
                elif word[i] == self.eos:
                    final[b] = self.hypothesis(d[:a] + [self.eos], torch.cat([draft_lp[i, :a], word_lp[i : i + 1]]),
                                               steps[b], passes[b])
                else:
                    again.append(b)
                    canvases.append(next_canvas(d, a, word[i]))
                    starts.append(a + 1)
            if again:
                new, more = self.draft(sample, again, canvases, starts, drafter_out)
                for b, d, s in zip(again, new, more):  # a redraft's pass over its canvas is a step too
                    drafts[b], steps[b] = d, steps[b] + s + 1
            active = again
        return [[h] for h in final]

    @staticmethod
    def hypothesis(tokens: List[int], scores: Tensor, steps: int, passes: int) -> dict:
        """fairseq's hypothesis dict: ``scores``, the verifier's log-probabilities of the tokens; ``steps``, drafting
        steps (canvas passes included) + verification passes (``draft_steps``, ``verify_passes`` apart)."""
        scores = scores.float()
        return {"tokens": torch.tensor(tokens), "positional_scores": scores, "alignment": None,
                "score": float(scores.mean()), "steps": steps + passes, "draft_steps": steps,
                "verify_passes": passes, "history": []}
