"""InsNet for fairseq: import (or pass as ``--user-dir``) to register the tasks
``insertion_translation`` and ``insertion_lm``, the criterion ``insnet_loss`` and the ``insnet_*``
and ``insnet_lm_*`` architectures.

The package, by layer; a module imports only from its own layer and the layers below it
(``tests/unit/test_layering.py`` checks it):

0. ``geometry``: pure tensor functions of insertion orders (:mod:`.geometry.orders`), offsets and slots
   (:mod:`.geometry.offsets`), the attention masks (:mod:`.geometry.masks`) and the layer arithmetic of layered
   trajectories (:mod:`.geometry.layers`); ``data``: the fairseq dataset (:mod:`.data.dataset`), dependency
   trees (:mod:`.data.dependency`: the InsNet syntactic order's levels, the expansion LM's transitions) and the
   expansion LM's dataset (:mod:`.data.expansion_dataset`); :mod:`.errors`: the errors raised on bad input;
1. ``modules``: the InsNet context encoder (:mod:`.modules.decoder`), offset attention
   (:mod:`.modules.attention`, with its C++ kernel :mod:`.modules.offset_scores`), slot heads
   (:mod:`.modules.slots`) and the linear layers they are built from (:mod:`.modules.packed_linear`: oneDNN's
   products on a CPU);
2. ``models``: the InsNet model (:mod:`.models.insnet`); InDIGO on the same machinery (:mod:`.models.indigo`);
   the text-infilling paper's self-attention baseline, fairseq's transformer with segment-aware positions
   (:mod:`.models.infill_transformer`); fairseq's Levenshtein Transformer started from, and keeping, its
   source words, the lexically constrained generation baseline (:mod:`.models.levt_keywords`); the iterative
   expansion LM, a Transformer over dependency-tree level transitions (:mod:`.models.expansion_lm`);
3. ``decoding``: the iterative generator (:mod:`.decoding.generator`; InDIGO's step:
   :mod:`.decoding.indigo_generator`; the expansion LM's: :mod:`.decoding.expansion_generator`), raw-line screening
   (:mod:`.decoding.inputs`) and the hub interface (:mod:`.decoding.hub`); ``training``: the passes of the
   model that make training trajectories, InsNet-Dinic layerings (:mod:`.training.layerization`) and InDIGO's
   searched orders (:mod:`.training.searched_order`); :mod:`.reference`: naive per-prefix implementations the
   tests check the one-pass code against;
4. ``tasks``: what every insertion task shares (:mod:`.tasks.base`), ``insertion_translation``
   (:mod:`.tasks.translation`), ``insertion_lm`` (:mod:`.tasks.lm`), the criterion (:mod:`.tasks.criterion`),
   ``expansion_lm`` with its criterion (:mod:`.tasks.expansion_lm`), fairseq's ``language_modeling`` sampling
   from nothing (:mod:`.tasks.unconditional_lm`) and the checks that refuse a model or checkpoint that does not
   fit its dictionaries, task or model (:mod:`.tasks.checkpoint_checks`); ``fairseq_fixes``: patches to
   fairseq 0.12 installed on import: loading its checkpoints under torch >= 2.6
   (:mod:`.fairseq_fixes.checkpoint_compat`), batching that drops the last sentences of a split
   (:mod:`.fairseq_fixes.batching`), fairseq-interactive aborting on, or silently dropping, a bad input line
   (:mod:`.fairseq_fixes.interactive`), distributed training that needs CUDA (:mod:`.fairseq_fixes.distributed_cpu`),
   checkpoint copies that a kill can leave truncated (:mod:`.fairseq_fixes.atomic_checkpoints`), InsT's
   ``--label-tau`` loss failing on its float64 targets (:mod:`.fairseq_fixes.insertion_targets`),
   ``--task language_modeling`` under numpy 2 (:mod:`.fairseq_fixes.numpy_compat`), tracebacks printed for a
   bad flag or file (:mod:`.fairseq_fixes.clean_errors`: one line instead), ``fairseq-train`` aborting at
   exit when its batch-prefetch thread is still inside torch (:mod:`.fairseq_fixes.clean_exit`).
   fairseq's own models keep their layers: the benchmarks give every system they time the package's linear
   layers explicitly (:func:`~insnet_fairseq.modules.packed_linear.pack_linears`).
"""
from insnet_fairseq.fairseq_fixes import (atomic_checkpoints, batching, checkpoint_compat, clean_errors, clean_exit,
                                          distributed_cpu, insertion_targets, interactive, numpy_compat)

checkpoint_compat.install()
batching.install()
interactive.install()
distributed_cpu.install()
atomic_checkpoints.install()
clean_errors.install()
insertion_targets.install()
numpy_compat.install()
clean_exit.install()

# the models and tasks register themselves with fairseq as they are imported
from insnet_fairseq.models import (expansion_lm, indigo, infill_transformer, insnet,  # noqa: E402,F401
                                   levt_keywords)
from insnet_fairseq.tasks import (checkpoint_checks, criterion, expansion_lm as expansion_lm_task,  # noqa: E402,F401
                                  lm, translation, unconditional_lm)

checkpoint_checks.install()

__version__ = "0.1.0"
