"""experiments/gap_slot_errors.py: each open slot's best word is counted as a missing word, a neighbour or the global
token's word, against a hand-made batch whose answers are known."""
import torch

from insnet_fairseq.geometry.gaps import gap_targets

from experiments.gap_slot_errors import slot_errors


def test_counts_of_a_hand_made_batch():
    # <s> a b c </s> (positions 0..4, words 10..14); layer 1: b; layer 2: a, c
    target = torch.tensor([[10, 11, 12, 13, 14]])
    layers = torch.tensor([[0, 2, 1, 2, 0]])
    t = gap_targets(layers, torch.tensor([5]))
    open_slots = (~t.done).nonzero().view(-1).tolist()
    # layer end 0: (<s>, </s>) misses a b c; layer end 1: (<s>, b) misses a, (b, </s>) misses c; end 2: all done
    assert [(int(t.left[s]), int(t.right[s])) for s in open_slots] == [(0, 4), (0, 2), (2, 4)]
    pair_slot = torch.tensor([0, 0, 0, 1, 2])  # rows of the open slots
    pair_target = torch.tensor([11, 12, 13, 11, 13])
    best = [12, 12, 14]  # a missing word; b, the right neighbour; </s>, the right neighbour too
    logits = torch.full((3, 20), -5.0)
    logits[torch.arange(3), torch.tensor(best)] = 5.0
    done_logits = torch.where(t.done, torch.tensor(1.0), torch.tensor(-1.0))
    done_logits[open_slots[0]] = 1.0  # one open slot said done
    gap = {"token_logits": logits, "pair_slot": pair_slot, "pair_target": pair_target, "done_logits": done_logits}
    glob_word = torch.full_like(t.row, 12)
    counts = slot_errors(target, t, gap, glob_word)
    assert counts == {"open slots": 3, "missing": 1, "neighbour": 2, "global": 0, "done slots": int(t.done.sum()),
                      "done said done": int(t.done.sum()), "open said open": 2}
    # the second slot's best word is now the global token's word, which is neither missing nor a neighbour there
    logits[1] = -5.0
    logits[1, 15] = 5.0
    counts = slot_errors(target, t, gap, torch.full_like(t.row, 15))
    assert (counts["missing"], counts["neighbour"], counts["global"]) == (1, 1, 1)
