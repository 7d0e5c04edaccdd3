"""InDIGO (Gu et al., 2019) on InsNet's machinery: the paper's worked example of relative positions, pointer
targets, and the one-pass objective against the definition re-encoded prefix by prefix."""
import torch

from insnet_fairseq.geometry.orders import make_order
from insnet_fairseq.models.indigo import IndigoModel, relative_positions
from insnet_fairseq.reference import naive_indigo_logprobs, naive_offsets
from insnet_fairseq.tasks.criterion import InsNetLoss

from conftest import FakeTask, make_dictionary, random_batch, tiny_args


def build_indigo(seed=0, vocab=20, **overrides):
    torch.manual_seed(seed)
    d = make_dictionary(vocab)
    model = IndigoModel.build_model(tiny_args(**overrides), FakeTask(d, d))
    model.eval()
    return model, d


def test_relative_positions_worked_example():
    """Paper 3.2: "<s> </s> dream I", "I" inserted left of "dream": z = [0, 3, 2, 1] and
    R^3 = [[0, -1, -1, -1], [1, 0, 1, 1], [1, -1, 0, 1], [1, -1, -1, 0]] (eq. 3); z_i = sum_j max(0, r_ij) (eq. 4)."""
    order = [0, 3, 2, 1]  # final position of the token of each step
    offsets = torch.tensor(naive_offsets(order))  # rows: queries (j <= i: the causal part)
    lower = relative_positions(offsets).tril()
    R = lower - lower.T  # eq. 5: r_{j,i} = -r_{i,j}, fixed once both exist
    assert R.tolist() == [[0, -1, -1, -1], [1, 0, 1, 1], [1, -1, 0, 1], [1, -1, -1, 0]]
    assert R.clamp_min(0).sum(1).tolist() == order
    # the start of Algorithm 1: R^1 of "<s> </s>"
    assert R[:2, :2].tolist() == [[0, -1], [1, 0]]


def test_pointer_targets_and_slot_logits_of_the_example():
    model, d = build_indigo(seed=1)
    target = torch.tensor([[d.bos(), 5, 6, d.eos()]])  # "<s> I dream </s>" by final position
    order = torch.tensor([[0, 3, 2, 1]])  # <s>, </s>, dream (position 2), I (position 1)
    src, src_lengths, _ = random_batch(d, [4], src_len=5, seed=0)
    out = model(src, src_lengths, target, order)
    pos = out["position"]
    # after step 1 (<s> </s>) "dream" goes to slot 0 (<s> | </s>); after step 2 (<s> dream </s>)
    # "I" goes to slot 0 (<s> | dream)
    assert pos["target"][0].tolist() == [0, 0] and pos["mask"][0].tolist() == [True, True]
    # words: dream, I, then <eod> (index V)
    assert out["token"]["target"].tolist() == [6, 5, len(d)]
    # slot logit = logaddexp(right key of the left neighbour, left key of the right neighbour)
    h, *_ = model.decoder.encode_trajectory(target, order, model.encoder(src, src_lengths=src_lengths))
    heads = model.decoder.heads
    left_key, right_key = heads.pointer_logits(h[:, 2:3], torch.tensor([[5]]), h)  # "I" after step 2
    expected = torch.logaddexp(right_key[0, 0, 0], left_key[0, 0, 2])  # right of <s> (step 0), left of dream (2)
    torch.testing.assert_close(pos["logits"][0, 1, 0], expected)
    assert torch.isinf(pos["logits"][0, 0, 1])  # after step 1 there is one slot only


def test_one_pass_equals_the_definition_prefix_by_prefix():
    model, d = build_indigo(seed=2, vocab=24)
    src, src_lengths, target = random_batch(d, [9, 5, 12, 7], src_len=6, seed=3)
    lengths = target.ne(d.pad()).sum(1)
    for policy in ("l2r", "random"):
        order = make_order(policy, lengths, target.size(1), torch.Generator().manual_seed(4))
        out = model(src, src_lengths, target, order)
        ref = naive_indigo_logprobs(model, src, src_lengths, target, order)
        word_lp = torch.log_softmax(out["token"]["logits"], -1).gather(1, out["token"]["target"][:, None])[:, 0]
        pos = out["position"]
        pos_lp = torch.log_softmax(pos["logits"], -1).gather(2, pos["target"].unsqueeze(2)).squeeze(2)[pos["mask"]]
        torch.testing.assert_close(word_lp, torch.tensor([x for r in ref for x in r["word"]]), atol=1e-5, rtol=0)
        torch.testing.assert_close(pos_lp, torch.tensor([x for r in ref for x in r["position"]]), atol=1e-5, rtol=0)


def test_trains_with_insnet_loss():
    model, d = build_indigo(seed=3)
    src, src_lengths, target = random_batch(d, [7, 4, 9], src_len=5, seed=1)
    order = make_order("random", target.ne(d.pad()).sum(1), target.size(1), torch.Generator().manual_seed(0))
    model.train()
    loss, size, log = InsNetLoss(FakeTask(d, d), label_smoothing=0.1)(
        model, {"net_input": {"src_tokens": src, "src_lengths": src_lengths, "target": target, "order": order},
                "target": target})
    loss.backward()
    assert torch.isfinite(loss) and size == int((target.ne(d.pad()).sum(1) - 1).sum())  # words + <eod>
    assert float(log["termination_nll"]) == 0.0 and float(log["position_nll"]) > 0
    assert model.decoder.heads.eod.grad.abs().sum() > 0 and model.decoder.heads.left_key.weight.grad.abs().sum() > 0
    assert model.decoder.context.offset_clip == 1


