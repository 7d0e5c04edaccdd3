"""Stop fairseq's batch-prefetch thread before Python exits, so ``fairseq-train`` cannot abort at exit.

fairseq 0.12 prefetches batches (``--data-buffer-size``, default 10) in a daemon thread
(``fairseq.data.iterators.BackgroundConsumer``). When training stops mid-epoch (``--max-update``, a
time budget), that thread is usually still collating the next batches inside torch's C++ code. At
interpreter exit, Python 3.11 ends a daemon thread that asks for the GIL back with ``pthread_exit``;
the forced unwind through torch's ``noexcept`` frames calls ``std::terminate``: the process prints
``terminate called without an active exception`` and dies with SIGABRT after "done training", a
nonzero status for a run that succeeded (a timing race: it depends on where the thread is).

The fix replaces the consumer with one that checks a stop flag between batches (waiting on a full
queue in short timed ``put`` calls), and an ``atexit`` handler, which runs before daemon threads are
ended, sets the flag and joins every live consumer. A consumer is then never inside torch at exit.

Bug: ``iterators.BufferedIterator(10, batches)`` with ``next()`` called once, then interpreter exit: SIGABRT
(``tests/unit/test_fairseq_fixes.py`` runs it without the fix and with it). Batches are made and handed over as
before; only the thread's end changes.
"""
import atexit
import queue
import threading
import weakref

import torch
from fairseq.data import iterators

_STOP = threading.Event()
_LIVE: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
_JOIN_TIMEOUT_S = 60.0  # one batch's collation at most; a thread still alive after it is left as before


class StoppableConsumer(iterators.BackgroundConsumer):
    """fairseq's ``BackgroundConsumer`` that returns between batches once :data:`_STOP` is set."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _LIVE.add(self)

    def _put(self, item) -> bool:
        """Queue ``item``; False when asked to stop first."""
        while not _STOP.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run(self):
        if self.cuda_device is not None:  # as fairseq: no stray context on GPU 0 with pin_memory
            torch.cuda.set_device(self.cuda_device)
        try:
            for item in self._source:
                if not self._put(item):
                    return
                self.count += 1
                if self._max_len is not None and self.count >= self._max_len:
                    break
            self._put(iterators._sentinel)
        except Exception as e:  # noqa: BLE001  handed to the reader, as fairseq does
            self._put(e)


def stop_consumers(timeout: float = _JOIN_TIMEOUT_S) -> None:
    """Ask every live consumer to stop and wait for it (the ``atexit`` handler)."""
    _STOP.set()
    for thread in list(_LIVE):
        if thread.is_alive():
            thread.join(timeout)


def install() -> None:
    if iterators.BackgroundConsumer is StoppableConsumer:
        return
    iterators.BackgroundConsumer = StoppableConsumer  # BufferedIterator looks the class up in its module
    atexit.register(stop_consumers)
