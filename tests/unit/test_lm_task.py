"""Task ``insertion_lm`` (paper section 4.1): the keyword rule and data recipe (recipes/prepare_lm.py),
keyword preservation in every decoding mode on 100 random keyword sets, one-pass exactness of the
source-free model, training batches of every layering on lm_data (the generated corpus's English side), and
one-line errors for bad keyword files and mismatched checkpoints. (fairseq-train / -generate / -interactive and
recipes/evaluate_lm.py: tests/cli/test_lm_task_cli.py.)"""
import os
import shutil

import pytest
import torch

from conftest import (FakeLMTask, FakeTask, build_tiny_lm_model, make_dictionary, random_batch, step_logprobs,
                      tiny_args)
from fairseq import models as fairseq_models
from insnet_fairseq.errors import CheckpointError, DataError
from insnet_fairseq.tasks.checkpoint_checks import check_model_fits_task
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.geometry.layers import sequential_layers, trajectory, uniform_layers
from insnet_fairseq.models.insnet import InsNetLMModel
from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.reference import naive_layered_logprobs, naive_trajectory_logprobs

from recipes import evaluate_lm, prepare_lm

from conftest import LM_LINES as N  # noqa: E402
from conftest import copy_data, lm_task  # noqa: E402


def in_order(keywords, words) -> bool:
    """``keywords`` occur in ``words`` in their order (a subsequence)."""
    return evaluate_lm.lcs(keywords, words) == len(keywords)


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


# ---------------------------------------------------------------------------------------- the keyword rule
def test_keyword_rule():
    yake = prepare_lm.keyword_extractor("en")
    sentence = "a boston terrier is running on lush green grass in front of a white fence .".split()
    vocab = set(sentence)
    # YAKE ranks fence, then boston, terrier, running (ties in text order); written in sentence order
    assert prepare_lm.sentence_keywords(sentence, yake, vocab) == ["boston", "terrier", "running", "fence"]
    assert prepare_lm.sentence_keywords(sentence, yake, vocab - {"boston"}) == ["terrier", "running", "lush", "fence"]
    assert prepare_lm.sentence_keywords(sentence, yake, vocab, max_keywords=2) == ["boston", "fence"]
    # YAKE finds nothing (stopwords only): the longest dictionary word with a letter or digit
    assert prepare_lm.sentence_keywords("the the .".split(), yake, {"the", "."}) == ["the"]
    assert prepare_lm.sentence_keywords(". ,".split(), yake, {".", ","}) == ["."]
    assert prepare_lm.sentence_keywords("the .".split(), yake, set()) == []
    # case-insensitive match, the sentence's spelling kept; every keyword once
    assert prepare_lm.sentence_keywords("two Dogs and two dogs play .".split(), yake, {"Dogs", "dogs", "play"}) == \
        ["Dogs", "play"]


def test_prepared_data_and_keyword_files(lm_data):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    vocab = prepare_lm.read_vocab(os.path.join(lm_data, "dict.txt"))
    assert len(lines(f"{lm_data}/train.keywords")) == len(MMapIndexedDataset(f"{lm_data}/train")) == N
    for split in ("valid", "test"):
        keywords, refs = lines(f"{lm_data}/{split}.keywords"), lines(f"{lm_data}/{split}.ref")
        assert len(keywords) == len(refs) == len(MMapIndexedDataset(f"{lm_data}/{split}")) == N
        for kw, ref in zip(keywords, refs):
            kw, ref = kw.split(), ref.split()
            assert 1 <= len(kw) <= 4 and all(w in vocab for w in kw)
            first = [ref.index(w) for w in kw]
            assert first == sorted(first) and len(set(kw)) == len(kw)  # sentence order, each once
        assert all(r == r.lower() for r in refs)
    ar = lm_data + "-ar"
    for split in ("train", "valid", "test"):
        assert len(MMapIndexedDataset(f"{ar}/{split}.kw-sent.kw")) == len(MMapIndexedDataset(f"{ar}/{split}.kw-sent.sent")) == N
    assert lines(f"{ar}/test.keywords") == lines(f"{lm_data}/test.keywords")


