"""fairseq_fixes/optimizer_versions: after a fairseq optimizer step (which updates the parameters through
``.data``) the tensors an InsNet model keeps from its weights (offset projections, packed weights) are made
again, so a no-gradient pass (the InsNet-Dinic layering of the next batch, validation) sees the current weights,
as a fresh process loading the same weights would."""
import copy
import math

import torch
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
from fairseq.tasks.fairseq_task import FairseqTask
from omegaconf import OmegaConf

from insnet_fairseq.fairseq_fixes import optimizer_versions
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.training.layerization import layerize

from conftest import build_tiny_model, random_batch


def kept_outputs(model, e, rel_table):
    """What the model computes from its kept tensors in a no-gradient evaluation: token logits of slot
    representations ``e`` and the first layer's offset projection."""
    model.eval()
    with torch.no_grad():
        attn = model.decoder.context.layers[0].self_attn
        return model.decoder.heads.token_logits(e).clone(), attn.project_offsets(rel_table, 5).clone()


def trained_step(model, optimizer, d, src, src_lengths, target, step):
    """One training update of ``model``: forward, backward and ``step(optimizer)``."""
    model.train()
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("anchored", n_tok, target.size(1))
    out = model(src, src_lengths, target=target, order=order)
    loss = -torch.log_softmax(out["token"]["logits"], -1).gather(1, out["token"]["target"].unsqueeze(1)).sum()
    optimizer.zero_grad()
    loss.backward()
    step(optimizer)


def setup():
    model, d = build_tiny_model(seed=2, dropout=0.0)
    src, src_lengths, target = random_batch(d, [9, 7, 12, 5], seed=3)
    cfg = OmegaConf.structured(FairseqAdamConfig(adam_betas="(0.9, 0.98)", tpu=False, lr=[0.05]))
    optimizer = FairseqAdam(cfg, list(model.parameters()))
    e = torch.randn(6, model.decoder.heads.token_proj.weight.size(1), generator=torch.Generator().manual_seed(0))
    rel_table = model.decoder.context.offset_embed
    return model, d, src, src_lengths, target, optimizer, e, rel_table


def test_fairseq_adam_alone_leaves_the_kept_tensors_stale():
    """The fault being fixed: fairseq's Adam updates through .data, and the kept tensors do not notice."""
    model, d, src, src_lengths, target, optimizer, e, rel_table = setup()
    kept_outputs(model, e, rel_table)  # kept from the initial weights
    trained_step(model, optimizer, d, src, src_lengths, target, lambda opt: opt.step())
    stale_logits, stale_p = kept_outputs(model, e, rel_table)
    fresh_logits, fresh_p = kept_outputs(copy.deepcopy(model), e, rel_table)  # a copy keeps nothing yet
    assert not torch.equal(stale_logits, fresh_logits) and not torch.equal(stale_p, fresh_p)


def test_after_the_task_optimizer_step_kept_tensors_follow_the_weights():
    model, d, src, src_lengths, target, optimizer, e, rel_table = setup()
    task = object.__new__(FairseqTask)  # optimizer_step uses nothing of the task
    for update in range(3):
        kept_outputs(model, e, rel_table)
        trained_step(model, optimizer, d, src, src_lengths, target,
                     lambda opt: FairseqTask.optimizer_step(task, opt, model=model, update_num=update))
        logits, p = kept_outputs(model, e, rel_table)
        fresh_logits, fresh_p = kept_outputs(copy.deepcopy(model), e, rel_table)
        assert torch.equal(logits, fresh_logits) and torch.equal(p, fresh_p)
        # the layering pass of the next batch is the one a process that just loaded these weights computes
        n_tok = target.ne(d.pad()).sum(1)
        order = make_order("anchored", n_tok, target.size(1))
        ours = layerize(model, src, src_lengths, target, order, 1.0)[0]
        assert torch.equal(ours, layerize(copy.deepcopy(model), src, src_lengths, target, order, 1.0)[0])


def test_install_wraps_once_and_bumps_every_parameter():
    optimizer_versions.install()
    assert FairseqTask.optimizer_step._insnet_bumps_versions
    assert not getattr(FairseqTask.optimizer_step.__wrapped__, "_insnet_bumps_versions", False)  # not twice
    model, _ = build_tiny_model(seed=1)
    before = [p._version for p in model.parameters()]
    optimizer_versions.bump_versions(model)
    assert all(p._version > v for p, v in zip(model.parameters(), before))
    assert math.isfinite(sum(float(p.sum()) for p in model.parameters()))  # the data is untouched and usable
