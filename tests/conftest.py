import argparse
import os
import sys

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import insnet_fairseq  # noqa: E402,F401
from fairseq.data import Dictionary  # noqa: E402
from insnet_fairseq.model import InsNetModel, insnet_small  # noqa: E402
from insnet_fairseq.task import InsertionTranslationTask  # noqa: E402

SHARED_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "multi30k")


def make_dictionary(n_words: int = 20) -> Dictionary:
    d = Dictionary()
    for i in range(n_words):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=1)
    return d


class FakeTask(InsertionTranslationTask):
    """The task's dictionaries and nothing else (InsNet models are built for insertion_translation only)."""

    def __init__(self, src_dict, tgt_dict):
        self.src_dict, self.tgt_dict = src_dict, tgt_dict


def tiny_args(**overrides):
    args = argparse.Namespace(
        encoder_layers=2, decoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
        encoder_attention_heads=4, decoder_attention_heads=4, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, max_source_positions=64, max_target_positions=64,
        share_all_embeddings=False,
    )
    for k, v in overrides.items():
        setattr(args, k, v)
    insnet_small(args)
    return args


def build_tiny_model(seed: int = 0, vocab: int = 20, **overrides):
    torch.manual_seed(seed)
    d = make_dictionary(vocab)
    model = InsNetModel.build_model(tiny_args(**overrides), FakeTask(d, d))
    model.eval()
    return model, d


def random_batch(d: Dictionary, lengths, src_len: int = 7, seed: int = 0):
    """Target [B, n] = <s> words </s> right-padded, source [B, src_len] left-padded like fairseq."""
    g = torch.Generator().manual_seed(seed)
    B, n = len(lengths), max(lengths)
    target = torch.full((B, n), d.pad(), dtype=torch.long)
    for b, L in enumerate(lengths):
        target[b, 0] = d.bos()
        target[b, 1 : L - 1] = torch.randint(d.nspecial, len(d), (L - 2,), generator=g)
        target[b, L - 1] = d.eos()
    src_lengths = torch.randint(2, src_len + 1, (B,), generator=g)
    src = torch.full((B, src_len), d.pad(), dtype=torch.long)
    for b in range(B):
        L = int(src_lengths[b])
        src[b, src_len - L :] = torch.randint(d.nspecial, len(d), (L,), generator=g)
        src[b, -1] = d.eos()
    return src, src_lengths, target


def step_logprobs(out):
    """Model output -> per-step log-probs of the true token, slot and termination (each [B, T])."""
    tok, pos, term = out["token"], out["position"], out["termination"]
    # token log-probs of the real steps, scattered back to [B, T] so they line up with the others
    tok_lp = pos["logits"].new_zeros(pos["mask"].shape)
    tok_lp[pos["mask"]] = F.log_softmax(tok["logits"], -1).gather(1, tok["target"].unsqueeze(1)).squeeze(1)
    pos_lp = F.log_softmax(pos["logits"], -1).gather(2, pos["target"].unsqueeze(2)).squeeze(2)
    term_lp = F.logsigmoid(torch.where(term["target"].bool(), term["logits"], -term["logits"]))
    return tok_lp, pos_lp, term_lp


@pytest.fixture
def tiny_model():
    return build_tiny_model()
