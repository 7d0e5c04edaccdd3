"""benchmarks/kill_campaign.py: the kill schedule (every kill asked for fits in the run, whatever the write kills
hit), the unrounded loss comparison and the detection of a checkpoint write, without training anything."""
import json
import os
import random

import pytest

from benchmarks import kill_campaign as kc


def simulate(plan, save_every, updates, hits):
    """The campaign's runs, by update numbers: each run resumes from checkpoint_last.pt and is killed at
    ``kill_target`` (an update kill resumes from the save before it; a write kill from the save before the one
    it hit, or from that one when it missed: ``hits`` says which). Returns [(kind, update)] of the kills made
    before the run reached ``updates``."""
    made, resume = [], 0
    for kill, hit in zip(plan, hits):
        at = kc.kill_target(kill, resume)
        if at >= updates:  # the run would have finished first
            break
        made.append((kill.kind, at))
        if kill.kind == "update":
            resume = at // save_every * save_every
        else:
            assert at % save_every == 0  # a write kill aims at a save
            resume = at - save_every if hit else at
    return made


@pytest.mark.parametrize("kills, save_every, seed", [(20, 2, 0), (20, 3, 1), (7, 2, 5), (1, 2, 0), (40, 4, 3)])
def test_plan_alternates_and_update_kills_are_distinct_increasing_and_between_saves(kills, save_every, seed):
    plan = kc.plan_kills(kills, save_every, seed)
    assert len(plan) == kills
    assert [k.kind for k in plan] == ["update" if i % 2 == 0 else "write" for i in range(kills)]
    assert sum(k.kind == "write" for k in plan) == kills // 2
    updates = [k.update for k in plan if k.kind == "update"]
    assert updates == sorted(set(updates))  # distinct, increasing
    assert all(u % save_every for u in updates)  # never at a save: an update kill lands mid-training
    assert all(k.update % save_every == 0 for k in plan if k.kind == "write")
    # the planned updates are those of a campaign whose write kills all hit their write
    assert simulate(plan, save_every, 10 ** 9, [True] * kills) == [(k.kind, k.update) for k in plan]


def test_plan_is_drawn_from_its_seed():
    assert kc.plan_kills(20, 2, 0) == kc.plan_kills(20, 2, 0)
    assert len({tuple(kc.plan_kills(20, 3, seed)) for seed in range(5)}) > 1


@pytest.mark.parametrize("kills, save_every", [(20, 2), (20, 3), (9, 2), (60, 5)])
def test_every_kill_fits_in_the_run_whatever_the_write_kills_hit(kills, save_every):
    plan = kc.plan_kills(kills, save_every, seed=kills)
    updates = kc.run_length(plan, save_every)
    rng = random.Random(0)
    for hits in [[True] * kills, [False] * kills] + [[rng.random() < 0.5 for _ in range(kills)] for _ in range(50)]:
        made = simulate(plan, save_every, updates, hits)
        assert len(made) == kills, (hits, made, updates)
    # and no longer than needed: with every write kill missing its write, the last kill comes save_every before the end
    assert simulate(plan, save_every, updates - 1, [False] * kills)[-1] == (plan[-1].kind, updates - save_every)


def test_run_length_grows_with_the_kills_and_honours_the_requested_updates():
    lengths = [kc.run_length(kc.plan_kills(k, 2, 0), 2) for k in (0, 2, 10, 20, 40)]
    assert lengths == sorted(lengths) and lengths[-1] > lengths[-2] > lengths[1]
    assert lengths[3] >= 2 * 20  # a write kill alone costs a save's updates
    assert kc.run_length(kc.plan_kills(20, 2, 0), 2, requested=500) == 500
    assert kc.run_length([], 2) == 2


def test_plan_refuses_a_save_every_update():
    with pytest.raises(ValueError, match="--save-every must be at least 2"):
        kc.plan_kills(4, 1, 0)
    with pytest.raises(ValueError, match="--kills must be >= 0"):
        kc.plan_kills(-1, 2, 0)


def log_line(update, loss):
    return "INFO:train_inner:" + json.dumps({"epoch": 1, "loss": loss, "nll_loss": "1.234", "num_updates": str(update)})


def test_losses_are_read_unrounded_and_every_logged_update_is_compared():
    ref_log = "\n".join([log_line(1, 9.123456789), "INFO:fairseq_cli.train:something else", log_line(2, 8.5),
                         log_line(3, 8.25)])
    ref = kc.losses(ref_log)
    assert ref == [(1, 9.123456789), (2, 8.5), (3, 8.25)]
    assert kc.max_difference(ref, ref) == (0.0, [])
    # a run killed after update 2 and resumed from update 1: update 2 logged twice, the redone value differs
    killed = kc.losses("\n".join([log_line(1, 9.123456789), log_line(2, 8.5), log_line(2, 8.5000001),
                                  log_line(3, 8.25)]))
    worst, missing = kc.max_difference(killed, ref)
    assert worst == pytest.approx(1e-7, rel=1e-3) and worst > kc.TOLERANCE and missing == []
    assert kc.max_difference(killed[:2], ref) == (0.0, [3])  # update 3 never logged


def test_a_write_is_seen_by_its_tmp_file_and_a_killed_one_left_behind_is_not(tmp_path):
    save = str(tmp_path)
    (tmp_path / "checkpoint_last.pt").write_bytes(b"x")
    (tmp_path / "checkpoint_1_4.pt.tmp").write_bytes(b"half a checkpoint")  # left by an earlier kill
    before = kc.tmp_files(save)
    assert list(before) == ["checkpoint_1_4.pt.tmp"]
    assert kc.new_tmp_files(save, before) == []
    (tmp_path / "checkpoint_last.pt.tmp").write_bytes(b"being written")
    assert kc.new_tmp_files(save, before) == ["checkpoint_last.pt.tmp"]
    os.replace(tmp_path / "checkpoint_last.pt.tmp", tmp_path / "checkpoint_last.pt")  # the write completes
    assert kc.new_tmp_files(save, before) == []
    (tmp_path / "checkpoint_1_4.pt.tmp").write_bytes(b"the same name written again")  # a new write to that name
    assert kc.new_tmp_files(save, before) == ["checkpoint_1_4.pt.tmp"]
    assert kc.new_tmp_files(str(tmp_path / "none"), {}) == []


def test_subset_data_keeps_the_first_sentences_and_the_dictionaries(tmp_path):
    import torch
    from fairseq.data import indexed_dataset

    full = tmp_path / "full"
    full.mkdir()
    sentences = {"en": [[4, 5, 2], [6, 2], [7, 8, 9, 2], [5, 2]], "de": [[10, 2], [11, 12, 2], [13, 2], [14, 15, 2]]}
    for lang, rows in sentences.items():
        (full / f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(16)))
        builder = indexed_dataset.make_builder(str(full / f"train.en-de.{lang}.bin"), "mmap", vocab_size=20)
        for row in rows:
            builder.add_item(torch.tensor(row))
        builder.finalize(str(full / f"train.en-de.{lang}.idx"))
    dest = kc.subset_data(str(full), str(tmp_path / "subset"), 3)
    for lang, rows in sentences.items():
        assert (tmp_path / "subset" / f"dict.{lang}.txt").read_text() == (full / f"dict.{lang}.txt").read_text()
        subset = indexed_dataset.make_dataset(os.path.join(dest, f"train.en-de.{lang}"), "mmap")
        assert [subset[i].tolist() for i in range(len(subset))] == rows[:3]
