"""experiments/slot_mass.sh on tiny checkpoints: the systems it decodes, the columns it writes, its refusals."""
import csv
import shutil
import subprocess

from conftest import ENV, ROOT


def slot_mass(ck, out, small_data, raw_corpus, **env):
    return subprocess.run(["bash", "experiments/slot_mass.sh"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**ENV, "CK": str(ck), "OUT": str(out), "DATA": small_data, "MULTI30K_DIR": raw_corpus,
                               **env})


def test_slot_mass_decodes_one_word_a_step_and_each_top_p_beside_ar_greedy(
        small_data, raw_corpus, tiny_checkpoint, ar_checkpoint, tmp_path):
    """The choose stage's averages of CK (ar_kd, dinic) on the valid set: AR+KD greedy (the baseline), the InsNet-Dinic
    checkpoint decoded one word a step and at each TOP_P, every row with its passes and times."""
    ck, out = tmp_path / "ck", tmp_path / "slot_mass"
    p = slot_mass(ck, out, small_data, raw_corpus, TOP_P="0.5 1", MAX_SENTENCES="5")
    assert p.returncode == 2 and f"{ck / 'ar_kd' / 'checkpoint_avg.pt'} missing" in p.stderr, p.stderr[-2000:]
    for run, src in (("ar_kd", ar_checkpoint), ("dinic", tiny_checkpoint)):
        (ck / run).mkdir(parents=True)
        shutil.copy(src, ck / run / "checkpoint_avg.pt")
    p = slot_mass(ck, out, small_data, raw_corpus, TOP_P="0.5 1", MAX_SENTENCES="5", MULTI30K_DIR=str(tmp_path))
    assert p.returncode == 2 and f"no valid.de in {tmp_path}" in p.stderr, p.stderr[-2000:]
    p = slot_mass(ck, out, small_data, raw_corpus, TOP_P="0.5 1", MAX_SENTENCES="5")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    ins = "--task insertion_translation --insertion-mode"
    dinic = ck / "dinic" / "checkpoint_avg.pt"
    assert (ck / "slot_mass.tsv").read_text() == (
        f"AR+KD greedy\t{ck / 'ar_kd' / 'checkpoint_avg.pt'}\t--beam 1\n"
        f"InsNet-Dinic, one word a step\t{dinic}\t{ins} sequential\n"
        f"InsNet-Dinic, slot top-p 0.5\t{dinic}\t{ins} parallel --slot-top-p 0.5\n"
        f"InsNet-Dinic, slot top-p 1\t{dinic}\t{ins} parallel --slot-top-p 1\n")
    with open(f"{out}.csv", newline="") as f:
        rows = {r["system"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["AR+KD greedy", "InsNet-Dinic, one word a step", "InsNet-Dinic, slot top-p 0.5",
                          "InsNet-Dinic, slot top-p 1"]
    for r in rows.values():
        assert float(r["passes_per_token"]) > 0 and float(r["ms_b1"]) > 0 and float(r["ms_b64"]) > 0, r
        assert r["device"] == "cpu" and r["threads"] == "1"
    one = rows["InsNet-Dinic, one word a step"]  # sequential: one call a word and the initial pass
    assert float(one["passes_per_token"]) == float(one["calls_per_token"]) > 1.0
    assert float(rows["AR+KD greedy"]["diff"]) == 0.0
    assert out.with_suffix(".png").exists() and "valid, 5 sentences" in out.with_suffix(".txt").read_text()
