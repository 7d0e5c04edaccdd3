"""``--own-words P``: layered training on contexts that hold the model's own words.

Parallel decoding fills a layer's slots from a context of words the model chose itself, some of them wrong, while
one-pass training shows every layer the reference's words. With ``--own-words P`` a training batch first runs one
pass without gradient (eval mode) over its trajectories, which gives every word the model's most probable word at
its slot in its layer's context (the reference's earlier layers). Each word is then replaced, with probability P, by
that prediction as the context that later layers read, and the training pass encodes those contexts while every
term's target stays the reference's (the forward's ``context_tokens``). The model learns to continue the partial
outputs that parallel decoding makes, as SMART (Ghazvininejad et al., 2020) does for mask-predict. A word of the last
layer is read by no later layer: replacing it changes only the whole sentence's termination term, which reads the
last word's state (as q(stop) reads the model's own words when decoding).
"""
import torch
from torch import Tensor

from insnet_fairseq.geometry.orders import positions


def own_word_context(target: Tensor, order: Tensor, lengths: Tensor, predicted: Tensor, u: Tensor,
                     p: float) -> Tensor:
    """The context tokens of ``--own-words``: each word of ``target`` replaced by its prediction where ``u < p``.

    target [B, n] (``<s> y </s>`` in final-position order, right-padded), order [B, n] (the final position inserted at
    each step), lengths [B], predicted [N] (the model's word at each real word step, row-major over the steps 2 ..
    length - 1 in insertion order, as the forward's token terms), u [B, n] uniform draws by step, p -> [B, n] like
    ``target``. ``<s>``, ``</s>`` and padding are kept.

    Example: target [[<s>, a, b, </s>]], order [[0, 3, 2, 1]] (b, then a), predicted [c, d] (c at b's slot, d at
    a's), u [[0.9, 0.9, 0.1, 0.9]], p 0.5 -> [[<s>, a, c, </s>]]: step 2 (b) is replaced, step 3 (a) is not.
    """
    B, n = target.shape
    steps = positions(B, n, target.device)
    word = (steps >= 2) & (steps < lengths.unsqueeze(1))  # [B, n] the word steps, as the forward's step_valid
    by_step = target.gather(1, order)  # [B, n] in insertion order
    own = by_step.masked_scatter(word, predicted)  # [B, n]
    chosen = torch.where(word & (u < p), own, by_step)
    return target.scatter(1, order, chosen)


@torch.no_grad()
def own_words(model, net_input: dict, special: Tensor, pad: int, u: Tensor, p: float) -> Tensor:
    """``--own-words``: the context tokens [B, n] for a training batch's ``net_input`` (its layered trajectories,
    padded with ``pad``): one pass of ``model`` in eval mode, its most probable word at each word's slot (never one
    of ``special``: ``<s>``, ``</s>``, padding), then :func:`own_word_context` with the draws ``u`` [B, n]."""
    was_training = model.training
    model.eval()
    try:
        args = {k: v for k, v in net_input.items() if k not in ("return_states", "context_tokens")}
        logits = model(**args)["token"]["logits"]  # [N, V]
    finally:
        model.train(was_training)
    logits = logits.float().index_fill(1, special.to(logits.device), float("-inf"))
    target = net_input["target"]
    lengths = target.ne(pad).sum(1)
    return own_word_context(target, net_input["order"], lengths, logits.argmax(-1), u, p)
