"""The errors this package raises on bad input: each names the file, line or flag it concerns.

The command-line tools print them as one line, without a traceback
(:mod:`insnet_fairseq.tasks.cli_errors`). This module imports nothing from the package, so
that every layer may raise them.
"""


class DataError(ValueError):
    """Bad or missing data, with the file or directory it concerns."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used here; the message names the file(s) and what to do."""


class TreeError(ValueError):
    """A ``.deps`` line that is not one tree over its sentence."""


class FlagError(ValueError):
    """A flag value that cannot be used, or a combination of flags that does not go together; the message names
    the flag(s)."""
