"""InsNet for fairseq: import (or pass as ``--user-dir``) to register the task
``insertion_translation``, the criterion ``insnet_loss`` and the ``insnet_*`` architectures.
Importing also lets fairseq load its checkpoints under torch >= 2.6 (:mod:`.checkpoint_compat`)."""
from . import checkpoint_compat

checkpoint_compat.install()

from . import criterion, model, task  # noqa: E402,F401  (registration side effects)

__version__ = "0.1.0"
