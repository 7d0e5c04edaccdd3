"""Raw text lines for decoding (fairseq-interactive, the Python hub interface), checked one by one
before they are batched, so that no line aborts its batch and none is silently dropped.

Every problem is one warning that names the line: ``input line N (sample id I)``, N counted
from 1 over the whole input, I = N - 1 the fairseq sample id (fairseq-interactive's ``H-I``, the
hub interface's list index). A *refused* line is not decoded but keeps its place in the output,
with an empty hypothesis. Refused:

* a source longer than the source limit: the model's ``--max-source-positions`` tokens with
  ``</s>`` (or ``--max-tokens`` where smaller), and a line of more than ``MAX_CHARS_PER_TOKEN``
  characters per allowed token, which is not even tokenised;
* a line its tokeniser or BPE fails on;
* with constraints (``source<TAB>phrase<TAB>phrase``): a phrase holding ``<s>``, ``</s>`` or
  ``<pad>`` (not insertable; fairseq packs phrases with id 0 = ``<s>`` as their separator, so
  one would silently cut its phrase), and constraints of more words than the model's target
  limit (``--max-target-positions`` - 2).

Warned and kept: invalid UTF-8 (bytes replaced by U+FFFD, see :func:`decode_line`), empty
constraint phrases from stray tabs (dropped: they hold no token), constraint words missing from
the target dictionary (inserted as ``<unk>``). Empty sources are the generator's: it outputs
exactly their constraint tokens, with a warning naming the sample id.

Control characters other than the tab (``\\x00``, ``\\x07`` ...) are whitespace, in the source and in constraint
phrases alike, so that no two words are joined. Zero-width and format characters (Unicode category Cf: U+200B,
U+FEFF, U+200D ...) are removed first: no BPE vocabulary learned on text holds them, and a line made only of them is
an empty line. A source whose every token is then ``<unk>`` (another script, emoji) is *unreadable*: it is
warned about, and translated anyway (``--unreadable-source translate``, the default: the model's
guess) or refused (``--unreadable-source empty``); a source more than half ``<unk>`` is warned
about too.

:func:`check_source_ids` screens the token ids given to the hub's ``generate``, and
:func:`check_bpe_files` the BPE files a tokeniser is built from (one-line errors naming the argument
or flag).
"""
import logging
import os
import re
import unicodedata
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from fairseq.tokenizer import tokenize_line

from insnet_fairseq.errors import DataError

logger = logging.getLogger(__name__)

MAX_CHARS_PER_TOKEN = 64
_EDGE_SPACE = re.compile(r"^[^\S\t]+|[^\S\t]+$")  # whitespace other than tabs, at either end


def line_label(sample_id: int) -> str:
    """How messages name a line: ``input line 3 (sample id 2)``."""
    return f"input line {sample_id + 1} (sample id {sample_id})"


def clean_line(text: str) -> str:
    """Strip whitespace at both ends, except tabs: with constraints ``<TAB>phrase`` is an empty
    source with one constraint, not the source ``phrase``."""
    return _EDGE_SPACE.sub("", text)


_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # C0 and C1 control characters but the tab


def controls_to_spaces(text: str) -> str:
    """``text`` with every control character but the tab (which separates constraint phrases) replaced by a space:
    the Moses tokeniser deletes them, which would join the words on either side. Example: "ein\\x07Hund" ->
    "ein Hund"."""
    return _CONTROL.sub(" ", text)


def drop_format_chars(text: str) -> str:
    """``text`` without its zero-width and format characters (Unicode category Cf), whitespace at
    the ends stripped again (:func:`clean_line`). Example: "\\ufeffa man\\u200b" -> "a man";
    "\\u200b\\u200b" -> "" (an empty line)."""
    if text.isprintable():  # no Cf character is printable: the common case costs one C-level scan
        return text
    return clean_line("".join(c for c in text if unicodedata.category(c) != "Cf"))


