"""InsNet for fairseq: import (or pass as ``--user-dir``) to register the task
``insertion_translation``, the criterion ``insnet_loss`` and the ``insnet_*`` architectures.
Importing also lets fairseq load its checkpoints under torch >= 2.6 (:mod:`.checkpoint_compat`)
and stops fairseq's batching from dropping the last sentences of a split (:mod:`.batching_fix`)."""
from . import batching_fix, checkpoint_compat

checkpoint_compat.install()
batching_fix.install()

from . import criterion, model, task  # noqa: E402,F401  (registration side effects)

__version__ = "0.1.0"
