"""Decoding of the iterative expansion LM (``../shared/papers/iterative-expansion-lm.txt``, section 3.3): start
from the root placeholder, and at every iteration choose each placeholder's expansion and word (argmax, or
nucleus sampling with ``--sampling --sampling-topp P``), then expand: every placeholder becomes its left
dependents' placeholders, its word, its right dependents' placeholders. A sentence is done when no
placeholder is left. The expansion is vectorised over the batch (:func:`expand`), as the model is.
``--sampling-topk K`` samples among the K most probable outcomes instead.
"""
from typing import Optional

import torch
from torch import Tensor

from insnet_fairseq.decoding.sampling import check_temperature, sample

SELF, NONE = -2, -1  # the pattern table's HEAD and padding entries


def expand(tokens: Tensor, heads: Tensor, is_ph: Tensor, words: Tensor, expansions: Tensor, table: Tensor, pad: int,
           scores: Optional[Tensor] = None):
    """One expansion of a batch of transition inputs.

    tokens, heads [B, m] (heads: the input position of each item's head, -1 root, -2 padding), is_ph [B, m]
    (placeholders), words [B, m] (the word chosen at each placeholder), expansions [B, m] (the pattern chosen
    there), table [E, K] (:func:`insnet_fairseq.data.expansion_dataset.pattern_table`: placeholder ids, -2 for
    HEAD, -1 after the pattern) -> the next (tokens, heads, is_ph) [B, m'], and with ``scores`` [B, m] (a
    score per item) the items' scores [B, m'] (a word keeps its item's score; new placeholders get 0).

    Example: tokens ``[nsubj] likes [xcomp]``, heads ``1 -1 1``, placeholders at 0 and 2, words ``dog`` and
    ``eating``, patterns ``[poss-HEAD-advmod]`` and ``[HEAD-dobj]`` -> ``[poss] dog [advmod] likes eating
    [dobj]``, heads ``1 3 1 -1 3 4``, placeholders at 0, 2, 5.
    """
    B, m = tokens.shape
    K = table.size(1)
    real = tokens.ne(pad)  # [B, m]
    keep = torch.full((K,), NONE, dtype=table.dtype, device=table.device)
    keep[0] = SELF  # a word already there stays itself
    items = torch.where(is_ph.unsqueeze(-1), table[expansions], keep)  # [B, m, K]
    valid = items.ne(NONE) & real.unsqueeze(-1)  # [B, m, K]
    is_self = items.eq(SELF) & valid
    value = torch.where(items.eq(SELF), torch.where(is_ph, words, tokens).unsqueeze(-1), items)  # [B, m, K]
    index = valid.view(B, m * K).long().cumsum(1).sub(1).view(B, m, K)  # [B, m, K] new positions
    self_pos = (index * is_self).sum(-1)  # [B, m] where each old item's word lands
    head_self = torch.where(heads >= 0, self_pos.gather(1, heads.clamp_min(0)), heads)  # [B, m] old head moved
    new_head = torch.where(is_self, head_self.unsqueeze(-1), self_pos.unsqueeze(-1).expand(B, m, K))  # [B, m, K]
    width = int(valid.view(B, -1).sum(1).max())
    dump = torch.where(valid, index, torch.full_like(index, width)).view(B, m * K)  # invalid items -> a spare column
    out_tokens = tokens.new_full((B, width + 1), pad).scatter_(1, dump, value.view(B, -1))[:, :width]
    out_heads = heads.new_full((B, width + 1), -2).scatter_(1, dump, new_head.reshape(B, -1))[:, :width]
    out_ph = is_ph.new_zeros((B, width + 1)).scatter_(1, dump, (valid & ~is_self).view(B, -1))[:, :width]
    if scores is None:
        return out_tokens, out_heads, out_ph
    carried = torch.where(is_self, scores.unsqueeze(-1), torch.zeros_like(scores).unsqueeze(-1))  # [B, m, K]
    out_scores = scores.new_zeros((B, width + 1)).scatter_(1, dump, carried.view(B, -1))[:, :width]
    return out_tokens, out_heads, out_ph, out_scores


