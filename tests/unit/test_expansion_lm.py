"""The iterative expansion LM: its data (level transitions), the vectorised expansion along gold trajectories,
the model (batched = one by one), the generator, nucleus sampling and the unconditional metrics. (fairseq-train and
fairseq-generate: tests/cli/test_expansion_lm_cli.py.)"""
import os
import random
import warnings

import pytest
import torch
from fairseq.data import Dictionary

from conftest import DEP_SENTENCES as SENTENCES, deps_line, write_dependency_corpus
from insnet_fairseq.data.dependency import ROOT as TREE_ROOT, binarize, expansion_iterations
from insnet_fairseq.data.expansion_dataset import ExpansionDataset, pattern_table, placeholder, sentence_trees
from insnet_fairseq.decoding.expansion_generator import ExpansionGenerator, expand
from insnet_fairseq.decoding.sampling import check_temperature, sample
from insnet_fairseq.errors import DataError

from test_dependency import FIG1_HEADS, FIG1_RELS, FIG1_WORDS

from recipes.evaluate_unconditional import self_bleu, shared_reference_bleu


@pytest.fixture
def corpus(tmp_path):
    return write_dependency_corpus(tmp_path, SENTENCES * 3)


def task_for(data):
    from insnet_fairseq.tasks.expansion_lm import ExpansionLMConfig, ExpansionLMTask

    return ExpansionLMTask.setup_task(ExpansionLMConfig(data=data, seed=1, dataset_impl=None))


def test_dataset_transitions_are_figure_2_binarised(tmp_path):
    d = Dictionary()
    for w in FIG1_WORDS:
        d.add_symbol(w)
    steps = expansion_iterations(FIG1_WORDS, binarize(FIG1_HEADS), FIG1_RELS)  # the reference, as words
    for r in FIG1_RELS:
        d.add_symbol(placeholder(r))
    (tmp_path / "x.deps").write_text(deps_line(FIG1_HEADS, FIG1_RELS) + "\n")
    trees = sentence_trees(str(tmp_path / "x.deps"), [6])
    exp = Dictionary()
    for p in trees[0][3]:
        exp.add_symbol(p)
    tokens = [torch.tensor([d.index(w) for w in FIG1_WORDS] + [d.eos()])]
    item = ExpansionDataset(tokens, trees, d, exp)[0]
    assert len(item["steps"]) == len(steps) == 3
    for (inp, head, tok, pat), ref in zip(item["steps"], steps):
        assert [d[i] for i in inp] == ref["input"] and list(head) == ref["head"]
        assert [d[i] if i != d.pad() else "[pad]" for i in tok] == ref["token"]
        assert [exp[i] if i != exp.pad() else "[pad]" for i in pat] == ref["expansion"]


def test_gold_expansion_reproduces_every_transition(corpus):
    """Driving :func:`expand` with the gold words and patterns of transition t gives transition t + 1's input and
    head positions, for a whole batch at once (sentences of different depths and widths)."""
    task = task_for(corpus)
    task.load_dataset("train")
    ds = task.datasets["train"]
    table = pattern_table(task.expansion_dictionary, task.target_dictionary)
    pad = task.target_dictionary.pad()
    items = [ds[i] for i in range(len(SENTENCES))]
    depth = max(len(it["steps"]) for it in items)

    def batch_of(t):
        rows = [it["steps"][min(t, len(it["steps"]) - 1)] for it in items]
        width = max(len(r[0]) for r in rows)
        out = [torch.full((len(rows), width), v, dtype=torch.long) for v in (pad, -2, pad, task.expansion_dictionary.pad())]
        for b, r in enumerate(rows):
            for k in range(4):
                out[k][b, : len(r[k])] = torch.as_tensor(r[k])
        return out

    for t in range(depth - 1):
        tokens, heads, words, pats = batch_of(t)
        is_ph = words.ne(pad)
        got_tokens, got_heads, got_ph = expand(tokens, heads, is_ph, words, pats, table, pad)
        nxt_tokens, nxt_heads, nxt_words, _ = batch_of(t + 1)
        for b, it in enumerate(items):
            if t + 1 >= len(it["steps"]):  # its last transition (repeated): the expansion is the whole sentence
                words = it["words"][:-1]
                assert torch.equal(got_tokens[b, : len(words)], words) and not got_ph[b].any()
                assert got_heads[b, : len(words)].eq(TREE_ROOT).sum() == 1
                continue
            n = int(nxt_tokens[b].ne(pad).sum())
            assert torch.equal(got_tokens[b, :n], nxt_tokens[b, :n]) and got_tokens[b, n:].eq(pad).all()
            assert torch.equal(got_heads[b, :n], nxt_heads[b, :n])
            assert torch.equal(got_ph[b, :n], nxt_words[b, :n].ne(pad))


