#!/usr/bin/env python
"""Kill campaign: SIGKILL fairseq-train --kills times, half of them during a checkpoint write, resume every
time, and check that no checkpoint is ever unreadable, that training always resumes from its last save, and
that the resumed run reproduces an uninterrupted one exactly.

    python benchmarks/kill_campaign.py [--kills 20] [--save-every 2] [--seed 0]      # or: make kill-campaign

Model and data: InsNet with the anchored order and InsNet-Dinic layering at ``--dinic-tau 0.5`` (every
sentence's last layering is kept in the task's layer store, which is saved with the checkpoint), dropout 0.1,
label smoothing 0.1, Adam; smaller than the results table's (3+3 layers, d=256) so that a campaign takes minutes
on a 2-core CPU: 2+2 layers, d=128, FFN 512 (:data:`MODEL`), batches of at most 512 tokens, one torch thread,
on the CPU. The data are the first --sentences (320) training pairs of Multi30k (``make multi30k``): an epoch
is about 14 updates, so the run crosses epochs and every sentence seen again continues from the layering the
store kept for it (a layer store lost or stale after a kill changes the loss). At tau 0.5 the layering pass's
promotions are close calls at this stage of training (at tau 2 this model promotes nearly every word whose
slot is free), so anything the pass computes differently after a resume shows in the loss.

Kills (:func:`plan_kills`, drawn up front with --seed): they alternate between

* ``update``: SIGKILL as soon as the training log shows update ``u`` (mid-training: the next batch is being
  loaded or trained); ``u`` is ``r`` updates past the run's resume point, ``r`` in 1 .. 2 * --save-every - 1
  and not a multiple of --save-every, so the kill never lands in a save, and the run resumes from the save
  before ``u``;
* ``write``: SIGKILL as soon as the run's second checkpoint write has begun (after the first save of the run
  was logged, a ``*.tmp`` file appears in the save directory: fairseq writes ``NAME.tmp`` and renames it, and
  with ``insnet_fairseq`` every copy to checkpoint_last.pt is made the same way), so every run gets one save
  further. A kill counts as during a write when the interrupted ``*.tmp`` file is still there afterwards.

Saves come every --save-every (2) updates (``--save-interval 1000``: none at epoch ends), so the update of
every kill is known before the campaign starts, as long as every write kill hits its write; the update kills'
updates are distinct and increasing. The run is made long enough for every kill (:func:`run_length`), even if
every write kill missed its write (the run then resumes one save further): --updates is only a lower bound.

After every kill every ``*.pt`` file of the save directory is loaded with ``torch.load``, and the update of
checkpoint_last.pt is read: a kill is *lost* when the next run could not start from it, or when it is older
than the last save the killed run had logged. The run is then resumed by the same command, until every kill
has been made and the last run finishes.

Resumed = uninterrupted, exactly. fairseq logs the loss with 3 decimals, which hides any difference below
0.0005; here fairseq-train runs in-process (``kill_campaign.py --fairseq-train ...``) with that rounding
switched off for the loss, so losses are compared unrounded: every logged update of every run, updates redone
after a kill included, against the uninterrupted run, and then the final checkpoints' parameters and layer
stores, tensor for tensor. Tolerance: 0, from the spread of the uninterrupted run against itself, which the
campaign measures every time by training it twice: on one CPU thread the two agree to the last bit (max |loss
difference| 0.0 at all 58 updates of --kills 20, identical parameters and layer stores). Nothing a resumed
run computes depends on where it was killed: fairseq re-seeds each update with seed + update number and
restores the optimizer and the data iterator's position, the task restores the layer store, and insertion
orders are drawn from (seed, epoch, first sentence of the batch).

What once made a resumed run part from an uninterrupted one: the InsNet-Dinic layering pass runs the model in
eval mode without gradients, where the model reuses tensors kept from its weights (each layer's offset
projection, the packed weight of every linear layer), and fairseq's Adam updates the weights through ``.data``,
which leaves their version counters alone. An uninterrupted run laid out its batches with tensors made from an
earlier update's weights, a resumed one with tensors made after it resumed, and a promotion near tau went the
other way. Now a module drops what it keeps whenever it goes back to training mode
(:class:`insnet_fairseq.modules.kept.KeepsDerived`), which the trainer does before every update, so the layering
pass sees the current weights, resumed or not.
"""
import argparse
import glob
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import List, NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 0.0  # unrounded losses: the resumed run must equal the uninterrupted one
MODEL = ["--arch", "insnet_small", "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "128",
         "--encoder-ffn-embed-dim", "512", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
SAVED = re.compile(r"Saved checkpoint .* @ (\d+) updates")
LOADED = re.compile(r"Loaded checkpoint .* @ (\d+) updates")
RESTORED = re.compile(r"restored the layerings of (\d+) training sentences")


# ---------------------------------------------------------------- the schedule (pure functions)
class Kill(NamedTuple):
    kind: str  # "update": after update `update` is logged; "write": during the write of the save of `update`
    update: int  # the update the kill is planned at, when every earlier write kill hit its write
    offset: int  # updates past the run's resume point


def plan_kills(kills: int, save_every: int, seed: int) -> List[Kill]:
    """The campaign's kills in order, drawn with ``seed``: even-numbered ones ``update``, odd-numbered ones
    ``write`` (``kills // 2`` writes). A run resumes from the last save before its kill: after an update kill
    at ``u`` from ``u // save_every * save_every``; after a write kill at the save of ``c + 2 * save_every``
    (the run's second save) from ``c + save_every``.

    Example: plan_kills(4, 2, seed) may give update 3 (offset 3), write 6, update 5 (offset 1), write 8.
    """
    if save_every < 2:
        raise ValueError(f"--save-every must be at least 2 (an update kill falls between two saves), got {save_every}")
    if kills < 0:
        raise ValueError(f"--kills must be >= 0, got {kills}")
    rng = random.Random(seed)
    offsets = [r for r in range(1, 2 * save_every) if r % save_every]
    plan, resume = [], 0
    for i in range(kills):
        if i % 2 == 0:
            r = rng.choice(offsets)
            plan.append(Kill("update", resume + r, r))
            resume = (resume + r) // save_every * save_every
        else:
            plan.append(Kill("write", resume + 2 * save_every, 2 * save_every))
            resume += save_every
    return plan


def run_length(plan: List[Kill], save_every: int, requested: int = 0) -> int:
    """Updates of the run: at least ``requested``, and enough for every kill of ``plan`` to happen, with
    ``save_every`` updates left after the last, even if every write kill missed its write (its run then
    resumes from the save it aimed at, one save further than planned)."""
    resume, last = 0, 0
    for kill in plan:
        last = resume + kill.offset  # the update (or the save) at which this kill happens
        resume = last // save_every * save_every if kill.kind == "update" else last
    return max(requested, last + save_every, 1)


def kill_target(kill: Kill, resume: int) -> int:
    """The update at which ``kill`` happens in a run resumed at update ``resume``."""
    return resume + kill.offset


def losses(log_text: str):
    """[(update, loss)] of fairseq-train's json log lines (``--log-format json --log-interval 1``), in order."""
    out = []
    for line in log_text.splitlines():
        if "train_inner" in line and "{" in line:
            row = json.loads(line[line.index("{"):])
            out.append((int(row["num_updates"]), float(row["loss"])))
    return out


def max_difference(runs, reference):
    """max |loss - reference loss| over every (update, loss) of ``runs`` (0.0 when they are equal), and the
    updates of ``reference`` that no run logged."""
    ref = dict(reference)
    worst = max((abs(loss - ref[u]) for u, loss in runs if u in ref), default=0.0)
    return worst, sorted(set(ref) - {u for u, _ in runs})


# ---------------------------------------------------------------- the training runs
def fairseq_train(argv):
    """fairseq-train ``argv`` in this process, the loss logged unrounded (fairseq rounds it to 3 decimals)."""
    from fairseq.logging import metrics

    log_scalar = metrics.log_scalar

    def log_scalar_unrounded(key, value, weight=1, priority=10, round=None):
        return log_scalar(key, value, weight, priority, None if key == "loss" else round)

    metrics.log_scalar = log_scalar_unrounded
    from fairseq_cli import train

    sys.argv = ["fairseq-train", *argv]
    train.cli_main()


def train_cmd(data, save, updates, save_every):
    return [sys.executable, os.path.abspath(__file__), "--fairseq-train", data, "--user-dir", "insnet_fairseq",
            "--task", "insertion_translation", *MODEL, "--criterion", "insnet_loss", "--share-all-embeddings",
            "--insertion-order", "anchored", "--dinic-tau", "0.5", "--dropout", "0.1", "--label-smoothing", "0.1",
            "--optimizer", "adam", "--lr", "5e-4", "--lr-scheduler", "fixed", "--max-tokens", "512",
            "--max-update", str(updates), "--save-dir", save, "--no-epoch-checkpoints", "--save-interval", "1000",
            "--save-interval-updates", str(save_every), "--keep-interval-updates", "2", "--disable-validation",
            "--log-format", "json", "--log-interval", "1", "--num-workers", "0", "--seed", "1", "--cpu"]


def subset_data(data, dest, sentences):
    """A data-bin at ``dest`` holding the first ``sentences`` training pairs of the data-bin ``data``."""
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)  # its note on tensorboardX
    from fairseq.data import data_utils, indexed_dataset

    src, tgt = data_utils.infer_language_pair(data)
    os.makedirs(dest, exist_ok=True)
    for lang in (src, tgt):
        shutil.copy(os.path.join(data, f"dict.{lang}.txt"), dest)
        prefix = f"train.{src}-{tgt}.{lang}"
        full = indexed_dataset.make_dataset(os.path.join(data, prefix), "mmap")
        if full is None:
            sys.exit(f"{data}: no {prefix}.bin/.idx (a data-bin of fairseq-preprocess --dataset-impl mmap)")
        vocab = sum(1 for _ in open(os.path.join(data, f"dict.{lang}.txt"), encoding="utf-8")) + 4
        builder = indexed_dataset.make_builder(os.path.join(dest, prefix + ".bin"), "mmap", vocab_size=vocab)
        for i in range(min(sentences, len(full))):
            builder.add_item(full[i])
        builder.finalize(os.path.join(dest, prefix + ".idx"))
    return dest