# ---------------------------------------------------------------------------------------- decoding keeps the keywords
def keyword_batch(d, sets):
    """Source side of an insertion_lm batch: keywords + </s>, left-padded."""
    width = max(len(s) for s in sets) + 1
    src = torch.full((len(sets), width), d.pad(), dtype=torch.long)
    for b, s in enumerate(sets):
        src[b, width - len(s) - 1 :] = torch.tensor(s + [d.eos()])
    return {"id": torch.arange(len(sets)), "net_input": {"src_tokens": src,
                                                         "src_lengths": torch.tensor([len(s) + 1 for s in sets])}}


@pytest.mark.parametrize("mode,sampling,skip_repeats", [("sequential", False, False), ("parallel", False, False),
                                                        ("parallel", True, False), ("sequential", True, False),
                                                        ("parallel", False, True)])
def test_keywords_kept_in_order_on_100_random_sets(mode, sampling, skip_repeats):
    model, d = build_tiny_lm_model(seed=5, vocab=30, slot_query_stream=mode == "parallel")
    with torch.no_grad():
        model.decoder.heads.termination_proj.bias.fill_(-30.0)  # never stops: every sentence runs to its cap
    g = torch.Generator().manual_seed(11)
    sets = [torch.randint(d.nspecial, len(d), (int(torch.randint(1, 5, (1,), generator=g)),), generator=g).tolist()
            for _ in range(100)]
    torch.manual_seed(0)
    gen = InsertionGenerator(d, DecodingOptions(mode=mode, max_steps=5, length_cap=(0.0, 30), sampling=sampling,
                             sampling_topk=3, retain_history=True, skip_repeats=skip_repeats, conditional=False,
                             keywords_from_source=True))
    hyps = gen.generate([model], keyword_batch(d, sets))
    assert len(hyps) == 100  # one output per keyword set, in order
    for kw, (hyp,) in zip(sets, hyps):
        out = hyp["tokens"][:-1].tolist()
        assert hyp["tokens"][-1] == d.eos() and len(out) > len(kw) and 1 <= hyp["steps"] <= 5
        assert in_order(kw, out), (kw, out)
        history = [h["tokens"][:-1].tolist() for h in hyp["history"]]
        assert history[0] == kw  # the start is exactly the keywords
        for before, after in zip(history, history[1:]):  # every step only inserts: nothing deleted or reordered
            assert len(after) > len(before) and in_order(before, after)


# ---------------------------------------------------------------------------------------- the source-free model
@pytest.mark.parametrize("slot_query", [False, True])
def test_lm_model_one_pass_and_layered_exactness(slot_query):
    model, d = build_tiny_lm_model(seed=2, slot_query_stream=slot_query, decoder_normalize_before=True)
    assert not any("cross_attn" in name or "encoder" in name for name, _ in model.named_parameters())
    lengths = [9, 3, 12, 6]
    src, src_lengths, target = random_batch(d, lengths, seed=3)
    n_tok = target.ne(d.pad()).sum(1)
    order = make_order("binary", n_tok, target.size(1))
    with torch.no_grad():
        out = model(src, src_lengths, target, order)
        other_source = model(src.flip(0), src_lengths.flip(0), target, order)  # the source is never read
    torch.testing.assert_close(out["token"]["logits"], other_source["token"]["logits"], atol=0, rtol=0)
    tok_lp, pos_lp, term_lp = step_logprobs(out)
    naive = naive_trajectory_logprobs(model, src, src_lengths, target, order)
    for b in range(len(lengths)):
        m = out["position"]["mask"][b]
        torch.testing.assert_close(tok_lp[b][m], torch.tensor(naive[b]["token"]), atol=1e-5, rtol=0)
        torch.testing.assert_close(pos_lp[b][m], torch.tensor(naive[b]["position"]), atol=1e-5, rtol=0)
        torch.testing.assert_close(term_lp[b][out["termination"]["mask"][b]], torch.tensor(naive[b]["termination"]),
                                   atol=1e-5, rtol=0)
    layers = uniform_layers(n_tok, target.size(1))
    order_l, context = trajectory(layers)
    with torch.no_grad():
        out = model(src, src_lengths, target, order_l, context=context)
    tok_lp, pos_lp, _ = step_logprobs(out)
    naive = naive_layered_logprobs(model, src, src_lengths, target, layers)
    for b in range(len(lengths)):
        m = out["position"]["mask"][b]
        torch.testing.assert_close(tok_lp[b][m], torch.tensor(naive[b]["token"]), atol=1e-5, rtol=0)
        torch.testing.assert_close(pos_lp[b][m], torch.tensor(naive[b]["position"]), atol=1e-5, rtol=0)


