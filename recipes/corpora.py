#!/usr/bin/env python
"""The data recipes: a catalogue of corpora, finding or downloading their raw files, and the
common pipeline (recipes/prepare_bitext.py) that writes data-bin/<name>/.

    python recipes/corpora.py NAME [--raw-dir DIR] [--work-dir work] [--dest-dir data-bin]
    make NAME RAW_DIR=DIR                        # the same, after `make install`

NAME          data-bin/           train / valid / test                                  BPE merges
multi30k      multi30k_en_de      Multi30k task 1 train / val / test_2016_flickr        10,000
wmt-ro-en     wmt16_ro_en         Europarl v8 + SETIMES2 / newsdev2016 / newstest2016   40,000
wmt-en-de     wmt14_en_de         Europarl v7 + CommonCrawl + News Commentary v9 (the
                                  standard 4.5M pairs) / newstest2013 / newstest2014    40,000
wat-en-ja     wat_en_ja           ASPEC-JE train-1 + train-2 (2M) / dev / test          40,000

Any other corpus of {train,valid,test}.{xx,yy} files: ``make custom`` (recipes/custom.py).
All use joint subword-nmt BPE and one joined dictionary (fairseq-preprocess
--joined-dictionary). wmt-en-de uses 40,000 merges like fairseq's prepare-wmt14en2de.sh (32,000
is also common; --bpe-merges changes it). Tokenisation is sacremoses (Moses) except: Romanian is
normalised and loses its diacritics first (recipes/romanian.py, the WMT16 Edinburgh scripts), and
Japanese is segmented into words with MeCab (recipes/japanese.py: fugashi + unidic-lite,
pip-installed on first use). The WMT training sets also drop pairs longer than 250 tokens or with
a length ratio above 1.5 (Moses clean-corpus-n, as fairseq's WMT scripts); ASPEC only the length.

Raw files. Each recipe reads the files listed below by their paths inside the official archives,
looking in RAW_DIR (``--raw-dir``; at that relative path, or flat in RAW_DIR by base name), then in
the download folder (``--download-dir``, default work/raw/<name>/). An archive found in either place
under the name below is checked and the files are extracted from it into the download folder. What
is still missing is downloaded (progress on stderr) into ``<archive>.part``, checked (the md5 where
sacrebleu publishes one, else the byte count against Content-Length) and the archive's integrity
(gzip CRC, tar or zip structure) read through before it is renamed; a truncated or corrupt download
is deleted and the recipe stops, so it is never binarised. Without a local copy and without network
the recipe stops after a short reachability probe (seconds), naming the files and their URLs.

- multi30k: RAW_DIR (default ../shared/data/multi30k, MULTI30K_DIR) holds train.en train.de valid.en
  valid.de test.en test.de, or the project's gzipped files train.{en,de}.gz, val.{en,de}.gz,
  test_2016_flickr.{en,de}.gz from github.com/multi30k/dataset (data/task1/raw).
- wmt-ro-en: training-parallel-ep-v8/europarl-v8.ro-en.{ro,en} (training-parallel-ep-v8.tgz),
  SETIMES.en-ro.{ro,en} (OPUS SETIMES v2 moses en-ro.txt.zip), dev/newsdev2016-roen-src.ro.sgm and
  dev/newsdev2016-roen-ref.en.sgm (WMT16 dev.tgz, here named wmt16-dev.tgz),
  test/newstest2016-roen-src.ro.sgm and test/newstest2016-roen-ref.en.sgm (WMT16 test.tgz, here
  wmt16-test.tgz). Source side Romanian: data-bin/wmt16_ro_en serves both directions.
- wmt-en-de: training/europarl-v7.de-en.{en,de} (training-parallel-europarl-v7.tgz),
  commoncrawl.de-en.{en,de} (training-parallel-commoncrawl.tgz),
  training/news-commentary-v9.de-en.{en,de} (training-parallel-nc-v9.tgz),
  test/newstest2013-src.{en,de}.sgm (WMT13 test.tgz, here wmt13-test.tgz),
  test-full/newstest2014-deen-src.en.sgm and test-full/newstest2014-deen-ref.de.sgm (test-full.tgz).
- wat-en-ja: ASPEC needs a licence and is never downloaded: request ASPEC-JE at
  https://jipsti.jst.go.jp/aspec/ and pass its ASPEC-JE folder as RAW_DIR: train/train-1.txt,
  train/train-2.txt (``score ||| id ||| n ||| ja ||| en``), dev/dev.txt, test/test.txt
  (``id ||| n ||| ja ||| en``).

Idempotent: found files, extracted files, the assembled corpus (work/<name>/raw/) and every step of
prepare_bitext.py are skipped when already there. ``--max-lines``, ``--bpe-merges`` are for tests
and quick runs; ``--mirror URL`` fetches every archive as URL/<archive name> instead.
"""
import argparse
import gzip
import hashlib
import itertools
import os
import re
import shutil
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field

