"""What importing the package changes in fairseq: only the named fixes of bugs of the pinned libraries
(``insnet_fairseq/__init__.py`` lists them). The checkpoint checks, a product feature, are installed by the
package's tasks when one is constructed (``tasks/checkpoint_checks.py``), never by the import."""
import subprocess
import sys

from conftest import ROOT

PROBE = """
import fairseq.checkpoint_utils as cu, fairseq.models as m
from fairseq.trainer import Trainer
names = ("cu.load_checkpoint_to_cpu", "cu.load_model_ensemble_and_task", "Trainer.load_checkpoint",
         "Trainer.state_dict", "m.build_model")
before = [eval(n) for n in names]
import insnet_fairseq
print("import:", [n for n, b in zip(names, before) if eval(n) is not b])
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from fairseq.data import Dictionary
d = Dictionary()
TranslationTask(TranslationConfig(), d, d)
print("fairseq task:", [n for n, b in zip(names, before) if eval(n) is not b])
from insnet_fairseq.tasks.translation import InsertionTranslationConfig, InsertionTranslationTask
InsertionTranslationTask(InsertionTranslationConfig(), d, d)
print("package task:", [n for n, b in zip(names, before) if eval(n) is not b])
"""


def test_import_leaves_checkpoint_loading_to_fairseq_until_a_package_task_runs():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [l for l in out.stdout.splitlines() if ":" in l]
    assert lines == ["import: []", "fairseq task: []",
                     "package task: ['cu.load_checkpoint_to_cpu', 'cu.load_model_ensemble_and_task', "
                     "'Trainer.load_checkpoint']"], out.stdout