def test_models_and_tasks_do_not_mix(tmp_path):
    d = make_dictionary(20)
    lm_state = {"cfg": {"model": {"arch": "insnet_lm_small"}, "task": {"_name": "insertion_lm"}}}
    mt_state = {"cfg": {"model": {"arch": "insnet_small"}, "task": {"_name": "insertion_translation"}}}
    lm_task = FakeLMTask(d)
    with pytest.raises(CheckpointError, match="is an InsNet language model .* only the task insertion_lm"):
        check_model_fits_task("lm.pt", lm_state, FakeTask(d, d))
    with pytest.raises(CheckpointError, match="is an InsNet translation model .* --task insertion_translation"):
        check_model_fits_task("mt.pt", mt_state, lm_task)
    check_model_fits_task("lm.pt", lm_state, lm_task)
    check_model_fits_task("mt.pt", mt_state, FakeTask(d, d))
    with pytest.raises(ValueError, match="only the task insertion_lm"):  # fairseq builds every model through it
        fairseq_models.build_model(tiny_args(arch="insnet_lm_small"), FakeTask(d, d))
    with pytest.raises(ValueError, match="insnet_lm_"):
        fairseq_models.build_model(tiny_args(arch="insnet_small"), lm_task)


# ---------------------------------------------------------------------------------------- bad data: one line each
def test_keywords_order_needs_the_training_keywords_and_the_lm_task(lm_data, tmp_path):
    data = copy_data(lm_data, str(tmp_path / "bin"))
    for f in ("train.bin", "train.idx"):
        shutil.copy(os.path.join(lm_data, f), data)
    with pytest.raises(DataError, match=r"train.keywords not found: --insertion-order keywords"):
        lm_task(data, insertion_order="keywords").load_dataset("train")
    lm_task(data).load_dataset("train")  # other orders train without them
    with pytest.raises(ValueError, match="--no-keywords generates without them"):
        lm_task(data, insertion_order="keywords", no_keywords=True)
    from insnet_fairseq.tasks.translation import InsertionTranslationConfig, InsertionTranslationTask

    d = make_dictionary(10)
    with pytest.raises(ValueError, match="use it with --task insertion_lm"):
        InsertionTranslationTask(InsertionTranslationConfig(insertion_order="keywords"), d, d)


def test_bad_keyword_files_are_named(lm_data, tmp_path):
    data = copy_data(lm_data, str(tmp_path / "bin"))
    path = os.path.join(data, "test.keywords")
    keywords = lines(path)
    task = lm_task(data)
    task.load_dataset("test")
    item = task.datasets["test"][7]
    assert item["source"].tolist() == [task.dictionary.index(w) for w in keywords[7].split()] + [task.dictionary.eos()]
    task.check_keywords()
    with open(path, "w") as f:
        f.write("".join(k + "\n" for k in keywords[:-1]))
    with pytest.raises(DataError, match=f"{path}: 299 lines of keywords, but .*test.bin holds 300 sentences"):
        lm_task(data).load_dataset("test")
    with open(path, "w") as f:
        f.write("".join((k if i != 4 else k + " zzzqqq") + "\n" for i, k in enumerate(keywords)))
    with pytest.raises(DataError, match=f"{path}:5: keyword 'zzzqqq' is not a word of the dictionary"):
        lm_task(data).load_dataset("test")
    os.remove(path)
    task = lm_task(data)
    task.load_dataset("test")
    with pytest.raises(DataError, match=f"{path} not found: .* or pass --no-keywords"):
        task.check_keywords()
    task = lm_task(data, no_keywords=True)
    task.load_dataset("test")
    task.check_keywords()
    os.remove(os.path.join(data, "dict.txt"))
    with pytest.raises(DataError, match="dict.txt not found"):
        lm_task(data)


class Backward:  # the part of fairseq's optimizer wrapper that train_step uses
    def backward(self, loss):
        loss.backward()