from recipes import prepare_bitext

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Archive:
    """A file to fetch: ``name`` on disk, ``url``, the ``members`` the recipe reads from it (for a
    single gzipped file: the one output name) and its md5 when a published one is known."""
    name: str
    url: str
    members: tuple
    md5: str = ""


@dataclass(frozen=True)
class Part:
    """Sentence pairs of one split from raw files. kind ``text``: two aligned plain-text files;
    ``sgm``: two WMT SGML files (the <seg> lines); ``aspec``: one ASPEC file, ``fields`` = the
    indices of the source and target fields among its ``|||``-separated fields."""
    kind: str
    src: str
    tgt: str = ""
    fields: tuple = ()


@dataclass
class Corpus:
    recipe: str
    name: str
    src: str
    tgt: str
    bpe_merges: int
    splits: dict
    archives: list = field(default_factory=list)
    tokenizers: dict = field(default_factory=dict)
    clean: tuple = (0, 0.0)  # training pairs: max tokens, max length ratio (0: off)
    how_to_get: str = ""

    def files(self):
        return [p for parts in self.splits.values() for part in parts for p in (part.src, part.tgt) if p]


MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
WMT16 = "https://data.statmt.org/wmt16/translation-task/"
EP8 = "training-parallel-ep-v8/europarl-v8.ro-en"
NEWS = {"ro": ("dev/newsdev2016-roen-src.ro.sgm", "dev/newsdev2016-roen-ref.en.sgm"),
        "ro-test": ("test/newstest2016-roen-src.ro.sgm", "test/newstest2016-roen-ref.en.sgm"),
        "de-valid": ("test/newstest2013-src.en.sgm", "test/newstest2013-src.de.sgm"),
        "de-test": ("test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm")}
DE_TRAIN = ("training/europarl-v7.de-en", "commoncrawl.de-en", "training/news-commentary-v9.de-en")

