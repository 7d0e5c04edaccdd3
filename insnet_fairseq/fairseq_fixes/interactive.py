"""Keep fairseq-interactive from aborting on, or silently dropping, a bad input line.

fairseq-fixed 0.12.3.1's ``fairseq_cli.interactive``:

* ``buffered_read`` decodes the input strictly as UTF-8 (``--input FILE``, or stdin under a
  strict UTF-8 locale): one invalid byte ends the run with a traceback. It also strips tabs at
  the ends of a line, so with ``--constraints`` the line ``<TAB>phrase`` (an empty source with
  one constraint) became the source ``phrase``; and reading in text mode also ends lines at a
  lone ``\\r``, so the lines it counts are not those of ``wc -l``.
  :func:`read_lines` replaces it: lines end at ``\\n`` only (a trailing ``\\r`` is dropped),
  invalid bytes become U+FFFD with a warning naming the line, and whitespace at both ends but
  tabs is stripped. A missing ``--input`` file is one line naming the flag and the file
  (``DataError``), not a ``FileNotFoundError``.
* ``make_batches`` gets each buffer without its place in the input, and the batches it makes
  reach the task without their sample ids: an over-long line aborted its whole buffer (or, with
  ``--skip-invalid-size-inputs-valid-test``, vanished, with a warning counting from the start of
  its buffer), and the generator's warnings named batch rows. The wrapper numbers the lines from
  the start of the input, lets the task screen them first (``task.screen_inference_lines``; the
  InsNet task refuses a bad line with a reason and answers it with an empty output, see
  :mod:`insnet_fairseq.decoding.inputs`) and tells the task each batch's sample ids (``task.pending_sample_ids``),
  which are the ``H-<id>`` of the output.

Bugs: ``fairseq_cli.interactive.buffered_read(FILE, 10)`` raises ``UnicodeDecodeError`` on a line holding the byte
``0xff`` and reads ``"\\tphrase"`` as ``"phrase"`` (``tests/unit/test_fairseq_fixes.py``); ``make_batches`` over a
buffer with one line longer than the model's positions raises for the whole buffer. The screening itself
(``task.screen_inference_lines``, ``task.pending_sample_ids``) runs only for a task that defines it, the package's;
another task's batches are fairseq's.

Installed when ``insnet_fairseq`` is imported (``--user-dir``). Only a module the
fairseq-interactive entry point has already loaded is patched: importing it here would set up
logging for every program that merely imports this package.
"""
import logging
import os
import sys

from insnet_fairseq.decoding.inputs import clean_line, decode_line
from insnet_fairseq.errors import DataError

logger = logging.getLogger(__name__)


def read_lines(input, buffer_size):
    """``buffered_read`` replacement: lists of at most ``buffer_size`` lines of ``input`` (``-``: stdin)."""
    if input != "-" and (os.path.isdir(input) or not os.path.exists(input)):  # a pipe (<(cmd)) is read
        raise DataError(f"--input {input}: {'is a directory, not a file' if os.path.isdir(input) else 'no such file'}")
    stream = sys.stdin.buffer if input == "-" else open(input, "rb")
    try:
        buffer, n = [], 0
        for raw in stream:
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            buffer.append(clean_line(decode_line(raw, n)))
            n += 1
            if len(buffer) >= buffer_size:
                yield buffer
                buffer = []
        if buffer:
            yield buffer
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _numbered(make_batches):
    next_id = [0]  # sample id of the first line of the next buffer

    def make_batches_numbered(lines, cfg, task, max_positions, encode_fn):
        first = next_id[0]
        next_id[0] += len(lines)
        screen = getattr(task, "screen_inference_lines", None)
        if screen is not None:
            lines = screen(list(lines), first, encode_fn, max_positions, constrained=bool(cfg.generation.constraints),
                           max_tokens=cfg.dataset.max_tokens)
        # fairseq encodes the constraint phrases with the function it is given, the sources through the task
        # (get_interactive_tokens_and_lengths): phrases are target text
        target_encoder = getattr(task, "target_encoder", None)
        if target_encoder is not None:
            task.interactive_source_encode = encode_fn
            encode_fn = target_encoder(encode_fn)
        for batch in make_batches(lines, cfg, task, max_positions, encode_fn):
            if screen is not None:
                task.pending_sample_ids = batch.ids + first
            yield batch

    make_batches_numbered.__wrapped__ = make_batches
    return make_batches_numbered


def running() -> bool:
    """fairseq-interactive is the program running (its module is loaded)."""
    return bool(_interactive_modules())


def _interactive_modules():
    mod = sys.modules.get("fairseq_cli.interactive")
    main = sys.modules.get("__main__")  # python -m fairseq_cli.interactive
    if main is not None and getattr(getattr(main, "__spec__", None), "name", None) == "fairseq_cli.interactive":
        return [m for m in (mod, main) if m is not None]
    return [mod] if mod is not None else []


def install() -> None:
    for mod in _interactive_modules():
        if not hasattr(mod, "make_batches") or hasattr(mod.make_batches, "__wrapped__"):
            continue
        mod.buffered_read = read_lines
        mod.make_batches = _numbered(mod.make_batches)
