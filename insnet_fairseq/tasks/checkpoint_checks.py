"""Clear errors, naming the file, when a checkpoint does not fit what it is loaded with.

fairseq 0.12 leaves these to chance: a corrupt, empty or non-checkpoint file gives a bare
unpickling or EOF error; a dictionary of another size a ``state_dict`` size mismatch that names no
file; a dictionary of the same size in another order decodes garbage, silently; a baseline
checkpoint decoded with ``--task insertion_translation`` fails only once decoding starts.

A product feature, not a fix of fairseq: importing the package installs nothing. The checks apply in a process that
runs one of the package's tasks (``insertion_translation``, ``insertion_lm``, ``expansion_lm``), whose construction
calls :func:`install`, and in the package's own scripts, which load through :func:`load_model_ensemble_and_task`.
A fairseq task's run (``--task translation`` with ``--user-dir insnet_fairseq`` too) loads as fairseq does.

* Every checkpoint that one of the package's tasks trains records a fingerprint of its source and target
  dictionaries, through fairseq's own hook: the task's ``state_dict``, saved as the checkpoint's ``task_state``
  (key ``dictionaries``: size, sha256 of the symbols in index order and of the sorted symbols, the dict file).
  Loading one for decoding (fairseq-generate, -interactive, the recipes) or for training (resume,
  ``--finetune-from-model``) compares it with the dictionaries loaded now. Checkpoints without it (a fairseq task's)
  still load; for them only the embedding size is compared with the dictionary's.
* The checkpoint's model must fit the task (InsNet only with ``insertion_translation``, and the
  baselines never with it) and, when training, the model being trained (same model class; a shape
  mismatch lists the first parameters that differ). A model being built must fit its task too:
  the models' own ``build_model`` checks it (:mod:`insnet_fairseq.models.task_fit`).
* A file that is missing, empty, not a torch file, damaged, or a torch file that is not a fairseq
  checkpoint is named with what is wrong with it.
* A checkpoint naming a global outside the weights-only allowlist (:mod:`insnet_fairseq.checkpoint_safety`) is
  refused, naming the file and the class, and how to convert a trusted one. A data-parallel run has every worker
  read the checkpoint it resumes from itself (``--load-checkpoint-on-all-dp-ranks``): fairseq would otherwise send
  rank 0's loaded state, configuration objects included, to the others as a pickle that weights-only loading
  refuses.

fairseq's hooks (the task's ``load_state_dict`` and ``build_model``, the model's ``load_state_dict``) do not see
the checkpoint's file, which every message names: so the checks wrap fairseq's three loading functions,
``checkpoint_utils.load_checkpoint_to_cpu`` and ``load_model_ensemble_and_task`` and ``Trainer.load_checkpoint``,
once such a task exists.

Each raises :class:`insnet_fairseq.errors.CheckpointError` (a model built for the wrong task: ``ValueError``),
which the package's tasks print as one line, without a traceback (:mod:`insnet_fairseq.tasks.cli_errors`).
"""
import hashlib
import os

from fairseq import checkpoint_utils, tasks, utils
from fairseq.tasks import TASK_REGISTRY
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.file_io import PathManager
from fairseq.models import ARCH_MODEL_REGISTRY, FairseqEncoderDecoderModel
from fairseq.models.nat import FairseqNATModel
from fairseq.trainer import Trainer

from insnet_fairseq import checkpoint_safety
from insnet_fairseq.errors import CheckpointError
from insnet_fairseq.models.insnet import InsNetLMModel, InsNetModel

FINGERPRINT_KEY = "dictionaries"
ROLES = (("source", "source_dictionary", "source_lang"), ("target", "target_dictionary", "target_lang"))


# ------------------------------------------------------------------ dictionaries


def _dictionary(task, attr):
    try:
        d = getattr(task, attr)
    except (NotImplementedError, AttributeError):
        return None
    return d if isinstance(d, Dictionary) else None