CORPORA = {c.recipe: c for c in [
    Corpus("multi30k", "multi30k_en_de", "en", "de", 10000,
           {s: [Part("text", f"{s}.en", f"{s}.de")] for s in SPLITS},
           [Archive(f"{orig}.{l}.gz", f"{MULTI30K}{orig}.{l}.gz", (f"{split}.{l}",))
            for split, orig in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")) for l in ("en", "de")],
           how_to_get="the Multi30k project, https://github.com/multi30k/dataset (data/task1/raw)"),
    Corpus("wmt-ro-en", "wmt16_ro_en", "ro", "en", 40000,
           {"train": [Part("text", f"{EP8}.ro", f"{EP8}.en"), Part("text", "SETIMES.en-ro.ro", "SETIMES.en-ro.en")],
            "valid": [Part("sgm", *NEWS["ro"])], "test": [Part("sgm", *NEWS["ro-test"])]},
           [Archive("training-parallel-ep-v8.tgz", WMT16 + "training-parallel-ep-v8.tgz", (f"{EP8}.ro", f"{EP8}.en")),
            Archive("en-ro.txt.zip", "https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip",
                    ("SETIMES.en-ro.ro", "SETIMES.en-ro.en")),
            Archive("wmt16-dev.tgz", WMT16 + "dev.tgz", NEWS["ro"], md5="4a3dc2760bb077f4308cce96b06e6af6"),
            Archive("wmt16-test.tgz", WMT16 + "test.tgz", NEWS["ro-test"], md5="3d809cd0c2c86adb2c67034d15c4e446")],
           tokenizers={"ro": "romanian"}, clean=(250, 1.5),
           how_to_get="WMT16, https://www.statmt.org/wmt16/translation-task.html, and OPUS SETIMES v2"),
    Corpus("wmt-en-de", "wmt14_en_de", "en", "de", 40000,
           {"train": [Part("text", f"{c}.en", f"{c}.de") for c in DE_TRAIN],
            "valid": [Part("sgm", *NEWS["de-valid"])], "test": [Part("sgm", *NEWS["de-test"])]},
           [Archive("training-parallel-europarl-v7.tgz", "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
                    (f"{DE_TRAIN[0]}.en", f"{DE_TRAIN[0]}.de")),
            Archive("training-parallel-commoncrawl.tgz", "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
                    (f"{DE_TRAIN[1]}.en", f"{DE_TRAIN[1]}.de")),
            Archive("training-parallel-nc-v9.tgz", "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
                    (f"{DE_TRAIN[2]}.en", f"{DE_TRAIN[2]}.de")),
            Archive("wmt13-test.tgz", "https://statmt.org/wmt13/test.tgz", NEWS["de-valid"],
                    md5="48eca5d02f637af44e85186847141f67"),
            Archive("test-full.tgz", "https://statmt.org/wmt14/test-full.tgz", NEWS["de-test"],
                    md5="a8cd784e006feb32ac6f3d9ec7eb389a")],
           clean=(250, 1.5), how_to_get="WMT14, https://www.statmt.org/wmt14/translation-task.html"),
    Corpus("wat-en-ja", "wat_en_ja", "en", "ja", 40000,
           {"train": [Part("aspec", "train/train-1.txt", fields=(4, 3)), Part("aspec", "train/train-2.txt", fields=(4, 3))],
            "valid": [Part("aspec", "dev/dev.txt", fields=(3, 2))], "test": [Part("aspec", "test/test.txt", fields=(3, 2))]},
           tokenizers={"ja": "japanese"}, clean=(250, 0.0),
           how_to_get="ASPEC-JE, which needs a licence and is never downloaded: request it at "
                      "https://jipsti.jst.go.jp/aspec/ and pass its ASPEC-JE folder as RAW_DIR"),
]}


class RecipeError(Exception):
    pass


# ---------------------------------------------------------------- downloads and checks


def _progress(name, got, total, state):
    now = time.time()
    if now - state.get("t", 0) < 2 and got != total:
        return
    state["t"] = now
    size = f"{got / 2 ** 20:.1f} MiB" + (f" of {total / 2 ** 20:.1f} MiB ({100 * got / total:.0f}%)" if total else "")
    print(f"  {name}: {size}", file=sys.stderr, flush=True)


def check_integrity(path: str, name: str) -> None:
    """Read an archive through: gzip CRC and length, tar structure, zip CRCs. Raises on damage."""
    if name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(path, "r|gz") as tar:
            for member in tar:
                f = tar.extractfile(member)
                while f and f.read(1 << 20):
                    pass
    elif name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad:
                raise RecipeError(f"{name}: damaged member {bad}")
    elif name.endswith(".gz"):
        with gzip.open(path) as g:
            while g.read(1 << 20):
                pass


def md5sum(path: str) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: str, md5: str = "", timeout: float = 60) -> str:
    """Fetch ``url`` to ``dest`` through ``dest.part``, showing progress; keep it only if the byte
    count matches Content-Length, the md5 matches (when given) and the archive reads through.
    Otherwise delete the .part file and raise RecipeError."""
    part = dest + ".part"
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    name = os.path.basename(dest)
    print(f"downloading {url} -> {dest}", file=sys.stderr, flush=True)
    try:
        digest, got, state = hashlib.md5(), 0, {}
        with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            for chunk in iter(lambda: response.read(1 << 20), b""):
                out.write(chunk)
                digest.update(chunk)
                got += len(chunk)
                _progress(name, got, total, state)
        if total is not None and got != total:
            raise RecipeError(f"truncated: received {got} of {total} bytes")
        if md5 and digest.hexdigest() != md5:
            raise RecipeError(f"md5 {digest.hexdigest()} is not the published {md5}")
        check_integrity(part, name)
    except BaseException as e:  # interrupted too: never leave a partial file behind
        if os.path.exists(part):
            os.remove(part)
        if isinstance(e, Exception):
            raise RecipeError(f"download of {url} failed, nothing kept: {e}") from e
        raise
    os.replace(part, dest)
    return dest


