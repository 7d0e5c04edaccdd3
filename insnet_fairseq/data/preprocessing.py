"""How a corpus's text was tokenised, kept with its data-bin, so that raw text is tokenised the same way.

``recipes/prepare_bitext.py`` tokenises with sacremoses (punctuation normalised, no escaping of ``& " '``, no
splitting of dashes) and applies joint subword-nmt BPE with each language's vocabulary filter. fairseq's
``--tokenizer moses`` defaults to the opposite (escaping on, aggressive dash splits) and its ``--bpe subword_nmt``
to no vocabulary filter, so "T-shirt", "&" and quotes became ``<unk>`` in raw text. The recipe writes
``DATA/preprocessing.json`` and copies the BPE codes and vocabularies beside it:

    {"source_lang": "en", "target_lang": "de",
     "tokenizer": {"en": "moses", "de": "moses"},          # or "pretokenized" (whitespace only), or a recipes hook
     "moses": {"escape": false, "aggressive_dash_splits": false, "normalize_punctuation": true},
     "bpe": {"codes": "bpe.codes", "separator": "@@", "vocabulary": {"en": "bpe.vocab.en", "de": "bpe.vocab.de"},
             "vocabulary_threshold": 1}}

:class:`PreparedTokenizer` and :class:`PreparedBPE` apply it (``encode``: the source language; ``encode_target``:
the target language, for constraint phrases; ``decode``: the target language). The insertion tasks build them for
fairseq-interactive and the hub interface (``tasks/base.py``).
"""
import hashlib
import importlib
import json
import os
import shutil
from typing import Dict, Optional

SETTINGS = "preprocessing.json"
MOSES = {"escape": False, "aggressive_dash_splits": False, "normalize_punctuation": True}


def write(dest: str, src: str, tgt: str, tokenizers: Dict[str, str], codes: str, vocabularies: Dict[str, str]) -> str:
    """Write ``dest/preprocessing.json`` and copy the BPE ``codes`` and per-language ``vocabularies`` beside it."""
    shutil.copyfile(codes, os.path.join(dest, "bpe.codes"))
    vocab = {}
    for lang, path in vocabularies.items():
        vocab[lang] = f"bpe.vocab.{lang}"
        shutil.copyfile(path, os.path.join(dest, vocab[lang]))
    settings = {"source_lang": src, "target_lang": tgt, "tokenizer": dict(tokenizers), "moses": dict(MOSES),
                "bpe": {"codes": "bpe.codes", "separator": "@@", "vocabulary": vocab, "vocabulary_threshold": 1}}
    path = os.path.join(dest, SETTINGS)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=1)
    os.replace(path + ".tmp", path)
    return path


def read(data_dir: Optional[str]) -> Optional[dict]:
    """The settings of ``data_dir`` (the first of fairseq's ``a:b`` paths), with ``dir`` added; None without them."""
    if not data_dir:
        return None
    data_dir = str(data_dir).split(os.pathsep)[0]
    path = os.path.join(data_dir, SETTINGS)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    settings["dir"] = data_dir
    settings["file"] = path
    return settings


def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def describe_tokenizer(settings: dict) -> str:
    """How the settings tokenise, for messages: e.g. "moses without escaping or dash splits (en)"."""
    name = settings["tokenizer"].get(settings["source_lang"], "moses")
    if name == "moses":
        return f"Moses without escaping or dash splits, punctuation normalised ({settings['file']})"
    return f"{name} ({settings['file']})"


def _line_tokenizer(name: str, lang: str):
    """One language's tokenisation, as recipes/prepare_bitext.py's ``make_line_tokenizer`` does it."""
    if name == "pretokenized":
        return lambda line: " ".join(line.split())
    if name == "moses":
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
        return lambda line: tok.tokenize(norm.normalize(line), escape=False, aggressive_dash_splits=False,
                                         return_str=True)
    return importlib.import_module(f"recipes.{name}").make_tokenizer(lang)  # romanian, japanese: the recipes' hooks


class PreparedTokenizer:
    """fairseq's tokenizer protocol (``encode``, ``decode``) over the recorded tokenisation."""

    def __init__(self, settings: dict):
        src, tgt = settings["source_lang"], settings["target_lang"]
        names = settings["tokenizer"]
        self.name = names.get(src, "moses")
        self._source = _line_tokenizer(names.get(src, "moses"), src)
        self._target = _line_tokenizer(names.get(tgt, "moses"), tgt)
        self._detok = None
        if names.get(tgt, "moses") != "pretokenized":
            from sacremoses import MosesDetokenizer

            self._detok = MosesDetokenizer(lang=tgt)

    def encode(self, x: str) -> str:
        return self._source(x)

    def encode_target(self, x: str) -> str:
        return self._target(x)

    def decode(self, x: str) -> str:
        return self._detok.detokenize(x.split()) if self._detok else x


class PreparedBPE:
    """fairseq's BPE protocol (``encode``, ``decode``): the recorded codes, each side with its vocabulary filter, as
    ``subword-nmt apply-bpe --vocabulary vocab.LANG --vocabulary-threshold 1`` applied them to the training data."""

    def __init__(self, settings: dict):
        from subword_nmt import apply_bpe

        bpe = settings["bpe"]
        self.codes = os.path.join(settings["dir"], bpe["codes"])
        self.separator = bpe.get("separator", "@@")
        threshold = bpe.get("vocabulary_threshold", 1)

        def side(lang):
            vocab = None
            if lang in bpe.get("vocabulary", {}):
                with open(os.path.join(settings["dir"], bpe["vocabulary"][lang]), encoding="utf-8") as f:
                    vocab = apply_bpe.read_vocabulary(f, threshold)
            with open(self.codes, encoding="utf-8") as f:
                return apply_bpe.BPE(f, separator=self.separator, vocab=vocab)

        self._source, self._target = side(settings["source_lang"]), side(settings["target_lang"])

    def encode(self, x: str) -> str:
        return self._source.process_line(x)

    def encode_target(self, x: str) -> str:
        return self._target.process_line(x)

    def decode(self, x: str) -> str:
        return (x + " ").replace(self.separator + " ", "").rstrip()
