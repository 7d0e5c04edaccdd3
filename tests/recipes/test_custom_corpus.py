"""Bring your own corpus (`make custom`, recipes/custom.py over recipes/prepare_bitext.py): a
synthetic language pair that is not Multi30k, whose source side arrives Moses-tokenised with Moses
escapes and whose target side is raw text, goes through preparation, a few training updates and
recipes/evaluate.py; bad input is reported with its file and line and the test references stay
aligned with what is binarised."""
import os
import random
import subprocess
import sys

from conftest import ENV, ROOT

from recipes import prepare_bitext

SRC, TGT = "xx", "yy"
# a made-up pair: yy is xx word by word through this table, then Moses-detokenised (raw text)
WORDS = {"the": "la", "a": "una", "cat": "gata", "dog": "perra", "bird": "pajara", "man": "hombra", "child": "nina",
         "sees": "mira", "likes": "ama", "has": "tiene", "red": "roja", "small": "chica", "old": "vieja",
         "toy": "juguete", "ball": "pelota", "house": "casa", "big": "grande", "and": "y", "is": "es", "in": "en",
         "garden": "jardin", "'s": "suyo", "green": "verde", "very": "muy"}
NOUNS = ["cat", "dog", "bird", "man", "child", "toy", "ball", "house", "garden"]
ADJS = ["red", "small", "old", "big", "green"]


def sentence(rng):
    """One xx sentence as tokens (Moses-tokenised, unescaped)."""
    np = lambda: [rng.choice(["the", "a"])] + ([rng.choice(ADJS)] if rng.random() < 0.5 else []) + [rng.choice(NOUNS)]  # noqa: E731
    kind = rng.random()
    if kind < 0.15:  # a possessive and a quotation: what Moses escapes
        return np() + ["'s", "toy", "is", '"', rng.choice(ADJS), '"', "."]
    if kind < 0.3:
        return np() + ["is", "very", rng.choice(ADJS), ",", "and", "old", "."]
    return np() + [rng.choice(["sees", "likes", "has"])] + np() + (["in", "the", "garden"] if rng.random() < 0.3 else []) + ["."]


def escape(tokens):
    return " ".join(t.replace("&", "&amp;").replace("'", "&apos;").replace('"', "&quot;") for t in tokens)