def decode_line(raw: bytes, sample_id: int) -> str:
    """UTF-8 bytes of one line -> text; undecodable bytes become U+FFFD, with a warning."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        logger.warning(f"{line_label(sample_id)}: invalid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}): "
                       "undecodable bytes replaced by U+FFFD")
        return raw.decode("utf-8", errors="replace")


def as_text(item, sample_id: int) -> Optional[str]:
    """A hub-interface input -> text: bytes are decoded as UTF-8 and lone surrogates (from
    ``surrogateescape``) replaced, both with a warning; None for anything else (refused)."""
    if isinstance(item, (bytes, bytearray)):
        return decode_line(bytes(item), sample_id)
    if not isinstance(item, str):
        return None
    try:
        item.encode("utf-8")
        return item
    except UnicodeEncodeError:
        logger.warning(f"{line_label(sample_id)}: lone surrogate code points (undecodable bytes?) replaced by U+FFFD")
        return item.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")


def _short(words: Sequence[str], most: int = 5) -> str:
    """Words for a one-line message: escaped (repr), clipped, at most ``most`` of them."""
    shown = [repr(w) if len(w) <= 30 else repr(w[:30]) + "..." for w in words[:most]]
    return ", ".join(shown) + (f" and {len(words) - most} more" if len(words) > most else "")


def screen_lines(
    lines: Sequence[str],
    first_id: int,
    encode_fn: Callable[[str], str],
    src_dict,
    tgt_dict,
    max_positions: Tuple[int, int],
    constrained: bool = False,
    max_tokens: Optional[int] = None,
    unreadable: Optional[str] = None,
    encode_target_fn: Optional[Callable[[str], str]] = None,
) -> Tuple[List[str], Dict[int, str]]:
    """Check lines ``first_id``, ``first_id + 1``, ... before batching.

    Args:
        encode_fn: tokeniser + BPE (fairseq-interactive's ``encode_fn``), text -> text.
        max_positions: fairseq's resolved (source, target) limits of task and model, in tokens
            with ``</s>``; the output holds at most ``target - 1`` words (``<s>`` and ``</s>``
            around them).
        constrained: lines are ``source<TAB>phrase...`` (``--constraints``).
        max_tokens: fairseq-interactive's ``--max-tokens`` (a longer line cannot be batched).
        unreadable: ``--unreadable-source`` (translate, empty) for a source whose every token is
            ``<unk>``; None: no check of ``<unk>`` (a task that checks its own words).
        encode_target_fn: the constraint phrases' text -> text (target side); default ``encode_fn``.

    Returns the lines to batch (refused ones replaced by ``""``, zero-width and format characters
    removed, stray empty phrases dropped) and
    ``{sample id: reason}`` of the refused lines; every refusal and warning is logged.
    """
    source_limit, source_flag = max_positions[0], f"--max-source-positions {max_positions[0]}"
    if max_tokens and max_tokens < source_limit:
        source_limit, source_flag = max_tokens, f"--max-tokens {max_tokens}"
    target_words = max_positions[1] - 1
    specials = {tgt_dict.bos(), tgt_dict.eos(), tgt_dict.pad()}
    out, refused = [], {}
    for i, line in enumerate(lines):
        sid = first_id + i
        try:
            line, reason = _screen(line, sid, encode_fn, src_dict, tgt_dict, constrained, source_limit, source_flag,
                                   target_words, specials, unreadable, encode_target_fn or encode_fn)
        except Exception as e:  # a tokeniser or BPE failure on this line only
            reason = f"tokenisation failed ({type(e).__name__}: {_short([str(e)], 1)})"
        if reason is not None:
            logger.warning(f"{line_label(sid)}: {reason}; not translated, output is empty")
            refused[sid], line = reason, ""
        out.append(line)
    return out, refused


def _screen(line, sid, encode_fn, src_dict, tgt_dict, constrained, source_limit, source_flag, target_words, specials,
            unreadable=None, encode_target_fn=None):
    """One line -> (line to batch, None) or (line, reason for refusing it)."""
    if len(line) > MAX_CHARS_PER_TOKEN * source_limit:
        return line, (f"{len(line)} characters, more than {MAX_CHARS_PER_TOKEN} per token of the source limit "
                      f"({source_limit} tokens, {source_flag})")
    line = controls_to_spaces(drop_format_chars(line))
    source, *phrases = line.split("\t") if constrained else [line]
    ids = src_dict.encode_line(encode_fn(source), add_if_not_exist=False)
    n = len(ids)
    if n > source_limit:
        return line, f"{n} source tokens with </s>, more than the limit of {source_limit} ({source_flag})"
    reason = None if unreadable is None else _unreadable(ids[:-1], src_dict.unk(), sid, unreadable)
    if reason is not None:
        return line, reason
    if not constrained:
        return line, None
    kept, empty, unknown, total = [], 0, [], 0
    for k, phrase in enumerate(phrases, 1):
        encoded = (encode_target_fn or encode_fn)(phrase)
        words = tgt_dict.encode_line(encoded, append_eos=False, add_if_not_exist=False).tolist()
        if not words:
            empty += 1
            continue
        bad = [tgt_dict[w] for w in words if w in specials]
        if bad:
            return line, (f"constraint phrase {k} holds {bad[0]}, a special symbol that cannot be inserted "
                          "(--constraints phrases are words of the target dictionary)")
        unknown += [p for p, w in zip(tokenize_line(encoded), words) if w == tgt_dict.unk()]
        total += len(words)
        kept.append(phrase)
    if total > target_words:
        return line, (f"its constraint phrases have {total} tokens, more than the model's output limit of "
                      f"{target_words} words (--max-target-positions)")
    if empty:
        logger.warning(f"{line_label(sid)}: {empty} empty constraint phrase(s) (stray tabs) ignored")
    if unknown:
        logger.warning(f"{line_label(sid)}: {len(unknown)} constraint word(s) not in the target dictionary, "
                       f"inserted as <unk>: {_short(unknown)}")
    return "\t".join([source] + kept), None


def _unreadable(words, unk: int, sid: int, unreadable: str) -> Optional[str]:
    """A source's word ids ``words`` [n] (without ``</s>``) -> the reason for refusing it, or None.

    All ``<unk>``: warned about and translated (``unreadable`` "translate"), or refused ("empty");
    more than half ``<unk>``: warned about. Example: unk 3, [3, 3, 7] -> None, with the warning
    "2 of 3 source tokens are <unk> ...".
    """
    n, k = len(words), int(words.eq(unk).sum())
    if n == 0 or 2 * k <= n:
        return None
    what = (f"all {n} source tokens are <unk>" if k == n else f"{k} of {n} source tokens are <unk>") + \
        " (not in the source dictionary)"
    if k == n and unreadable == "empty":
        return f"{what}, --unreadable-source empty"
    guess = "the output is the model's guess (--unreadable-source empty: an empty output)" if k == n else \
        "the output may not translate it"
    logger.warning(f"{line_label(sid)}: {what}; {guess}")
    return None


def integer_ids(name: str, row, what: str) -> torch.Tensor:
    """``row`` (a list, array or tensor of integers) -> a 1-D LongTensor, or a one-line ValueError saying that
    ``name`` must be ``what``, and what it got: a type that is not a sequence, a shape that is not 1-D, or a float,
    complex or bool dtype (float ids are refused, not rounded). An empty row passes. Example:
    integer_ids("initial_tokens[0]", [5, 6], "a list of integer token ids") -> tensor([5, 6]); [5.0] raises
    "initial_tokens[0] must be a list of integer token ids, got torch.float32 (ids are not rounded)"."""
    try:
        ids = torch.as_tensor(row)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"{name} must be {what}, got {type(row).__name__}") from None
    if ids.numel() and ids.dim() != 1:
        raise ValueError(f"{name} must be {what}, got shape {tuple(ids.shape)}")
    if ids.numel() and (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool):
        raise ValueError(f"{name} must be {what}, got {ids.dtype} (ids are not rounded)")
    return ids.long().view(-1)


def check_source_ids(sentences: Sequence, vocab_size: int) -> List[torch.Tensor]:
    """The hub's ``generate`` input -> one LongTensor of source ids per sentence, each ending with
    ``</s>`` as ``encode`` gives it. A row that is not a 1-D sequence of integer ids (:func:`integer_ids`), an empty
    row and an id outside the source dictionary (0..V-1) are refused with a one-line ValueError naming
    ``tokenized_sentences[i]``. Example: [[4, 9, 2]] -> [tensor([4, 9, 2])]; [[4.0, 2.0]] and [[V, 2]] raise."""
    rows = []
    for i, row in enumerate(sentences):
        name = f"tokenized_sentences[{i}]"
        ids = integer_ids(name, row, "a 1-D sequence of integer token ids")
        if ids.numel() == 0:
            raise ValueError(f"{name} is empty: a sentence's ids end with </s> (an empty sentence is encode(''))")
        bad = (ids < 0) | (ids >= vocab_size)
        if bool(bad.any()):
            raise ValueError(f"{name} holds {ids[bad].tolist()[:10]}: not ids of the source dictionary "
                             f"(0..{vocab_size - 1})")
        rows.append(ids)
    return rows


BPE_FILES = {  # the file fields of fairseq's BPE configs -> their flags
    "bpe_codes": "--bpe-codes", "sentencepiece_model": "--sentencepiece-model", "bpe_merges": "--bpe-merges",
    "bpe_vocab": "--bpe-vocab",
}


def check_bpe_files(bpe_cfg) -> None:
    """Refuse a BPE (fairseq's ``cfg.bpe``, or None) whose file is missing, with one line naming
    the flag and the file, before fairseq's encoder fails on it (an ``OSError`` deep in its
    loader). URLs are left to fairseq. Example: --bpe-codes nowhere.codes raises DataError."""
    for name, flag in BPE_FILES.items():
        path = getattr(bpe_cfg, name, None) if bpe_cfg is not None else None
        if not isinstance(path, str) or path in ("", "???") or "://" in path or os.path.isfile(path):
            continue
        what = "is a directory, not a file" if os.path.isdir(path) else "no such file"
        hint = " (the recipes write the codes of data-bin/NAME to work/NAME/bpe.codes)" if name == "bpe_codes" else ""
        raise DataError(f"{flag} {path}: {what}{hint}")