def probe(url: str, timeout: float = 4.0):
    """None if the server of ``url`` answers within ``timeout`` seconds, else the reason."""
    result = []

    def run():
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            result.append(None)
        except urllib.error.HTTPError:
            result.append(None)  # it answered
        except Exception as e:  # noqa: BLE001 - any failure means unreachable
            result.append(f"{type(e).__name__}: {getattr(e, 'reason', e)}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout + 1)
    return result[0] if result else f"no answer within {timeout:.0f} s"


def _member_matches(member: str, wanted: str) -> bool:
    member = member[2:] if member.startswith("./") else member
    return member == wanted or member.endswith("/" + wanted)


def extract(archive_path: str, archive: Archive, out_dir: str, wanted) -> None:
    """Copy the ``wanted`` members of an (already checked) archive to out_dir/<member path>."""
    wanted = [w for w in wanted if not os.path.exists(os.path.join(out_dir, w))]
    if not wanted:
        return
    print(f"extracting {', '.join(wanted)} from {archive_path}", flush=True)

    def save(fileobj, rel):
        dest = os.path.join(out_dir, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest + ".part", "wb") as out:
            shutil.copyfileobj(fileobj, out, 1 << 20)
        os.replace(dest + ".part", dest)
        wanted.remove(rel)

    name = archive.name
    if name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(archive_path, "r|gz") as tar:
            for member in tar:
                rel = next((w for w in wanted if member.isfile() and _member_matches(member.name, w)), None)
                if rel:
                    save(tar.extractfile(member), rel)
    elif name.endswith(".zip"):
        with zipfile.ZipFile(archive_path) as z:
            for member in z.namelist():
                rel = next((w for w in wanted if _member_matches(member, w)), None)
                if rel:
                    with z.open(member) as f:
                        save(f, rel)
    elif name.endswith(".gz"):
        with gzip.open(archive_path) as f:
            save(f, wanted[0])
    if wanted:
        raise RecipeError(f"{archive_path} has no {', '.join(wanted)}")


# ---------------------------------------------------------------- finding the raw files


class Finder:
    """Looks a raw file up in RAW_DIR (by its path, then its base name), then the download dir."""

    def __init__(self, raw_dir, download_dir):
        self.raw_dir, self.download_dir = raw_dir, download_dir

    def find(self, rel):
        candidates = [os.path.join(self.download_dir, rel)]
        if self.raw_dir:
            candidates[:0] = [os.path.join(self.raw_dir, rel), os.path.join(self.raw_dir, os.path.basename(rel))]
        return next((c for c in candidates if os.path.isfile(c)), None)

    def missing(self, corpus):
        return [f for f in corpus.files() if not self.find(f)]


def missing_message(corpus, missing, finder, reason) -> str:
    where = f"RAW_DIR={finder.raw_dir}" if finder.raw_dir else "no RAW_DIR given"
    lines = [f"{corpus.recipe}: raw files missing ({where}; download folder {finder.download_dir}): {reason}.",
             f"Needed, from {corpus.how_to_get}:"]
    for archive in corpus.archives:
        need = [m for m in archive.members if m in missing]
        if need:
            lines.append(f"  {', '.join(need)}\n      from {archive.name}: {archive.url}")
    for f in missing:
        if not any(f in a.members for a in corpus.archives):
            lines.append(f"  {f}")
    lines.append(f"Put them{' (or the archives, under the names above)' if corpus.archives else ''} in a folder and "
                 f"run: make {corpus.recipe} RAW_DIR=/path/to/folder")
    return "\n".join(lines)


def fetch(corpus, finder, mirror="") -> None:
    """Make every raw file of ``corpus`` available: extract from local archives, else download
    (after a quick reachability probe), else raise RecipeError naming what is needed."""
    missing = finder.missing(corpus)
    if not missing:
        return
    to_download = []
    for archive in corpus.archives:
        need = [m for m in archive.members if m in missing]
        if not need:
            continue
        local = finder.find(archive.name)
        if local:
            print(f"checking {local}", flush=True)
            if archive.md5 and md5sum(local) != archive.md5:
                raise RecipeError(f"{local}: md5 differs from the published {archive.md5} (damaged or another version)")
            try:
                check_integrity(local, archive.name)
            except Exception as e:
                raise RecipeError(f"{local} is damaged or truncated ({e}); delete it and run again") from e
            extract(local, archive, finder.download_dir, need)
        else:
            to_download.append(archive)
    if not to_download:
        still = finder.missing(corpus)
        if still:
            reason = "this corpus is not downloaded (licence)" if not corpus.archives else "not in the archives given"
            raise RecipeError(missing_message(corpus, still, finder, reason))
        return
    urls = {a.name: (mirror.rstrip("/") + "/" + a.name if mirror else a.url) for a in to_download}
    hosts = {}
    for a in to_download:
        parsed = urllib.parse.urlsplit(urls[a.name])
        hosts.setdefault((parsed.scheme, parsed.netloc), urls[a.name])
    for url in hosts.values():
        reason = probe(url)
        if reason:
            raise RecipeError(missing_message(corpus, finder.missing(corpus), finder,
                                              f"cannot download, {urllib.parse.urlsplit(url).netloc or url} "
                                              f"is unreachable ({reason})"))
    for a in to_download:
        path = download(urls[a.name], os.path.join(finder.download_dir, a.name), a.md5)
        extract(path, a, finder.download_dir, [m for m in a.members if m in missing])
    still = finder.missing(corpus)
    if still:
        raise RecipeError(missing_message(corpus, still, finder, "not found after download"))


# ---------------------------------------------------------------- assembling the splits

_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)


