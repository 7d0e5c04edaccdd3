"""Let fairseq 0.12's ``language_modeling`` task run under numpy 2.

fairseq's ``TokenBlockDataset`` (every ``--task language_modeling`` dataset) and ``LanguagePairDataset.get_batch_shapes``
ask for ``np.compat.long``; numpy 2 removed ``numpy.compat``, so loading a language-modelling split fails with
``AttributeError: module 'numpy' has no attribute 'compat'``. numpy 1's ``np.compat.long`` was Python's ``int``;
the fix gives numpy that attribute back (nothing else in numpy 2 reads it).

Bug: ``TokenBlockDataset(dataset, sizes, block_size=None, pad, eos, break_mode="eos")`` under numpy 2
(``tests/unit/test_fairseq_fixes.py`` builds one in a process without the fix). Under numpy 1 nothing is installed.
"""
import types

import numpy as np


def install() -> None:
    try:
        np.compat  # noqa: B018  numpy 1: present
        return
    except AttributeError:
        pass
    np.compat = types.SimpleNamespace(long=int)
