"""Templates: a sentence's given tokens and the blanks where words may go. An infilling template's tokens and blanks
(:func:`split_template`); constraint phrases as a template whose blanks lie only between whole phrases
(:func:`phrase_template`); the blanks given to the generator checked against them (:func:`check_blanks`), each error
naming the row at fault."""
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


def phrase_template(phrases: Sequence[Sequence[int]]) -> Tuple[List[int], List[int]]:
    """Constraint phrases as a template: their tokens in order, and a blank before the first phrase, between every two
    and after the last, none inside a phrase (so no word is ever inserted inside one). Empty phrases hold no token.
    Example: [[a, b], [c]] -> ([a, b, c], [0, 2, 3]); [] -> ([], [0])."""
    tokens, blanks = [], [0]
    for phrase in phrases:
        tokens.extend(int(t) for t in phrase)
        if len(tokens) != blanks[-1]:
            blanks.append(len(tokens))
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