def test_greedy_decoding_follows_the_model_step_by_step():
    """Decoding = the model's own choices: along the decoded trajectory, every step's word and slot are
    the argmax of the one-pass model's distributions, and decoding stops exactly when <eod> wins."""
    from insnet_fairseq.decoding.indigo_generator import IndigoGenerator, IndigoSteps
    from insnet_fairseq.decoding.options import DecodingOptions

    model, d = build_indigo(seed=4, vocab=16)
    model.decoder.heads.eod.data.mul_(0)  # <eod> logit 0: a random model stops after a few words
    src, src_lengths, _ = random_batch(d, [4] * 5, src_len=6, seed=2)
    slots = []

    class SpySteps(IndigoSteps):
        def insert(self, decoder, state, chosen, tokens, scores, source_kv, source_pad, picks=None):
            slots.append(int(chosen[0].nonzero()[0]))
            return super().insert(decoder, state, chosen, tokens, scores, source_kv, source_pad, picks)

    class Spy(IndigoGenerator):
        steps_class = SpySteps

    batched = IndigoGenerator(d, DecodingOptions(max_steps=12)).generate(
        [model], {"id": torch.arange(5), "net_input": {"src_tokens": src, "src_lengths": src_lengths}})
    lengths = []
    for b in range(5):
        slots.clear()
        keep = src[b].ne(d.pad())
        one = {"id": torch.arange(1), "net_input": {"src_tokens": src[b : b + 1, keep], "src_lengths": src_lengths[b : b + 1]}}
        h = Spy(d, DecodingOptions(max_steps=12)).generate([model], one)[0][0]
        assert h["tokens"].tolist() == batched[b][0]["tokens"].tolist()  # batched == one by one
        words = h["tokens"][:-1].tolist()
        lengths.append(len(words))
        order = [0, 1]  # each step's token's index in the current sequence; finally its final position
        for k in slots:  # slot k lies between indices k and k + 1
            order = [p + (p > k) for p in order] + [k + 1]
        out = model(src[b : b + 1], src_lengths[b : b + 1], torch.tensor([[d.bos()] + words + [d.eos()]]),
                    torch.tensor([order]))
        lp = torch.log_softmax(out["token"]["logits"], -1)
        words_lp = lp[:, : len(d)].clone()
        words_lp[:, [d.bos(), d.eos(), d.pad()]] = float("-inf")  # never inserted
        assert out["token"]["target"][-1] == len(d)  # the trajectory ends with <eod>
        if len(words) < 12:  # stopped by <eod>, not by the cap
            assert lp[-1, len(d)] > words_lp[-1].max()
        assert (lp[:-1, len(d)] <= words_lp[:-1].max(-1).values).all()  # <eod> lost at every earlier step
        assert (words_lp[:-1].argmax(-1) == out["token"]["target"][:-1]).all()  # each word was the argmax
        pos = out["position"]
        assert (pos["logits"].argmax(-1)[pos["mask"]] == pos["target"][pos["mask"]]).all()  # each slot too
        assert h["steps"] == len(words)
    assert max(lengths) > 1


def order_logprob(model, src, src_lengths, target, order):
    out = model(src, src_lengths, target, order)
    tok = torch.log_softmax(out["token"]["logits"], -1).gather(1, out["token"]["target"][:, None]).sum()
    pos = out["position"]
    return float(tok + torch.log_softmax(pos["logits"], -1).gather(2, pos["target"].unsqueeze(2)).squeeze(2)[pos["mask"]].sum())


def test_searched_orders_are_the_best_orders_when_the_beam_covers_them():
    """SAO with a beam as wide as the number of orders (3 words: 6) is exhaustive: its first order is
    the one of highest log p(y_pi | x) (words, slots and <eod>, scored by the one-pass model), and
    each sentence's orders are distinct permutations with the padding last."""
    import itertools

    from insnet_fairseq.training.searched_order import search_orders

    model, d = build_indigo(seed=5, vocab=20)
    src, src_lengths, target = random_batch(d, [5, 4, 5], src_len=5, seed=6)  # 3, 2, 3 words
    orders = search_orders(model, src, src_lengths, target, beam=6)
    n = target.size(1)
    for b in range(3):
        L = int(target[b].ne(d.pad()).sum())
        rows = orders[b * 6 : (b + 1) * 6]
        assert all(r[:2].tolist() == [0, L - 1] and sorted(r.tolist()) == list(range(n)) for r in rows)
        assert all(r[L:].tolist() == list(range(L, n)) for r in rows)
        best = max(itertools.permutations(range(1, L - 1)),
                   key=lambda p: order_logprob(model, src[b : b + 1], src_lengths[b : b + 1], target[b : b + 1, :L],
                                               torch.tensor([[0, L - 1, *p]])))
        assert rows[0, 2:L].tolist() == list(best)
        distinct = {tuple(r[:L].tolist()) for r in rows}
        assert len(distinct) == (6 if L == 5 else 2)
