"""A decoded canvas against its reference: which canvas words the reference has, and the sequence that holds both.

On-policy training (``--on-policy``) starts a trajectory from the model's own partial output, the canvas, whose
words may be wrong or out of order. :func:`lcs_match` aligns the canvas to the reference by a longest common
subsequence; :func:`merge_canvas` writes the sequence a one-pass trajectory is laid over: the reference, with every
canvas word the alignment leaves out (a *foreign* word) placed right after the aligned canvas word on its left.
Foreign words are in the context from the step that inserted them and are never a missing word of any gap.

Both are pure tensor functions. The alignment loops over canvas positions (at most the rollout's words), each
iteration one batched operation; nothing loops over sentences.
"""
from typing import Tuple

import torch
from torch import Tensor

from insnet_fairseq.geometry.layers import PAD_LAYER


def lcs_match(canvas: Tensor, canvas_len: Tensor, ref: Tensor, ref_len: Tensor) -> Tensor:
    """A longest common subsequence of each canvas and its reference.

    canvas [B, m], canvas_len [B], ref [B, n], ref_len [B] (tokens beyond a length are ignored) -> match [B, m]
    LongTensor: the reference position of each aligned canvas token, -1 for the others (and for padding). Matched
    positions increase along a row, and the number matched is the LCS length. Where several subsequences are
    longest, each canvas token is matched as far right as the rest allows.

    Example: canvas "<s> a x c </s>", ref "<s> a b c </s>" -> [0, 1, -1, 3, 4].
    """
    B, m = canvas.shape
    n = ref.size(1)
    device = canvas.device
    cols = torch.arange(n, device=device)
    valid = (torch.arange(m, device=device).unsqueeze(0) < canvas_len.unsqueeze(1)).unsqueeze(2) \
        & (cols < ref_len.unsqueeze(1)).unsqueeze(1)
    eq = canvas.unsqueeze(2).eq(ref.unsqueeze(1)) & valid  # [B, m, n]
    dp = [torch.zeros(B, n + 1, dtype=torch.long, device=device)]  # dp[i][:, j]: LCS of canvas[:i], ref[:j]
    for i in range(m):
        prev = dp[-1]
        best = torch.maximum(prev[:, 1:], prev[:, :-1] + eq[:, i].long())  # [B, n]
        dp.append(torch.cat([prev[:, :1], best.cummax(1).values], 1))
    match = torch.full((B, m), -1, dtype=torch.long, device=device)
    j = ref_len.clone()  # ref prefix still available: ref[:j]
    rows = torch.arange(B, device=device)
    for i in range(m, 0, -1):
        cur, up = dp[i][rows, j], dp[i - 1][rows, j]
        matched = cur > up  # canvas token i - 1 is in every LCS of (canvas[:i], ref[:j])
        ok = eq[:, i - 1] & (dp[i - 1][:, :-1] + 1).eq(cur.unsqueeze(1)) & (cols.unsqueeze(0) < j.unsqueeze(1))
        last = torch.where(ok, cols.unsqueeze(0), torch.full_like(ok, -1, dtype=torch.long)).max(1).values
        match[:, i - 1] = torch.where(matched, last, match[:, i - 1])
        j = torch.where(matched, last, j)
    return match


def merge_canvas(canvas: Tensor, canvas_layers: Tensor, canvas_len: Tensor, ref: Tensor, ref_len: Tensor,
                 match: Tensor, pad: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The reference with the canvas's foreign words in it, and the layers the canvas gives its positions.

    canvas [B, m] (``<s> ... </s>``, aligned by ``match`` [B, m] from :func:`lcs_match`), canvas_layers [B, m] (the
    step that inserted each canvas token, 0 for ``<s>``, ``</s>``), ref [B, n]; lengths [B] -> (target [B, N],
    start [B, N], foreign [B, N] bool). ``target``: the reference tokens in order, each foreign canvas word right
    after the aligned canvas word left of it (after the foreign words already there), ``pad`` beyond. ``start``: the
    layer of every canvas token (aligned: its reference position's), -1 where a reference word is still to be laid
    out, ``PAD_LAYER`` beyond. ``foreign``: True at foreign words.

    Example: canvas "<s> a x </s>" (layers [0, 1, 2, 0]), ref "<s> a b </s>", match [0, 1, -1, 3] ->
    target "<s> a x b </s>", start [0, 1, 2, -1, 0], foreign [F, F, T, F, F].
    """
    B, m = canvas.shape
    n = ref.size(1)
    device = canvas.device
    width = m + 1  # room in a reference position's key for the foreign words after it
    in_canvas = torch.arange(m, device=device).unsqueeze(0) < canvas_len.unsqueeze(1)
    in_ref = torch.arange(n, device=device).unsqueeze(0) < ref_len.unsqueeze(1)
    foreign_c = in_canvas & match.lt(0)  # [B, m]
    anchor = match.cummax(1).values.clamp_min(0)  # the aligned reference position left of each canvas token
    big = (n + 1) * width
    key_ref = torch.where(in_ref, torch.arange(n, device=device).unsqueeze(0) * width, big)  # [B, n]
    key_for = torch.where(foreign_c, anchor * width + torch.arange(1, m + 1, device=device).unsqueeze(0), big)
    key = torch.cat([key_ref, key_for], 1)  # [B, n + m]
    aligned = in_canvas & match.ge(0)
    ref_start = torch.full((B, n + 1), -1, dtype=torch.long, device=device).scatter(  # column n: the others
        1, torch.where(aligned, match, n), torch.where(aligned, canvas_layers, -1))[:, :n]
    ref_start = torch.where(in_ref, ref_start, PAD_LAYER)
    tok = torch.cat([torch.where(in_ref, ref, pad), torch.where(foreign_c, canvas, pad)], 1)
    lay = torch.cat([ref_start, torch.where(foreign_c, canvas_layers, PAD_LAYER)], 1)
    is_for = torch.cat([torch.zeros_like(in_ref), foreign_c], 1)
    order = key.argsort(dim=1, stable=True)
    N = int((in_ref.sum(1) + foreign_c.sum(1)).max())
    order = order[:, :N]
    return tok.gather(1, order), lay.gather(1, order), is_for.gather(1, order)