def dict_file(task, lang_attr):
    """The dict.LANG.txt a (translation) task read its dictionary from, or ''."""
    cfg = getattr(task, "cfg", None)
    data = getattr(cfg, "data", None) if cfg is not None else None
    lang = getattr(cfg, lang_attr, None) if cfg is not None else None
    if not data:
        return ""
    if not lang:  # monolingual data (insertion_lm): one dict.txt
        path = os.path.join(utils.split_paths(data)[0], "dict.txt")
        return path if os.path.isfile(path) else ""
    return os.path.join(utils.split_paths(data)[0], f"dict.{lang}.txt")


def fingerprint(dictionary, path=""):
    symbols = list(dictionary.symbols)
    return {
        "size": len(symbols),
        "sha256": hashlib.sha256("\n".join(symbols).encode("utf-8")).hexdigest(),
        "sorted_sha256": hashlib.sha256("\n".join(sorted(symbols)).encode("utf-8")).hexdigest(),
        "file": path,
    }


def task_fingerprints(task):
    """{role: fingerprint} of the task's source and target dictionaries (none for other tasks)."""
    out = {}
    for role, attr, lang_attr in ROLES:
        d = _dictionary(task, attr) if task is not None else None
        if d is not None:
            out[role] = fingerprint(d, dict_file(task, lang_attr))
    return out


def _difference(saved, now):
    if saved["sha256"] == now["sha256"]:
        return None
    if saved["size"] != now["size"]:
        return f"{saved['size']:,} types in the checkpoint's, {now['size']:,} in this one"
    if saved.get("sorted_sha256") == now["sorted_sha256"]:
        return f"the same {now['size']:,} types in a different order"
    return f"the same size ({now['size']:,} types) but other types"


def saved_fingerprints(state) -> dict:
    """{role: fingerprint} a checkpoint records: in its ``task_state`` (the task's ``state_dict`` hook), or, in a
    checkpoint saved before that hook held it, at the top level; {} for a checkpoint of a fairseq task."""
    return (state.get("task_state") or {}).get(FINGERPRINT_KEY) or state.get(FINGERPRINT_KEY) or {}


def check_dictionaries(path, state, task):
    """Raise CheckpointError when the task's dictionaries are not the ones ``path`` was trained with."""
    now = task_fingerprints(task)
    if not now:
        return
    saved = saved_fingerprints(state)
    problems = []
    for role, attr, lang_attr in ROLES:
        if role not in now:
            continue
        here = now[role]["file"] or f"the task's {role} dictionary"
        if role in saved:
            diff = _difference(saved[role], now[role])
            if diff:
                trained = saved[role].get("file")
                problems.append(f"{role} dictionary {here}: {diff}"
                                + (f" (trained with {trained})" if trained and trained != here else ""))
            continue
        # an older checkpoint, without fingerprints: only the embedding size can be compared
        key = "encoder.embed_tokens.weight" if role == "source" else "decoder.embed_tokens.weight"
        weight = (state.get("model") or {}).get(key)
        if weight is not None and hasattr(weight, "shape") and weight.shape[0] != now[role]["size"]:
            problems.append(f"{role} dictionary {here}: {now[role]['size']:,} types, but the checkpoint's "
                            f"embedding ({key}) has {weight.shape[0]:,} rows")
    if problems:
        raise CheckpointError(
            f"checkpoint {path} was trained with other dictionaries than the data given now: "
            + "; ".join(problems)
            + ". Its token ids would mean other words (garbage output): use the data-bin it was trained on, "
            "or binarise new data with its dictionaries (fairseq-preprocess --srcdict/--tgtdict)"
        )


# ------------------------------------------------------------------ models and tasks


def _get(obj, key):
    if obj is None:
        return None
    try:
        return obj.get(key) if hasattr(obj, "get") else getattr(obj, key, None)
    except Exception:  # noqa: BLE001 - omegaconf struct errors and the like
        return None