def tiny_model(task, seed=0):
    import argparse

    from insnet_fairseq.models.expansion_lm import ExpansionLM

    torch.manual_seed(seed)
    args = argparse.Namespace(embed_dim=32, ffn_embed_dim=64, layers=2, attention_heads=2, dropout=0.0)
    return ExpansionLM.build_model(args, task).eval()


def test_model_batched_equals_one_by_one(corpus):
    task = task_for(corpus)
    task.load_dataset("valid")
    ds = task.datasets["valid"]
    batch = ds.collater([ds[i] for i in range(len(SENTENCES))])
    model = tiny_model(task)
    for bucket in batch["net_input"]["buckets"]:
        where = bucket["token_target"].ne(task.target_dictionary.pad())
        with torch.no_grad():
            out = model(bucket["tokens"], bucket["heads"], bucket["expansions"], where)
        row = 0
        for b in range(bucket["tokens"].size(0)):
            n = int(bucket["tokens"][b].ne(task.target_dictionary.pad()).sum())
            one = {k: bucket[k][b : b + 1, :n] for k in ("tokens", "heads", "expansions")}
            w = where[b : b + 1, :n]
            with torch.no_grad():
                alone = model(one["tokens"], one["heads"], one["expansions"], w)
            k = int(w.sum())
            torch.testing.assert_close(out["token"][row : row + k], alone["token"], atol=1e-5, rtol=0)
            torch.testing.assert_close(out["expansion"][row : row + k], alone["expansion"], atol=1e-5, rtol=0)
            row += k


def test_loss_counts_every_word_once_and_trains(corpus):
    from insnet_fairseq.tasks.expansion_lm import ExpansionLMLoss

    task = task_for(corpus)
    task.load_dataset("train")
    ds = task.datasets["train"]
    batch = ds.collater([ds[i] for i in range(len(SENTENCES))])
    assert batch["ntokens"] == sum(len(s.split()) for s in SENTENCES)
    model = tiny_model(task).train()
    crit = ExpansionLMLoss(task)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss, size, log = crit(model, batch)
        opt.zero_grad()
        (loss / size).backward()
        opt.step()
        losses.append(float(loss) / size)
    assert size == batch["ntokens"] and losses[-1] < 0.5 * losses[0]


def test_generator_writes_sentences(corpus):
    task = task_for(corpus)
    model = tiny_model(task)
    sample = {"target": torch.zeros(5, 3, dtype=torch.long), "nsentences": 5}
    for sampling, topp in ((False, -1.0), (True, 0.9)):
        gen = ExpansionGenerator(task.target_dictionary, pattern_table(task.expansion_dictionary, task.target_dictionary),
                                 task.root, sampling=sampling, top_p=topp, max_iterations=6, max_length=40)
        hypos = gen.generate([model], sample)
        assert len(hypos) == 5
        for h in hypos:
            toks = h[0]["tokens"]
            assert toks[-1] == task.target_dictionary.eos() and 1 <= h[0]["steps"] <= 6
            assert not any(int(t) in task.placeholder_ids for t in toks)  # placeholders are never output
            assert len(h[0]["positional_scores"]) == len(toks) and torch.isfinite(h[0]["positional_scores"]).all()
    # greedy decoding is deterministic and the same for every sentence (nothing conditions it)
    gen = ExpansionGenerator(task.target_dictionary, pattern_table(task.expansion_dictionary, task.target_dictionary),
                             task.root, max_iterations=6, max_length=40)
    a, b = gen.generate([model], sample), gen.generate([model], sample)
    assert all(torch.equal(x[0]["tokens"], y[0]["tokens"]) for x, y in zip(a, b))
    assert all(torch.equal(x[0]["tokens"], a[0][0]["tokens"]) for x in a)


