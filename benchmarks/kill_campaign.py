#!/usr/bin/env python
"""Kill campaign: SIGKILL fairseq-train at random moments, resume every time, and check that no
checkpoint is ever unreadable, that training always resumes, and that the loss curve matches an
uninterrupted run with the same seed.

    python benchmarks/kill_campaign.py [--kills 20] [--updates 60]      # or: make kill-campaign

Model: InsNet of the results table's size (3+3 layers, d=256) with the anchored order and
InsNet-Dinic layering (``--dinic-tau 2``: the layerings are saved with the checkpoint too), small
batches (--max-tokens 1024) on Multi30k, a checkpoint every --save-every updates, dropout on.
Kills alternate between two kinds:

* ``random``: after a random delay (start-up, checkpoint loading and training all get hit);
* ``write``: the moment a checkpoint file is being written (a ``*.tmp`` file appears in the save
  directory: fairseq writes ``NAME.tmp`` then renames it, and with ``insnet_fairseq`` every copy to
  checkpoint_last.pt / checkpoint_best.pt is made the same way), at the run's second save, so that
  every run gets somewhere.

After every kill every ``*.pt`` of the save directory is loaded with ``torch.load``. The run is
then resumed by the same command, until --kills kills have been made and it finishes. The loss of
every update (the last run that logged it) is compared with a run that was never killed.
Tolerance: |loss difference| <= 0.002 at every update (fairseq logs 3 decimals; a resumed run
re-seeds each update with seed + update number, so the curves should agree to rounding).
"""
import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
TOLERANCE = 0.002


def train_cmd(data, save, updates, save_every):
    return [os.path.join(BIN, "fairseq-train"), data, "--user-dir", "insnet_fairseq", "--task", "insertion_translation",
            "--arch", "insnet_small", "--criterion", "insnet_loss", "--encoder-layers", "3", "--decoder-layers", "3",
            "--encoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024", "--share-all-embeddings",
            "--insertion-order", "anchored", "--dinic-tau", "2.0", "--dropout", "0.1", "--label-smoothing", "0.1",
            "--optimizer", "adam", "--lr", "5e-4", "--lr-scheduler", "fixed", "--max-tokens", "1024",
            "--max-update", str(updates), "--save-dir", save, "--no-epoch-checkpoints",
            "--save-interval-updates", str(save_every), "--keep-interval-updates", "2", "--disable-validation",
            "--log-format", "json", "--log-interval", "1", "--num-workers", "0", "--seed", "1"]


def losses(log_text):
    out = {}
    for line in log_text.splitlines():
        if "train_inner" in line and "{" in line:
            row = json.loads(line[line.index("{"):])
            out[int(row["num_updates"])] = float(row["loss"])
    return out


def readable(save):
    """[(file, None or the error)] for every checkpoint file of ``save``."""
    import torch

    result = []
    for path in sorted(glob.glob(os.path.join(save, "*.pt"))):
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
            assert "model" in state and "extra_state" in state, "not a fairseq checkpoint"
            result.append((path, None))
        except Exception as e:  # noqa: BLE001  (any failure to load counts as unreadable)
            result.append((path, f"{type(e).__name__}: {e}"))
    return result


def last_saved_update(save):
    import torch

    path = os.path.join(save, "checkpoint_last.pt")
    if not os.path.exists(path):
        return 0
    return int(torch.load(path, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data-bin/multi30k_en_de")
    p.add_argument("--work", default="work/kill_campaign")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--save-every", type=int, default=3)
    p.add_argument("--max-delay", type=float, default=40.0, help="random kills: at most this many seconds after start")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    args = p.parse_args()
    if not os.path.isdir(args.data):
        sys.exit(f"{args.data} not found: run `make multi30k` first")
    rng = random.Random(args.seed)
    work = os.path.join(ROOT, args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))

    ref_save = os.path.join(work, "reference")
    t0 = time.time()
    ref = subprocess.run(train_cmd(args.data, ref_save, args.updates, args.save_every), cwd=ROOT, env=env,
                         capture_output=True, text=True)
    if ref.returncode != 0:
        sys.exit(f"the uninterrupted run failed:\n{ref.stderr[-3000:]}")
    ref_losses = losses(ref.stdout + ref.stderr)
    print(f"uninterrupted run: {len(ref_losses)} updates in {time.time() - t0:.0f} s", flush=True)

    save = os.path.join(work, "killed")
    curve, kills, during_write, redone, unreadable, failed_starts, segment = {}, 0, 0, 0, [], 0, 0
    lost, saved_before = 0, 0  # lost: a kill after which a saved checkpoint was gone, older or unreadable
    while True:
        segment += 1
        log_path = os.path.join(work, f"segment{segment:02d}.log")
        before = last_saved_update(save)
        with open(log_path, "w") as log:
            proc = subprocess.Popen(train_cmd(args.data, save, args.updates, args.save_every), cwd=ROOT, env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
            kind, started = None, time.time()

            def writing():  # a checkpoint file being written by this run (a killed write leaves its .tmp)
                return any(os.path.getmtime(f) >= started for f in glob.glob(os.path.join(save, "*.tmp"))
                           if os.path.exists(f))

            if kills < args.kills:
                kind = "write" if kills % 2 else "random"
                deadline = time.time() + (rng.uniform(1.0, args.max_delay) if kind == "random" else 600)
                last = os.path.join(save, "checkpoint_last.pt")
                while proc.poll() is None and time.time() < deadline:
                    # a write kill waits for this run's second save: every run makes some progress
                    saved = os.path.exists(last) and os.path.getmtime(last) >= started
                    if kind == "write" and saved and writing():
                        break
                    time.sleep(0.002 if kind == "write" else 0.05)
                hit_write = writing()
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    during_write += hit_write
                else:
                    kind = None  # it finished before the kill
            proc.wait()
        with open(log_path) as f:
            seg_losses = losses(f.read())
        curve.update(seg_losses)
        after = last_saved_update(save)
        if seg_losses:
            redone += max(0, max(seg_losses) - after)  # updates done but not in a checkpoint: redone
        bad = [(path, err) for path, err in readable(save) if err]
        unreadable += bad
        lost += bool(bad) or after < saved_before
        saved_before = max(saved_before, after)
        note = f"kill {kills:2d} ({kind}{', during a checkpoint write' if kind and hit_write else ''})" if kind else "finished"
        print(f"segment {segment:2d}: resumed at update {before}, reached {max(seg_losses, default=before)}, "
              f"checkpoint at {after}; {note}; unreadable checkpoints: {len(bad)}", flush=True)
        if kind is None:
            failed_starts += proc.returncode != 0
            if proc.returncode == 0 or failed_starts > 2:
                break

    diffs = {u: abs(curve[u] - ref_losses[u]) for u in ref_losses if u in curve}
    worst = max(diffs.values()) if diffs else float("nan")
    survived = kills - failed_starts  # kills after which the same command resumed
    print(f"\nkills {kills} ({during_write} during a checkpoint write), survived {survived}, lost {lost} "
          f"(kills after which a saved checkpoint was missing, older or unreadable); unreadable checkpoint files "
          f"{len(unreadable)}; {redone} updates redone after resuming (done but not yet saved when killed)")
    print(f"loss curve: {len(diffs)}/{len(ref_losses)} updates compared with the uninterrupted run, "
          f"max |difference| {worst:.4f} (tolerance {TOLERANCE})")
    ok = (failed_starts == 0 and not unreadable and lost == 0 and len(diffs) == len(ref_losses) and worst <= TOLERANCE
          and kills >= args.kills)
    for path, err in unreadable:
        print(f"unreadable: {path}: {err}")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