def checkpoint_arch(state):
    """(arch, task name) the checkpoint was trained with, as far as it records them."""
    cfg, args = state.get("cfg"), state.get("args")
    if cfg is not None:
        model, task = _get(cfg, "model"), _get(cfg, "task")
        return _get(model, "arch") or _get(model, "_name"), _get(task, "_name")
    if args is not None:
        return getattr(args, "arch", None), getattr(args, "task", None)
    return None, None


def _model_class(arch):
    return ARCH_MODEL_REGISTRY.get(arch) if arch else None


def _is_insnet(cls):
    return cls is not None and issubclass(cls, InsNetModel)


def _is_autoregressive(cls) -> bool:
    return issubclass(cls, FairseqEncoderDecoderModel) and not issubclass(cls, FairseqNATModel) and not _is_insnet(cls)


def check_model_fits_task(path, state, task, judge: bool = False):
    """``judge``: the checkpoint follows the first in ``--path``, where autoregressive models may be the judge of
    InsNet's candidates and its channel model (``--iter-decode-with-external-reranker``, ``--channel-weight``; the
    generator checks the flags and the count)."""
    arch, trained_task = checkpoint_arch(state)
    cls = _model_class(arch)
    if cls is None or task is None:
        return
    # by their registered names: the tasks import this module (they install the checks)
    InsertionLMTask, InsertionTranslationTask = TASK_REGISTRY["insertion_lm"], TASK_REGISTRY["insertion_translation"]
    task_name = _task_name(task)
    is_lm, lm_task = issubclass(cls, InsNetLMModel), isinstance(task, InsertionLMTask)
    if is_lm and not lm_task:
        raise CheckpointError(
            f"checkpoint {path} is an InsNet language model (--arch {arch}), which only the task insertion_lm "
            f"trains and decodes, not --task {task_name}: pass --user-dir insnet_fairseq --task insertion_lm"
        )
    if lm_task and not is_lm:
        what = f"an InsNet translation model (--arch {arch})" if _is_insnet(cls) else f"a fairseq {cls.__name__} (--arch {arch})"
        raise CheckpointError(
            f"checkpoint {path} is {what}, but --task insertion_lm decodes InsNet language models (--arch insnet_lm_*) "
            f"only: decode it with --task {trained_task or 'translation'}"
        )
    if is_lm:
        return
    if _is_insnet(cls) and not isinstance(task, InsertionTranslationTask):
        raise CheckpointError(
            f"checkpoint {path} is an InsNet model (--arch {arch}), which only the task insertion_translation "
            f"trains and decodes, not --task {task_name}: pass --user-dir insnet_fairseq --task insertion_translation"
        )
    if not _is_insnet(cls) and isinstance(task, InsertionTranslationTask):
        if judge and _is_autoregressive(cls):
            return
        raise CheckpointError(
            f"checkpoint {path} is a fairseq {cls.__name__} (--arch {arch}, trained with --task "
            f"{trained_task or '?'}), but --task insertion_translation decodes InsNet models (--arch insnet_*) only: "
            f"decode it with --task {trained_task or 'translation'} (and that task's flags), or, autoregressive, make "
            "it the judge of --insertion-candidates: --path INSNET.pt:AR.pt --iter-decode-with-external-reranker"
        )


def _task_name(task) -> str:
    return getattr(getattr(task, "cfg", None), "_name", None) or type(task).__name__


def check_model_fits_training(path, state, model_cfg):
    """Resume / --finetune-from-model: the checkpoint must hold the kind of model being trained."""
    arch, _ = checkpoint_arch(state)
    run_arch = _get(model_cfg, "arch") or _get(model_cfg, "_name")
    cls, run_cls = _model_class(arch), _model_class(run_arch)
    if cls is not None and run_cls is not None and cls is not run_cls:
        raise CheckpointError(
            f"checkpoint {path} holds a model of class {cls.__name__} (--arch {arch}), but this run trains "
            f"{run_cls.__name__} (--arch {run_arch}): resume it with its own architecture, or train into another --save-dir"
        )


