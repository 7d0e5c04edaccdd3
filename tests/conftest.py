import argparse
import os
import random
import shutil
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
from insnet_fairseq.tasks.lm import InsertionLMConfig, InsertionLMTask  # noqa: E402
from insnet_fairseq.models.insnet import InsNetLMModel, InsNetModel, insnet_small  # noqa: E402
from insnet_fairseq.tasks.translation import InsertionTranslationTask  # noqa: E402
from insnet_fairseq.data.dependency import ROOT as TREE_ROOT  # noqa: E402
from insnet_fairseq.modules import packed_linear  # noqa: E402

import synthetic_corpus  # noqa: E402  (tests/synthetic_corpus.py: the generated corpus every corpus fixture uses)

# ---------------------------------------------------------------- tiers (pytest.ini): the slow folders
SLOW_FOLDERS = ("recipes", "stress")  # tests/recipes: whole recipes and benchmarks; tests/stress: long inputs, fuzzing


def pytest_collection_modifyitems(config, items):
    """Every test under tests/recipes and tests/stress is in the slow tier (``make test-all`` only)."""
    for item in items:
        parts = os.path.relpath(str(item.fspath), os.path.join(ROOT, "tests")).split(os.sep)
        if parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


# ---------------------------------------------------------------- every product of a tiny model packed
REAL_MIN_WORK = packed_linear.MIN_WORK


@pytest.fixture(autouse=True)
def every_product_packed(monkeypatch):
    """In this process, every decoding product of a linear layer goes through oneDNN's packed path, however small
    (modules/packed_linear.py packs only products of ``MIN_WORK`` multiply-adds, which no tiny model reaches), so that
    every decoding invariant below tests it. The rule's own test restores ``REAL_MIN_WORK``."""
    monkeypatch.setattr(packed_linear, "MIN_WORK", 0)


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


# ---------------------------------------------------------------- corpora: generated, then prepared by the recipes
N_LINES = synthetic_corpus.N_LINES  # sentence pairs of every split


@pytest.fixture(scope="session")
def raw_corpus(tmp_path_factory):
    """A raw parallel corpus written by tests/synthetic_corpus.py: {train,valid,test}.{en,de}, N_LINES generated
    caption-like sentence pairs per split (untokenised text with punctuation), the same for every seed-1 run."""
    return synthetic_corpus.write_corpus(str(tmp_path_factory.mktemp("raw_corpus")))


