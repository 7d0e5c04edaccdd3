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
   :mod:`.checkpoint_safety`: the allowlist of weights-only checkpoint loading, and the package's loader;
   :mod:`.measure`: counters of decoder passes and host syncs (the tests' and the benchmarks');
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
   from nothing (:mod:`.tasks.unconditional_lm`), the checks that refuse a model or checkpoint that does not
   fit its dictionaries, task or model (:mod:`.tasks.checkpoint_checks`) and the one-line errors of the package's
   tasks (:mod:`.tasks.cli_errors`, set by their ``add_args``); ``fairseq_fixes``: fixes of bugs in the pinned
   fairseq 0.12 (fairseq-fixed 0.12.3.1) under torch 2.13 and numpy 2, each named in its module.

Importing the package registers its tasks, models, criteria and generator; a model or task of fairseq's trains and
decodes as it does without the package (``tests/cli/test_plugin_neutral.py``), but where a fix below applies. The
package's linear layers (oneDNN's products and the packed-weight cache, :mod:`.modules.packed_linear`) are built
into its own models; another model gets them only through
:func:`~insnet_fairseq.modules.packed_linear.pack_linears`, which the benchmarks and the recipes' trainer
(``recipes/train_packed.py``) call for every system alike.
What is installed on import fixes a bug of the pinned libraries, and changes nothing where the bug does not occur:

* :mod:`.checkpoint_safety`: fairseq's checkpoint loaders fail under torch >= 2.6 (``torch.load``'s
  ``weights_only=True`` default refuses ``argparse.Namespace``): the allowlist is registered, and loading stays
  weights-only;
* :mod:`.fairseq_fixes.batching`: ``data_utils.batch_by_size`` drops the last sentences of a split;
* :mod:`.fairseq_fixes.interactive`: fairseq-interactive aborts on invalid UTF-8, strips tabs of ``--constraints``
  lines, and aborts (or silently drops) a buffer for one over-long line (the package's tasks screen each line);
* :mod:`.fairseq_fixes.distributed_cpu`: ``--distributed-world-size`` fails without CUDA;
* :mod:`.fairseq_fixes.atomic_checkpoints`: a kill during ``PathManager.copy`` leaves a truncated checkpoint;
* :mod:`.fairseq_fixes.insertion_targets`: ``insertion_transformer --label-tau`` fails on float64 targets;
* :mod:`.fairseq_fixes.numpy_compat`: ``--task language_modeling`` reads ``np.compat``, gone in numpy 2;
* :mod:`.fairseq_fixes.clean_exit`: ``fairseq-train`` aborts at exit while its prefetch thread is inside torch;

Nothing else is installed on import. The package's tasks, once constructed, install :mod:`.tasks.checkpoint_checks`
(a checkpoint that does not fit its task, model or dictionaries is refused, naming the file); a fairseq task's run
loads checkpoints as fairseq does.
"""
from insnet_fairseq import checkpoint_safety
from insnet_fairseq.fairseq_fixes import (atomic_checkpoints, batching, clean_exit, distributed_cpu,
                                          insertion_targets, interactive, numpy_compat)

checkpoint_safety.install()  # fairseq's torch.load calls stay weights-only: they only need the allowlist
batching.install()
interactive.install()
distributed_cpu.install()
atomic_checkpoints.install()
insertion_targets.install()
numpy_compat.install()
clean_exit.install()

# the models and tasks register themselves with fairseq as they are imported
from insnet_fairseq.models import (expansion_lm, indigo, infill_transformer, insnet,  # noqa: E402,F401
                                   levt_keywords)
from insnet_fairseq.tasks import (criterion, expansion_lm as expansion_lm_task, lm, translation,  # noqa: E402,F401
                                  unconditional_lm)

__version__ = "0.1.0"
