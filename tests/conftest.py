import argparse
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import insnet_fairseq  # noqa: E402,F401
from fairseq.data import Dictionary  # noqa: E402
from fairseq.models.transformer import TransformerModel, base_architecture  # noqa: E402
from insnet_fairseq.tasks.lm import InsertionLMTask  # noqa: E402
from insnet_fairseq.models.insnet import InsNetLMModel, InsNetModel, insnet_small  # noqa: E402
from insnet_fairseq.tasks.translation import InsertionTranslationTask  # noqa: E402

SHARED_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "multi30k")

# ---------------------------------------------------------------- command-line runs (fairseq-* of the venv)
BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1")
TINY = ["--arch", "insnet_small", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "64",
        "--encoder-ffn-embed-dim", "128", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, **kw)


def train_cmd(data, save_dir, *extra):
    """fairseq-train of a tiny insnet_small (1+1 layers, d=64) on ``data``."""
    return [os.path.join(BIN, "fairseq-train"), data, "--user-dir", "insnet_fairseq", "--task", "insertion_translation",
            "--criterion", "insnet_loss", *TINY, "--share-all-embeddings", "--optimizer", "adam", "--lr", "2e-3",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--max-tokens", "256", "--save-dir", save_dir,
            "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "1", "--num-workers", "0",
            "--disable-validation", "--seed", "3", *extra]


def generate_cmd(data, ckpt, *extra):
    return [os.path.join(BIN, "fairseq-generate"), data, "--user-dir", "insnet_fairseq", "--task", "insertion_translation",
            "--path", ckpt, "--gen-subset", "test", "--batch-size", "16", "--max-insertion-steps", "5", *extra]


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """data-bin of the first 300 lines of every Multi30k split (BPE 300 merges), built once per session."""
    if not os.path.isdir(SHARED_DATA):
        pytest.skip("../shared/data/multi30k not present")
    tmp = tmp_path_factory.mktemp("m30k")
    out = run([sys.executable, "recipes/prepare_bitext.py", "--name", "m30k_small", "--raw-dir", SHARED_DATA,
               "--src", "en", "--tgt", "de", "--bpe-merges", "300", "--max-lines", "300",
               "--work-dir", str(tmp / "work"), "--dest-dir", str(tmp / "bin")])
    assert out.returncode == 0, out.stderr[-2000:]
    return str(tmp / "bin" / "m30k_small")


LM_LINES = 300  # lines of every split in lm_data


@pytest.fixture(scope="session")
def lm_data(tmp_path_factory):
    """data-bin of the first 300 English lines of every Multi30k split, with keywords and the AR bitext (the LM
    task's data, recipes/prepare_lm.py), built once per session."""
    if not os.path.isdir(SHARED_DATA):
        pytest.skip("../shared/data/multi30k not present")
    tmp = tmp_path_factory.mktemp("lm")
    out = run([sys.executable, "recipes/prepare_lm.py", "--name", "lm_small", "--raw-dir", SHARED_DATA, "--ext", "en",
               "--max-lines", str(LM_LINES), "--work-dir", str(tmp / "work"), "--dest-dir", str(tmp / "bin"),
               "--workers", "1"], timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "keywords per sentence" in out.stdout
    return str(tmp / "bin" / "lm_small")


@pytest.fixture(scope="session")
def tiny_checkpoint(small_data, tmp_path_factory):
    """A tiny InsNet trained 30 updates on small_data: checkpoint_last.pt."""
    save = str(tmp_path_factory.mktemp("gen_ckpt"))
    out = run(train_cmd(small_data, save, "--max-update", "30"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return os.path.join(save, "checkpoint_last.pt")


AR_TINY = ["--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
           "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
           "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]


@pytest.fixture(scope="session")
def ar_checkpoint(small_data, tmp_path_factory):
    """A fairseq transformer (the AR baseline) trained 2 updates on the same data."""
    save = str(tmp_path_factory.mktemp("ar_ckpt"))
    out = run([os.path.join(BIN, "fairseq-train"), small_data, "--user-dir", "insnet_fairseq", "--task", "translation",
               *AR_TINY, "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "512",
               "--max-update", "2", "--disable-validation", "--save-dir", save, "--no-epoch-checkpoints",
               "--num-workers", "0", "--log-format", "simple"], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return os.path.join(save, "checkpoint_last.pt")


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


class FakeLMTask(InsertionLMTask):
    """The LM task's dictionary and nothing else (InsNet language models are built for insertion_lm only)."""

    def __init__(self, d):
        self.src_dict = self.tgt_dict = d


def build_tiny_lm_model(seed: int = 0, vocab: int = 20, **overrides):
    """``insnet_lm`` (no source, no cross-attention) of the tiny size of :func:`build_tiny_model`."""
    torch.manual_seed(seed)
    d = make_dictionary(vocab)
    args = argparse.Namespace(decoder_layers=2, decoder_embed_dim=32, decoder_ffn_embed_dim=64,
                              decoder_attention_heads=4, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                              max_source_positions=64, max_target_positions=64, share_all_embeddings=False)
    for k, v in overrides.items():
        setattr(args, k, v)
    model = InsNetLMModel.build_model(args, FakeLMTask(d))
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


def sample_of(src, src_lengths):
    """A fairseq-style sample of a source batch (ids 0..B-1), as ``generator.generate`` takes it."""
    return {"id": torch.arange(len(src)), "net_input": {"src_tokens": src, "src_lengths": src_lengths}}


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


def build_tiny_ar(d, seed: int = 11):
    """fairseq's autoregressive transformer (1+1 layers, d=16) over dictionary ``d``, random weights."""
    args = argparse.Namespace(encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
                              encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2,
                              decoder_attention_heads=2, max_source_positions=64, max_target_positions=64,
                              dropout=0.0)
    base_architecture(args)
    torch.manual_seed(seed)
    model = TransformerModel.build_model(args, FakeTask(d, d))
    model.eval()
    return model


@pytest.fixture(scope="module")
def insnet_and_ar():
    """A tiny InsNet model (random weights that stop after a while), a tiny AR transformer over the same dictionary,
    and a source batch of 6 sentences: (model, ar, dictionary, src [6, 9], src_lengths [6])."""
    model, d = build_tiny_model(seed=7, vocab=30)
    model.decoder.heads.termination_proj.bias.data.fill_(-1.5)  # random weights stop after a while
    src, src_lengths, _ = random_batch(d, [5] * 6, src_len=9, seed=3)
    return model, build_tiny_ar(d), d, src, src_lengths
