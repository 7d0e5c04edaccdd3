"""Checks of the decoding flags and of infilling templates, each naming the flag or row at fault.

The task calls the flag checks before a model loads (``fairseq-generate`` with a bad value stops at once
with the flag's name, not after loading a checkpoint).
"""
from typing import List, Sequence, Tuple

MODES = ("sequential", "parallel")
REDRAFTS = ("suffix", "fresh")  # --verify-redraft (decoding/verify.py: next_canvas)
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")  # --compile-decoder: torch.compile's modes


def check_decoding_flags(mode: str, slot_top_p: float, max_steps: int, min_token_prob: float = 0.0,
                         stop_threshold: float = 0.5, stop_check_prob: float = 0.0) -> None:
    """Refuse flag values decoding cannot use, naming the flag (the task checks them before a model loads)."""
    if mode not in MODES:
        raise ValueError(f"--insertion-mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "parallel" and not 0.0 < slot_top_p <= 1.0:  # sequential decoding ignores it
        raise ValueError(f"--slot-top-p must be in (0, 1], got {slot_top_p}")
    if not 0.0 < stop_threshold < 1.0:
        raise ValueError(f"--stop-threshold must be in (0, 1), got {stop_threshold}")
    if not 0.0 <= min_token_prob < 1.0:
        raise ValueError(f"--min-token-prob must be in [0, 1), got {min_token_prob}")
    if not 0.0 <= stop_check_prob < 1.0:
        raise ValueError(f"--stop-check-prob must be in [0, 1), got {stop_check_prob}")
    if max_steps < 0:
        raise ValueError(f"--max-insertion-steps must be >= 0 (0: 2 x source length + 10), got {max_steps}")


def check_beam_flags(beam: int, mode: str, candidates: int = 1, sampling: bool = False, skip_repeats: bool = False,
                     replace_repeats: bool = False, stop_check_prob: float = 0.0, min_token_prob: float = 0.0) -> None:
    """Refuse ``--insertion-beam`` values and the flags a beam search does not combine with, naming them."""
    if beam < 1:
        raise ValueError(f"--insertion-beam must be >= 1, got {beam}")
    if beam == 1:
        return
    if mode != "sequential":
        raise ValueError(f"--insertion-beam {beam} searches sequential insertions: add --insertion-mode sequential "
                         f"(got {mode}; parallel decoding keeps several hypotheses with --insertion-candidates)")
    clash = [flag for flag, on in (("--insertion-candidates", candidates > 1), ("--sampling", sampling),
                                   ("--skip-repeats", skip_repeats), ("--replace-repeats", replace_repeats),
                                   ("--stop-check-prob", stop_check_prob > 0), ("--min-token-prob", min_token_prob > 0))
             if on]
    if clash:
        raise ValueError(f"--insertion-beam {beam} does not combine with {', '.join(clash)} (greedy decoding's "
                         "options): drop them, or decode with --insertion-beam 1")


def check_verify_flags(verify: bool, tolerance: float, candidates: int = 1, beam: int = 1,
                       reranking: bool = False, redraft: str = "suffix") -> None:
    """Refuse ``--verify-tolerance`` without ``--insertion-verify`` or below 0, an unknown ``--verify-redraft``, and
    the flags ``--insertion-verify`` does not combine with, naming them."""
    if redraft not in REDRAFTS:
        raise ValueError(f"--verify-redraft must be {' or '.join(REDRAFTS)}, not {redraft!r}")
    if tolerance < 0 or (tolerance > 0 and not verify):
        raise ValueError(f"--verify-tolerance B (nats, >= 0) widens --insertion-verify's acceptance: use it with "
                         f"--insertion-verify (got {tolerance})")
    clash = [flag for flag, on in (("--insertion-candidates", candidates > 1), ("--insertion-beam", beam > 1),
                                   ("--iter-decode-with-external-reranker", reranking)) if on]
    if verify and clash:
        raise ValueError(f"--insertion-verify does not combine with {', '.join(clash)}: the verifier chooses every "
                         "word of the output")


def split_template(ids: Sequence[int], blank_id: int) -> Tuple[List[int], List[int]]:
    """A template's tokens and blanks: ids with ``blank_id`` at each blank -> (tokens, blanks), each
    blank given as the number of tokens before it; adjacent blanks are one blank.
    Example: [a, B, b, c, B] (B = blank_id) -> ([a, b, c], [1, 3])."""
    tokens, blanks = [], []
    for t in ids:
        if t == blank_id:
            if not blanks or blanks[-1] != len(tokens):
                blanks.append(len(tokens))
        else:
            tokens.append(int(t))
    return tokens, blanks


def check_blanks(blanks, n_tokens: Sequence[int]) -> List[List[int]]:
    """Blanks per sentence (see :meth:`InsertionGenerator.generate`), checked against the template lengths."""
    if len(blanks) != len(n_tokens):
        raise ValueError(f"blanks has {len(blanks)} rows for a batch of {len(n_tokens)} sentences")
    rows = []
    for b, (row, n) in enumerate(zip(blanks, n_tokens)):
        row = [int(x) for x in row]
        if row != sorted(set(row)) or any(not 0 <= x <= n for x in row):
            raise ValueError(f"blanks[{b}] = {row}: blanks are distinct counts of template tokens before them, "
                             f"ascending, each in 0..{n}")
        rows.append(row)
    return rows