def tiny_lm_model(task):
    torch.manual_seed(0)
    return InsNetLMModel.build_model(tiny_args(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=1), task)


@pytest.mark.parametrize("training", [dict(), dict(dinic_tau=1.0, insertion_order="binary"),
                                      dict(layerization="uniform", insertion_order="random"),
                                      dict(insertion_order="keywords"),
                                      dict(layerization="uniform", insertion_order="keywords")])
def test_sequential_dinic_and_uniform_training_batches(lm_data, tmp_path, training):
    from insnet_fairseq.tasks.criterion import InsNetLoss

    task = lm_task(copy_data(lm_data, str(tmp_path / "bin")), **training)
    task.load_dataset("test")
    dataset = task.datasets["test"]
    sample = dataset.collater([dataset[i] for i in range(16)])
    model = tiny_lm_model(task)
    if training.get("insertion_order") == "keywords":  # the keywords come first, in sentence order
        keywords = [lines(f"{lm_data}/test.keywords")[int(i)].split() for i in sample["id"]]
        target, order = sample["net_input"]["target"], sample["net_input"]["order"]
        for b, kw in enumerate(keywords):
            first = target[b, order[b, 2 : 2 + len(kw)]].tolist()
            assert [task.dictionary[t] for t in first] == kw
    loss, size, log = task.train_step(sample, model, InsNetLoss(task), Backward(), 0)
    words = int(sample["ntokens"])
    assert size == words and torch.isfinite(loss)
    if "layerization" in training or "dinic_tau" in training:  # layered: fewer parallel steps than words
        assert 16 <= int(log["layers"]) < words
    else:
        assert "layers" not in log


def lagged_lm_task(lm_data, tmp_path, **flags):
    """A --dinic-tau 1 --dinic-lagged LM task on the binary order (and ``flags``), a tiny model in training mode,
    and a maker of the same 16-sentence test batch: (task, model, sample)."""
    task = lm_task(copy_data(lm_data, str(tmp_path / "bin")), dinic_tau=1.0, insertion_order="binary",
                   dinic_lagged=True, **flags)
    task.load_dataset("test")
    dataset = task.datasets["test"]
    model = tiny_lm_model(task)
    model.train()
    return task, model, lambda: dataset.collater([dataset[i] for i in range(16)])


def test_lagged_dinic_trains_on_the_stored_layering_and_promotes_from_its_pass(lm_data, tmp_path):
    """--dinic-lagged: a training batch trains on its sentences' stored layerings (sequential the first time)
    with no layering pass, and stores the layering one promotion round further, computed from that pass:
    the store after v visits is layerize(max_rounds=v) (same weights, dropout 0); validation still
    layers to the fixpoint."""
    from insnet_fairseq.geometry.layers import num_layers, sequential_layers
    from insnet_fairseq.training.layerization import layerize
    from insnet_fairseq.tasks.criterion import InsNetLoss

    task, model, sample = lagged_lm_task(lm_data, tmp_path)
    ni = sample()["net_input"]
    lengths = ni["target"].ne(task.dictionary.pad()).sum(1)
    args = (model, ni["src_tokens"], ni["src_lengths"], ni["target"], ni["order"], 1.0)
    for visit in (1, 2, 3):
        batch = sample()
        trained_on = sequential_layers(ni["order"], lengths) if visit == 1 else layerize(*args, max_rounds=visit - 1)[0]
        _, _, log = task.train_step(batch, model, InsNetLoss(task), Backward(), visit)
        assert int(log["layers"]) == int(num_layers(trained_on).sum())  # the stored layering, no layering pass
        stored, known = task._stored_layers("train", batch["id"], lengths, ni["target"].size(1))
        assert bool(known.all()) and torch.equal(stored, layerize(*args, max_rounds=visit)[0])
        assert model.training
    assert int(num_layers(stored).sum()) < int(num_layers(sequential_layers(ni["order"], lengths)).sum())
    valid = sample()
    task.layer_batch(valid, model)  # validation: to the fixpoint, in its own store
    assert int(valid["layers"].sum()) == int(num_layers(layerize(*args)[0]).sum())
    with pytest.raises(ValueError, match="--dinic-lagged promotes tokens of InsNet-Dinic layerings"):
        lm_task(copy_data(lm_data, str(tmp_path / "bin2")), layerization="uniform", dinic_lagged=True)


