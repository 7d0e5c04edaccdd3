#!/usr/bin/env python
"""Convert a checkpoint you trust into one that loads weights-only.

    python recipes/trust_checkpoint.py old.pt safe.pt

The package loads every checkpoint weights-only (``insnet_fairseq/checkpoint_safety.py``): unpickling may build
tensors, plain containers and a short allowlist of classes, and run nothing else. An older checkpoint, or one written
by other code, may hold more (an omegaconf configuration, an enum, a custom object), and is refused with a message
pointing here. This recipe unpickles IN fully, which runs whatever code the file names, so only because you named
the file and trust where it came from, and writes OUT with what weights-only loading accepts:

* omegaconf configurations become plain dicts and lists (as fairseq itself saves its configuration), enums their
  value, numpy scalars Python numbers, dict subclasses plain dicts, sets lists;
* an ``argparse.Namespace`` is kept (it is on the allowlist), its fields converted in turn;
* any other object is dropped, and named (``extra_state.foo: dropped, a Foo``).

OUT is loaded back weights-only before the recipe says it is done. A checkpoint that already loads weights-only is
copied as it is.
"""
import argparse
import collections
import enum
import os
import shutil
import sys

import numpy as np
import torch

from insnet_fairseq import checkpoint_safety
from insnet_fairseq.errors import CheckpointError

PLAIN = (str, bytes, int, float, bool, complex, type(None), torch.Size, torch.dtype, torch.device, torch.layout,
         torch.memory_format)
ALLOWED = tuple(c for c in checkpoint_safety.SAFE_GLOBALS if isinstance(c, type))


def fail(message: str) -> None:
    sys.exit(f"trust_checkpoint.py: {message}")


def safe_form(obj, where: str, notes: list):
    """``obj`` with every part weights-only loading refuses converted or dropped (``_DROP``); ``notes`` gets one
    line per change, named by its path in the checkpoint (``cfg.model``, ``extra_state.foo[2]``)."""
    from omegaconf import OmegaConf

    if isinstance(obj, torch.Tensor) or type(obj) in PLAIN:
        return obj
    if OmegaConf.is_config(obj):
        notes.append(f"{where}: an omegaconf {type(obj).__name__}, converted to plain containers")
        return safe_form(OmegaConf.to_container(obj, resolve=False, enum_to_str=True), where, notes)
    if isinstance(obj, enum.Enum):
        notes.append(f"{where}: the enum {type(obj).__name__}.{obj.name}, kept as its value {obj.value!r}")
        return safe_form(obj.value, where, notes)
    if isinstance(obj, np.generic) and not isinstance(obj, np.object_):
        return obj.item()
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biuf":
            return obj
        notes.append(f"{where}: a numpy array of {obj.dtype}, converted to a list")
        return safe_form(obj.tolist(), where, notes)
    if isinstance(obj, argparse.Namespace):
        out = argparse.Namespace()
        for k, v in vars(obj).items():
            v = safe_form(v, f"{where}.{k}", notes)
            if v is not _DROP:
                setattr(out, k, v)
        return out
    if isinstance(obj, dict):
        if type(obj) not in (dict, collections.OrderedDict):
            notes.append(f"{where}: a {type(obj).__name__}, kept as a plain dict")
        out = collections.OrderedDict() if type(obj) is collections.OrderedDict else {}
        for k, v in obj.items():
            key = safe_form(k, f"{where}[{k!r}]", notes)
            v = safe_form(v, f"{where}.{k}" if where else str(k), notes)
            if key is not _DROP and v is not _DROP:
                out[key] = v
        return out
    if isinstance(obj, (list, tuple, set, frozenset)):
        if isinstance(obj, (set, frozenset)):
            notes.append(f"{where}: a {type(obj).__name__}, kept as a list")
        items = [safe_form(v, f"{where}[{i}]", notes) for i, v in enumerate(obj)]
        items = [None if v is _DROP else v for v in items]  # a dropped item keeps its place: the rest keep their index
        return tuple(items) if type(obj) is tuple else items
    if isinstance(obj, ALLOWED):
        return obj
    notes.append(f"{where}: dropped, a {type(obj).__module__}.{type(obj).__qualname__} (not loadable weights-only)")
    return _DROP


_DROP = object()  # marks a value that safe_form leaves out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN", help="a checkpoint you trust: it is unpickled fully")
    p.add_argument("output", metavar="OUT", help="where the weights-only form is written")
    args = p.parse_args(argv)
    if not os.path.isfile(args.input):
        fail(f"{args.input}: no such file")
    if os.path.abspath(args.input) == os.path.abspath(args.output):
        fail(f"IN and OUT are both {args.input}: write the converted checkpoint to another file")
    try:
        checkpoint_safety.load(args.input)
        already = True
    except CheckpointError:
        already = False
    except Exception as e:  # noqa: BLE001 - damaged or not a torch file
        fail(f"{args.input} is not a readable checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    if already:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        shutil.copyfile(args.input, args.output)
        print(f"{args.input} already loads weights-only: copied to {args.output} unchanged")
        return
    # the one full unpickling of the package: the user named this file as trusted
    try:
        state = torch.load(args.input, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - a class of code that is not installed here, a damaged file
        fail(f"{args.input} cannot be unpickled here ({type(e).__name__}: {str(e).splitlines()[0][:200]}): the code "
             "that wrote it must be importable to convert it")
    notes = []
    safe = safe_form(state, "", notes)
    if safe is _DROP:
        fail(f"{args.input} holds a {type(state).__name__}, nothing a checkpoint can keep")
    from fairseq.checkpoint_utils import torch_persistent_save

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    torch_persistent_save(safe, args.output)  # to OUT.tmp, then renamed: never a truncated OUT
    try:
        checkpoint_safety.load(args.output)
    except Exception as e:  # noqa: BLE001 - a kind of object safe_form does not know
        os.remove(args.output)
        fail(f"the converted checkpoint still does not load weights-only ({str(e).splitlines()[0][:300]}); nothing "
             "written")
    for note in notes:
        print(note)
    print(f"{args.output}: written in the weights-only form ({len(notes)} change(s)); it loads without running code")


if __name__ == "__main__":
    main()
