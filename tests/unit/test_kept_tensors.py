"""Tensors an InsNet model keeps from its weights (offset projections, packed weights: modules/kept.py) follow the
weights through fairseq's optimizer steps, which update the parameters through ``.data`` (so their version counters
stay as they were), with no patch of fairseq: a module drops what it keeps when it goes back to training mode. A
no-gradient pass after an update (the InsNet-Dinic layering of the next batch, validation) sees the current
weights, as a fresh process loading the same weights would."""
import copy

import torch
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
from omegaconf import OmegaConf

from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.modules.kept import KeepsDerived
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


def test_fairseq_adam_updates_through_data_without_bumping_versions():
    """Why a version key alone is not enough: fairseq's Adam writes ``p.data``, and ``p._version`` stays."""
    model, d, src, src_lengths, target, optimizer, e, rel_table = setup()
    before = [p._version for p in model.parameters()]
    weights = [p.detach().clone() for p in model.parameters()]
    trained_step(model, optimizer, d, src, src_lengths, target, lambda opt: opt.step())
    assert any(not torch.equal(w, p) for w, p in zip(weights, model.parameters()))
    assert [p._version for p in model.parameters()] == before


def test_kept_tensors_follow_fairseq_adam_updates():
    model, d, src, src_lengths, target, optimizer, e, rel_table = setup()
    for update in range(3):
        kept_outputs(model, e, rel_table)  # kept from the current weights
        trained_step(model, optimizer, d, src, src_lengths, target, lambda opt: opt.step())
        logits, p = kept_outputs(model, e, rel_table)
        fresh_logits, fresh_p = kept_outputs(copy.deepcopy(model), e, rel_table)  # a copy keeps nothing yet
        assert torch.equal(logits, fresh_logits) and torch.equal(p, fresh_p)
        # the layering pass of the next batch is the one a process that just loaded these weights computes
        n_tok = target.ne(d.pad()).sum(1)
        order = make_order("anchored", n_tok, target.size(1))
        ours = layerize(model, src, src_lengths, target, order, 1.0)[0]
        assert torch.equal(ours, layerize(copy.deepcopy(model), src, src_lengths, target, order, 1.0)[0])


def test_kept_tensors_follow_a_state_dict_loaded_in_eval_mode():
    """Outside training the key (data pointer, version counter) notices an in-place load."""
    model, d, src, src_lengths, target, optimizer, e, rel_table = setup()
    other, _ = build_tiny_model(seed=5, dropout=0.0)
    kept_outputs(model, e, rel_table)
    model.load_state_dict(other.state_dict())
    assert not model.training
    logits, p = kept_outputs(model, e, rel_table)
    fresh_logits, fresh_p = kept_outputs(other, e, rel_table)
    assert torch.equal(logits, fresh_logits) and torch.equal(p, fresh_p)


def test_training_mode_drops_what_every_module_keeps():
    model, d, src, src_lengths, target, optimizer, e, rel_table = setup()
    kept_outputs(model, e, rel_table)
    keepers = [m for m in model.modules() if isinstance(m, KeepsDerived)]
    assert any(store in m.__dict__ and m.__dict__[store] for m in keepers for store in m.kept_stores)
    model.train()
    assert not any(store in m.__dict__ and m.__dict__[store] for m in keepers for store in m.kept_stores)