def shape_differences(saved_shapes, model, limit=3):
    """Readable list of the first parameters whose presence or shape differs."""
    current = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    diffs = []
    for key in list(saved_shapes) + [k for k in current if k not in saved_shapes]:
        a, b = saved_shapes.get(key), current.get(key)
        if a != b:
            diffs.append(f"{key}: {'absent' if a is None else list(a)} in the checkpoint, "
                         f"{'absent' if b is None else list(b)} in the model")
    more = f" (and {len(diffs) - limit} more)" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more, len(diffs)


# ------------------------------------------------------------------ loading


_training = []  # (task, model cfg, saved shapes) of the Trainer.load_checkpoint being run


def describe_unreadable(path, error):
    """Why ``path`` is no fairseq checkpoint (called once loading it failed; reads it again to tell)."""
    if os.path.isdir(path):
        return f"checkpoint {path} is a directory, not a checkpoint file"
    size = os.path.getsize(path) if os.path.exists(path) else -1
    if size == 0:
        return f"checkpoint {path} is empty (0 bytes), not a checkpoint (an interrupted save?): delete it or pass another file"
    refused = checkpoint_safety.refusal(path, error)
    if refused:  # a global outside the allowlist: named without unpickling the file
        return refused
    try:
        obj = checkpoint_safety.load(path)
    except CheckpointError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - pickle, zip, EOF: whatever the file is, it is no checkpoint
        text = f"{type(e).__name__}: {e}".splitlines()[0][:160]
        return (f"checkpoint {path} ({size:,} bytes) cannot be read by torch.load: not a checkpoint, or a damaged or "
                f"truncated one ({text})")
    if not isinstance(obj, dict):
        return f"checkpoint {path} holds a {type(obj).__name__}, not a fairseq checkpoint (a dict with 'model' and 'cfg')"
    if "model" not in obj or ("cfg" not in obj and "args" not in obj):
        keys = ", ".join(sorted(map(str, obj))[:8]) or "none"
        return f"checkpoint {path} is a torch file but not a fairseq checkpoint: its keys are {keys}, not 'model' and 'cfg'"
    text = f"{type(error).__name__}: {error}".splitlines()[0][:160]
    return f"checkpoint {path} could not be loaded as a fairseq checkpoint ({text})"


def _wrap_load_checkpoint_to_cpu(original):
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        if not PathManager.exists(path):
            raise CheckpointError(f"checkpoint {path} does not exist")
        if os.path.isdir(path) or (os.path.exists(path) and os.path.getsize(path) == 0):
            raise CheckpointError(describe_unreadable(path, None))
        try:
            state = original(path, arg_overrides, load_on_all_ranks)
        except Exception as e:  # noqa: BLE001 - whatever pickle, zip or fairseq's upgrade raised
            raise CheckpointError(describe_unreadable(path, e)) from e
        if not isinstance(state, dict) or "model" not in state or ("cfg" not in state and "args" not in state):
            raise CheckpointError(describe_unreadable(path, ValueError("no 'model', 'cfg'")))
        if _training:  # Trainer.load_checkpoint: check before the parameters are copied
            task, model_cfg, shapes = _training[-1]
            check_model_fits_training(path, state, model_cfg)
            check_dictionaries(path, state, task)
            shapes.update({k: tuple(v.shape) for k, v in state["model"].items() if hasattr(v, "shape")})
        return state

    load_checkpoint_to_cpu.insnet_checked = True
    load_checkpoint_to_cpu.__doc__ = original.__doc__
    return load_checkpoint_to_cpu


