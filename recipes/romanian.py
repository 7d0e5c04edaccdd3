"""Romanian preprocessing of the WMT16 Edinburgh system (Sennrich, Haddow, Birch 2016), in Python.

The original scripts (github.com/rsennrich/wmt16-scripts, preprocess/, by Barry Haddow, MIT) run
as ``normalize-punctuation.perl -l ro | normalise-romanian.py | remove-diacritics.py |
tokenizer.perl -l ro``. Here:

- ``normalise_romanian``: s and t with cedilla (Ş ş Ţ ţ, U+015E/F, U+0162/3) become s and t with
  comma below (Ș ș Ț ț, U+0218/9, U+021A/B). That is all normalise-romanian.py does; the quote and
  dash fixes (the Romanian „...” quotes, en/em dashes, ...) come from the Moses punctuation
  normaliser that runs first (sacremoses' ``MosesPunctNormalizer``, the port of
  normalize-punctuation.perl).
- ``remove_diacritics``: ă â î ș ț (and capitals) become a a i s t. Applied after
  ``normalise_romanian``, it removes the cedilla forms too.
- ``make_tokenizer``: the whole chain for one line, the hook used by ``prepare_bitext.py
  --tokenizer ro=romanian``.
"""

_TO_COMMA = str.maketrans({"\u015e": "\u0218", "\u015f": "\u0219", "\u0162": "\u021a", "\u0163": "\u021b"})
_NO_DIACRITICS = str.maketrans({
    "\u0218": "S", "\u0219": "s", "\u021a": "T", "\u021b": "t",  # s, t with comma below
    "\u0102": "A", "\u0103": "a", "\u00c2": "A", "\u00e2": "a", "\u00ce": "I", "\u00ee": "i",  # ă â î
})


def normalise_romanian(line: str) -> str:
    """Cedilla s/t (Ş ş Ţ ţ) -> comma-below s/t (Ș ș Ț ț), as normalise-romanian.py."""
    return line.translate(_TO_COMMA)


def remove_diacritics(line: str) -> str:
    """ă â î ș ț (both cases) -> a a i s t, as remove-diacritics.py (run after normalise_romanian)."""
    return line.translate(_NO_DIACRITICS)


def clean(line: str) -> str:
    """normalise_romanian then remove_diacritics: both s/t forms lose their diacritics."""
    return remove_diacritics(normalise_romanian(line))


def make_tokenizer(lang: str = "ro"):
    """Line function: Moses punctuation normalisation, Romanian normalisation and diacritics
    removal, Moses tokenisation (no escaping, like the rest of prepare_bitext.py)."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return lambda line: tok.tokenize(clean(norm.normalize(line)), escape=False, return_str=True)