def test_sampling_rules():
    lp = torch.tensor([[0.5, 0.3, 0.2]]).log().expand(2000, 3)
    g = torch.Generator().manual_seed(0)
    nucleus = sample(lp, topp=0.7, generator=g)
    assert set(nucleus.tolist()) == {0, 1}  # 0.5 < 0.7 keeps the second; 0.8 >= 0.7 cuts the third
    assert abs((nucleus == 0).float().mean().item() - 0.5 / 0.8) < 0.05
    assert set(sample(lp, topk=1, generator=g).tolist()) == {0}
    assert set(sample(lp, generator=g).tolist()) == {0, 1, 2}


def test_temperature_rescales_the_sampled_distribution():
    """--temperature T samples from softmax(log p / T), before the top-k cut; T = 1 draws exactly as before."""
    lp = torch.tensor([[0.5, 0.3, 0.2]]).log().expand(4000, 3)
    sharp = torch.tensor([0.5, 0.3, 0.2]) ** 2 / (0.5 ** 2 + 0.3 ** 2 + 0.2 ** 2)  # T = 0.5: [0.66, 0.24, 0.11]
    draws = sample(lp, temperature=0.5, generator=torch.Generator().manual_seed(1))
    freq = torch.bincount(draws, minlength=3).float() / len(draws)
    assert torch.allclose(freq, sharp, atol=0.03), freq
    top2 = sample(lp, topk=2, temperature=0.5, generator=torch.Generator().manual_seed(2))
    assert set(top2.tolist()) == {0, 1}
    assert abs((top2 == 0).float().mean().item() - sharp[0] / (sharp[0] + sharp[1])) < 0.03
    flat = sample(lp, temperature=4.0, generator=torch.Generator().manual_seed(3))
    assert (flat == 2).float().mean().item() > 0.27  # 0.2 ** 0.25 / sum: 0.29
    same = [sample(lp, topp=0.9, generator=torch.Generator().manual_seed(4), **kw) for kw in ({}, {"temperature": 1.0})]
    assert torch.equal(*same)
    for bad, sampling, message in ((0.0, True, r"--temperature must be > 0"),
                                   (0.7, False, r"--temperature 0.7 shapes --sampling only")):
        with pytest.raises(ValueError, match=message):
            check_temperature(bad, sampling)


def test_unconditional_bleu_matches_nltk():
    from nltk.translate.bleu_score import corpus_bleu

    rng = random.Random(0)
    vocab = "a b c d e f".split()
    for _ in range(30):
        hyps = [[rng.choice(vocab) for _ in range(rng.randint(1, 9))] for _ in range(rng.randint(2, 8))]
        refs = [[rng.choice(vocab) for _ in range(rng.randint(1, 9))] for _ in range(rng.randint(1, 8))]
        for order in (2, 3):
            w = (1 / order,) * order
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                shared = 100 * corpus_bleu([refs] * len(hyps), hyps, weights=w)
                others = 100 * corpus_bleu([hyps[:i] + hyps[i + 1 :] for i in range(len(hyps))], hyps, weights=w)
            assert shared_reference_bleu(hyps, refs, order) == pytest.approx(shared, abs=1e-9)
            assert self_bleu(hyps, order) == pytest.approx(others, abs=1e-9)


def test_bad_data_is_named(corpus):
    os.remove(os.path.join(corpus, "valid.deps"))
    task = task_for(corpus)
    with pytest.raises(DataError, match=r"valid.deps not found: the expansion LM trains along"):
        task.load_dataset("valid")
    with open(os.path.join(corpus, "valid.deps"), "w") as f:
        f.write("1:root\n")
    with pytest.raises(DataError, match=r"valid.deps: 1 parses, but the split holds 21 sentences"):
        task.load_dataset("valid")
