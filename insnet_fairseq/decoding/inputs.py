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
"""
import logging
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq.tokenizer import tokenize_line

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
) -> Tuple[List[str], Dict[int, str]]:
    """Check lines ``first_id``, ``first_id + 1``, ... before batching.

    Args:
        encode_fn: tokeniser + BPE (fairseq-interactive's ``encode_fn``), text -> text.
        max_positions: fairseq's resolved (source, target) limits of task and model, in tokens
            with ``</s>``; the output holds at most ``target - 1`` words (``<s>`` and ``</s>``
            around them).
        constrained: lines are ``source<TAB>phrase...`` (``--constraints``).
        max_tokens: fairseq-interactive's ``--max-tokens`` (a longer line cannot be batched).

    Returns the lines to batch (refused ones replaced by ``""``, stray empty phrases dropped) and
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
                                   target_words, specials)
        except Exception as e:  # a tokeniser or BPE failure on this line only
            reason = f"tokenisation failed ({type(e).__name__}: {_short([str(e)], 1)})"
        if reason is not None:
            logger.warning(f"{line_label(sid)}: {reason}; not translated, output is empty")
            refused[sid], line = reason, ""
        out.append(line)
    return out, refused


def _screen(line, sid, encode_fn, src_dict, tgt_dict, constrained, source_limit, source_flag, target_words, specials):
    """One line -> (line to batch, None) or (line, reason for refusing it)."""
    if len(line) > MAX_CHARS_PER_TOKEN * source_limit:
        return line, (f"{len(line)} characters, more than {MAX_CHARS_PER_TOKEN} per token of the source limit "
                      f"({source_limit} tokens, {source_flag})")
    source, *phrases = line.split("\t") if constrained else [line]
    n = len(src_dict.encode_line(encode_fn(source), add_if_not_exist=False))
    if n > source_limit:
        return line, f"{n} source tokens with </s>, more than the limit of {source_limit} ({source_flag})"
    if not constrained:
        return line, None
    kept, empty, unknown, total = [], 0, [], 0
    for k, phrase in enumerate(phrases, 1):
        encoded = encode_fn(phrase)
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
