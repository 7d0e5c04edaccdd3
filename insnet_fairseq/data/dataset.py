"""Batches of insertion trajectories on top of fairseq's LanguagePairDataset.

The collater keeps fairseq's batch and adds, vectorised over the batch:
``net_input.target`` [B, n] = ``<s> y </s>`` (right-padded) and ``net_input.order`` [B, n], the
insertion order drawn by the task's ``--insertion-order`` policy (the ``keywords`` order also puts
``given`` [B, n], the keywords' positions, into the batch; the ``dependency`` order ``levels`` [B, n], read
from the dataset's per-sentence levels). Random orders are seeded by
(seed, epoch, first sample id), so a resumed run sees the same orders.
"""
import torch
from fairseq.data import BaseWrapperDataset

from insnet_fairseq.geometry.orders import (DEFAULT_ANCHOR_DEPTH, GIVEN_POLICIES, TREE_POLICIES, given_positions,
                                            make_order)


def padded_levels(flat: torch.Tensor, offsets: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor, n: int):
    """Per-sentence word levels, stored end to end, laid out as a batch of ``<s> words </s>`` targets.

    flat [W] every sentence's word levels one after another; offsets [N + 1] where sentence i's start
    (``flat[offsets[i]:offsets[i + 1]]``); ids [B] the batch's sentences; lengths [B] their target lengths
    (words + 2) -> levels [B, n], -1 at <s>, </s> and padding.
    Example: flat [1, 0, 0], offsets [0, 2, 3], ids [1, 0], lengths [3, 4], n 4
    -> [[-1, 0, -1, -1], [-1, 1, 0, -1]].
    """
    pos = torch.arange(n).unsqueeze(0)  # [1, n]
    word = (pos >= 1) & (pos <= (lengths - 2).unsqueeze(1))  # [B, n]
    idx = (offsets[ids].unsqueeze(1) + pos - 1).clamp(0, max(len(flat) - 1, 0))  # [B, n]
    return torch.where(word, flat[idx], torch.full_like(idx, -1))


class InsertionPairDataset(BaseWrapperDataset):
    def __init__(self, dataset, policy: str, bos: int, seed: int = 1, anchor_depth: int = DEFAULT_ANCHOR_DEPTH,
                 levels=None):
        super().__init__(dataset)
        self.policy, self.anchor_depth = policy, anchor_depth
        self.levels = levels  # (flat [W], offsets [N + 1]): the dependency order's word levels, or None
        self.bos = bos
        self.pad = dataset.tgt_dict.pad()
        self.seed = seed
        self.epoch = 1

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.epoch = epoch

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False  # random orders differ per epoch

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if len(batch) == 0 or batch.get("target") is None:
            return batch
        tgt = batch["target"]  # [B, m] words + </s>, right-padded
        target = torch.cat([tgt.new_full((tgt.size(0), 1), self.bos), tgt], dim=1)  # [B, n]
        lengths = target.ne(self.pad).sum(1)
        generator = torch.Generator().manual_seed(
            (self.seed * 1_000_003 + self.epoch * 10_007 + int(batch["id"][0])) % (2 ** 63)
        )
        given = None
        if self.policy in GIVEN_POLICIES:  # the source side holds each sentence's keywords
            given = given_positions(batch["net_input"]["src_tokens"], target, self.pad, self.dataset.tgt_dict.eos())
            batch["given"] = given  # [B, n] for InsNet-uniform's levels (not a model input)
        levels = None
        if self.policy in TREE_POLICIES:
            if self.levels is None:
                raise ValueError(f"--insertion-order {self.policy}: this dataset was loaded without dependency parses")
            levels = padded_levels(*self.levels, batch["id"], lengths, target.size(1))
            batch["levels"] = levels  # [B, n] for InsNet-uniform's layers (not a model input)
        order = make_order(self.policy, lengths, target.size(1), generator, self.anchor_depth, given, levels)
        net_input = batch["net_input"]
        net_input.pop("prev_output_tokens", None)
        net_input["target"] = target
        net_input["order"] = order
        batch["ntokens"] = int((lengths - 2).sum())  # insertions to predict
        return batch
