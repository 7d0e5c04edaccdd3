"""Linear layers that decode through oneDNN with a packed weight (insnet_fairseq/modules/packed_linear.py): the same
values as ``F.linear`` wherever they pack, ``F.linear`` itself wherever they do not, a packed copy that follows the
weight, and models (InsNet's, and fairseq's AR transformer made packed) that decode what they decoded before."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from insnet_fairseq.modules import packed_linear
from insnet_fairseq.modules.packed_linear import Linear, pack_linears, packs, set_packed
from insnet_fairseq.modules.slots import SlotHeads


def test_this_torch_build_has_onednn():
    """Every test below that checks the packed path needs it: a CPU build of torch without oneDNN would leave every
    product to F.linear, and they would pass without testing it."""
    assert packed_linear.ONEDNN, "torch was built without oneDNN (torch.backends.mkldnn): the packed path is untested"


def test_packing_rule(monkeypatch):
    from conftest import REAL_MIN_WORK

    monkeypatch.setattr(packed_linear, "MIN_WORK", REAL_MIN_WORK)  # the rule itself (the other tests pack everything)
    ffn, attn, vocab = torch.empty(1024, 256), torch.empty(256, 256), torch.empty(9808, 256)
    assert packs(torch.empty(3, 256), ffn) and packs(torch.empty(1, 3, 256), ffn) and packs(torch.empty(1, 256), vocab)
    assert not packs(torch.empty(2, 256), ffn) and not packs(torch.empty(1, 8, 256), attn)  # too little work: MKL
    assert packs(torch.empty(2, 8, 256), attn)
    assert not packs(torch.empty(4, 256, dtype=torch.float64), ffn.double())
    assert not packs(torch.empty(4, 256).bfloat16(), ffn.bfloat16())


@pytest.mark.parametrize("bias", [True, False])
def test_packed_product_equals_f_linear(bias):
    """[N, K] and [B, T, K] inputs, non-contiguous ones (a slice of a fused projection's input), one row and many."""
    torch.manual_seed(0)
    lin = Linear(48, 80, bias=bias).eval()
    base = torch.randn(3, 7, 96)
    with torch.no_grad():
        for x in (torch.randn(5, 48), torch.randn(2, 6, 48), base[:, 2:, :48], torch.randn(1, 48), torch.randn(64, 48)):
            torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), atol=1e-5, rtol=1e-5)
    assert "" in lin._packed  # the packed path ran


