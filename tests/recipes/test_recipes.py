"""Data recipes (recipes/corpora.py, the code path of `make multi30k|wmt-ro-en|wmt-en-de|wat-en-ja`)
and distillation (recipes/distill.py, `make distill-NAME`) on the few hundred generated sentence pairs
of tests/synthetic_corpus.py laid out under each corpus' raw file names: fairseq-train accepts every data-bin;
Romanian normalisation; fail-fast without network or local copy; checked downloads; idempotence."""
import csv
import gzip
import http.server
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading

import pytest
import torch

import synthetic_corpus
from conftest import ROOT

from experiments import candidate_oracle
from recipes import corpora
from recipes import distill
from recipes import distill_lm
from experiments import lm_pair_summary
from experiments import lm_valid_choice
from recipes import romanian

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1")
N = synthetic_corpus.N_LINES  # sentence pairs per split


def lines(split, lang):
    """One side ('en' or 'de') of one split of the generated corpus: N raw lines."""
    return synthetic_corpus.lines(split, lang)


def write(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in rows))


def write_sgm(path, rows, lang):
    segs = "".join(f'<seg id="{i}"> {r} </seg>\n' for i, r in enumerate(rows, 1))
    write(path, [f'<srcset setid="t" srclang="any">\n<doc sysid="ref" docid="d1" genre="news" origlang="{lang}">\n'
                 f"{segs}</doc>\n</srcset>"])


def recipe(name, tmp, raw_dir, *extra, env=None):
    cmd = [sys.executable, "recipes/corpora.py", name, "--raw-dir", str(raw_dir), "--work-dir", str(tmp / "work"),
           "--dest-dir", str(tmp / "bin"), "--bpe-merges", "200", "--workers", "1", *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env or ENV, capture_output=True, text=True, timeout=600)


def assert_ok(out):
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def assert_fairseq_trains(data, src, tgt):
    """Two updates of a tiny fairseq transformer on the data-bin."""
    cmd = [os.path.join(BIN, "fairseq-train"), str(data), "--user-dir", "insnet_fairseq", "--task", "translation",
           "--source-lang", src, "--target-lang", tgt, "--arch", "transformer", "--encoder-layers", "1",
           "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
           "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
           "--decoder-attention-heads", "2", "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3",
           "--max-tokens", "1024", "--max-update", "2", "--disable-validation", "--no-save", "--num-workers", "0",
           "--log-format", "simple", "--log-interval", "1"]
    out = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "done training" in log and "num_updates 2" in log, log[-2000:]


def n_sentences(prefix):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    return len(MMapIndexedDataset(prefix))


def snapshot(*dirs):
    return {os.path.join(r, f): os.stat(os.path.join(r, f)).st_mtime_ns
            for d in dirs for r, _, fs in os.walk(d) for f in fs}


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory=None, handler=None):
    """A local HTTP server (thread); returns (base URL, server)."""
    h = handler or (lambda *a, **kw: Quiet(*a, directory=str(directory), **kw))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_env():
    """Every URL goes through a proxy that refuses connections: no network, whatever the machine."""
    proxy = f"http://127.0.0.1:{closed_port()}"
    env = {k: v for k, v in ENV.items() if k.lower() != "no_proxy"}
    env.update(http_proxy=proxy, https_proxy=proxy, HTTP_PROXY=proxy, HTTPS_PROXY=proxy)
    return env


# ---------------------------------------------------------------- Romanian


def test_romanian_normalisation_and_diacritics():
    assert romanian.clean("Şi ţara în care") == "Si tara in care"  # cedilla forms
    assert romanian.clean("Și țara în care") == "Si tara in care"  # comma-below forms
    assert romanian.clean("ŞŢȘȚĂÂÎ şţșțăâî") == "STSTAAI ststaai"
    assert romanian.normalise_romanian("Ş ş Ţ ţ") == "\u0218 \u0219 \u021a \u021b"  # comma below, kept
    assert romanian.remove_diacritics("Învăţământ") == "Invaţamant"  # alone it assumes comma forms
    tok = romanian.make_tokenizer("ro")
    assert tok("„Ţara” – în 2016, Ştefan a spus: «Bună!»") == '" Tara " - in 2016 , Stefan a spus : " Buna ! "'


# ---------------------------------------------------------------- downloads


PAYLOAD = gzip.compress("".join(f"line {i}\n" for i in range(5000)).encode())


