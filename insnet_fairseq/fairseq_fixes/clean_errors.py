"""One line, not a traceback, for the errors this package raises on bad input.

fairseq's command-line tools let every exception reach the interpreter, which prints the whole
traceback: a user who passed a wrong flag combination or a mismatched data directory reads 30
lines of fairseq internals before the message that names the flag or the file. Here an uncaught
``DataError`` or ``CheckpointError``, or a ``ValueError`` raised by ``insnet_fairseq`` code, is
printed as ``<program>: error: <message>`` (argparse's form), and the process exits with status 1
as before. ``INSNET_TRACEBACK=1`` prints the full traceback again; any other
exception is left to Python.
"""
import os
import sys

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _raised_here(tb) -> bool:
    """The innermost frame of the traceback is in this package."""
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    return last is not None and os.path.abspath(last.tb_frame.f_code.co_filename).startswith(PACKAGE + os.sep)


def install() -> None:
    if getattr(sys.excepthook, "_insnet", False):
        return
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        from insnet_fairseq.tasks.checkpoint_checks import CheckpointError
        from insnet_fairseq.tasks.translation import DataError

        ours = issubclass(exc_type, (CheckpointError, DataError)) or (issubclass(exc_type, ValueError) and _raised_here(tb))
        if ours and not os.environ.get("INSNET_TRACEBACK"):
            program = os.path.basename(sys.argv[0]) or "python"
            sys.stderr.write(f"{program}: error: {exc}\n(INSNET_TRACEBACK=1 shows the traceback)\n")
            return
        previous(exc_type, exc, tb)

    excepthook._insnet = True
    sys.excepthook = excepthook