def load(path):
    """A checkpoint of the campaign, loaded weights-only (insnet_fairseq.checkpoint_safety)."""
    from insnet_fairseq import checkpoint_safety

    return checkpoint_safety.load(path)


def readable(save):
    """[(file, None or the error)] for every checkpoint file of ``save``."""
    result = []
    for path in sorted(glob.glob(os.path.join(save, "*.pt"))):
        try:
            state = load(path)
            assert "model" in state and "extra_state" in state, "not a fairseq checkpoint"
            result.append((path, None))
        except Exception as e:  # noqa: BLE001  (any failure to load counts as unreadable)
            result.append((path, f"{type(e).__name__}: {e}"))
    return result


def saved_update(save):
    """The update of ``save``/checkpoint_last.pt (0: none)."""
    path = os.path.join(save, "checkpoint_last.pt")
    return int(load(path)["optimizer_history"][-1]["num_updates"]) if os.path.exists(path) else 0


def same_final(save_a, save_b):
    """(parameters identical, layer stores identical, sentences in the store) of two runs' checkpoint_last.pt."""
    import torch

    a, b = load(os.path.join(save_a, "checkpoint_last.pt")), load(os.path.join(save_b, "checkpoint_last.pt"))
    params = a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k])
                                                            for k in a["model"])
    store_a = a["extra_state"].get("InsertionTranslationTask", {}).get("layer_store")
    store_b = b["extra_state"].get("InsertionTranslationTask", {}).get("layer_store")
    stores = store_a is not None and store_b is not None and torch.equal(store_a, store_b)
    return params, stores, 0 if store_a is None else int(store_a[:, 0].eq(0).sum())


