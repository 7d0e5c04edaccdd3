"""InsNet for fairseq: import (or pass as ``--user-dir``) to register the tasks
``insertion_translation`` and ``insertion_lm``, the criterion ``insnet_loss`` and the ``insnet_*``
and ``insnet_lm_*`` architectures.
Importing also lets fairseq load its checkpoints under torch >= 2.6 (:mod:`.checkpoint_compat`),
refuses checkpoints that do not fit their dictionaries, task or model with an error naming the file
(:mod:`.checkpoint_checks`), stops fairseq's batching from dropping the last sentences of a split
(:mod:`.batching_fix`) and keeps fairseq-interactive from aborting on, or silently dropping, a bad
input line (:mod:`.interactive_fix`)."""
from . import batching_fix, checkpoint_checks, checkpoint_compat, interactive_fix

checkpoint_compat.install()
checkpoint_checks.install()
batching_fix.install()
interactive_fix.install()

from . import criterion, lm_task, model, task  # noqa: E402,F401  (registration side effects)

__version__ = "0.1.0"
