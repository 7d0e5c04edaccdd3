"""Make fairseq's optimizer steps visible to the tensors a model keeps from its weights.

An InsNet model evaluated without gradients keeps tensors derived from its weights from one call to the next
(:mod:`insnet_fairseq.modules.kept`: every self-attention layer's offset projection, the packed weight of
every linear layer), keyed by each weight's version counter, which an in-place update bumps. fairseq 0.12's optimizers
update the parameters through ``p.data`` (``FairseqAdam``: ``p_data_fp32 = p.data``, then ``addcdiv_``; the
fp16 wrappers: ``p.data.copy_``), which leaves the version counter as it was. So in fairseq-train every
no-gradient evaluation between updates (the InsNet-Dinic layering pass of each training batch, the
``--dinic-lagged`` promotions, validation) reused tensors made from the weights of an earlier update, whichever
the process had started from: a run resumed from a checkpoint (a new process, nothing kept) laid out its
batches differently from an uninterrupted run, and the two loss curves parted (``benchmarks/kill_campaign.py``).

Here every task's optimizer step (``FairseqTask.optimizer_step``, which fairseq's trainer calls for each
update) is followed by bumping the version counter of every parameter of the model
(``torch.autograd.graph.increment_version``: no data is touched), so a kept tensor is made again from the
current weights.
"""
import torch
from fairseq.tasks.fairseq_task import FairseqTask


def bump_versions(model) -> None:
    """Mark every parameter of ``model`` as modified in place (what an update through ``.data`` does not)."""
    params = list(model.parameters())
    if params:
        torch.autograd.graph.increment_version(params)


def install() -> None:
    step = FairseqTask.optimizer_step
    if getattr(step, "_insnet_bumps_versions", False):
        return

    def optimizer_step(self, optimizer, model, update_num):
        result = step(self, optimizer, model, update_num)
        bump_versions(model)
        return result

    optimizer_step._insnet_bumps_versions = True
    optimizer_step.__wrapped__ = step
    FairseqTask.optimizer_step = optimizer_step