class Truncating(http.server.BaseHTTPRequestHandler):
    """Announces the whole file, sends half of it and hangs up."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD[: len(PAYLOAD) // 2])

    def log_message(self, *args):
        pass


def test_download_is_checked_and_atomic(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "good.en.gz").write_bytes(PAYLOAD)
    (tmp_path / "site" / "cut.en.gz").write_bytes(PAYLOAD[:-40])  # complete transfer, damaged gzip
    base, server = serve(tmp_path / "site")
    bad, bad_server = serve(handler=Truncating)
    out = tmp_path / "dl"
    try:
        cases = [(f"{bad}/x.en.gz", "", "truncated: received"),  # fewer bytes than Content-Length
                 (f"{base}/good.en.gz", "0" * 32, "md5"),  # wrong checksum
                 (f"{base}/cut.en.gz", "", "download of"),  # gzip integrity
                 ((tmp_path / "site" / "cut.en.gz").as_uri(), "", "download of")]  # file:// too
        for url, md5, message in cases:
            dest = out / "x.en.gz"
            with pytest.raises(corpora.RecipeError, match=message):
                corpora.download(url, str(dest), md5=md5)
            assert not dest.exists() and not (out / "x.en.gz.part").exists(), url
        import hashlib

        corpora.download(f"{base}/good.en.gz", str(out / "good.en.gz"), md5=hashlib.md5(PAYLOAD).hexdigest())
        assert (out / "good.en.gz").read_bytes() == PAYLOAD and not (out / "good.en.gz.part").exists()
    finally:
        server.shutdown()
        bad_server.shutdown()


def test_recipes_fail_fast_without_network_or_local_copy(tmp_path):
    for name, needs in [("wmt-ro-en", ["europarl-v8.ro-en.ro", "SETIMES.en-ro.en", "newstest2016-roen-src.ro.sgm",
                                      "https://data.statmt.org/wmt16/translation-task/training-parallel-ep-v8.tgz",
                                      "https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip"]),
                        ("wmt-en-de", ["commoncrawl.de-en.de", "newstest2014-deen-ref.de.sgm",
                                       "https://statmt.org/wmt14/test-full.tgz"]),
                        ("multi30k", ["val.de.gz", "https://raw.githubusercontent.com/multi30k/dataset"]),
                        ("wat-en-ja", ["train/train-1.txt", "dev/dev.txt", "https://jipsti.jst.go.jp/aspec/"])]:
        out = recipe(name, tmp_path, tmp_path / "empty", env=offline_env())
        assert out.returncode != 0, out.stdout
        for need in needs:
            assert need in out.stderr, (name, need, out.stderr)
        assert "RAW_DIR=" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "bin").exists()
    assert not any(f.endswith((".tgz", ".gz", ".zip", ".part")) for _, _, fs in os.walk(tmp_path) for f in fs)


# ---------------------------------------------------------------- the recipes on the generated corpus


@pytest.fixture(scope="module")
def multi30k_bin(tmp_path_factory):
    """`multi30k` without a local copy: downloaded (gzipped, under the project's names) from a
    local HTTP server through --mirror, then prepared."""
    tmp = tmp_path_factory.mktemp("m30k")
    site = tmp / "site"
    site.mkdir()
    for split, orig in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("en", "de"):
            (site / f"{orig}.{lang}.gz").write_bytes(gzip.compress("".join(
                l + "\n" for l in lines(split, lang)).encode()))
    base, server = serve(site)
    try:
        out = recipe("multi30k", tmp, tmp / "no-local-copy", "--mirror", base)
    finally:
        server.shutdown()
    assert_ok(out)
    assert "downloading" in out.stderr and f"{base}/val.de.gz" in out.stderr
    assert (tmp / "work" / "raw" / "multi30k_en_de" / "valid.de").read_text(encoding="utf-8").splitlines() == \
        lines("valid", "de")
    return tmp, tmp / "bin" / "multi30k_en_de", out


def test_multi30k_download_fallback_trains(multi30k_bin):
    tmp, data, _ = multi30k_bin
    assert n_sentences(str(data / "train.en-de.de")) == N
    assert_fairseq_trains(data, "en", "de")


def test_wmt_ro_en_recipe_and_idempotence(tmp_path):
    raw = tmp_path / "raw"
    de, en = lines("train", "de"), lines("train", "en")
    de[0], en[0] = "Şi ţara în care Ștefan învață", "And the country where Stefan learns"
    half = N // 2
    # the German side plays Romanian; Europarl nested as in its archive, SETIMES flat
    write(str(raw / "training-parallel-ep-v8/europarl-v8.ro-en.ro"), de[:half])
    write(str(raw / "training-parallel-ep-v8/europarl-v8.ro-en.en"), en[:half])
    write(str(raw / "SETIMES.en-ro.ro"), de[half:])
    write(str(raw / "SETIMES.en-ro.en"), en[half:])
    for split, stem in (("valid", "dev/newsdev2016"), ("test", "test/newstest2016")):
        write_sgm(str(raw / f"{stem}-roen-src.ro.sgm"), lines(split, "de"), "ro")
        write_sgm(str(raw / f"{stem}-roen-ref.en.sgm"), lines(split, "en"), "ro")
    out = recipe("wmt-ro-en", tmp_path, raw)
    assert_ok(out)
    data = tmp_path / "bin" / "wmt16_ro_en"
    assert n_sentences(str(data / "valid.ro-en.ro")) == N and n_sentences(str(data / "test.ro-en.en")) == N
    tok = (tmp_path / "work" / "wmt16_ro_en" / "train.tok.ro").read_text(encoding="utf-8").splitlines()
    assert len(tok) == N and tok[0] == "Si tara in care Stefan invata"
    assert_fairseq_trains(data, "ro", "en")

    before = snapshot(tmp_path / "work", tmp_path / "bin")
    again = recipe("wmt-ro-en", tmp_path, raw)
    assert_ok(again)
    assert snapshot(tmp_path / "work", tmp_path / "bin") == before  # nothing rewritten
    for step in ("assemble train", "tokenise ro", "learn BPE", "binarise"):
        assert f"{step}: done before, skipped" in again.stdout, again.stdout


def _tgz(path, files):
    with tarfile.open(path, "w:gz") as tar:
        for name, rows in files.items():
            data = "".join(r + "\n" for r in rows).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_wmt_en_de_recipe_from_archives(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    en, de = lines("train", "en"), lines("train", "de")
    en[5], de[5] = "a b c d e f g h i j", "x"  # length ratio 10: dropped from train
    thirds = [(0, 100), (100, 200), (200, N)]
    for (a, b), (archive, stem) in zip(thirds, [("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en"),
                                               ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
                                               ("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en")]):
        _tgz(raw / archive, {f"{stem}.en": en[a:b], f"{stem}.de": de[a:b]})
    # the test sets' archives have published md5s, so they are given as extracted files
    write_sgm(str(raw / "test/newstest2013-src.en.sgm"), lines("valid", "en"), "en")
    write_sgm(str(raw / "test/newstest2013-src.de.sgm"), lines("valid", "de"), "en")
    write_sgm(str(raw / "test-full/newstest2014-deen-src.en.sgm"), lines("test", "en"), "en")
    write_sgm(str(raw / "test-full/newstest2014-deen-ref.de.sgm"), lines("test", "de"), "en")
    out = recipe("wmt-en-de", tmp_path, raw)
    assert_ok(out)
    assert re.search(r"train: dropped \d+ pair\(s\) over the length limits", out.stdout), out.stdout
    kept = (tmp_path / "work" / "wmt14_en_de" / "train.clean.en").read_text(encoding="utf-8").splitlines()
    assert "a b c d e f g h i j" not in kept and len(kept) < N
    extracted = tmp_path / "work" / "raw" / "wmt14_en_de" / "training" / "news-commentary-v9.de-en.de"
    assert extracted.read_text(encoding="utf-8").splitlines() == de[200:]
    data = tmp_path / "bin" / "wmt14_en_de"
    assert n_sentences(str(data / "train.en-de.en")) == len(kept)
    assert_fairseq_trains(data, "en", "de")


def test_wat_en_ja_recipe(tmp_path):
    from recipes import japanese

    try:
        japanese.ensure_installed()  # what the recipe does on first use: pip install fugashi unidic-lite
    except SystemExit as e:
        pytest.fail(f"the wat-en-ja recipe needs fugashi and unidic-lite, and pip could not install them: {e}")
    raw = tmp_path / "ASPEC-JE"
    en, ja = lines("train", "en"), lines("train", "de")  # German plays Japanese, plus real Japanese:
    en[0], ja[0] = "I study natural language processing at the University of Tokyo.", "私は東京大学で自然言語処理を研究しています。"
    half = N // 2
    for name, a, b in (("train-1", 0, half), ("train-2", half, N)):
        write(str(raw / "train" / f"{name}.txt"),
              [f"0.9 ||| {name}-{i} ||| {i} ||| {j} ||| {e}" for i, (j, e) in enumerate(zip(ja[a:b], en[a:b]))])
    for split, name in (("valid", "dev"), ("test", "test")):
        write(str(raw / name / f"{name}.txt"),
              [f"{name}-{i} ||| {i} ||| {j} ||| {e}" for i, (j, e) in enumerate(zip(lines(split, "de"), lines(split, "en")))])
    out = recipe("wat-en-ja", tmp_path, raw)
    assert_ok(out)
    tok = (tmp_path / "work" / "wat_en_ja" / "train.tok.ja").read_text(encoding="utf-8").splitlines()
    assert tok[0] == "私 は 東京 大学 で 自然 言語 処理 を 研究 し て い ます 。"
    data = tmp_path / "bin" / "wat_en_ja"
    assert n_sentences(str(data / "train.en-ja.ja")) == N
    assert_fairseq_trains(data, "en", "ja")


# ---------------------------------------------------------------- distillation


def test_distillation_on_a_tiny_slice(multi30k_bin):
    tmp, data, _ = multi30k_bin
    env = dict(ENV, UPDATES="2", WARMUP="1", MAX_TOKENS="1024", BEAM="2", GEN_BATCH="100",
               GEN_ARGS="--max-len-a 0 --max-len-b 6",
               TEACHER_ARGS="--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
                            "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
                            "--decoder-attention-heads 2 --disable-validation --log-interval 1")
    cmd = [sys.executable, "recipes/distill.py", "multi30k_en_de", "--data-dir", str(tmp / "bin"),
           "--work-dir", str(tmp / "work"), "--checkpoint-dir", str(tmp / "ckpt")]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert_ok(out)
    assert (tmp / "ckpt" / "multi30k_en_de-teacher" / "checkpoint_last.pt").exists()
    dest = tmp / "bin" / "multi30k_en_de-distill"
    for lang in ("en", "de"):
        assert n_sentences(str(dest / f"train.en-de.{lang}")) == n_sentences(str(data / f"train.en-de.{lang}")) == N
        assert (dest / f"dict.{lang}.txt").read_bytes() == (data / f"dict.{lang}.txt").read_bytes()
        for split in ("valid", "test"):
            assert (dest / f"{split}.en-de.{lang}.bin").read_bytes() == (data / f"{split}.en-de.{lang}.bin").read_bytes()
    work = tmp / "work" / "multi30k_en_de-distill"
    # the source side is the original BPE text, in corpus order; the target side the teacher's
    assert (work / "train.en").read_text(encoding="utf-8") == \
        (tmp / "work" / "multi30k_en_de" / "train.bpe.en").read_text(encoding="utf-8")
    hyps = (work / "train.de").read_text(encoding="utf-8").splitlines()
    generated = [l.split("\t") for l in (work / "generate-train.txt").read_text(encoding="utf-8").splitlines()]
    best = {int(l[0][2:]): l[2] for l in generated if l[0].startswith("H-")}
    refs = {int(l[0][2:]): l[1] for l in generated if l[0].startswith("T-")}
    assert sorted(best) == list(range(N))
    assert hyps == [best[i] or refs[i] for i in range(N)]  # the beam output by id; an empty one keeps the reference
    assert any(hyps[i] != refs[i] for i in range(N))  # (a 2-update teacher does not reproduce the references)
    assert all(len(best[i].split()) <= 6 for i in range(N))  # GEN_ARGS reached fairseq-generate

    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert_ok(again)
    for step in ("teacher", "decoding", "distilled text", "binarise"):
        assert f"distill: {step}: done before, skipped" in again.stdout, again.stdout

    # a second teacher's corpus beside the first (--suffix), from a given checkpoint (TEACHER)
    teacher = tmp / "ckpt" / "multi30k_en_de-teacher" / "checkpoint_last.pt"
    other = subprocess.run(cmd + ["--suffix", "distill-b"], cwd=ROOT, env=dict(env, TEACHER=str(teacher)),
                           capture_output=True, text=True, timeout=600)
    assert_ok(other)
    assert "training the teacher" not in other.stdout
    assert (tmp / "work" / "multi30k_en_de-distill-b" / "train.de").read_text(encoding="utf-8").splitlines() == hyps
    assert n_sentences(str(tmp / "bin" / "multi30k_en_de-distill-b" / "train.en-de.de")) == N


def test_distillation_each_corpus_has_its_own_teacher():
    assert distill.teacher_dir("ck", "multi30k_en_de", "distill") == os.path.join("ck", "multi30k_en_de-teacher")
    assert distill.teacher_dir("ck", "multi30k_en_de", "distill-long") == \
        os.path.join("ck", "multi30k_en_de-distill-long-teacher")  # not the first teacher's folder, done or not


def test_distillation_teacher_decodes_by_its_task(tmp_path):
    import torch

    assert distill.teacher_decoding("translation", 5) == ["--task", "translation", "--beam", "5"]
    insnet = ["--task", "insertion_translation", "--insertion-mode", "sequential", "--beam", "1"]
    assert distill.teacher_decoding("insertion_translation", 1) == insnet  # greedy: no insertion beam
    assert distill.teacher_decoding("insertion_translation", 5) == insnet + ["--insertion-beam", "5"]
    with pytest.raises(SystemExit, match="--task insertion_lm"):
        distill.teacher_decoding("insertion_lm", 5)
    ckpt = tmp_path / "teacher.pt"
    torch.save({"cfg": {"task": {"_name": "insertion_translation"}}, "model": {}}, ckpt)
    assert distill.checkpoint_task(str(ckpt)) == "insertion_translation"
    other = tmp_path / "other.pt"
    torch.save({"cfg": {"task": {"_name": "translation"}}, "model": {}}, other)
    assert distill.ensemble_paths(f"{ckpt}:{other}") == [str(ckpt), str(other)]  # fairseq's --path ensemble
    assert distill.checkpoint_task(f"{ckpt}:{ckpt}") == "insertion_translation"  # an ensemble of one task
    with pytest.raises(SystemExit, match="different tasks: .*teacher.pt \\(insertion_translation\\), .*other.pt \\(translation\\)"):
        distill.checkpoint_task(f"{ckpt}:{other}")
    with pytest.raises(SystemExit, match="no such checkpoint .*missing.pt"):
        distill.ensemble_paths(f"{ckpt}:{tmp_path / 'missing.pt'}")
    with pytest.raises(SystemExit, match="empty path"):
        distill.ensemble_paths(":")
    torch.save({"model": {}}, ckpt)
    with pytest.raises(SystemExit, match="cannot tell the task"):
        distill.checkpoint_task(str(ckpt))


# ---------------------------------------------------------------- distillation, keywords -> sentence


def test_candidate_rerankers_pick_as_their_docstrings_say():
    """candidate_oracle's offline rerankers: the judge + W x own + B x length mix, and the noisy-channel judge whose
    channel score is the W = 1 decoding's score minus the judge's."""
    judge = {0: [("a b", -1.0, 2), ("a", -0.9, 1)], 1: [("c", -0.2, 1), ("c d", -0.3, 2)]}
    own = {0: [("a b", -0.2, 2), ("a", -0.1, 1)], 1: [("c", -0.5, 1), ("c d", -0.1, 2)]}
    assert candidate_oracle.mixed_picks(own, judge, 0, 0) == {0: "a", 1: "c"}
    assert candidate_oracle.mixed_picks(own, judge, 0, 0.2) == {0: "a b", 1: "c d"}
    assert candidate_oracle.mixed_picks(own, judge, 1, 0) == {0: "a", 1: "c d"}  # -0.3 - 0.1 > -0.2 - 0.5
    both = {0: [("a b", -1.5, 2), ("a", -2.0, 1)], 1: [("c", -0.4, 1), ("c d", -0.4, 2)]}  # channel -0.5/-1.1, -0.2/-0.1
    assert candidate_oracle.channel_picks(judge, both, 0) == {0: "a", 1: "c"}
    assert candidate_oracle.channel_picks(judge, both, 0.5) == {0: "a b", 1: "c"}  # -0.2 - 0.1 > -0.3 - 0.05
    assert candidate_oracle.channel_picks(judge, both, 5) == {0: "a b", 1: "c d"}  # -0.2 - 1.0 < -0.3 - 0.5
    # the combined scores, best first (what MBR weighs): -1.0 + 0.5 x -0.5 and -0.9 + 0.5 x -1.1
    combined = candidate_oracle.channel_scored(judge, both, 0.5)[0]
    assert [(t, n) for t, _, n in combined] == [("a b", 2), ("a", 1)]
    assert [s for _, s, _ in combined] == pytest.approx([-1.25, -1.45])
    # a second judge's score added with weight 0.5 (the docstring's example), and a weight that changes nothing
    second = {0: [("a", -1.5, 1), ("a b", -0.5, 2)]}
    added = candidate_oracle.added_scored({0: judge[0]}, second, 0.5)[0]
    assert [(t, n) for t, _, n in added] == [("a b", 2), ("a", 1)]
    assert [s for _, s, _ in added] == pytest.approx([-1.25, -1.65])
    assert [t for t, _, _ in candidate_oracle.added_scored({0: judge[0]}, second, 0.0)[0]] == ["a", "a b"]


def test_log_linear_reranker_joins_the_scores_and_fits_weights_that_score_higher():
    """feature_table joins every decoding's scores by candidate text (the channel: both minus judge; a repeated
    candidate kept once, its own score the better trajectory's); linear_picks adds the weighted features to the
    judge's score; fit_weights moves a weight only where the objective rises, and parse_weights refuses unknown names."""
    judge = {0: [("a b", -1.0, 2), ("a", -0.9, 1), ("a", -0.9, 1)], 1: [("c", -0.2, 1), ("c d", -0.3, 2)]}
    own = {0: [("a b", -0.2, 2), ("a", -0.4, 1), ("a", -0.1, 1)], 1: [("c", -0.5, 1), ("c d", -0.1, 2)]}
    both = {0: [("a b", -1.5, 2), ("a", -2.0, 1)], 1: [("c", -0.4, 1), ("c d", -0.4, 2)]}
    table = candidate_oracle.feature_table(judge, own, both)
    assert [t for t, _ in table[0]] == ["a b", "a"]  # the judge's order, "a" once
    assert table[0][1][1] == pytest.approx({"judge": -0.9, "length": 1.0, "own": -0.1, "channel": -1.1})
    assert candidate_oracle.linear_picks(table, {}) == {0: "a", 1: "c"}
    assert candidate_oracle.linear_picks(table, {"channel": 0.5}) == \
        candidate_oracle.channel_picks(judge, both, 0.5) == {0: "a b", 1: "c"}
    assert candidate_oracle.linear_picks(table, {"length": 0.2}) == {0: "a b", 1: "c d"}
    # an objective that counts the picks of two words: the length bonus alone reaches 2 from 0
    weights, best = candidate_oracle.fit_weights(table, lambda picks: sum(len(p.split()) == 2 for p in picks.values()))
    assert best == 2 and candidate_oracle.linear_picks(table, weights) == {0: "a b", 1: "c d"}
    weights, best = candidate_oracle.fit_weights(table, lambda picks: 0.0)  # nothing rises: every weight stays 0
    assert best == 0.0 and set(weights.values()) == {0.0} and set(weights) == {"channel", "own", "length"}
    assert candidate_oracle.parse_weights("channel=0.5, length=0.05") == {"channel": 0.5, "length": 0.05}
    with pytest.raises(SystemExit, match="'beam=1' is not FEATURE=VALUE"):
        candidate_oracle.parse_weights("beam=1")


def test_lm_valid_choice_picks_the_highest_bleu4_and_needs_a_trained_row(tmp_path):
    rows = [("best", {"bleu4": 29.5}), ("last", {"bleu4": 29.5}), ("avg", {"bleu4": 29.8})]
    assert lm_valid_choice.chosen(rows) == "avg"
    assert lm_valid_choice.chosen(rows[:2]) == "best"  # a tie goes to the first
    with pytest.raises(SystemExit, match="checkpoint_last.pt not found: train the row first"):
        lm_valid_choice.main(["--data", str(tmp_path), "--dir", str(tmp_path / "none"), "--", "--task", "insertion_lm"])


def test_candidate_oracle_mbr_picks_follow_the_docstring():
    """Minimum Bayes risk: the consensus candidate with uniform weights, the judge's favourite at a low temperature."""
    def shared(h, r):
        return len(set(h.split()) & set(r.split()))

    scored = {0: [("a b c", -1.0, 3), ("a b d", -1.1, 3), ("x y", -0.5, 2)]}
    assert candidate_oracle.mbr_picks(scored, float("inf"), shared) == {0: "a b c"}
    assert candidate_oracle.mbr_picks(scored, 0.01, shared) == {0: "x y"}
    assert candidate_oracle.mbr_picks({0: [("a", -1.0, 1)]}, 1.0) == {0: "a"}  # sacreBLEU utility, one candidate


def test_distillation_runs_fairseq_without_its_console_scripts(tmp_path, monkeypatch):
    """Beside a Python with fairseq's console scripts (a virtual environment) distill.py runs them; where fairseq is
    only importable (fairseq on PYTHONPATH, no console scripts installed) it runs its modules."""
    from recipes import common  # fairseq_tool lives there, distill imports it

    monkeypatch.setattr(common, "BIN", str(tmp_path))
    assert distill.fairseq_tool("generate") == [sys.executable, "-m", "fairseq_cli.generate"]
    assert distill.fairseq_tool("preprocess") == [sys.executable, "-m", "fairseq_cli.preprocess"]
    (tmp_path / "fairseq-generate").write_text("#!/bin/sh\n")
    assert distill.fairseq_tool("generate") == [str(tmp_path / "fairseq-generate")]
    import importlib.util
    assert all(importlib.util.find_spec(f"fairseq_cli.{t}") for t in ("generate", "preprocess"))


def test_ensemble_kd_refuses_bad_arguments_by_name(tmp_path):
    """experiments/ensemble_kd.sh: an unknown variant, a folder that is not its OUT, a missing OUT, a missing
    corpus for the baselines stage."""
    def run(*args, **env):
        p = subprocess.run(["bash", "experiments/ensemble_kd.sh", *args], cwd=ROOT, capture_output=True, text=True,
                           env={k: v for k, v in dict(ENV, **env).items() if k != "OUT" or v})
        return p.returncode, p.stderr
    code, err = run("continue", "zigzag")
    assert code == 2 and "not 'zigzag'" in err
    code, err = run("eval", "zigzag")
    assert code == 2 and "not 'zigzag'" in err
    code, err = run("eval", "mbr", PAR_RUN="nowhere")
    assert code == 2 and "checkpoints/gpuens_nowhere/checkpoint_last.pt missing" in err
    code, err = run("unpack", str(tmp_path))
    assert code == 2 and "no *.pt.gz in" in err
    code, err = run("unpack", str(tmp_path / "nowhere"))
    assert code == 2 and "is not a folder" in err
    code, err = run(OUT="")
    assert code != 0 and "OUT" in err
    code, err = run("baselines", OUT=str(tmp_path / "out"), DISTILL_SUFFIX="nowhere")
    assert code == 2 and "data-bin/multi30k_en_de-nowhere missing" in err


def test_lm_distillation_keeps_every_keyword_in_order():
    assert distill_lm.keeps_keywords(["man", "hat"], "a man in a red hat .".split())
    assert not distill_lm.keeps_keywords(["man", "hat"], "a hat on a man .".split())  # out of order
    assert not distill_lm.keeps_keywords(["man", "man"], "a man .".split())  # a keyword twice needs it twice
    assert distill_lm.keeps_keywords([], "anything".split())
    out = distill_lm.distilled_sentences({0: "a man in a hat .", 1: "a dog .", 2: ""},
                                         ["a man with a hat .", "two cats sleep .", "a bird ."], ["man hat", "cats", ""])
    assert out == (["a man in a hat .", "two cats sleep .", "a bird ."], 2)  # missing keyword, empty: originals


def test_lm_distillation_on_a_tiny_slice(lm_data, tmp_path):
    from conftest import AR_TINY, LM_LINES

    data, work = str(tmp_path / "bin"), str(tmp_path / "work")  # a copy: lm_data is shared by other tests
    for name in ("lm_small", "lm_small-ar"):
        shutil.copytree(os.path.join(os.path.dirname(lm_data), name), os.path.join(data, name))
    shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(lm_data)), "work", "lm_small"),
                    os.path.join(work, "lm_small"))
    lm_data = os.path.join(data, "lm_small")
    teacher = tmp_path / "teacher"
    out = subprocess.run([os.path.join(BIN, "fairseq-train"), lm_data + "-ar", "--user-dir", "insnet_fairseq",
                          "--task", "translation", *AR_TINY,
                          "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "512", "--max-update", "2",
                          "--disable-validation", "--save-dir", str(teacher), "--no-epoch-checkpoints",
                          "--num-workers", "0"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert_ok(out)
    cmd = [sys.executable, "recipes/distill_lm.py", "lm_small", "--teacher", str(teacher / "checkpoint_last.pt"),
           "--data-dir", data, "--work-dir", work, "--suffix", "kd-test"]
    env = dict(ENV, BEAM="2", GEN_BATCH="100", GEN_ARGS="--max-len-a 0 --max-len-b 6")
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert_ok(out)
    dest = os.path.join(data, "lm_small-kd-test")
    assert n_sentences(os.path.join(dest, "train")) == LM_LINES
    for name in ("dict.txt", "train.keywords", "valid.bin", "valid.idx", "test.bin", "test.idx", "test.keywords",
                 "test.ref"):  # the same dictionary, keywords and held-out sets
        with open(os.path.join(dest, name), "rb") as a, open(os.path.join(lm_data, name), "rb") as b:
            assert a.read() == b.read(), name
    kd_work = os.path.join(work, "lm_small-kd-test")
    sentences = open(os.path.join(kd_work, "train.tok"), encoding="utf-8").read().splitlines()
    originals = open(os.path.join(work, "lm_small", "train.tok"), encoding="utf-8").read().splitlines()
    keywords = open(os.path.join(lm_data, "train.keywords"), encoding="utf-8").read().splitlines()
    generated = [l.split("\t") for l in open(os.path.join(kd_work, "generate-train.txt"), encoding="utf-8")
                 .read().splitlines()]
    best = {int(l[0][2:]): l[2] for l in generated if l[0].startswith("H-")}
    assert sorted(best) == list(range(LM_LINES))
    assert all(len(h.split()) <= 6 for h in best.values())  # GEN_ARGS reached fairseq-generate
    fallback = 0
    for i, s in enumerate(sentences):  # the teacher's sentence where it keeps the keywords, else the original
        keeps = bool(best[i].strip()) and distill_lm.keeps_keywords(keywords[i].split(), best[i].split())
        fallback += not keeps
        assert s == (best[i] if keeps else originals[i]), i
        assert distill_lm.keeps_keywords(keywords[i].split(), s.split()), i
    assert f"{LM_LINES - fallback} from the teacher, {fallback} originals kept" in out.stdout, out.stdout
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert_ok(again)
    for step in ("decoding", "distilled text", "binarise"):
        assert f"distill: {step}: done before, skipped" in again.stdout, again.stdout
    # an ensemble teacher (fairseq's a.pt:b.pt): two copies of one model average to that model, the same corpus
    last = str(teacher / "checkpoint_last.pt")
    ens = subprocess.run(cmd[:3] + ["--teacher", f"{last}:{last}"] + cmd[5:-1] + ["kd-ens"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert_ok(ens)
    assert f"--path {last}:{last}" in ens.stdout, ens.stdout
    assert open(os.path.join(work, "lm_small-kd-ens", "train.tok"), encoding="utf-8").read().splitlines() == sentences
    # --with-originals: the distilled sentences, then the originals, each line with its keywords
    raw = subprocess.run(cmd[:-1] + ["kd-raw", "--with-originals"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert_ok(raw)
    assert open(os.path.join(work, "lm_small-kd-raw", "train.tok"), encoding="utf-8").read().splitlines() == \
        sentences + originals
    assert open(os.path.join(data, "lm_small-kd-raw", "train.keywords"), encoding="utf-8").read().splitlines() == \
        keywords + keywords
    assert n_sentences(os.path.join(data, "lm_small-kd-raw", "train")) == 2 * LM_LINES


# ---------------------------------------------------------------- the constrained-generation pair's verdict

def test_lm_pair_summary_takes_the_valid_choice_of_each_seed(tmp_path, capsys):
    def folder(name, valid, test):
        d = tmp_path / name
        d.mkdir()
        for file, rows in (("valid_lenpen.csv", valid), ("lm_table.csv", test)):
            (d / file).write_text("model,bleu4\n" + "".join(f'"{m}",{b}\n' for m, b in rows))
        return str(d)

    ar = folder("ar", [("ar_s1 beam 5 lenpen 1", 30.0), ("ar_s1 beam 5 lenpen 2.2", 30.5),
                       ("ar_s2 beam 5 lenpen 1", 31.0), ("ar_s2 beam 5 lenpen 2.2", 31.0),  # equals: the first
                       ("ar_s1 beam 10 lenpen 1", 40.0), ("ar_s4 beam 5 lenpen 1", 29.0)],
                [("ar_s1 beam 5, lenpen 2.2 (valid)", 31.0), ("ar_s1 greedy", 50.0), ("ar_s2 beam 5, lenpen 1 (valid)", 31.5),
                 ("ar_s2 beam 5, lenpen 2.2 (valid)", 99.0), ("ar_s4 beam 5, lenpen 1 (valid)", 30.0)])
    kd = folder("kd", [("kd_s1 beam 5 lenpen 2.2", 30.0), ("kd_s2 beam 5 lenpen 3", 30.5)],
                [("kd_s1 beam 5, lenpen 2.2 (valid)", 31.5), ("kd_s2 beam 5, lenpen 3 (valid)", 31.0)])
    lm_pair_summary.main(["--ar", ar, "--insnet", kd])
    out = capsys.readouterr().out.splitlines()
    assert out[3] == "| 1 | 2.2: 30.50 / 31.00 | 2.2: 30.00 / 31.50 | -0.50 / +0.50 |"
    assert out[4] == "| 2 | 1: 31.00 / 31.50 | 3: 30.50 / 31.00 | -0.50 / -0.50 |"  # seed 4: AR only, left out
    assert out[5] == "| mean of 2 | 30.75 / 31.25 | 30.25 / 31.25 | **-0.50 / +0.00** |"
    assert len(out) == 6
    # a folder with both systems' rows (a third seed's pair), beside the first folders: kd rows are not AR rows
    both = folder("s3", [("ar_s3 beam 5 lenpen 1", 29.0), ("kd_s3 beam 5 lenpen 1", 29.5)],
                  [("ar_s3 beam 5, lenpen 1 (valid)", 30.0), ("kd_s3 beam 5, lenpen 1 (valid)", 31.0)])
    lm_pair_summary.main(["--ar", ar, both, "--insnet", kd, both])
    out = capsys.readouterr().out.splitlines()
    assert out[5] == "| 3 | 1: 29.00 / 30.00 | 1: 29.50 / 31.00 | +0.50 / +1.00 |" and out[6].startswith("| mean of 3 |")
    with pytest.raises(SystemExit, match="scores ar seed.*3.*again"):
        lm_pair_summary.main(["--ar", ar, both, both, "--insnet", kd])
    with pytest.raises(SystemExit, match="no seed scored for both"):
        lm_pair_summary.main(["--ar", ar, "--insnet", kd, "--beam", "10"])
    with pytest.raises(SystemExit, match="valid_lenpen.csv not found"):
        lm_pair_summary.main(["--ar", ar, "--insnet", str(tmp_path)])


def test_frontier_gpu_stage_writes_its_systems_and_refuses_without_a_gpu(tiny_checkpoint, ar_checkpoint, tmp_path):
    """recipes/frontier.sh gpu: the test stage's systems but the variants' and the no-skip-repeats rows, each on a
    decoding-only fp16 copy of its checkpoint (CK/half/RUN.pt), in the test stage's order and flags; on a machine
    where torch finds no GPU it stops there, saying so (this suite runs on such a machine)."""
    ck = tmp_path / "ck"
    runs = {"ar_kd": ar_checkpoint, "l2r_kd": tiny_checkpoint, "dinic": tiny_checkpoint, "dinic_late": tiny_checkpoint,
            "parallel": tiny_checkpoint}
    for r, src in runs.items():
        (ck / r).mkdir(parents=True)
        shutil.copy(src, ck / r / "checkpoint_avg.pt")
    par = "--task insertion_translation --insertion-mode parallel"
    rows = [("AR+KD greedy", "ar_kd", "--beam 1"), ("AR+KD beam 5", "ar_kd", "--beam 5"),
            ("InsNet l2r+KD sequential", "l2r_kd", "--task insertion_translation --insertion-mode sequential"),
            ("InsNet parallel 1 candidate", "parallel", par),
            ("InsNet-Dinic 1 candidate", "dinic", par),
            ("InsNet-Dinic 1 candidate, always fused", "dinic", par + " --fuse-slot-queries"),
            ("InsNet-Dinic 1 candidate, two passes", "dinic", par + " --no-fuse-slot-queries"),
            ("InsNet-Dinic 1 candidate, no skip repeats", "dinic", par + " --no-skip-repeats"),
            ("InsNet-Dinic 8 candidates + MBR", "dinic", par + " --insertion-candidates 8 --insertion-candidates-mbr 1"),
            ("InsNet-Dinic 1 candidate, late words", "dinic_late", par)]
    (ck / "test.tsv").write_text("".join(f"{n}\t{ck / r / 'checkpoint_avg.pt'}\t{f}\n" for n, r, f in rows))
    env = dict(ENV, CK=str(ck), GPU_OUT=str(tmp_path / "gpu"), CUDA_VISIBLE_DEVICES="")
    p = subprocess.run(["bash", "recipes/frontier.sh", "gpu"], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 2 and "frontier.sh gpu: torch finds no GPU" in p.stderr, p.stderr[-3000:]
    kept = [(n, str(ck / "half" / f"{r}.pt"), f) for n, r, f in rows if "no skip" not in n and "late" not in n]
    assert (ck / "gpu.tsv").read_text() == "".join(f"{n}\t{c}\t{f}\n" for n, c, f in kept)
    for r in ("ar_kd", "l2r_kd", "dinic", "parallel"):
        half = torch.load(ck / "half" / f"{r}.pt", map_location="cpu")
        assert "last_optimizer_state" not in half
        assert all(t.dtype == torch.float16 for t in half["model"].values() if t.is_floating_point())
    assert not (ck / "half" / "dinic_late.pt").exists() and not (tmp_path / "gpu.csv").exists()


def test_frontier_choose_stage_picks_the_rule_stores_stop_checks_and_scores_the_variants(
        tiny_checkpoint, ar_checkpoint, gap_checkpoint, small_data, raw_corpus, tmp_path):
    """recipes/frontier.sh choose on tiny runs (DATA and MULTI30K_DIR name the corpus): the checkpoint rule with the
    higher valid sacreBLEU summed over the runs writes the test stage's systems file; each InsNet-Dinic run gets the
    best stop check of STOP_CHECKS on valid stored with its checkpoint, InsNet parallel the best --end-of-slot of
    END_OF_SLOT; each variant is scored against InsNet-Dinic on valid. The variant here is InsNet-Dinic's own
    checkpoint, so it decodes the same: a difference of exactly 0."""
    ck = tmp_path / "ck"
    runs = {"ar_kd": ar_checkpoint, "l2r_kd": tiny_checkpoint, "dinic": tiny_checkpoint, "dinic_late": tiny_checkpoint,
            "parallel": gap_checkpoint}
    for r, src in runs.items():
        (ck / r).mkdir(parents=True)
        for name in ("checkpoint_1_10.pt", "checkpoint_last.pt"):
            shutil.copy(src, ck / r / name)
        (ck / r / "done").touch()
    env = dict(ENV, CK=str(ck), DATA=small_data, MULTI30K_DIR=raw_corpus, VARIANTS="dinic_late", STOP_CHECKS="0.5 0.9",
               END_OF_SLOT="0.3 0.7")
    p = subprocess.run(["bash", "recipes/frontier.sh", "choose"], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    def rows(name):
        with open(ck / f"{name}.csv") as f:
            return {r["system"]: r for r in csv.DictReader(f)}
    sums = {rule: sum(float(r["sacrebleu"]) for r in rows(f"valid_{rule}").values()) for rule in ("last", "avg")}
    rule = max(sums, key=lambda k: sums[k])  # a tie keeps the first, as the recipe's strict ">"
    assert f"frontier.sh: chosen on valid: {rule}" in p.stdout
    assert set(rows(f"valid_{rule}")) == {"AR+KD greedy", "InsNet l2r+KD sequential", "InsNet parallel 1 candidate",
                                          "InsNet-Dinic 1 candidate", "InsNet-Dinic 1 candidate, late words"}
    chosen = {"last": "checkpoint_last.pt", "avg": "checkpoint_avg.pt"}[rule]
    systems = [line.split("\t") for line in (ck / "test.tsv").read_text().splitlines()]
    assert [s[0] for s in systems][-1] == "InsNet-Dinic 1 candidate, late words" and len(systems) == 11
    assert all(path == str(ck / run / chosen) for _, path, _ in systems
               for run in [os.path.basename(os.path.dirname(path))])
    for run, flag in (("dinic", "stop_check_prob"), ("dinic_late", "stop_check_prob"), ("parallel", "end_of_slot")):
        scored = rows(f"valid_{flag}_{run}")
        best = max(scored, key=lambda k: float(scored[k]["sacrebleu"])).split()[-1]
        assert f"frontier.sh: {run}'s --{flag.replace('_', '-')} chosen on valid: {best}" in p.stdout
        state = torch.load(ck / run / chosen, map_location="cpu")
        assert state["cfg"]["model"].decoding_defaults == {"parallel": {flag: float(best)}}
    variants = rows("valid_variants")
    assert list(variants) == ["InsNet-Dinic 1 candidate", "InsNet-Dinic 1 candidate, late words"]
    late = variants["InsNet-Dinic 1 candidate, late words"]
    assert late["sacrebleu"] == variants["InsNet-Dinic 1 candidate"]["sacrebleu"]
    assert float(late["diff"]) == float(late["diff_low"]) == float(late["diff_high"]) == 0.0


def test_frontier_recipe_refuses_bad_stages_variants_and_untrained_runs_by_name(tmp_path):
    """recipes/frontier.sh: an unknown stage, run or variant, the choose stage before every run it scores is trained (a
    variant included), the variants stage with none asked for (the default, and VARIANTS=), the train stage before its
    teacher's corpus (KD_SUFFIX's) exists."""
    base = {k: v for k, v in ENV.items() if k != "VARIANTS"}  # the recipe's default, whatever the caller's shell set

    def run(*args, **env):
        p = subprocess.run(["bash", "recipes/frontier.sh", *args], cwd=ROOT, capture_output=True, text=True,
                           env=dict(base, CK=str(tmp_path / "ck"), **env))
        return p.returncode, p.stdout, p.stderr
    code, _, err = run("zigzag")
    assert code == 2 and "unknown stage 'zigzag'" in err
    code, _, err = run("variants", VARIANTS="dinic_zigzag")
    assert code == 2 and "unknown variant 'dinic_zigzag'" in err
    code, _, err = run("train", RUNS="ar_kd zigzag")
    assert code == 2 and "unknown run 'zigzag' in RUNS" in err
    for r in ("dinic", "parallel"):  # alone, before l2r_kd has the update they start from
        code, _, err = run("train", RUNS=r)
        assert code == 2 and f"{r} starts from l2r_kd's update 1000, which does not exist: add l2r_kd to RUNS" in err
    for variants in ({}, {"VARIANTS": ""}):
        code, out, _ = run("variants", **variants)
        assert code == 0 and "no VARIANTS, variants stage skipped" in out
    code, _, err = run("choose")
    assert code == 2 and f"{tmp_path / 'ck' / 'ar_kd'} is not trained" in err
    code, _, err = run("train", DATA=str(tmp_path / "corpus"), KD_SUFFIX="distill-long")  # another teacher's corpus
    assert code == 2 and f"{tmp_path / 'corpus'}-distill-long missing: run the teacher stage first" in err
    code, _, err = run("choose", VARIANTS="")
    assert code == 2 and f"{tmp_path / 'ck' / 'ar_kd'} is not trained" in err
    for r in ("ar_kd", "l2r_kd", "dinic"):
        (tmp_path / "ck" / r).mkdir(parents=True)
        (tmp_path / "ck" / r / "done").touch()
    code, _, err = run("choose", VARIANTS="")  # the new parallel model is a frontier run
    assert code == 2 and f"{tmp_path / 'ck' / 'parallel'} is not trained" in err
    (tmp_path / "ck" / "parallel").mkdir(parents=True)
    (tmp_path / "ck" / "parallel" / "done").touch()
    code, _, err = run("choose", VARIANTS="dinic_repeat dinic_late")  # the variants asked for are frontier runs too
    assert code == 2 and f"{tmp_path / 'ck' / 'dinic_repeat'} is not trained" in err
    code, _, err = run("choose", VARIANTS="dinic_late")
    assert code == 2 and f"{tmp_path / 'ck' / 'dinic_late'} is not trained" in err
