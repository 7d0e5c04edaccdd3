"""Infilling templates: a template's tokens and blanks (:func:`split_template`), and the blanks given to the
generator checked against them (:func:`check_blanks`), each error naming the row at fault."""
from typing import List, Sequence, Tuple


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
