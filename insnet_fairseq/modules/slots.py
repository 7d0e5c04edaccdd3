"""Slot representations and the token / position / termination heads (paper 3.2).

For the context after step ``t`` and its slot ``k`` between the tokens inserted at steps
``l`` (left) and ``r`` (right):

    e[t, k] = LayerNorm(concat(f_l(h_l), f_r(h_r)) + h_t)

with ``h`` the last decoder layer's outputs in insertion order and ``h_t`` the token inserted at
step ``t`` (the global vector; ``--no-global-slot``, the paper's InsNet-noglobal ablation, drops it:
``e = LayerNorm(concat(f_l(h_l), f_r(h_r)))``, everywhere slots are scored). Heads: token ``log_softmax(W_p e + b)`` (with
``--slot-query-stream``, ``W_p LayerNorm(e + z) + b``, z the slot's query, see :mod:`insnet_fairseq.modules.decoder`); position ``w_o . e``,
log-softmax over the ``t`` slots of a step; termination ``q(stop | h_t)`` (which keeps ``h_t`` under
``--no-global-slot``: the ablation removes it from the slot representation only).

Training needs the position logit of every slot of every step: B x n x n x D if built naively.
:meth:`SlotHeads.position_logits` never builds it: LayerNorm's mean and variance and the final
dot product with ``w_o`` decompose into per-token sums and two [B, T, n] matrix products, so
memory is O(B n^2) (like an attention score matrix) and compute O(B n^2 D). Decoding scores the
slots of a step with the same decomposition (:meth:`SlotHeads.position_logits_from_parts`, T = 1),
from the per-token parts ``f_l(h)``, ``f_r(h)`` it computes once per token (:meth:`SlotHeads.parts`):
O(B n D) per step instead of the O(B n D^2) of projecting every slot's neighbours again.
"""
import torch
from torch import Tensor, nn

from insnet_fairseq.modules.packed_linear import Linear


def gather_steps(x: Tensor, index: Tensor) -> Tensor:
    """Row-wise gather along the step axis.

    x: [B, n, ...]; index: LongTensor [B, *idx] -> [B, *idx, ...], out[b, *i] = x[b, index[b, *i]].
    """
    B, rest = x.size(0), x.shape[2:]
    flat = index.reshape(B, -1, *([1] * len(rest))).expand(-1, -1, *rest)  # [B, N, ...]
    return x.gather(1, flat).view(*index.shape, *rest)


