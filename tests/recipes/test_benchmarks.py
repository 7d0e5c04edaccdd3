"""Helpers of the benchmarks that decide what is measured."""

import pytest
import torch


from experiments import cache_gain


def test_cache_gain_joins_consecutive_sentences_with_one_eos():
    eos = 2
    ds = [{"source": torch.tensor([5 + i, 6, eos]), "target": torch.tensor([9, 10 + i, eos])} for i in range(5)]
    items = cache_gain.joined_items(ds, [0, 1, 2, 3, 4], 2, eos)
    assert len(items) == 2  # the fifth sentence has no partner: left out, never half a pair
    assert items[0]["source"].tolist() == [5, 6, 6, 6, eos] and items[0]["target"].tolist() == [9, 10, 9, 11, eos]
    assert items[1]["source"].tolist() == [7, 6, 8, 6, eos] and [it["id"] for it in items] == [0, 1]
    assert [it["source"].tolist() for it in cache_gain.joined_items(ds, [3], 1, eos)] == [[8, 6, eos]]  # K = 1: as is


def test_call_timer_adds_up_the_wrapped_calls_time():
    class Thing:
        def work(self, x):
            return x + 1

    ticks = iter([10.0, 10.5, 20.0, 20.25])  # two calls: 0.5 s and 0.25 s (a fake clock: no real timing)
    thing = Thing()
    timer = cache_gain.CallTimer(thing, "work", clock=lambda: next(ticks))
    assert thing.work(1) == 2 and thing.work(2) == 3  # calls pass through
    assert timer.seconds == 0.75


def test_without_offset_term_drops_exactly_the_position_term():
    """--without-offset-term's diagnostic model: when the position term is zero anyway (W_kR = 0, v = 0), it
    gives InsNet's own loss, so what it saves in time is the offset term and nothing else; with the term it differs."""
    from benchmarks import train_throughput as tt
    from fairseq.data import Dictionary

    d = Dictionary()
    for w in "abcdefgh":
        d.add_symbol(w)
    batch = tt.synthetic_batches(d, 6, 24, 1)[0]
    full, plain = tt.build("insnet", d), tt.build(tt.NO_OFFSETS, d)  # same seed: same weights
    for m in (full, plain):
        m.eval()
    with torch.no_grad():
        assert not torch.allclose(tt.step_fn("insnet", full, batch, d, 0.1), tt.step_fn("insnet", plain, batch, d, 0.1))
        for m in (full, plain):
            for layer in m.decoder.context.layers:
                layer.self_attn.r_proj.weight.zero_()
                layer.self_attn.v.zero_()
        torch.testing.assert_close(tt.step_fn("insnet", plain, batch, d, 0.1), tt.step_fn("insnet", full, batch, d, 0.1))


def assert_same_training_step(tt, models, batch, d, grad_atol):
    """The two models of ``models`` (train_throughput kind -> model) take a training step from the same seed: the
    same loss (to 1e-4) and the same gradients (to ``grad_atol``, relative 1e-4)."""
    losses, grads = {}, {}
    for k, m in models.items():
        torch.manual_seed(1)
        losses[k] = tt.step_fn(k, m, batch, d, 0.1)
        losses[k].backward()
        grads[k] = [p.grad for p in m.parameters()]
    first, second = models
    torch.testing.assert_close(losses[first], losses[second], rtol=1e-5, atol=1e-4)
    for a, b in zip(grads[first], grads[second]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=grad_atol)


def test_offset_kernels_times_the_same_models_with_the_dense_offset_term():
    """--offset-kernels' systems ("InsNet gather", "InsNet l2r view") are the same models with the C++ kernel switched
    off: the same weights and, in a training step (dropout on, the same seed), the same loss and gradients, so the
    timing compares two ways of computing one thing."""
    from benchmarks import train_throughput as tt
    from fairseq.data import Dictionary
    from insnet_fairseq.modules.attention import OffsetSelfAttention

    d = Dictionary()
    for w in "abcdefgh":
        d.add_symbol(w)
    batch = tt.synthetic_batches(d, 6, 24, 1)[0]
    for kernel_kind, dense_kind in (("insnet", tt.GATHER), (tt.L2R, tt.L2R_VIEW)):
        models = {k: tt.build(k, d).train() for k in (kernel_kind, dense_kind)}
        switches = {k: {m.offset_kernel for m in models[k].modules() if isinstance(m, OffsetSelfAttention)}
                    for k in models}
        assert switches == {kernel_kind: {True}, dense_kind: {False}}
        assert_same_training_step(tt, models, batch, d, grad_atol=1e-5)