def test_lagged_dinic_with_late_words_promotes_the_stored_layering_but_the_moved_words(lm_data, tmp_path):
    """--dinic-lagged --late-words: the pass encodes the stored layering with late words moved
    (``sample["encoded_layers"]``); the store becomes the stored layering one promotion round further for every
    word but the moved ones, which stay (same weights, dropout 0)."""
    from insnet_fairseq.geometry.layers import compact, num_layers
    from insnet_fairseq.training.layerization import promotions
    from insnet_fairseq.tasks.criterion import InsNetLoss

    task, model, sample = lagged_lm_task(lm_data, tmp_path, late_words=0.5)
    moved_any = False
    for visit in (1, 2, 3):
        batch = sample()
        ni = batch["net_input"]
        lengths = ni["target"].ne(task.dictionary.pad()).sum(1)
        before, _ = task._stored_layers("train", batch["id"], lengths, ni["target"].size(1))
        _, _, log = task.train_step(batch, model, InsNetLoss(task), Backward(), visit)
        after, _ = task._stored_layers("train", batch["id"], lengths, ni["target"].size(1))
        if visit == 1:
            continue  # the first visit trains on the sequential layering: one word per layer, none to move
        encoded = batch["encoded_layers"]
        kept = encoded.eq(before)
        moved_any |= not bool(kept.all())
        model.eval()
        with torch.no_grad():
            source_kv, source_pad = model.decoder.encode_source(model.encoder(ni["src_tokens"],
                                                                              src_lengths=ni["src_lengths"]))
            up = promotions(model.decoder, ni["target"], before, source_kv, source_pad, 1.0)
        model.train()
        assert torch.equal(after, compact(before - (up & kept).long()))
        assert int(log["layers"]) == int(num_layers(encoded).sum())
    assert moved_any


@pytest.mark.parametrize("max_rounds", [0, 2])
def test_warm_lagged_dinic_lays_out_a_first_visit_then_promotes_from_the_pass(lm_data, tmp_path, max_rounds):
    """--dinic-lagged-warm: a sentence's first visit trains on the layering pass's layering (to the fixpoint, or
    --dinic-max-rounds rounds), not the sequential one, and stores it one lagged round further; later visits
    are lagged (no layering pass); a batch where some sentences were seen lays out only the others."""
    from insnet_fairseq.geometry.layers import num_layers
    from insnet_fairseq.training.layerization import layerize
    from insnet_fairseq.tasks.criterion import InsNetLoss

    task = lm_task(copy_data(lm_data, str(tmp_path / "bin")), dinic_tau=1.0, insertion_order="binary",
                   dinic_lagged=True, dinic_lagged_warm=True, dinic_max_rounds=max_rounds)
    task.load_dataset("test")
    dataset = task.datasets["test"]
    model = tiny_lm_model(task)
    model.train()
    sample = lambda ids: dataset.collater([dataset[i] for i in ids])  # noqa: E731
    batch = sample(range(16))  # the collater sorts the sentences: rows [:8] are the half seen first
    ni = batch["net_input"]
    lengths = ni["target"].ne(task.dictionary.pad()).sum(1)
    args = (model, ni["src_tokens"], ni["src_lengths"], ni["target"], ni["order"], 1.0)
    rounds = lambda r: layerize(*args, max_rounds=r)[0]  # noqa: E731 (r 0: the fixpoint)
    first = rounds(max_rounds)
    assert int(num_layers(first).sum()) < int(lengths.sum())  # not the sequential layering
    _, _, log = task.train_step(sample(batch["id"][:8].tolist()), model, InsNetLoss(task), Backward(), 1)
    assert int(log["layers"]) == int(num_layers(first[:8]).sum())
    _, _, log = task.train_step(sample(range(16)), model, InsNetLoss(task), Backward(), 2)
    later = lambda visits: rounds(max_rounds + visits if max_rounds else 0)  # noqa: E731 (lagged rounds after it)
    assert int(log["layers"]) == int(num_layers(later(1)[:8]).sum()) + int(num_layers(first[8:]).sum())
    stored, known = task._stored_layers("train", batch["id"], lengths, ni["target"].size(1))
    assert bool(known.all())
    assert torch.equal(stored[:8], later(2)[:8]) and torch.equal(stored[8:], later(1)[8:])
    with pytest.raises(ValueError, match="--dinic-lagged-warm .* use it with --dinic-lagged"):
        lm_task(copy_data(lm_data, str(tmp_path / "bin2")), dinic_tau=1.0, dinic_lagged_warm=True)