def tmp_files(save):
    """{name: (mtime in ns, size)} of the ``*.tmp`` files of ``save`` (a checkpoint write in progress, or one
    killed)."""
    found = {}
    for entry in os.scandir(save) if os.path.isdir(save) else []:
        if entry.name.endswith(".tmp"):
            try:
                st = entry.stat()
                found[entry.name] = (st.st_mtime_ns, st.st_size)
            except FileNotFoundError:  # renamed meanwhile: that write is complete
                pass
    return found


def new_tmp_files(save, before):
    """The ``*.tmp`` files of ``save`` written since the snapshot ``before`` (:func:`tmp_files`): a killed write
    leaves its file behind, and the next write to that name rewrites it."""
    return sorted(name for name, stat in tmp_files(save).items() if before.get(name) != stat)


class Segment:
    """One run of the training command; its log, a file, read line by line as it grows."""

    def __init__(self, cmd, log_path, env, save):
        self.text, self.last_update, self.saves, self.losses = "", None, [], []
        self.tmp_before = tmp_files(save)  # what earlier kills left behind
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.reader, self.partial = open(log_path), ""

    def read(self):
        """Take in the log's new whole lines."""
        chunk = self.reader.read()
        if not chunk:
            return
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        for line in lines:
            self.text += line + "\n"
            row = losses(line)
            if row:
                self.losses += row
                self.last_update = row[-1][0]
            saved = SAVED.search(line)
            if saved:
                self.saves.append(int(saved.group(1)))

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def finish(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.read()
        self.reader.close()
        return self.proc.returncode


def run_to_kill(seg, kill, resume, save, timeout):
    """Wait for ``kill``'s moment in the run ``seg`` resumed at update ``resume``, then SIGKILL it. Returns
    (killed, during a write)."""
    deadline, target = time.time() + timeout, kill_target(kill, resume)
    while seg.proc.poll() is None and time.time() < deadline:
        seg.read()
        if kill.kind == "update":
            if seg.last_update is not None and seg.last_update >= target:
                break
            time.sleep(0.01)
        elif not seg.saves:  # a write kill waits for the run's first save to be logged ...
            time.sleep(0.01)
        elif new_tmp_files(save, seg.tmp_before) or len(seg.saves) >= 2:  # ... then for the second to begin
            break  # (two saves logged: the second write passed between two looks; kill now)
        else:
            time.sleep(0.001)
    if seg.proc.poll() is not None:
        return False, False
    seg.kill()
    return True, bool(new_tmp_files(save, seg.tmp_before))


def reference_run(data, save, updates, save_every, log_path, env):
    seg = Segment(train_cmd(data, save, updates, save_every), log_path, env, save)
    if seg.finish(timeout=3600) != 0:
        sys.exit(f"the uninterrupted run failed:\n{seg.text[-3000:]}")
    return seg.losses


def main():
    if sys.argv[1:2] == ["--fairseq-train"]:
        return fairseq_train(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--sentences", type=int, default=320, help="train on the first N training pairs of --data")
    p.add_argument("--work", default="work/kill_campaign")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--updates", type=int, default=0, help="at least this many updates (the kills may need more)")
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    args = p.parse_args()
    data = os.path.join(ROOT, args.data)
    if not os.path.isdir(data):
        sys.exit(f"{args.data} not found: run `make multi30k` first")
    try:
        plan = plan_kills(args.kills, args.save_every, args.seed)
    except ValueError as e:
        sys.exit(str(e))
    updates = run_length(plan, args.save_every, args.updates)
    t0 = time.time()
    work = os.path.join(ROOT, args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = subset_data(data, os.path.join(work, "data"), args.sentences)
    # one torch thread on the CPU: the same reductions in the same order in every run
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    print(f"kill plan (seed {args.seed}): " + ", ".join(f"{k.kind} {k.update}" for k in plan)
          + f"; the run: {updates} updates, a save every {args.save_every}, the first {args.sentences} sentence "
          f"pairs of {args.data}", flush=True)

    ref_save, ref2_save = os.path.join(work, "reference"), os.path.join(work, "reference2")
    ref = reference_run(data, ref_save, updates, args.save_every, os.path.join(work, "reference.log"), env)
    print(f"uninterrupted run: {len(ref)} updates in {time.time() - t0:.0f} s", flush=True)
    t1 = time.time()
    again = reference_run(data, ref2_save, updates, args.save_every, os.path.join(work, "reference2.log"), env)
    spread, _ = max_difference(again, ref)
    params_again, store_again, _ = same_final(ref_save, ref2_save)
    print(f"the same run again ({time.time() - t1:.0f} s): max |loss difference| {spread!r} over {len(again)} "
          f"updates; final parameters {'identical' if params_again else 'DIFFERENT'}, layer store "
          f"{'identical' if store_again else 'DIFFERENT'}", flush=True)

    save = os.path.join(work, "killed")
    logged, kills, during_write, lost, unreadable, redone, failed, off_plan = [], 0, 0, 0, [], 0, 0, 0
    resume, segment, pending, finished = 0, 0, list(plan), False
    while not finished and failed <= 2:
        segment += 1
        kill = pending[0] if pending else None
        seg = Segment(train_cmd(data, save, updates, args.save_every),
                      os.path.join(work, f"segment{segment:02d}.log"), env, save)
        killed, hit = run_to_kill(seg, kill, resume, save, timeout=1800) if kill else (False, False)
        code = seg.finish(timeout=3600 if kill is None else 60)
        logged += seg.losses
        loaded = [int(u) for u in LOADED.findall(seg.text)]
        restored = [int(n) for n in RESTORED.findall(seg.text)]
        started_at = loaded[0] if loaded else 0
        resumed = started_at == resume and (killed or code == 0)  # it started from the last kill's checkpoint
        after = saved_update(save)
        note = ""
        if killed:
            kills += 1
            during_write += hit
            pending.pop(0)
            at = kill_target(kill, resume)
            off_plan += at != kill.update
            bad = [(path, err) for path, err in readable(save) if err]
            unreadable += bad
            resumed = resumed and after >= max(seg.saves, default=resume)  # no save it had finished is gone
            redone += max(0, (seg.last_update or 0) - after)
            note = (f"kill {kills:2d} ({kill.kind} {at}{', during a checkpoint write' if hit else ''}); "
                    f"unreadable checkpoints: {len(bad)}")
        elif code == 0:
            finished = True
            note = "finished" if kill is None else "finished before its kill"
        else:
            failed += 1
            note = f"failed (exit code {code})"
        lost += not resumed
        store = f" (layerings of {restored[0]} sentences restored)" if restored else ""
        print(f"segment {segment:2d}: resumed at update {started_at}{store}, reached {seg.last_update or started_at}, "
              f"checkpoint at {after}; {note}", flush=True)
        resume = after

    worst, missing = max_difference(logged, ref)
    params, stores, sentences = same_final(ref_save, save) if finished else (False, False, 0)
    print(f"\nkills asked {args.kills}, made {kills} ({during_write} during a checkpoint write); lost {lost} (runs "
          f"that could not resume from their last save); unreadable checkpoint files {len(unreadable)}; {redone} "
          f"updates redone after resuming (done but not yet saved when killed)"
          + (f"; {off_plan} kills off the planned update" if off_plan else ""))
    print(f"loss: {len(logged)} logged updates (redone ones included) compared unrounded with the uninterrupted "
          f"run's {len(ref)}: max |difference| {worst!r} (tolerance {TOLERANCE!r}; the uninterrupted run against "
          f"itself: {spread!r}){f'; {len(missing)} updates never logged' if missing else ''}")
    print(f"final checkpoint against the uninterrupted run's: parameters {'identical' if params else 'DIFFERENT'}, "
          f"layer store ({sentences} sentences) {'identical' if stores else 'DIFFERENT'}")
    ok = (finished and kills == args.kills and lost == 0 and failed == 0 and not unreadable and not missing
          and worst <= TOLERANCE and spread <= TOLERANCE and params and stores and params_again and store_again)
    for path, err in unreadable:
        print(f"unreadable: {path}: {err}")
    print(f"{'PASS' if ok else 'FAIL'} ({time.time() - t0:.0f} s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
