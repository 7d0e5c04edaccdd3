"""A tiny InsNet memorises 20 real sentence pairs on CPU in well under a minute."""
import os
import time

import pytest
import torch

from fairseq.data import Dictionary
from insnet_fairseq.criterion import term_losses
from insnet_fairseq.model import InsNetModel
from insnet_fairseq.orders import make_order

from conftest import SHARED_DATA, FakeTask, tiny_args


def load_pairs(n=20):
    if not os.path.isdir(SHARED_DATA):
        pytest.skip("../shared/data/multi30k not present")
    with open(os.path.join(SHARED_DATA, "train.en")) as f_en, open(os.path.join(SHARED_DATA, "train.de")) as f_de:
        return [(next(f_en).lower().split(), next(f_de).lower().split()) for _ in range(n)]


def test_tiny_model_overfits_twenty_pairs():
    pairs = load_pairs()
    d = Dictionary()
    for en, de in pairs:
        for w in en + de:
            d.add_symbol(w)
    d.finalize(padding_factor=1)
    n_src = max(len(en) for en, _ in pairs) + 1
    n_tgt = max(len(de) for _, de in pairs) + 2
    src = torch.full((20, n_src), d.pad())
    tgt = torch.full((20, n_tgt), d.pad())
    for b, (en, de) in enumerate(pairs):
        ids = [d.index(w) for w in en] + [d.eos()]
        src[b, n_src - len(ids):] = torch.tensor(ids)  # left-padded source, fairseq's default
        ids = [d.bos()] + [d.index(w) for w in de] + [d.eos()]
        tgt[b, : len(ids)] = torch.tensor(ids)
    src_lengths = src.ne(d.pad()).sum(1)
    order = make_order("binary", tgt.ne(d.pad()).sum(1), n_tgt)
    ntokens = int(tgt.ne(d.pad()).sum()) - 2 * 20

    torch.manual_seed(0)
    args = tiny_args(encoder_embed_dim=64, encoder_ffn_embed_dim=128, max_target_positions=128, max_source_positions=128)
    model = InsNetModel.build_model(args, FakeTask(d, d))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = time.time()
    losses = []
    for step in range(400):
        opt.zero_grad()
        terms = term_losses(model(src, src_lengths, tgt, order))
        loss = sum(v[0] for v in terms.values()) / ntokens
        loss.backward()
        opt.step()
        losses.append(float(loss))
        if loss < 0.02:
            break
    elapsed = time.time() - start
    assert losses[0] > 3.0, losses[0]  # started from chance (vocab of a few hundred words)
    assert losses[-1] < 0.05, f"loss per token after {len(losses)} steps: {losses[-1]:.4f}"
    assert elapsed < 60, f"took {elapsed:.1f}s"