def test_validation_layerings_are_kept_per_sentence(lm_data, tmp_path, monkeypatch):
    """InsNet-Dinic validation continues from each sentence's last layering (one round when the model
    has not changed) and never from a layering stored for a sentence of another length."""
    import insnet_fairseq.tasks.base as task_module

    calls = []
    real = task_module.layerize

    def spy(*args, **kwargs):
        layers, rounds = real(*args, **kwargs)
        calls.append((kwargs.get("start"), rounds, layers.clone()))
        return layers, rounds

    monkeypatch.setattr(task_module, "layerize", spy)
    task = lm_task(copy_data(lm_data, str(tmp_path / "bin")), dinic_tau=1.0, insertion_order="binary")
    task.load_dataset("test")
    dataset = task.datasets["test"]
    torch.manual_seed(0)
    model = InsNetLMModel.build_model(tiny_args(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=1),
                                      task)
    sample = lambda: dataset.collater([dataset[i] for i in range(16)])  # noqa: E731
    first, second = sample(), sample()
    task.layer_batch(first, model)
    task.layer_batch(second, model)
    (start0, rounds0, layers0), (start1, rounds1, layers1) = calls
    assert start0 is None and rounds0 > 1
    assert torch.equal(start1, layers0) and rounds1 == 1 and torch.equal(layers1, layers0)
    assert torch.equal(first["net_input"]["context"], second["net_input"]["context"])
    assert "valid" in task.layer_stores and "train" not in task.layer_stores
    # a stored layering of another length is not a start: that sentence starts sequential again
    ids = second["id"]
    task.layer_stores["valid"][ids[0], :] = 0
    third = sample()
    order = third["net_input"]["order"].clone()  # layer_batch replaces it by the layered trajectory
    task.layer_batch(third, model)
    start2 = calls[-1][0]
    lengths = third["net_input"]["target"].ne(task.tgt_dict.pad()).sum(1)
    assert torch.equal(start2[0], sequential_layers(order[:1], lengths[:1])[0])
    assert torch.equal(start2[1:], layers0[1:])


# ---------------------------------------------------------------------------------------- the generator's flags
def test_generator_reads_the_sampling_flags(lm_data, tmp_path):
    """insertion_lm and insertion_translation build the generator from the same options: --sampling-topk and
    --sampling-topp reach it (a nucleus flag that the LM task dropped sampled from the full distribution)."""
    import argparse

    task = lm_task(copy_data(lm_data, str(tmp_path / "bin")), no_keywords=True)
    gen = task.build_generator([tiny_lm_model(task)], argparse.Namespace(sampling=True, sampling_topp=0.7,
                                                                         sampling_topk=-1))
    assert gen.options.sampling and gen.options.sampling_topp == 0.7 and gen.options.sampling_topk == -1
    gen = task.build_generator([tiny_lm_model(task)], argparse.Namespace(sampling=True, sampling_topk=3))
    assert gen.options.sampling_topk == 3 and gen.options.sampling_topp == -1.0 and gen.options.temperature == 1.0
    gen = task.build_generator([tiny_lm_model(task)], argparse.Namespace(sampling=True, sampling_topk=3,
                                                                         temperature=0.5))
    assert gen.options.temperature == 0.5  # fairseq's --temperature reaches the sampler (it was ignored)
    with pytest.raises(ValueError, match=r"--temperature 0.5 shapes --sampling only"):
        task.build_generator([tiny_lm_model(task)], argparse.Namespace(temperature=0.5))
    verifying = lm_task(copy_data(lm_data, str(tmp_path / "bin2")), no_keywords=True, insertion_verify=True)
    with pytest.raises(ValueError, match=r"--insertion-verify .* applies to --task insertion_translation"):
        verifying.build_generator([tiny_lm_model(verifying)], argparse.Namespace())