def test_rows_is_the_product_by_a_block_of_rows_each_packed_once():
    torch.manual_seed(1)
    qkv = Linear(16, 48).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        q, kv = qkv.rows(x, 0, 16), qkv.rows(x[:, :3], 16, 48)
        torch.testing.assert_close(q, F.linear(x, qkv.weight[:16], qkv.bias[:16]), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(kv, F.linear(x[:, :3], qkv.weight[16:], qkv.bias[16:]), atol=1e-5, rtol=1e-5)
        kept = dict(qkv._packed)
        qkv.rows(x, 0, 16)
    assert set(kept) == {"0:16", "16:48"} and qkv._packed["0:16"][1] is kept["0:16"][1]  # reused, not packed again


def test_row_blocks_are_kept_for_decoding_and_follow_the_weight():
    """Linear.rows slices its weight and bias once for decoding (views kept on the layer, the F.linear path's too) and
    again after an in-place update; training slices at every call and keeps nothing; copies leave them out."""
    torch.manual_seed(3)
    qkv = Linear(16, 48).eval()
    x = torch.randn(1, 1, 16)  # one row: F.linear's path (below packs' work)
    with torch.no_grad():
        first = qkv.rows(x, 16, 48)
        w, b = qkv._row_blocks["16:48"][1]
        assert torch.equal(w, qkv.weight[16:]) and torch.equal(b, qkv.bias[16:])
        qkv.rows(x, 16, 48)
        assert qkv._row_blocks["16:48"][1][0] is w  # kept, not sliced again
        torch.testing.assert_close(first, F.linear(x, qkv.weight[16:], qkv.bias[16:]))
        qkv.bias.add_(1.0)  # (an optimizer step, a checkpoint load: the version counter moves)
        torch.testing.assert_close(qkv.rows(x, 16, 48), F.linear(x, qkv.weight[16:], qkv.bias[16:]))
        assert "_row_blocks" not in copy.deepcopy(qkv).__dict__
    train = Linear(16, 48).train()
    y = train.rows(x, 0, 16)
    y.sum().backward()
    assert "_row_blocks" not in train.__dict__ and train.weight.grad[16:].abs().sum() == 0


def test_packed_weight_follows_the_weight():
    """Made again after an in-place update (an optimizer step, a checkpoint load), not before."""
    torch.manual_seed(2)
    lin = Linear(24, 40).eval()
    x = torch.randn(6, 24)
    with torch.no_grad():
        lin(x)
        first = lin._packed[""][1]
        lin(x)
        assert lin._packed[""][1] is first
        lin.weight.mul_(2.0)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), atol=1e-5, rtol=1e-5)
        assert lin._packed[""][1] is not first
        state = {k: torch.randn_like(v) for k, v in lin.state_dict().items()}
        lin.load_state_dict(state)
        torch.testing.assert_close(lin(x), F.linear(x, state["weight"], state["bias"]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_training_products_and_gradients_equal_f_linear(bias):
    """Training mode and gradients in eval mode: oneDNN's forward product and its gradients (OneDNNLinear), with the
    values and gradients of F.linear to float rounding, on [B, T, K] inputs; nothing packed (the weights change)."""
    torch.manual_seed(3)
    lin = Linear(24, 40, bias=bias)
    for mode in ("train", "eval"):
        getattr(lin, mode)()
        x = torch.randn(2, 6, 24, requires_grad=True)
        g = torch.randn(2, 6, 40)
        y = lin(x)
        assert "OneDNNLinear" in str(y.grad_fn.next_functions)  # oneDNN's products, not F.linear's
        y.backward(g)
        ours = [x.grad, lin.weight.grad] + ([lin.bias.grad] if bias else [])
        x2 = x.detach().clone().requires_grad_()
        w2 = lin.weight.detach().clone().requires_grad_()
        b2 = lin.bias.detach().clone().requires_grad_() if bias else None
        y2 = F.linear(x2, w2, b2)
        y2.backward(g)
        torch.testing.assert_close(y, y2, atol=1e-5, rtol=1e-5)
        for a, b in zip(ours, [x2.grad, w2.grad] + ([b2.grad] if bias else [])):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        lin.zero_grad()
    assert "_packed" not in lin.__dict__
    lin.weight.requires_grad_(False)  # a frozen weight: only x's gradient
    x = torch.randn(3, 24, requires_grad=True)
    lin(x).sum().backward()
    torch.testing.assert_close(x.grad, lin.weight.sum(0).expand(3, 24), atol=1e-5, rtol=1e-5)


def test_in_place_change_of_a_training_output_is_allowed():
    """fairseq's attention scales its queries in place (``q *= scaling``): the output of a training product must be
    an ordinary tensor, not a view made inside the custom function."""
    lin = Linear(8, 8).train()
    x = torch.randn(2, 3, 8, requires_grad=True)
    y = lin(x)
    y *= 0.5
    y.sum().backward()
    assert x.grad is not None


def test_copies_and_pickles_leave_the_packed_weight_out():
    import pickle

    lin = Linear(8, 16).eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        y = lin(x)
        assert "_packed" in lin.__dict__
        for other in (copy.deepcopy(lin), pickle.loads(pickle.dumps(lin))):
            assert "_packed" not in other.__dict__
            torch.testing.assert_close(other(x), y)
            assert "_packed" in other.__dict__
    assert "_packed" in lin.__dict__


def test_set_packed_switches_a_model_back_to_f_linear():
    torch.manual_seed(4)
    model = nn.Sequential(Linear(8, 16), nn.ReLU(), Linear(16, 4)).eval()
    x = torch.randn(5, 8)
    with torch.no_grad():
        model(x)
        kept = [m._packed[""][1] for m in (model[0], model[2])]
        set_packed(model, False)
        assert torch.equal(model(x), F.linear(F.relu(F.linear(x, model[0].weight, model[0].bias)), model[2].weight,
                                              model[2].bias))
        set_packed(model, True)
        model(x)
        assert [m._packed[""][1] for m in (model[0], model[2])] == kept  # switched back: nothing packed again


def test_pack_linears_keeps_parameters_and_subclasses():
    class Own(nn.Linear):
        def forward(self, x):
            return super().forward(x) + 1

    model = nn.Sequential(nn.Linear(8, 8), Own(8, 8))
    keys = list(model.state_dict())
    assert pack_linears(model) is model
    assert type(model[0]) is Linear and type(model[1]) is Own and list(model.state_dict()) == keys


def test_tied_vocabulary_follows_the_embedding():
    """SlotHeads' vocabulary product with a tied embedding: packed, the same values as token_proj by F.linear, made
    again after the embedding changes in place (an optimizer step on the tied weight)."""
    torch.manual_seed(6)
    emb = nn.Embedding(50, 24)
    heads = SlotHeads(24, 50, tied_embedding=emb).eval()
    nn.init.normal_(heads.token_proj.bias)
    ref = lambda e: F.linear(e, emb.weight, heads.token_proj.bias)  # noqa: E731
    with torch.no_grad():
        for e in (torch.randn(5, 24), torch.randn(2, 3, 24)):
            torch.testing.assert_close(heads.token_logits(e), ref(e), atol=1e-5, rtol=1e-5)
        kept = heads.token_proj._packed[""][1]
        emb.weight.mul_(2.0)
        e = torch.randn(4, 24)
        torch.testing.assert_close(heads.token_logits(e), ref(e), atol=1e-5, rtol=1e-5)
        assert heads.token_proj._packed[""][1] is not kept


def _logits(model, batch):
    src, src_lengths, prev = batch
    with torch.no_grad():
        return model(src, src_lengths, prev)[0]


def test_insnet_models_are_packed_throughout():
    """InsNet's own layers and fairseq's source encoder inside it: every linear layer of the model decodes packed."""
    from conftest import build_tiny_model

    model, _ = build_tiny_model(slot_query_stream=True)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is Linear for m in linears)


def test_packed_ar_transformer_decodes_as_before():
    """fairseq's AR transformer made packed (what the benchmarks do to the baseline): the same teacher-forced logits
    and the same greedy outputs as the stock model."""
    from fairseq.sequence_generator import SequenceGenerator

    from conftest import build_tiny_ar, make_dictionary, random_batch, sample_of

    d = make_dictionary(30)
    stock = build_tiny_ar(d)
    packed = pack_linears(copy.deepcopy(stock))
    assert any(type(m) is Linear for m in packed.modules())
    src, src_lengths, target = random_batch(d, [6, 4, 7], src_len=8, seed=5)
    prev = torch.cat([torch.full_like(target[:, :1], d.eos()), target[:, :-1]], 1)
    torch.testing.assert_close(_logits(packed, (src, src_lengths, prev)), _logits(stock, (src, src_lengths, prev)),
                               atol=1e-4, rtol=1e-4)
    sample = sample_of(src, src_lengths)
    outs = [SequenceGenerator([m], d, beam_size=1, max_len_b=12).generate([m], sample) for m in (stock, packed)]
    assert [h[0]["tokens"].tolist() for h in outs[0]] == [h[0]["tokens"].tolist() for h in outs[1]]
    from fairseq.modules.multihead_attention import MultiheadAttention

    attention = [m for m in packed.modules() if isinstance(m, MultiheadAttention)]
    # without a GPU the projections run through the packed layers (with one, fairseq's fused path stays)
    assert attention and all(m.skip_embed_dim_check == (not torch.cuda.is_available()) for m in attention)
    grads = []
    for m in (stock, packed):  # training: the same loss gradients
        m.train()
        m.zero_grad()
        m(src, src_lengths, prev)[0].logsumexp(-1).sum().backward()
        grads.append({n: p.grad for n, p in m.named_parameters()})
        m.eval()
    for n, g in grads[0].items():
        torch.testing.assert_close(grads[1][n], g, atol=1e-4, rtol=1e-4, msg=n)


def test_fairseq_models_keep_their_layers_and_the_package_models_are_packed():
    """Importing the package leaves ``fairseq.models.build_model`` as it is: fairseq's AR transformer built through
    its task keeps ``nn.Linear`` (the benchmarks pack it explicitly, :func:`pack_linears`), while the package's own
    models are built on :class:`Linear`."""
    import subprocess
    import sys
    from argparse import Namespace

    from fairseq.models.transformer import base_architecture
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    from conftest import build_tiny_model, make_dictionary

    check = ("import fairseq.models as m; b = m.build_model; import insnet_fairseq; "
             "assert m.build_model is b, 'importing insnet_fairseq replaced fairseq.models.build_model'")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    d = make_dictionary(30)
    args = Namespace(arch="transformer", encoder_layers=1, decoder_layers=1, encoder_embed_dim=16,
                     decoder_embed_dim=16, encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32,
                     encoder_attention_heads=2, decoder_attention_heads=2, max_source_positions=64,
                     max_target_positions=64, dropout=0.0)
    base_architecture(args)
    model = TranslationTask(TranslationConfig(), d, d).build_model(args)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is nn.Linear for m in linears)
    insnet, _ = build_tiny_model(seed=0)
    linears = [m for m in insnet.modules() if isinstance(m, nn.Linear)]
    assert linears and all(isinstance(m, Linear) for m in linears)


PACKED_TRAINER = """
from argparse import Namespace
from fairseq.models.transformer import base_architecture
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from fairseq.data import Dictionary
import recipes.train_packed  # noqa: F401  (the recipes' fairseq-train)
from insnet_fairseq.modules.packed_linear import Linear
d = Dictionary()
for i in range(30):
    d.add_symbol(f"w{i}")
args = Namespace(arch="transformer", encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
                 encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
                 decoder_attention_heads=2, max_source_positions=64, max_target_positions=64, dropout=0.0)
base_architecture(args)
model = TranslationTask(TranslationConfig(), d, d).build_model(args)
print(all(type(m) is Linear for m in model.modules() if isinstance(m, __import__("torch").nn.Linear)))
"""


def test_the_recipes_trainer_packs_fairseqs_models_too():
    """recipes/train.sh trains every kind through recipes/train_packed.py: fairseq's AR transformer on the package's
    linear layers too (the explicit switch; a separate process, as plain imports leave fairseq's models alone)."""
    import subprocess
    import sys

    from conftest import ENV, ROOT

    out = subprocess.run([sys.executable, "-c", PACKED_TRAINER], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1] == "True", out.stderr[-2000:]
