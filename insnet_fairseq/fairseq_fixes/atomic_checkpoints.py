"""Make fairseq's checkpoint copies atomic, so a trainer killed at any moment leaves only readable
checkpoints.

fairseq 0.12 writes the first checkpoint of a save atomically (to ``NAME.tmp``, then renamed), but
makes the others (``checkpoint_last.pt``, ``checkpoint_best.pt``, ...) with ``PathManager.copy``,
i.e. ``shutil.copyfile`` straight onto the destination: a SIGKILL during that copy leaves a
truncated ``checkpoint_last.pt``, and the next run cannot resume. Here a local copy goes to
``DEST.tmp`` in the destination's directory and is then renamed over the destination
(``os.replace``, atomic on POSIX), so a reader sees either the old file or the complete new one.
Copies to or from remote paths (ioPath handlers) are left to ioPath.

Bug: ``fairseq.file_io.PathManager.copy(src, dst)`` (without ioPath: ``shutil.copyfile(src, dst)``) truncates
``dst`` first and fills it in place; ``tests/unit/test_fairseq_fixes.py`` interrupts it midway and finds ``dst``
truncated. Nothing changes but where the bytes are written before the rename.
"""
import os
import shutil

from fairseq.file_io import PathManager


def _local(path: str) -> bool:
    return "://" not in path


def install() -> None:
    if getattr(PathManager.copy, "_insnet_atomic", False):
        return
    copy = PathManager.copy

    def atomic_copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        if not (_local(src_path) and _local(dst_path)):
            return copy(src_path, dst_path, overwrite)
        if os.path.exists(dst_path) and not overwrite:
            return False
        tmp = dst_path + ".tmp"
        shutil.copyfile(src_path, tmp)
        os.replace(tmp, dst_path)
        return True

    atomic_copy._insnet_atomic = True
    atomic_copy.__wrapped__ = copy
    PathManager.copy = staticmethod(atomic_copy)