@pytest.fixture(scope="session")
def small_data(raw_corpus, tmp_path_factory):
    """data-bin of raw_corpus, en-de (Moses tokenisation, joint BPE of 300 merges: recipes/prepare_bitext.py),
    built once per test run."""
    tmp = tmp_path_factory.mktemp("bitext")
    out = run([sys.executable, "recipes/prepare_bitext.py", "--name", "small", "--raw-dir", raw_corpus,
               "--src", "en", "--tgt", "de", "--bpe-merges", "300", "--workers", "1",
               "--work-dir", str(tmp / "work"), "--dest-dir", str(tmp / "bin")], timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return str(tmp / "bin" / "small")


LM_LINES = N_LINES  # lines of every split in lm_data


@pytest.fixture(scope="session")
def lm_data(raw_corpus, tmp_path_factory):
    """data-bin of raw_corpus's English side, with keywords and the AR bitext (the LM task's data,
    recipes/prepare_lm.py), built once per test run."""
    tmp = tmp_path_factory.mktemp("lm")
    out = run([sys.executable, "recipes/prepare_lm.py", "--name", "lm_small", "--raw-dir", raw_corpus, "--ext", "en",
               "--max-lines", str(LM_LINES), "--work-dir", str(tmp / "work"), "--dest-dir", str(tmp / "bin"),
               "--workers", "1"], timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "keywords per sentence" in out.stdout
    return str(tmp / "bin" / "lm_small")


# the LM task's command-line flags and a tiny insnet_lm
LM = ["--user-dir", "insnet_fairseq", "--task", "insertion_lm"]
TINY_LM = ["--arch", "insnet_lm_small", "--decoder-layers", "1", "--decoder-embed-dim", "64", "--decoder-ffn-embed-dim",
           "128", "--decoder-attention-heads", "2"]


def copy_data(lm_data, dest):
    """A copy of lm_data's dictionary and test split (with its keywords) in ``dest``, for tests that alter it."""
    os.makedirs(dest)
    for f in ("dict.txt", "test.bin", "test.idx", "test.keywords"):
        shutil.copy(os.path.join(lm_data, f), dest)
    return dest


def lm_task(data, **cfg):
    """InsertionLMTask over the data-bin ``data``, its config fields set by ``cfg``."""
    # the interpolations fairseq resolves from its other config groups, given here
    return InsertionLMTask.setup_task(InsertionLMConfig(data=str(data), seed=1, dataset_impl=None, train_subset="train",
                                                        required_seq_len_multiple=1, **cfg))


@pytest.fixture(scope="session")
def tiny_checkpoint(small_data, tmp_path_factory):
    """A tiny InsNet trained 30 updates on small_data: checkpoint_last.pt."""
    save = str(tmp_path_factory.mktemp("gen_ckpt"))
    out = run(train_cmd(small_data, save, "--max-update", "30"), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return os.path.join(save, "checkpoint_last.pt")


GAP = ["--slot-objective", "gap", "--layerization", "sampled"]  # InsNet parallel: the end-of-slot objective


@pytest.fixture(scope="session")
def gap_checkpoint(small_data, tmp_path_factory):
    """A tiny InsNet parallel (``GAP``) trained 30 updates on small_data: checkpoint_last.pt. Its training log names
    the objective's two terms."""
    save = str(tmp_path_factory.mktemp("gap_ckpt"))
    out = run(train_cmd(small_data, save, *GAP, "--max-update", "30"), timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"train_slot_token_nll"' in out.stdout and '"train_slot_done_nll"' in out.stdout
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
    """The tiny model's args; ``slot_query_stream="untied"`` stands for the slot query stream with its own layers
    (``--slot-query-stream --untied-slot-queries``) and ``"last1"`` for the stream through the last layer only
    (``--slot-query-stream --slot-query-layers 1``), so that a test parametrized over the stream covers each."""
    if overrides.get("slot_query_stream") == "untied":
        overrides.update(slot_query_stream=True, untied_slot_queries=True)
    if overrides.get("slot_query_stream") == "last1":
        overrides.update(slot_query_stream=True, slot_query_layers=1)
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


# ---------------------------------------------------------------- dependency trees and a tiny parsed corpus
def random_projective(n, rng):
    """A random projective tree over n words (heads, ROOT for the root): a random root per span, its dependents random
    sub-spans."""
    heads = [None] * n

    def build(lo, hi, parent):  # span [lo, hi) becomes one subtree under parent
        root = rng.randrange(lo, hi)
        heads[root] = parent
        for a, b in ((lo, root), (root + 1, hi)):
            cuts = sorted(rng.sample(range(a + 1, b), rng.randint(0, max(0, min(3, b - a - 1))))) if b - a > 1 else []
            for x, y in zip([a] + cuts, cuts + [b]):
                if y > x:
                    build(x, y, root)

    build(0, n, TREE_ROOT)
    return heads


DEP_RELS = ["root", "det", "nsubj", "dobj", "amod", "prep", "pobj", "punct"]
DEP_SENTENCES = ["a man in a red hat plays the guitar .", "two dogs run", "a woman is sitting on a bench near the park .",
                 "children play", "the boy jumps into the water", "people", "a man rides a bike down a long hill ."]


def deps_line(heads, rels):
    """A line of a .deps file: HEAD:REL per word, heads 1-based (0: the root)."""
    return " ".join(f"{h + 1}:{r}" for h, r in zip(heads, rels))


def write_dependency_corpus(tmp_path, sentences, seed=0):
    """A data dir with dict.txt, train/valid/test .bin/.idx and random projective parses (.deps) of the sentences."""
    from fairseq.data import indexed_dataset

    rng = random.Random(seed)
    data = tmp_path / "bin"
    data.mkdir()
    d = Dictionary()
    for s in sentences:
        for w in s.split():
            d.add_symbol(w)
    d.finalize(padding_factor=1)
    d.save(str(data / "dict.txt"))
    for split in ("train", "valid", "test"):
        builder = indexed_dataset.make_builder(str(data / f"{split}.bin"), impl="mmap", vocab_size=len(d))
        lines = []
        for s in sentences:
            builder.add_item(d.encode_line(s, add_if_not_exist=False))
            heads = random_projective(len(s.split()), rng)
            lines.append(deps_line(heads, ["root" if h == TREE_ROOT else rng.choice(DEP_RELS[1:]) for h in heads]))
        builder.finalize(str(data / f"{split}.idx"))
        (data / f"{split}.deps").write_text("".join(x + "\n" for x in lines))
    return str(data)