class SlotHeads(nn.Module):
    def __init__(self, embed_dim: int, vocab_size: int, tied_embedding: nn.Embedding = None, eps: float = 1e-5,
                 slot_query: bool = False, global_vector: bool = True, objective: str = "position",
                 last_word: bool = False):
        super().__init__()
        self.global_vector = global_vector  # False: --no-global-slot (InsNet-noglobal)
        self.query_norm = nn.LayerNorm(embed_dim, eps=eps) if slot_query else None  # --slot-query-stream
        self.left_dim = embed_dim // 2
        self.right_dim = embed_dim - self.left_dim
        self.f_left = Linear(embed_dim, self.left_dim)
        self.f_right = Linear(embed_dim, self.right_dim)
        self.norm = nn.LayerNorm(embed_dim, eps=eps)
        self.objective = objective
        if objective == "gap":  # --slot-objective gap: each slot says whether its gap is done; no position or stop head
            self.done_proj = Linear(embed_dim, 1)
            # --last-word-head: q(last | slot), the slot's gap misses exactly one word (its two new slots are done)
            self.last_proj = Linear(embed_dim, 1) if last_word else None
        else:
            self.position_proj = Linear(embed_dim, 1)  # w_o (its bias cancels in the softmax)
            self.termination_proj = Linear(embed_dim, 1)
        self.token_proj = Linear(embed_dim, vocab_size)
        if tied_embedding is not None:
            self.token_proj.weight = tied_embedding.weight
        else:
            nn.init.normal_(self.token_proj.weight, mean=0, std=embed_dim ** -0.5)
        nn.init.zeros_(self.token_proj.bias)

    # -- materialised slot representations (decoding, target slots, test oracle) ---------------
    def slot_repr(self, h_left: Tensor, h_right: Tensor, h_global: Tensor) -> Tensor:
        """e = LayerNorm(concat(f_l(h_left), f_r(h_right)) + h_global); all [..., D] -> [..., D].
        ``--no-global-slot``: e = LayerNorm(concat(f_l(h_left), f_r(h_right))), ``h_global`` unused."""
        return self.slot_repr_from_parts(self.f_left(h_left), self.f_right(h_right), h_global)

    def read(self, e: Tensor, z: Tensor = None) -> Tensor:
        """What the heads read at a slot: e [..., D] itself, or with --slot-query-stream ``LayerNorm(e + z)``, z
        [..., D] the slots' queries."""
        if self.query_norm is None:
            return e
        if z is None:
            raise ValueError("this model has a slot query stream (--slot-query-stream): pass the slot queries")
        return self.query_norm(e + z)

    def token_logits(self, e: Tensor, z: Tensor = None) -> Tensor:
        """e [..., D] (and the slot queries z [..., D] with --slot-query-stream) -> [..., V]
        (unnormalised; log_softmax in the caller). With queries: ``W_p LayerNorm(e + z) + b``."""
        return self.token_proj(self.read(e, z))  # W_p (packed once for oneDNN in CPU decoding: modules/packed_linear.py)

    def position_logit(self, e: Tensor) -> Tensor:
        """[..., D] -> [...]."""
        return self.position_proj(e).squeeze(-1)

    def done_logit(self, e: Tensor, z: Tensor = None) -> Tensor:
        """Logit of end-of-slot, the slot's gap is complete (``--slot-objective gap``): [..., D] -> [...]. With the
        slot query stream, read from ``LayerNorm(e + z)`` as the token head is (z [..., D], the slots' queries)."""
        return self.done_proj(self.read(e, z)).squeeze(-1)

    def last_logit(self, e: Tensor, z: Tensor = None) -> Tensor:
        """Logit of q(last | slot) (``--last-word-head``): the slot's gap misses exactly one word, so the word it
        takes closes it. Read as :meth:`done_logit` is: [..., D] (and z [..., D]) -> [...]."""
        return self.last_proj(self.read(e, z)).squeeze(-1)

    def step_gap_logits(self, a: Tensor, b: Tensor, g: Tensor, left: Tensor, right: Tensor, z: Tensor = None,
                        last: bool = False):
        """Decoding: the end-of-slot logits of one step's slots, from the tokens' :meth:`parts` ``a`` [B, S, Dl],
        ``b`` [B, S, Dr], the global vectors ``g`` [B, D] and the slots' neighbours ``left``, ``right`` [B, K]
        (and their queries z [B, K, D] with the stream), the slots materialised as :meth:`step_position_logits`
        does; with ``last`` (a ``--last-word-head`` model) also their q(last) logits from the same representations:
        (done float [B, K], last float [B, K] or None)."""
        e = self.read(self.slot_repr_from_parts(gather_steps(a, left), gather_steps(b, right), g.unsqueeze(1)), z)
        done = self.done_proj(e).squeeze(-1).float()  # [B, K]
        last_proj = getattr(self, "last_proj", None)
        return done, (last_proj(e).squeeze(-1).float() if last and last_proj is not None else None)

    def termination_logit(self, h_global: Tensor) -> Tensor:
        """Logit of q(stop | h_t): [..., D] -> [...]."""
        return self.termination_proj(h_global).squeeze(-1)

    def parts(self, h: Tensor):
        """The per-token halves of the slot representation: h [..., D] -> (f_l(h) [..., Dl], f_r(h) [..., Dr])."""
        return self.f_left(h), self.f_right(h)

    def slot_repr_from_parts(self, a_left: Tensor, b_right: Tensor, h_global: Tensor) -> Tensor:
        """:meth:`slot_repr` from the neighbours' :meth:`parts`: f_l(h_left) [..., Dl], f_r(h_right) [..., Dr]."""
        c = torch.cat([a_left, b_right], dim=-1)
        return self.norm(c + h_global if self.global_vector else c)

    # -- fused position head over all slots of all steps (training) ------------------------------
    def position_logits(self, h: Tensor, steps: Tensor, left: Tensor, right: Tensor) -> Tensor:
        """Position logits of every slot of the given steps, without materialising the slots.

        Args:
            h: [B, n, D] last-layer states in insertion order.
            steps: LongTensor [T], the steps t whose contexts are scored (global vector h[:, t]).
            left, right: LongTensor [B, T, K], steps of the neighbours of slot k after step t.

        Returns:
            [B, T, K], equal (up to float rounding) to
            ``position_logit(slot_repr(h[left], h[right], h[steps]))``.
        """
        dtype = h.dtype
        a, b = self.parts(h)  # [B, n, Dl], [B, n, Dr] in the model's precision (fp16 under --fp16)
        return self.position_logits_from_parts(a, b, h[:, steps], left, right).to(dtype)  # statistics in fp32

    def position_logits_from_parts(self, a: Tensor, b: Tensor, g: Tensor, left: Tensor, right: Tensor) -> Tensor:
        """:meth:`position_logits` from the tokens' :meth:`parts` ``a`` [B, n, Dl], ``b`` [B, n, Dr] and the
        global vectors ``g`` [B, T, D]; left, right [B, T, K] -> float logits [B, T, K].

        Example: decoding step of B sentences with S tokens: g = h_last [B, 1, D], left/right [B, 1, S - 1]
        (the neighbours of every slot) -> [B, 1, S - 1], without any [B, S - 1, D] tensor.
        """
        a, b, g = a.float(), b.float(), g.float()
        D = self.left_dim + self.right_dim
        if not self.global_vector:  # --no-global-slot: the same sums with a zero global vector
            g = torch.zeros_like(g)
        g_l, g_r = g.split([self.left_dim, self.right_dim], dim=-1)
        gamma, beta = self.norm.weight.float(), self.norm.bias.float()
        w = self.position_proj.weight.float().view(-1)
        wg = w * gamma  # [D]
        wg_l, wg_r = wg.split([self.left_dim, self.right_dim])

        # per-token statistics of the two halves, gathered per slot   [B, T, K]
        def at(stat: Tensor, idx: Tensor) -> Tensor:  # stat [B, n] -> [B, T, K]
            return stat.unsqueeze(1).expand(-1, idx.size(1), -1).gather(2, idx)

        # cross terms between the global vector and every token         [B, T, n]
        cross_l = g_l @ a.transpose(1, 2)
        cross_r = g_r @ b.transpose(1, 2)
        total = at(a.sum(-1), left) + at(b.sum(-1), right) + g.sum(-1, keepdim=True)
        squares = (
            at(a.pow(2).sum(-1), left)
            + at(b.pow(2).sum(-1), right)
            + g.pow(2).sum(-1, keepdim=True)
            + 2 * (cross_l.gather(2, left) + cross_r.gather(2, right))
        )
        weighted = at(a @ wg_l, left) + at(b @ wg_r, right) + (g @ wg).unsqueeze(-1)
        mean = total / D
        var = (squares / D - mean.pow(2)).clamp_min(0.0)
        rstd = torch.rsqrt(var + self.norm.eps)
        return rstd * (weighted - mean * wg.sum()) + (w @ beta) + self.position_proj.bias.float()

    def step_position_logits(self, a: Tensor, b: Tensor, g: Tensor, left: Tensor, right: Tensor) -> Tensor:
        """Decoding: the position logits of one step's slots, from the tokens' :meth:`parts` ``a`` [B, S, Dl],
        ``b`` [B, S, Dr], the global vectors ``g`` [B, D] and the slots' neighbours ``left``, ``right`` [B, K]
        -> float [B, K]. The slots are materialised: at one step per sentence [B, K, D] is the size of the
        states, and it takes a handful of ops where :meth:`position_logits_from_parts` (built for training's
        B x n x n slots) takes about fifty, which is most of a batch-1 step's cost on a CPU. Equal up to
        float rounding (tested).

        Example: "<s> a </s>" (S = 3 tokens, K = 2 slots) -> left [[0, 2]], right [[2, 1]] (steps by rank)
        -> logits [1, 2].
        """
        e = self.slot_repr_from_parts(gather_steps(a, left), gather_steps(b, right), g.unsqueeze(1))  # [B, K, D]
        return self.position_logit(e).float()

    def target_slot_repr(self, h: Tensor, steps: Tensor, left: Tensor, right: Tensor) -> Tensor:
        """Materialised e at one slot per prediction.

        steps (the global vectors' steps): [T] or [B, T]; left/right [B, T] -> [B, T, D].
        """
        g = h[:, steps] if steps.dim() == 1 else gather_steps(h, steps)
        return self.slot_repr(gather_steps(h, left), gather_steps(h, right), g)