def test_offset_term_cost_times_one_layer_with_and_without_only_the_offset_term():
    """experiments/offset_term_cost.py's two layers share their weights and differ by the offset term alone: equal
    where the term is zero (W_kR = 0, v = 0), not otherwise; the term alone is -inf exactly where the mask blocks."""
    from experiments import offset_term_cost as otc

    full, plain = otc.layers()
    x, offsets, mask, table = otc.layer_inputs(6, 24)
    for m in (full, plain):
        m.eval()
    with torch.no_grad():
        assert not torch.allclose(full(x, offsets, table, mask)[0], plain(x, offsets, table, mask)[0])
        q = torch.randn(x.size(0), otc.HEADS, 6, otc.D // otc.HEADS)
        bias = full.offset_bias(q, offsets, table, mask, 6)
        assert torch.equal(torch.isinf(bias), mask.expand_as(bias))
        for m in (full, plain):
            m.r_proj.weight.zero_()
            m.v.zero_()
        torch.testing.assert_close(plain(x, offsets, table, mask)[0], full(x, offsets, table, mask)[0])
        # the l2r columns' term: the skewed view gives the gathered offsets' scores, -inf where they are
        l2r_offsets = otc.layer_inputs(6, 24, policy="l2r")[1]
        torch.testing.assert_close(full.offset_bias(q, l2r_offsets, table, mask, 6, True),
                                   full.offset_bias(q, l2r_offsets, table, mask, 6))


def test_linear_kernels_times_the_same_models_on_f_linear(monkeypatch):
    """train_throughput --linear-kernels: "X, F.linear" is model X (the same weights) with its layers on F.linear's
    products; every model, the AR one too, has the packed layers; a training step gives the same loss and gradients
    both ways, to float rounding. Without dropout: oneDNN's outputs are laid out in memory as F.linear's are not
    always, and dropout draws its mask in memory order, so with it each way draws another (equally random) mask."""
    from benchmarks import train_throughput as tt
    from fairseq.data import Dictionary
    from insnet_fairseq.modules.packed_linear import Linear

    monkeypatch.setitem(tt.SIZE, "dropout", 0.0)

    d = Dictionary()
    for w in "abcdefgh":
        d.add_symbol(w)
    batch = tt.synthetic_batches(d, 6, 24, 1)[0]
    for kind in ("ar", tt.AR_FUSED, tt.L2R):
        models = {k: tt.build(k, d).train() for k in (kind, kind + tt.STOCK)}
        for k, m in models.items():
            layers = [x for x in m.modules() if isinstance(x, torch.nn.Linear)]
            assert layers and all(type(x) is Linear and x.packed == (k == kind) for x in layers), k
        assert_same_training_step(tt, models, batch, d, grad_atol=1e-4)


def test_peak_tensor_memory_counts_live_tensors_in_time_order():
    """memory_scaling.py's CPU measure: the most bytes live at once during the call, frees included."""
    from benchmarks import memory_scaling

    mb = 2**20

    def work():
        a = torch.empty(4 * mb, dtype=torch.uint8)
        b = torch.empty(4 * mb, dtype=torch.uint8)
        del a  # 8 MB live at the peak, then 4
        c = torch.empty(1 * mb, dtype=torch.uint8)
        return b, c

    assert abs(memory_scaling.peak_tensor_mb(work) - 8.0) < 0.01

    def sequential():  # the same bytes, never two blocks live at once
        for _ in range(3):
            t = torch.empty(4 * mb, dtype=torch.uint8)
            del t

    assert abs(memory_scaling.peak_tensor_mb(sequential) - 4.0) < 0.01


def test_pass_breakdown_splits_the_labelled_passes_by_kind_of_op():
    """cache_gain.py --profile-passes: only ops inside a pass count, each once (a pass inside a pass is not counted
    again), sorted into products / attention / copies / other, the parts adding up to the passes' time."""
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, record_function

    x, w, buf = torch.randn(8, 16), torch.randn(4, 16), torch.empty(8, 4)
    q = torch.randn(1, 2, 3, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.bmm(x.view(1, 8, 16), w.t().reshape(1, 16, 4))  # outside any pass: not counted
        with record_function(cache_gain.PASS):
            buf.copy_(x @ w.t())
            F.scaled_dot_product_attention(q, q, q)
            with record_function(cache_gain.PASS):  # nested: its ops count once, in the outer pass
                torch.relu(x)
    total, ops = cache_gain.pass_ops(prof.events())
    names = [name for name, _ in ops]
    assert "aten::bmm" not in names and names.count("aten::relu") == 1 and names.count("aten::copy_") >= 1
    assert "aten::mm" in names and any("scaled_dot_product" in name for name in names)
    outer = [e for e in prof.events() if e.name == cache_gain.PASS and e.cpu_parent is None]
    assert len(outer) == 1 and total == outer[0].cpu_time_total / 1e6
    b = cache_gain.pass_breakdown(prof.events())
    assert b["total"] == total and min(b.values()) >= 0
    assert abs(sum(v for key, v in b.items() if key != "total") - total) < 1e-9 or b["outside ops"] == 0


def test_train_throughput_parallel_step_is_the_gap_objective():
    """train_throughput's "InsNet parallel" trains the end-of-slot objective (a done head, no position or stop head)
    on a sampled layering: its step's loss is insnet_loss's gap terms on that layering."""
    from benchmarks import train_throughput as tt
    from fairseq.data import Dictionary
    from insnet_fairseq.geometry.gaps import sample_layers
    from insnet_fairseq.tasks.criterion import gap_losses

    d = Dictionary()
    for w in "abcdefgh":
        d.add_symbol(w)
    batch = tt.synthetic_batches(d, 6, 24, 1)[0]
    model = tt.build(tt.PARALLEL, d).eval()
    assert hasattr(model.decoder.heads, "done_proj") and not hasattr(model.decoder.heads, "position_proj")
    tgt = batch["target"]
    target = torch.cat([tgt.new_full((tgt.size(0), 1), d.bos()), tgt], 1)
    layers = sample_layers(target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0), 1.0, 0.1)
    with torch.no_grad():
        out = model(batch["net_input"]["src_tokens"], batch["net_input"]["src_lengths"], target, None, layers=layers)
        expected = sum(v[0] for v in gap_losses(out["gap"], 0.1).values())
        torch.testing.assert_close(tt.step_fn(tt.PARALLEL, model, batch, d, 0.1), expected)


@pytest.mark.parametrize("variant", ["rate", "query_layers", "asked"])
def test_train_throughput_stream_variants_step_as_their_flags_train(variant):
    """--gap-slot-rates R: "InsNet parallel with the slot query stream, slot rate R" is the stream model whose step's
    loss is insnet_loss's gap terms on the drawn slots (sample_slots, weighted 1 / R), not on every slot.
    --slot-query-layers K: "... through the last K layers" is the stream model built with --slot-query-layers K,
    stepped on the gap objective of every slot. --asked-slots: "... the slots decoding asks" is the stream model
    (through the last K layers here) stepped on the slots asked_slots keeps."""
    from benchmarks import train_throughput as tt
    from fairseq.data import Dictionary
    from insnet_fairseq.geometry.gaps import asked_slots, sample_layers, sample_slots
    from insnet_fairseq.tasks.criterion import gap_losses

    d = Dictionary()
    for w in "abcdefgh":
        d.add_symbol(w)
    batch = tt.synthetic_batches(d, 8, 48, 1)[0]
    kind = tt.PARALLEL_QUERY + (f"{tt.SLOT_RATE}0.5" if variant == "rate" else f"{tt.QUERY_LAYERS}1")
    kind += tt.ASKED if variant == "asked" else ""
    model = tt.build(kind, d).eval()
    assert model.decoder.context.slot_query is not None
    assert model.decoder.context.query_from == (0 if variant == "rate" else 2)
    tgt, ni = batch["target"], batch["net_input"]
    target = torch.cat([tgt.new_full((tgt.size(0), 1), d.bos()), tgt], 1)
    layers = sample_layers(target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0), 1.0, 0.1)
    weight = {"rate": sample_slots(layers, 0.5, torch.Generator().manual_seed(2)),
              "asked": asked_slots(layers)}.get(variant)
    with torch.no_grad():
        out = model(ni["src_tokens"], ni["src_lengths"], target, None, layers=layers, slot_weight=weight)
        expected = sum(v[0] for v in gap_losses(out["gap"], 0.1).values())
        torch.testing.assert_close(tt.step_fn(kind, model, batch, d, 0.1), expected)
        if variant != "query_layers":  # not every slot's loss
            every = tt.PARALLEL_QUERY if variant == "rate" else kind.removesuffix(tt.ASKED)
            assert not torch.allclose(expected, tt.step_fn(every, model, batch, d, 0.1))


