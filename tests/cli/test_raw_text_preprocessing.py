"""Raw text is tokenised as the training data was (insnet_fairseq/data/preprocessing.py): recipes/prepare_bitext.py
records its settings with the data-bin, and fairseq-interactive and the hub interface apply them, so that Multi30k-style
lines with hyphens, & and quotes get exactly the source ids of their preparation, without <unk>."""
import os
import sys

import pytest

from conftest import BIN, run, train_cmd

SUBJECTS = ["A man", "A woman", "Two boys", "A girl", "The dog's owner", "A black-and-white dog", "An older man"]
WEARING = ["a T-shirt", "a red T-shirt", "a \"Rock & Roll\" cap", "a blue-green jacket", "jeans & boots"]
ACTIONS = ["runs on the grass .", "sits on a bench .", "plays in the snow .", "jumps into the water ."]
GERMAN = {"A man": "Ein Mann", "A woman": "Eine Frau", "Two boys": "Zwei Jungen", "A girl": "Ein Mädchen",
          "The dog's owner": "Der Besitzer des Hundes", "A black-and-white dog": "Ein schwarz-weißer Hund",
          "An older man": "Ein älterer Mann", "a T-shirt": "einem T-Shirt", "a red T-shirt": "einem roten T-Shirt",
          "a \"Rock & Roll\" cap": "einer \"Rock & Roll\" Mütze", "a blue-green jacket": "einer blaugrünen Jacke",
          "jeans & boots": "Jeans & Stiefeln", "runs on the grass .": "läuft auf dem Gras .",
          "sits on a bench .": "sitzt auf einer Bank .", "plays in the snow .": "spielt im Schnee .",
          "jumps into the water .": "springt ins Wasser ."}


def pairs():
    out = []
    for s in SUBJECTS:
        for w in WEARING:
            for a in ACTIONS:
                out.append((f"{s} in {w} {a}", f"{GERMAN[s]} in {GERMAN[w]} {GERMAN[a]}"))
    return out


@pytest.fixture(scope="module")
def hyphen_data(tmp_path_factory):
    """(data-bin, work dir, raw dir) of a raw corpus of caption pairs with hyphens, & and quotes, prepared by
    recipes/prepare_bitext.py; and a tiny InsNet trained 2 updates on it."""
    tmp = tmp_path_factory.mktemp("hyphens")
    raw = tmp / "raw"
    raw.mkdir()
    data = pairs()
    splits = {"train": data, "valid": data[::7], "test": data[3::5]}
    for split, rows in splits.items():
        for i, lang in enumerate(("en", "de")):
            (raw / f"{split}.{lang}").write_text("".join(r[i] + "\n" for r in rows), encoding="utf-8")
    out = run([sys.executable, "recipes/prepare_bitext.py", "--name", "hy", "--raw-dir", str(raw), "--src", "en",
               "--tgt", "de", "--bpe-merges", "200", "--workers", "1", "--work-dir", str(tmp / "work"), "--dest-dir",
               str(tmp / "bin")], timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "raw-text settings" in out.stdout
    bin_, work = str(tmp / "bin" / "hy"), str(tmp / "work" / "hy")
    trained = run(train_cmd(bin_, str(tmp / "ckpt"), "--max-update", "2"), timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    return bin_, work, str(raw), str(tmp / "ckpt" / "checkpoint_last.pt")


def prepared(work, raw):
    """(raw test line, its source line as prepared: BPE text) for every test pair kept."""
    with open(os.path.join(raw, "test.en"), encoding="utf-8") as f:
        raw_lines = [line.rstrip("\n") for line in f]
    with open(os.path.join(work, "test.bpe.en"), encoding="utf-8") as f:
        bpe_lines = [line.rstrip("\n") for line in f]
    assert len(raw_lines) == len(bpe_lines)
    return list(zip(raw_lines, bpe_lines))


def test_interactive_tokenises_raw_text_as_prepared(hyphen_data):
    data, work, raw, ckpt = hyphen_data
    rows = prepared(work, raw)
    assert any("-" in r for r, _ in rows) and any("&" in r for r, _ in rows) and any('"' in r for r, _ in rows)
    out = run([os.path.join(BIN, "fairseq-interactive"), data, "--user-dir", "insnet_fairseq", "--task",
               "insertion_translation", "--path", ckpt, "--max-insertion-steps", "2"],
              input="".join(r + "\n" for r, _ in rows), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    sources = {int(l.split("\t")[0][2:]): l.split("\t", 1)[1] for l in out.stdout.splitlines() if l.startswith("S-")}
    assert [sources[i] for i in range(len(rows))] == [b for _, b in rows]  # the same BPE tokens: the same ids
    assert "<unk>" not in out.stdout
    assert "raw text tokenised as the training data was" in out.stderr


def test_interactive_warns_when_the_command_line_asks_for_other_settings(hyphen_data):
    data, work, raw, ckpt = hyphen_data
    out = run([os.path.join(BIN, "fairseq-interactive"), data, "--user-dir", "insnet_fairseq", "--task",
               "insertion_translation", "--path", ckpt, "--max-insertion-steps", "2", "--tokenizer", "moses",
               "-s", "en", "-t", "de"], input="A man in a T-shirt runs .\n", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    warning = next(l for l in out.stderr.splitlines() if "is not how the training data was tokenised" in l)
    assert "--tokenizer moses (escaping" in warning and "preprocessing.json" in warning  # both settings named


def test_hub_tokenises_raw_text_as_prepared(hyphen_data):
    from insnet_fairseq.models.insnet import InsNetModel

    data, work, raw, ckpt = hyphen_data
    hub = InsNetModel.from_pretrained(os.path.dirname(ckpt), checkpoint_file=os.path.basename(ckpt),
                                      data_name_or_path=data, max_insertion_steps=2)
    for line, bpe in prepared(work, raw):
        ids = hub.encode(line)
        assert ids.tolist() == hub.src_dict.encode_line(bpe, add_if_not_exist=False).tolist(), line
        assert hub.src_dict.unk() not in ids.tolist(), line
    # constraint phrases are target text: the German side's tokenisation and BPE vocabulary
    de = hub.task.target_encoder(hub._encode_text)("schwarz-weißer Hund & \"Rock & Roll\"")
    ids = hub.tgt_dict.encode_line(de, append_eos=False, add_if_not_exist=False).tolist()
    assert hub.tgt_dict.unk() not in ids
    assert isinstance(hub.translate(["A man in a T-shirt runs .\teinem T-Shirt"], constraints="ordered")[0], str)
