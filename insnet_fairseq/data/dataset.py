"""Batches of insertion trajectories on top of fairseq's LanguagePairDataset.

The collater keeps fairseq's batch and adds, vectorised over the batch:
``net_input.target`` [B, n] = ``<s> y </s>`` (right-padded) and ``net_input.order`` [B, n], the
insertion order drawn by the task's ``--insertion-order`` policy (the ``keywords`` order also puts
``given`` [B, n], the keywords' positions, into the batch). Random orders are seeded by
(seed, epoch, first sample id), so a resumed run sees the same orders.
"""
import torch
from fairseq.data import BaseWrapperDataset

from insnet_fairseq.data.orders import DEFAULT_ANCHOR_DEPTH, GIVEN_POLICIES, given_positions, make_order


class InsertionPairDataset(BaseWrapperDataset):
    def __init__(self, dataset, policy: str, bos: int, seed: int = 1, anchor_depth: int = DEFAULT_ANCHOR_DEPTH):
        super().__init__(dataset)
        self.policy, self.anchor_depth = policy, anchor_depth
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
        order = make_order(self.policy, lengths, target.size(1), generator, self.anchor_depth, given)
        net_input = batch["net_input"]
        net_input.pop("prev_output_tokens", None)
        net_input["target"] = target
        net_input["order"] = order
        batch["ntokens"] = int((lengths - 2).sum())  # insertions to predict
        return batch
