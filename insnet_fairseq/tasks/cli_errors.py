"""One line, not a traceback, for the errors raised on bad input while one of the package's tasks runs.

fairseq's command-line tools let every exception reach the interpreter, which prints the whole
traceback: a user who passed a wrong flag combination or a mismatched data directory reads 30
lines of fairseq internals before the message that names the flag or the file. Here an uncaught
``DataError`` or ``CheckpointError``, a ``ValueError`` raised by ``insnet_fairseq`` code, or an
``AssertionError`` of fairseq's command-line scripts whose message names a flag (their checks of flag
combinations, e.g. ``--sampling requires --nbest to be equal to --beam``), is printed as
``<program>: error: <message>`` (argparse's form), and the process exits with status 1 as before.
``INSNET_TRACEBACK=1`` prints the full traceback again; any other exception is left to Python.

A product feature, not a fix of fairseq: ``import insnet_fairseq`` changes nothing. The hook is set by the
package's tasks' ``add_args``, which a fairseq command-line tool calls when it loads ``--user-dir insnet_fairseq``
(every task module of a user dir is read for its flags) and again for the chosen task, before any of its checks;
and by the package's own scripts (``recipes/``, ``benchmarks/``). It reformats the package's own errors only, and
fairseq's flag assertions only in a run of one of the package's tasks (``--task insertion_translation``, ``insertion_lm``,
``expansion_lm``, ``unconditional_language_modeling``) prints its errors this way.
"""
import os
import sys

from insnet_fairseq.errors import CheckpointError, DataError

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_TASKS = ("insertion_translation", "insertion_lm", "expansion_lm", "unconditional_language_modeling")


def _innermost_file(tb) -> str:
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    return "" if last is None else os.path.abspath(last.tb_frame.f_code.co_filename)


def _raised_here(tb) -> bool:
    """The innermost frame of the traceback is in this package."""
    return _innermost_file(tb).startswith(PACKAGE + os.sep)


def _package_task_chosen(argv=None) -> bool:
    """The command line picks one of the package's tasks (``--task NAME`` or ``--task=NAME``)."""
    argv = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(argv):
        if arg == "--task" and i + 1 < len(argv):
            return argv[i + 1] in PACKAGE_TASKS
        if arg.startswith("--task="):
            return arg.split("=", 1)[1] in PACKAGE_TASKS
    return False


def _flag_check_of_fairseq_cli(exc, tb) -> bool:
    """An assertion of a fairseq_cli script about its flags, in a run of one of the package's tasks: the innermost
    frame is in fairseq_cli and the message names a flag (another task's run prints it as fairseq does)."""
    return (os.sep + "fairseq_cli" + os.sep in _innermost_file(tb) and "--" in str(exc)
            and _package_task_chosen())


def use_one_line_errors() -> None:
    """Set the hook (once per process; the previous hook handles everything else)."""
    if getattr(sys.excepthook, "_insnet", False):
        return
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        ours = (issubclass(exc_type, (CheckpointError, DataError))
                or (issubclass(exc_type, ValueError) and _raised_here(tb))
                or (issubclass(exc_type, AssertionError) and _flag_check_of_fairseq_cli(exc, tb)))
        if ours and not os.environ.get("INSNET_TRACEBACK"):
            program = os.path.basename(sys.argv[0]) or "python"
            sys.stderr.write(f"{program}: error: {exc}\n(INSNET_TRACEBACK=1 shows the traceback)\n")
            return
        previous(exc_type, exc, tb)

    excepthook._insnet = True
    sys.excepthook = excepthook