def choose(logits: Tensor, sampling: bool, topk: int = -1, topp: float = -1.0, temperature: float = 1.0) -> Tensor:
    """argmax, or a sample (:func:`insnet_fairseq.decoding.sampling.sample`, at ``temperature``).
    logits [P, V] -> ids [P]."""
    if not sampling:
        return logits.argmax(-1)
    return sample(logits.float().log_softmax(-1), topk, topp, temperature=temperature)


class ExpansionGenerator:
    """fairseq-generate's generator for ``--task expansion_lm``: one unconditional sentence per input sentence
    (the input is only counted). Hypotheses carry ``steps`` (iterations; ``--print-step`` prints them)."""

    def __init__(self, tgt_dict, table: Tensor, root: int, sampling: bool = False, top_k: int = -1,
                 top_p: float = -1.0, max_iterations: int = 50, max_length: int = 200, temperature: float = 1.0):
        check_temperature(temperature, sampling)
        self.dict, self.table, self.root = tgt_dict, table, root
        self.temperature = temperature
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.sampling, self.top_k, self.top_p = sampling, top_k, top_p
        self.max_iterations, self.max_length = max_iterations, max_length

    @torch.no_grad()
    def generate(self, models, sample, **kwargs):
        model = models[0]
        B = sample["target"].size(0) if "target" in sample else sample["nsentences"]
        device = next(model.parameters()).device
        table = self.table.to(device)
        tokens = torch.full((B, 1), self.root, dtype=torch.long, device=device)
        heads = torch.full((B, 1), -1, dtype=torch.long, device=device)
        is_ph = torch.ones(B, 1, dtype=torch.bool, device=device)
        steps = torch.zeros(B, dtype=torch.long, device=device)
        scores = torch.zeros(B, 1, device=device)  # log-probability of each word and its expansion
        for _ in range(self.max_iterations):
            open_ = is_ph.any(1)  # [B]
            if not bool(open_.any()) or tokens.size(1) > self.max_length:
                break
            steps += open_.long()
            h, exp_logits, padding = model.expansion_logits(tokens, heads, is_ph)  # exp_logits [P, E]
            exp_ids = choose(exp_logits, self.sampling, self.top_k, self.top_p, self.temperature)  # [P]
            expansions = torch.full_like(tokens, model.embed_expansions.padding_idx).masked_scatter(is_ph, exp_ids)
            tok_logits = model.token_logits(h, padding, expansions, is_ph)  # [P, V]
            word_ids = choose(tok_logits, self.sampling, self.top_k, self.top_p, self.temperature)  # [P]
            words = torch.full_like(tokens, self.pad).masked_scatter(is_ph, word_ids)  # [B, m]
            chosen = (exp_logits.log_softmax(-1).gather(-1, exp_ids.unsqueeze(-1))
                      + tok_logits.log_softmax(-1).gather(-1, word_ids.unsqueeze(-1))).squeeze(-1)  # [P]
            scores = scores.masked_scatter(is_ph, chosen.float())
            tokens, heads, is_ph, scores = expand(tokens, heads, is_ph, words, expansions, table, self.pad, scores)
        words = tokens.masked_fill(is_ph, self.pad)  # a placeholder left at the caps is dropped
        hypos = []
        for b in range(B):  # per sentence: fairseq-generate's output format
            keep = words[b].ne(self.pad)
            out = torch.cat([words[b][keep], words.new_tensor([self.eos])])
            pos = torch.cat([scores[b][keep], scores.new_zeros(1)])
            hypos.append([{"tokens": out, "score": pos.sum() / len(out), "positional_scores": pos,
                           "alignment": None, "steps": int(steps[b])}])
        return hypos
