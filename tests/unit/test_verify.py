"""InsNet drafts verified by an autoregressive model (--insertion-verify, decoding/verify.py): at tolerance 0 the output
is the autoregressive model's greedy output (fairseq's SequenceGenerator at beam 1), whatever the drafter; batched
equals one by one; the steps are the drafting steps plus the verification passes; misuse is refused with the flag
named."""
import pytest
import torch

from fairseq.sequence_generator import SequenceGenerator

from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.verify import accepted_lengths, next_canvas

from conftest import build_tiny_lm_model, sample_of


@pytest.fixture(scope="module")
def models_and_batch(insnet_and_ar):
    model, ar, d, src, _ = insnet_and_ar
    src = src.clone()
    src[1, :3] = d.pad()  # left padding: shorter sources
    src[4, :5] = d.pad()
    return model, ar, d, src, src.ne(d.pad()).sum(1)


def greedy(ar, d, src, src_lengths, max_len_b):
    """fairseq's greedy decoding of the autoregressive model: each sentence's tokens (ending with </s>)."""
    gen = SequenceGenerator([ar], d, beam_size=1, max_len_a=0, max_len_b=max_len_b)
    return [h[0]["tokens"].tolist() for h in gen.generate([ar], sample_of(src, src_lengths))]


def test_accepted_lengths_and_next_canvas_examples():
    V, pad, eos = 6, 1, 2
    lp = torch.full((1, 3, V), -5.0)
    lp[0, 0, 3] = lp[0, 1, 5] = lp[0, 2, eos] = -0.1  # greedy: 3 5 </s>
    lp[0, 1, 4] = -0.5  # the draft's word at position 1 is 0.4 nats behind
    draft = torch.tensor([[3, 4, eos]])
    acc, word, word_lp, draft_lp = accepted_lengths(lp, draft, torch.tensor([10]), 0.0, pad, eos)
    assert acc.tolist() == [1] and word.tolist() == [5] and word_lp.tolist() == pytest.approx([-0.1])
    assert draft_lp[0].tolist() == pytest.approx([-0.1, -0.5, -0.1])
    assert accepted_lengths(lp, draft, torch.tensor([10]), 0.5, pad, eos)[0].tolist() == [3]  # within 0.5 nats
    assert accepted_lengths(lp, draft, torch.tensor([10]), 0.3, pad, eos)[0].tolist() == [1]
    acc, word, _, _ = accepted_lengths(lp, torch.tensor([[3, 5, eos]]), torch.tensor([1]), 0.0, pad, eos)
    assert acc.tolist() == [1] and word.tolist() == [eos]  # the length limit forces </s> at position 1
    lp[0, 0, eos] = 0.0  # </s> is never the first word
    assert accepted_lengths(lp, draft, torch.tensor([10]), 0.0, pad, eos)[:2] == (torch.tensor([1]), torch.tensor([5]))
    assert next_canvas([7, 8, 9, 10, eos], 1, 11) == [7, 11, 9, 10]  # a substitution
    assert next_canvas([7, 8, 9, 10, eos], 1, 9) == [7, 9, 10]  # the draft's word 8 was extra
    assert next_canvas([7, eos], 1, 9) == [7, 9]


@pytest.mark.parametrize("mode,max_len_b", [("parallel", 12), ("sequential", 30), ("parallel", 30)])
def test_the_output_is_fairseqs_greedy_output_batched_and_alone(models_and_batch, mode, max_len_b):
    """Tolerance 0: every sentence's output is the AR model's greedy output, whatever the drafts (random models
    disagree often: several rounds), with the length limit of fairseq's --max-len-b; batched equals alone; the
    steps are the drafting steps plus the passes, one pass per round."""
    model, ar, d, src, src_lengths = models_and_batch
    gen = InsertionGenerator(d, DecodingOptions(mode=mode, slot_top_p=0.9, max_steps=25, verify=True, verify_max_len=(0.0, max_len_b)))
    out = [h[0] for h in gen.generate([model, ar], sample_of(src, src_lengths))]
    ref = greedy(ar, d, src, src_lengths, max_len_b)
    assert [h["tokens"].tolist() for h in out] == ref
    assert all(h["steps"] == h["draft_steps"] + h["verify_passes"] and h["verify_passes"] >= 1 for h in out)
    assert max(h["verify_passes"] for h in out) > 1  # drafts were corrected: the rounds are exercised
    for b in range(len(src)):
        keep = src[b].ne(d.pad())
        alone = gen.generate([model, ar], sample_of(src[b : b + 1, keep], src_lengths[b : b + 1]))[0][0]
        assert alone["tokens"].tolist() == out[b]["tokens"].tolist() and alone["steps"] == out[b]["steps"]
        torch.testing.assert_close(alone["positional_scores"], out[b]["positional_scores"], atol=1e-5, rtol=0)


def test_a_large_tolerance_accepts_the_first_draft_in_one_pass(models_and_batch):
    """With a tolerance of 1e9 nats any draft word is accepted (the greedy rules aside): the output is the drafter's
    own output, in one pass, wherever that output is not empty and within the length limit."""
    model, ar, d, src, src_lengths = models_and_batch
    kw = dict(mode="parallel", slot_top_p=0.9, max_steps=25)
    plain = [h[0] for h in InsertionGenerator(d, DecodingOptions(**kw)).generate([model], sample_of(src, src_lengths))]
    out = [h[0] for h in InsertionGenerator(d, DecodingOptions(verify=True, verify_tolerance=1e9, **kw)).generate(
        [model, ar], sample_of(src, src_lengths))]
    checked = 0
    for p, o in zip(plain, out):
        if 1 < len(p["tokens"]) <= 200:
            assert o["tokens"].tolist() == p["tokens"].tolist()
            assert o["verify_passes"] == 1 and o["draft_steps"] == p["steps"]
            checked += 1
    assert checked >= 3


def test_misuse_is_refused_with_the_flag_named(models_and_batch):
    model, ar, d, src, src_lengths = models_and_batch
    sample = sample_of(src, src_lengths)
    with pytest.raises(ValueError, match="--insertion-verify does not combine with --insertion-candidates"):
        InsertionGenerator(d, DecodingOptions(verify=True, candidates=2))
    with pytest.raises(ValueError, match="--insertion-verify does not combine with --insertion-beam"):
        InsertionGenerator(d, DecodingOptions(mode="sequential", verify=True, beam=3))
    with pytest.raises(ValueError, match="--verify-tolerance B .* use it with --insertion-verify"):
        InsertionGenerator(d, DecodingOptions(verify_tolerance=1.0))
    with pytest.raises(ValueError, match="--verify-tolerance"):
        InsertionGenerator(d, DecodingOptions(verify=True, verify_tolerance=-1.0))
    gen = InsertionGenerator(d, DecodingOptions(verify=True))
    with pytest.raises(ValueError, match="--insertion-verify needs two checkpoints.*INSNET.pt:AR.pt"):
        gen.generate([model], sample)
    with pytest.raises(ValueError, match="--insertion-verify: the judge checkpoint must be an autoregressive "
                                         "encoder-decoder \\(e.g. --arch transformer\\), not InsNetModel"):
        gen.generate([model, model], sample)
    with pytest.raises(ValueError, match="--insertion-verify: .* not InsNetLMModel"):
        gen.generate([model, build_tiny_lm_model(vocab=30)[0]], sample)
    with pytest.raises(ValueError, match="--insertion-verify .* does not take initial_tokens"):
        gen.generate([model, ar], sample, initial_tokens=[[5]] * len(src))