def test_on_policy_throughput_times_the_checkpoints_model_with_and_without_its_rollouts(tmp_path):
    """--on-policy P --on-policy-checkpoint CKPT: both systems carry the checkpoint's weights; at P = 0 the on-policy
    step is InsNet parallel's exactly (the same loss and gradients), so what the timing separates is the rollouts
    and the longer trajectories they leave; at P = 1 the step trains on the rollouts' words."""
    from benchmarks import train_throughput as tt
    from fairseq.data import Dictionary

    d = Dictionary()
    for w in "abcdefgh":
        d.add_symbol(w)
    torch.manual_seed(5)
    ckpt = tmp_path / "gap.pt"
    source = tt.build(tt.PARALLEL, d)
    for p in source.parameters():
        p.data.add_(torch.randn_like(p) * 0.01)  # weights other than build()'s own
    source.decoder.heads.done_proj.bias.data.fill_(-3.0)  # slots open: the rollouts write words
    torch.save({"model": source.state_dict()}, ckpt)
    batch = tt.synthetic_batches(d, 6, 24, 1)[0]
    models = {k: tt.build(k, d, str(ckpt)).train() for k in (tt.TRAINED, tt.ON_POLICY)}
    for m in models.values():
        for k, v in m.state_dict().items():
            assert torch.equal(v, source.state_dict()[k]), k
    assert_same_training_step(tt, models, batch, d, grad_atol=1e-6)  # on_policy 0.0: no sentence rolled out
    with torch.no_grad():
        torch.manual_seed(1)
        rolled = tt.step_fn(tt.ON_POLICY, models[tt.ON_POLICY], batch, d, 0.1, on_policy=1.0)
        torch.manual_seed(1)
        assert not torch.allclose(rolled, tt.step_fn(tt.TRAINED, models[tt.TRAINED], batch, d, 0.1))
