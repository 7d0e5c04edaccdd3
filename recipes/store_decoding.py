#!/usr/bin/env python
"""Store decoding settings with a model: the values chosen on valid for its checkpoint become the defaults that
fairseq-generate, fairseq-interactive and the hub interface use for it when the flag is not given.

    python recipes/store_decoding.py CKPT --insertion-mode parallel --stop-check-prob 0.5
    python recipes/store_decoding.py CKPT --insertion-mode parallel --slot-top-p 0.95 --no-skip-repeats
    python recipes/store_decoding.py CKPT --insertion-mode parallel --end-of-slot 0.4   # a --slot-objective gap model
    python recipes/store_decoding.py CKPT --insertion-mode parallel --last-word 0.6     # a --last-word-head model
    python recipes/store_decoding.py CKPT --show         # what CKPT holds
    python recipes/store_decoding.py CKPT --clear        # back to the flags' own defaults

Stored per ``--insertion-mode`` (a setting of parallel decoding does not change sequential decoding), only the
settings whose defaults are chosen on valid (``--slot-top-p``, ``--skip-repeats`` / ``--no-skip-repeats``,
``--stop-check-prob``, ``--end-of-slot``, ``--last-word``); a flag given on the command line always wins. They live in the checkpoint's model arguments
(``decoding_defaults``), so they travel with the file and survive fairseq's loading; averaging checkpoints keeps
the newest input's (recipes/average_checkpoints.py), so store after averaging. The checkpoint is rewritten in place,
atomically (fairseq's ``torch_persistent_save``). Example: after ``--insertion-mode parallel --stop-check-prob 0.5``,
``fairseq-generate ... --insertion-mode parallel`` decodes with ``--stop-check-prob 0.5``, and with
``--stop-check-prob 0.75`` given, at 0.75.
"""
import argparse
import os
import sys

from fairseq import checkpoint_utils

from insnet_fairseq import checkpoint_safety
from insnet_fairseq.decoding.options import MODES, DecodingOptions, check_stored
from insnet_fairseq.errors import CheckpointError, FlagError


def model_args(state: dict, path: str):
    """The model arguments of a loaded checkpoint (``cfg.model``, or ``args`` of an old one), where
    ``decoding_defaults`` lives."""
    cfg = state.get("cfg") or {}
    found = cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", None)
    found = found if found is not None else state.get("args")
    if found is None or not hasattr(found, "__dict__") or not hasattr(found, "arch"):
        sys.exit(f"store_decoding.py: {path} has no model arguments (cfg.model): not a fairseq checkpoint of a model")
    if not str(found.arch).startswith("insnet"):
        sys.exit(f"store_decoding.py: {path} is a checkpoint of --arch {found.arch}: decoding settings are stored with "
                 "InsNet models (--arch insnet_*)")
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--insertion-mode", choices=MODES, help="the mode the settings are for (required to store)")
    p.add_argument("--slot-top-p", type=float)
    repeats = p.add_mutually_exclusive_group()
    repeats.add_argument("--skip-repeats", action="store_true")
    repeats.add_argument("--no-skip-repeats", action="store_true")
    p.add_argument("--stop-check-prob", type=float)
    p.add_argument("--end-of-slot", type=float)
    p.add_argument("--last-word", type=float)
    p.add_argument("--show", action="store_true", help="print what the checkpoint holds, change nothing")
    p.add_argument("--clear", action="store_true", help="remove every stored setting")
    args = p.parse_args(argv)
    if not os.path.isfile(args.checkpoint):
        sys.exit(f"store_decoding.py: checkpoint {args.checkpoint} not found")
    try:
        state = checkpoint_safety.load(args.checkpoint)
    except CheckpointError as e:
        sys.exit(f"store_decoding.py: {e}")
    margs = model_args(state, args.checkpoint)
    stored = dict(getattr(margs, "decoding_defaults", None) or {})
    if args.show:
        print(f"{args.checkpoint}: {stored or 'no stored decoding settings'}")
        return
    if args.clear:
        stored = {}
    else:
        if args.insertion_mode is None:
            sys.exit("store_decoding.py: --insertion-mode is required: the settings are stored per mode")
        given = {"slot_top_p": args.slot_top_p, "stop_check_prob": args.stop_check_prob, "end_of_slot": args.end_of_slot,
                 "last_word": args.last_word,
                 "skip_repeats": True if args.skip_repeats else False if args.no_skip_repeats else None}
        given = {k: v for k, v in given.items() if v is not None}
        if not given:
            sys.exit("store_decoding.py: nothing to store: give --slot-top-p, --stop-check-prob, --end-of-slot, --last-word or "
                     "--skip-repeats / --no-skip-repeats (or --clear, --show)")
        stored[args.insertion_mode] = {**stored.get(args.insertion_mode, {}), **given}
        try:  # the values decoding would refuse are refused here, naming the flag
            DecodingOptions.for_mode(args.insertion_mode, stored=check_stored(stored))
        except FlagError as e:
            sys.exit(f"store_decoding.py: {e}")
    margs.decoding_defaults = stored
    checkpoint_utils.torch_persistent_save(state, args.checkpoint)  # to CKPT.tmp, then renamed: never truncated
    print(f"{args.checkpoint}: stored decoding settings {stored or '(none)'}")


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