def _lines(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n").replace("\r", " ").strip()


def _segs(path):
    for line in _lines(path):
        m = _SEG.search(line)
        if m:
            yield m.group(1).strip()


def read_pairs(part, finder):
    """(source, target) sentence pairs of one Part, streamed."""
    if part.kind == "aspec":
        path = finder.find(part.src)
        for i, line in enumerate(_lines(path), 1):
            fields = [x.strip() for x in line.split("|||")]
            if len(fields) <= max(part.fields):
                raise RecipeError(f"{path}:{i}: expected at least {max(part.fields) + 1} '|||' fields")
            yield fields[part.fields[0]], fields[part.fields[1]]
        return
    reader = _segs if part.kind == "sgm" else _lines
    src, tgt = finder.find(part.src), finder.find(part.tgt)
    sentinel = object()
    for n, (a, b) in enumerate(itertools.zip_longest(reader(src), reader(tgt), fillvalue=sentinel)):
        if a is sentinel or b is sentinel:
            raise RecipeError(f"{src} and {tgt} have different numbers of {'segments' if part.kind == 'sgm' else 'lines'} "
                              f"(they differ after {n})")
        yield a, b


def assemble(corpus, finder, out_dir) -> str:
    """Write out_dir/{split}.{src,tgt} from the corpus' parts (skipped when there), return out_dir.
    A corpus whose raw files already are {split}.{lang} in one folder is used where it lies."""
    paths = [finder.find(f) for f in corpus.files()]
    plain = all(len(p) == 1 and p[0].kind == "text" and p[0].src == f"{s}.{corpus.src}" and p[0].tgt == f"{s}.{corpus.tgt}"
                for s, p in corpus.splits.items())
    if plain and len({os.path.dirname(p) for p in paths}) == 1:
        return os.path.dirname(paths[0])
    os.makedirs(out_dir, exist_ok=True)
    for split, parts in corpus.splits.items():
        outs = [os.path.join(out_dir, f"{split}.{l}") for l in (corpus.src, corpus.tgt)]
        if all(os.path.exists(o) for o in outs):
            print(f"assemble {split}: done before, skipped", flush=True)
            continue
        n = 0
        with open(outs[0] + ".tmp", "w", encoding="utf-8") as fs, open(outs[1] + ".tmp", "w", encoding="utf-8") as ft:
            for part in parts:
                for a, b in read_pairs(part, finder):
                    fs.write(a + "\n")
                    ft.write(b + "\n")
                    n += 1
        for o in outs:
            os.replace(o + ".tmp", o)
        print(f"assembled {split}: {n} pairs", flush=True)
    return out_dir


# ---------------------------------------------------------------- the recipe


def prepare(recipe, raw_dir="", work_dir="work", dest_dir="data-bin", download_dir="", bpe_merges=0,
            max_lines=0, workers=0, mirror="") -> str:
    """Run one data recipe end to end; returns data-bin/<name>. Raises RecipeError."""
    corpus = CORPORA[recipe]
    finder = Finder(raw_dir, download_dir or os.path.join(work_dir, "raw", corpus.name))
    fetch(corpus, finder, mirror)
    raw = assemble(corpus, finder, os.path.join(work_dir, corpus.name, "raw"))
    argv = ["--name", corpus.name, "--raw-dir", raw, "--src", corpus.src, "--tgt", corpus.tgt,
            "--bpe-merges", str(bpe_merges or corpus.bpe_merges), "--max-lines", str(max_lines),
            "--work-dir", work_dir, "--dest-dir", dest_dir,
            "--max-train-len", str(corpus.clean[0]), "--max-train-ratio", str(corpus.clean[1]),
            # the named corpora are raw text with their documented pipelines: no detection (make custom detects)
            "--tokenized", "no", "--unescape", "no"]
    argv += [f"--tokenizer={lang}={hook}" for lang, hook in corpus.tokenizers.items()]
    if workers:
        argv += ["--workers", str(workers)]
    return prepare_bitext.main(argv)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe", choices=sorted(CORPORA))
    p.add_argument("--raw-dir", default="", help="local copy of the raw corpus (RAW_DIR)")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--dest-dir", default="data-bin")
    p.add_argument("--download-dir", default="", help="where downloads and extracted files go (default work/raw/<name>)")
    p.add_argument("--bpe-merges", type=int, default=0, help="default: the corpus' (see above)")
    p.add_argument("--max-lines", type=int, default=0, help="keep the first N lines of every split")
    p.add_argument("--workers", type=int, default=0, help="tokenisation/BPE processes (default min(4, cores))")
    p.add_argument("--mirror", default="", help="fetch archives as MIRROR/<archive name>")
    args = p.parse_args(argv)
    try:
        prepare(args.recipe, args.raw_dir, args.work_dir, args.dest_dir, args.download_dir, args.bpe_merges,
                args.max_lines, args.workers, args.mirror)
    except RecipeError as e:
        sys.exit(f"corpora: {e}")


if __name__ == "__main__":
    main()