def make_corpus(raw_dir, sizes=(160, 24, 24), seed=0):
    """{train,valid,test}.{xx,yy}: xx Moses-tokenised and escaped, yy raw. Returns {split: (xx, yy)}."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang="en")
    rng = random.Random(seed)
    os.makedirs(raw_dir, exist_ok=True)
    corpus = {}
    for split, n in zip(("train", "valid", "test"), sizes):
        xs, ys = [], []
        for _ in range(n):
            toks = sentence(rng)
            xs.append(escape(toks))
            y = detok.detokenize([WORDS.get(t, t) for t in toks])
            ys.append(y[0].upper() + y[1:])
        corpus[split] = (xs, ys)
        write_split(raw_dir, split, xs, ys)
    return corpus


def write_split(raw_dir, split, xs, ys):
    for lang, rows in ((SRC, xs), (TGT, ys)):
        with open(os.path.join(raw_dir, f"{split}.{lang}"), "w", encoding="utf-8", newline="") as f:
            f.write("".join(r + "\n" for r in rows))


def read(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        return [l.rstrip("\n") for l in f]


def prepare(raw, tmp, *extra):
    cmd = [sys.executable, "recipes/prepare_bitext.py", "--name", "c", "--raw-dir", str(raw), "--src", SRC, "--tgt", TGT,
           "--bpe-merges", "100", "--workers", "1", "--work-dir", str(tmp / "work"), "--dest-dir", str(tmp / "bin"), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)


def n_sentences(prefix):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    return len(MMapIndexedDataset(prefix))


def test_make_custom_end_to_end(tmp_path):
    raw = tmp_path / "raw"
    corpus = make_corpus(raw)
    xs, ys = corpus["test"]
    ys[6] = ""  # an empty target side in the test set: dropped, and reported with its file and line
    train_x, train_y = corpus["train"]
    train_y[3] = train_y[3].replace(" ", "\u2028", 1)  # a line separator inside a line: no extra line
    write_split(raw, "test", xs, ys)
    write_split(raw, "train", train_x, train_y)
    cmd = ["make", "-s", "-o", ".venv/.installed", "custom", "NAME=toy", f"SRC={SRC}", f"TGT={TGT}", f"RAW_DIR={raw}",
           f"WORK_DIR={tmp_path / 'work'}", f"DEST_DIR={tmp_path / 'bin'}", f"SAVE_DIR={tmp_path / 'ckpt'}",
           "BPE_MERGES=100", f"CSV={tmp_path / 'row.csv'}", "UPDATES=12", "WARMUP=4", "MAX_TOKENS=512", "THREADS=1",
           "TRAIN_ARGS=--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
           "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --disable-validation --log-interval 4",
           "GEN_ARGS=--max-insertion-steps 4"]
    out = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]

    # detection: the source side came tokenised with escapes, the target side raw
    assert f"{SRC}: Moses/HTML escapes (&apos; &quot;) on" in log and f"first {raw}/train.{SRC}:" in log
    assert f"{SRC}: " in log and "already tokenised, kept as it is" in log
    assert f"{TGT}: " in log and "raw text, Moses-tokenised" in log
    work = tmp_path / "work" / "toy"
    tok_x = read(work / f"train.tok.{SRC}")
    assert len(tok_x) == 160 and not any("&apos;" in l or "&quot;" in l for l in tok_x)
    assert any(" 's toy is \" " in l for l in tok_x)  # kept, not tokenised again into "' s"
    assert not any("' s" in l for l in tok_x)
    tok_y = read(work / f"train.tok.{TGT}")
    assert len(tok_y) == 160 and any(l.endswith(" .") for l in tok_y)  # Moses split the raw side
    assert "\u2028" not in tok_y[3]  # the line separator became a space, the line stayed one line
    assert n_sentences(str(tmp_path / "bin" / "toy" / f"train.{SRC}-{TGT}.{TGT}")) == 160

    # the dropped test line: named with its file and line, and the references skip it
    assert f"test: dropped 1 pair(s) with an empty side: {raw}/test.{TGT}:7" in log
    assert "DROPPED FROM THE TEST SET" in log
    kept = [i for i in range(24) if i != 6]
    assert read(work / "test.lines") == [str(i + 1) for i in kept]
    assert read(work / f"test.ref.{TGT}") == [ys[i] for i in kept]  # raw references, aligned
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=SRC)
    assert read(work / f"test.ref.{SRC}") == [detok.detokenize(prepare_bitext.unescape(xs[i]).split()) for i in kept]
    assert n_sentences(str(tmp_path / "bin" / "toy" / f"test.{SRC}-{TGT}.{TGT}")) == 23

    # training and evaluation ran on it: one row, scored on the 23 kept test pairs
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()
    assert "sacreBLEU" in out.stdout and "steps_per_token" in out.stdout
    rows = read(tmp_path / "row.csv")
    assert len(rows) == 2 and rows[1].startswith("toy insnet sequential,")


def test_line_count_mismatch_names_file_and_line(tmp_path):
    raw = tmp_path / "raw"
    corpus = make_corpus(raw, sizes=(20, 5, 5))
    xs, ys = corpus["valid"]
    write_split(raw, "valid", xs, ys[:4])
    out = prepare(raw, tmp_path)
    assert out.returncode != 0
    assert (f"line-count mismatch: {raw}/valid.{SRC} has 5 lines but {raw}/valid.{TGT} has 4: line 5 of "
            f"{raw}/valid.{SRC} has no counterpart") in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "bin").exists()  # nothing binarised


def test_carriage_return_inside_a_line_is_not_a_line_break(tmp_path):
    raw = tmp_path / "raw"
    corpus = make_corpus(raw, sizes=(30, 5, 5))
    xs, ys = corpus["train"]
    ys[2] = ys[2].replace(" ", "\r", 1)  # a lone CR: universal newlines would split this line in two
    write_split(raw, "train", xs, ys)
    out = prepare(raw, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"{raw}/train.{TGT}:3: 1 line(s) hold a carriage return" in out.stdout
    work = tmp_path / "work" / "c"
    assert len(read(work / f"train.tok.{TGT}")) == len(read(work / f"train.bpe.{TGT}")) == 30


def test_empty_sides_are_reported_with_file_and_line(tmp_path):
    raw = tmp_path / "raw"
    corpus = make_corpus(raw, sizes=(30, 5, 5))
    xs, ys = corpus["train"]
    xs[4], ys[9] = "", "   "
    write_split(raw, "train", xs, ys)
    out = prepare(raw, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"train: dropped 2 pair(s) with an empty side: {raw}/train.{SRC}:5, {raw}/train.{TGT}:10" in out.stdout
    assert n_sentences(str(tmp_path / "bin" / "c" / f"train.{SRC}-{TGT}.{SRC}")) == 28

    # a whole side empty: nothing left to binarise, said with the file
    tmp2 = tmp_path / "second"
    xs, ys = corpus["test"]
    write_split(raw, "test", xs, [""] * len(ys))
    write_split(raw, "train", *corpus["train"])
    out = prepare(raw, tmp2)
    assert out.returncode != 0
    assert "test: no sentence pair is left" in out.stderr and f"{raw}/test.{TGT}:1" in out.stderr


def test_detection_can_be_forced(tmp_path):
    raw = tmp_path / "raw"
    make_corpus(raw, sizes=(30, 5, 5))
    out = prepare(raw, tmp_path, "--tokenized", "no", "--unescape", "no")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "escapes" not in out.stdout and "sampled training lines" not in out.stdout
    tok = read(tmp_path / "work" / "c" / f"train.tok.{SRC}")
    assert any("& apos ;" in l for l in tok)  # what a Moses corpus becomes without the normalisation
