"""tasks/cli_errors.py: the package's own errors in one line; fairseq's flag assertions only in a run of one of the
package's tasks; ``import insnet_fairseq`` alone leaves ``sys.excepthook`` as it was."""
import subprocess
import sys

from insnet_fairseq.tasks.cli_errors import _package_task_chosen


def test_the_chosen_task_is_read_from_the_command_line():
    assert _package_task_chosen(["data", "--task", "insertion_translation", "--beam", "5"])
    assert _package_task_chosen(["data", "--task=insertion_lm"])
    assert not _package_task_chosen(["data", "--task", "translation"])
    assert not _package_task_chosen(["data"])


def test_importing_the_package_leaves_the_excepthook():
    check = "import sys; hook = sys.excepthook; import insnet_fairseq; assert sys.excepthook is hook"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