def _wrap_load_model_ensemble_and_task(original):
    def load_model_ensemble_and_task(filenames, arg_overrides=None, task=None, strict=True, suffix="",
                                     num_shards=1, state=None):
        if num_shards != 1:
            return original(filenames, arg_overrides, task, strict, suffix, num_shards, state)
        ensemble, cfg = [], None
        for i, filename in enumerate(filenames):
            path = checkpoint_utils.get_maybe_sharded_checkpoint_filename(filename, suffix, 0, 1)
            st = state if state is not None else checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides)
            state = None
            if task is None:  # as fairseq does, but before the model is built, so it can be checked
                st_cfg = convert_namespace_to_omegaconf(st["args"]) if st.get("args") is not None else st["cfg"]
                task = tasks.setup_task(st_cfg.task, from_checkpoint=True)
            check_model_fits_task(path, st, task, judge=i > 0)
            check_dictionaries(path, st, task)
            try:
                models, cfg, task = original([filename], arg_overrides, task, strict, suffix, 1, st)
            except RuntimeError as e:
                if "Error(s) in loading state_dict" not in str(e):
                    raise
                first = next((l.strip() for l in str(e).splitlines()[1:] if l.strip()), str(e))
                raise CheckpointError(
                    f"checkpoint {path} does not fit the model built from its own configuration ({first}): "
                    "a checkpoint of another architecture or code version, or --model-overrides that change its shape"
                ) from e
            ensemble.extend(models)
        return ensemble, cfg, task

    load_model_ensemble_and_task.insnet_checked = True
    return load_model_ensemble_and_task


def _wrap_trainer_load_checkpoint(original):
    def load_checkpoint(self, filename, *args, **kwargs):
        shapes = {}
        _training.append((self.task, self.cfg.model, shapes))
        if self.data_parallel_world_size > 1:  # no pickled broadcast of the loaded state (module docstring)
            self.cfg.checkpoint.load_checkpoint_on_all_dp_ranks = True
        try:
            return original(self, filename, *args, **kwargs)
        except CheckpointError:
            raise
        except Exception as e:
            if not str(e).startswith("Cannot load model parameters") or not shapes:
                raise
            diffs, n = shape_differences(shapes, self.model)
            if n == 0:  # the parameters fit: something else failed (the criterion's state, ...)
                raise
            raise CheckpointError(
                f"checkpoint {filename} does not fit the model being trained: {n} parameter(s) differ ({diffs}); "
                "it was trained with other architecture flags (layers, dimensions, shared embeddings): resume "
                "with the same flags, or train into another --save-dir"
            ) from e
        finally:
            _training.pop()

    load_checkpoint.insnet_checked = True
    return load_checkpoint


def install() -> None:
    """Idempotently wrap fairseq's checkpoint loading (see the module docstring); the package's tasks call it."""
    cu = checkpoint_utils
    if not getattr(cu.load_checkpoint_to_cpu, "insnet_checked", False):
        cu.load_checkpoint_to_cpu = _wrap_load_checkpoint_to_cpu(cu.load_checkpoint_to_cpu)
    if not getattr(cu.load_model_ensemble_and_task, "insnet_checked", False):
        cu.load_model_ensemble_and_task = _wrap_load_model_ensemble_and_task(cu.load_model_ensemble_and_task)
    if not getattr(Trainer.load_checkpoint, "insnet_checked", False):
        Trainer.load_checkpoint = _wrap_trainer_load_checkpoint(Trainer.load_checkpoint)


class CheckedCheckpoints:
    """What the package's tasks (``InsertionTask``, ``ExpansionLMTask``) inherit first: constructing one installs the
    checks, and its ``state_dict`` (fairseq saves it as the checkpoint's ``task_state``) records its dictionaries."""

    def __init__(self, *args, **kwargs):
        install()
        super().__init__(*args, **kwargs)

    def state_dict(self):
        return {**super().state_dict(), FINGERPRINT_KEY: task_fingerprints(self)}


def load_model_ensemble_and_task(filenames, arg_overrides=None, task=None, **kwargs):
    """fairseq's ``checkpoint_utils.load_model_ensemble_and_task`` with the checks: what the package's scripts
    (``recipes/``, ``benchmarks/``, ``experiments/``) load checkpoints with. Returns (models, cfg, task)."""
    install()
    return checkpoint_utils.load_model_ensemble_and_task(filenames, arg_overrides, task, **kwargs)
