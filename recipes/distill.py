#!/usr/bin/env python
"""Sequence-level knowledge distillation of a prepared corpus (the paper's "+KD" rows).

    make distill-NAME          # python recipes/distill.py NAME: data-bin/NAME -> data-bin/NAME-distill

1. Teacher: fairseq's autoregressive ``transformer``, trained by ``bash recipes/train.sh ar
   data-bin/NAME checkpoints/NAME-teacher`` with train.sh's settings and environment (UPDATES,
   MAX_TOKENS, LR, WARMUP, MINUTES, THREADS); TEACHER_ARGS adds fairseq-train flags (a bigger or
   smaller teacher: ``TEACHER_ARGS="--encoder-layers 6 --decoder-layers 6"``). Skipped once it has
   finished (its teacher.done), or when TEACHER=checkpoint.pt names one (or an ensemble: TEACHER=a.pt:b.pt, as
   fairseq's --path). Its folder is checkpoints/NAME-teacher, or checkpoints/NAME-SUFFIX-teacher for a corpus of
   another ``--suffix`` (:func:`teacher_dir`), so that a second teacher trains beside the first.
   checkpoint_best.pt is used when there is one, else checkpoint_last.pt.
2. Beam search over the training set: ``fairseq-generate --gen-subset train --beam BEAM (5)
   --batch-size GEN_BATCH (64)`` plus GEN_ARGS (default ``--max-len-a 1.2 --max-len-b 10``), BPE
   kept (no --remove-bpe). Saved as work/NAME-distill/generate-train.txt. TEACHER may also be an
   InsNet model (``--task insertion_translation``, best one trained left to right): it decodes with
   sequential insertion, greedy at BEAM=1, ``--insertion-beam BEAM`` above.
3. The corpus: fairseq-generate prints sentences in batch order, so the S- (source BPE) and H-
   (best hypothesis) lines are joined per id and sorted by id (GNU sort, bounded memory) into
   work/NAME-distill/train.SRC and train.TGT, one line per training sentence, in corpus order. An
   empty hypothesis keeps the original target (counted and reported).
4. fairseq-preprocess of that training set with the original joined dictionary (--srcdict
   data-bin/NAME/dict.SRC.txt --joined-dictionary) into data-bin/NAME-distill/; the original
   valid and test binaries are copied, so they are the same sets.

``--suffix`` (DISTILL_SUFFIX, default ``distill``) names the outputs data-bin/NAME-SUFFIX and work/NAME-SUFFIX, so
a second teacher's corpus sits beside the first: ``DISTILL_SUFFIX=distill-t120
TEACHER=checkpoints/t120_ar/checkpoint_best.pt python recipes/distill.py multi30k_en_de``, or, a teacher trained
for it, ``DISTILL_SUFFIX=distill-long UPDATES=4000 TEACHER_ARGS="--dropout 0.3" python recipes/distill.py
multi30k_en_de`` (into checkpoints/multi30k_en_de-distill-long-teacher).

Every step is skipped when its output exists. The direction is read from data-bin/NAME
(train.SRC-TGT.*); SRC=.. TGT=.. (or --src/--tgt) choose the other one.
"""
import argparse
import glob
import os
import shlex
import shutil
import subprocess
import sys
import time

from recipes.common import ROOT, fairseq_tool, tool_env


DEFAULT_SUFFIX = "distill"  # --suffix's default: data-bin/NAME-distill, taught by checkpoints/NAME-teacher


def log(message):
    print(f"distill: {message}", flush=True)


def fail(message):
    sys.exit(f"distill: {message}")


def languages(data):
    """(src, tgt) from the training files of a data-bin folder."""
    pairs = {os.path.basename(p).split(".")[1] for p in glob.glob(os.path.join(data, "train.*-*.*.bin"))}
    if len(pairs) != 1:
        fail(f"cannot tell the language pair of {data} (train.SRC-TGT.*.bin: {sorted(pairs) or 'none'})")
    return tuple(pairs.pop().split("-"))


def train_teacher(data, save):
    """The teacher's checkpoint: TEACHER (one checkpoint, or an ensemble a.pt:b.pt), or train.sh ar (resumed if
    interrupted) unless done."""
    if os.environ.get("TEACHER"):
        return ":".join(os.path.abspath(p) for p in ensemble_paths(os.environ["TEACHER"]))
    done = os.path.join(save, "teacher.done")
    if os.path.exists(done):
        log(f"teacher: done before, skipped ({save})")
    else:
        log(f"training the teacher (fairseq transformer) into {save}")
        extra = shlex.split(os.environ.get("TEACHER_ARGS", ""))
        code = subprocess.run(["bash", "recipes/train.sh", "ar", data, save, *extra], cwd=ROOT, env=tool_env()).returncode
        if code != 0:
            fail(f"teacher training failed (recipes/train.sh exit {code}); run again to resume it")
        open(done, "w").close()
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        if os.path.exists(os.path.join(save, name)):
            return os.path.join(save, name)
    fail(f"no checkpoint in {save}")


def teacher_dir(checkpoint_dir: str, name: str, suffix: str) -> str:
    """The folder the teacher of corpus NAME-SUFFIX trains into: NAME-teacher for the default suffix, else
    NAME-SUFFIX-teacher, so that each corpus has its own teacher.
    Example: ("checkpoints", "multi30k_en_de", "distill") -> "checkpoints/multi30k_en_de-teacher";
    ("checkpoints", "multi30k_en_de", "distill-long") -> "checkpoints/multi30k_en_de-distill-long-teacher"."""
    folder = f"{name}-teacher" if suffix == DEFAULT_SUFFIX else f"{name}-{suffix}-teacher"
    return os.path.join(checkpoint_dir, folder)


def checkpoint_task(ckpt) -> str:
    """The fairseq task a checkpoint was trained with (its saved config's ``task._name``, or ``args.task``:
    :func:`insnet_fairseq.tasks.checkpoint_checks.checkpoint_arch`). Every member of an ensemble (fairseq's
    ``a.pt:b.pt``, :func:`ensemble_paths`) must have been trained with the same task."""
    from insnet_fairseq import checkpoint_safety
    from insnet_fairseq.errors import CheckpointError
    from insnet_fairseq.tasks.checkpoint_checks import checkpoint_arch

    tasks = {}
    for path in ensemble_paths(ckpt):
        try:
            _, tasks[path] = checkpoint_arch(checkpoint_safety.load(path))
        except CheckpointError as e:
            fail(str(e))
        if not tasks[path]:
            fail(f"cannot tell the task of the teacher {path} (no cfg.task in the checkpoint)")
    if len(set(tasks.values())) > 1:
        fail("the teacher's checkpoints were trained with different tasks: "
             + ", ".join(f"{p} ({t})" for p, t in tasks.items()))
    return next(iter(tasks.values()))


def ensemble_paths(ckpt: str) -> list:
    """The members of a teacher given as fairseq's ``--path`` (one checkpoint, or an ensemble joined by ':'), each
    checked to exist. Example: "a.pt:b.pt" -> ["a.pt", "b.pt"] (when both are files)."""
    paths = [p for p in ckpt.split(":") if p]
    missing = [p for p in paths if not os.path.isfile(p)]
    if not paths or missing:
        fail(f"teacher {ckpt or '(none)'}: no such checkpoint {', '.join(missing) or '(empty path)'}")
    return paths


def teacher_decoding(task: str, beam: int) -> list:
    """fairseq-generate flags of a teacher trained with ``task``: an autoregressive model (``translation``) decodes
    with ``--beam BEAM``; an InsNet one (``insertion_translation``) inserts left to right, sequential insertion, greedy
    at BEAM 1 and ``--insertion-beam BEAM`` above. Example: ("insertion_translation", 1) -> ["--task",
    "insertion_translation", "--insertion-mode", "sequential", "--beam", "1"]."""
    if task == "translation":
        return ["--task", "translation", "--beam", str(beam)]
    if task == "insertion_translation":
        flags = ["--task", task, "--insertion-mode", "sequential", "--beam", "1"]
        return flags + (["--insertion-beam", str(beam)] if beam > 1 else [])
    fail(f"a teacher must be a translation or insertion_translation model, this one was trained with --task {task}")


def decode_train(data, ckpt, src, tgt, out, gen_args="--max-len-a 1.2 --max-len-b 10"):
    """fairseq-generate over the training split, output saved to ``out`` (skipped when there); GEN_ARGS, when set,
    replaces ``gen_args``, the caller's default length limits. The teacher's task picks the decoding
    (:func:`teacher_decoding`)."""
    if os.path.exists(out):
        log(f"decoding: done before, skipped ({out})")
        return
    cmd = [*fairseq_tool("generate"), data, "--user-dir", "insnet_fairseq",
           *teacher_decoding(checkpoint_task(ckpt), int(os.environ.get("BEAM", "5"))),
           "--source-lang", src, "--target-lang", tgt, "--path", ckpt, "--gen-subset", "train",
           "--batch-size", os.environ.get("GEN_BATCH", "64"),
           *shlex.split(os.environ.get("GEN_ARGS", gen_args))]
    log("decoding the training set: " + " ".join(cmd))
    hyps, last = 0, time.time()
    with subprocess.Popen(cmd, cwd=ROOT, env=tool_env(), stdout=subprocess.PIPE, text=True, encoding="utf-8") as proc, \
            open(out + ".tmp", "w", encoding="utf-8") as f:
        for line in proc.stdout:
            f.write(line)
            if line.startswith("H-"):
                hyps += 1
                if time.time() - last > 30:
                    log(f"{hyps} sentences decoded")
                    last = time.time()
            elif line[:2] not in ("S-", "T-", "D-", "P-"):
                print(line, end="", flush=True)
    if proc.returncode != 0:
        fail(f"fairseq-generate failed (exit {proc.returncode})")
    os.replace(out + ".tmp", out)
    log(f"{hyps} sentences decoded")


def write_corpus(generated, count_train, out_src, out_tgt):
    """Source and best hypothesis of every training sentence, in corpus (id) order;
    ``count_train()`` gives the number of training sentences the output must have."""
    if os.path.exists(out_src) and os.path.exists(out_tgt):
        log(f"distilled text: done before, skipped ({out_tgt})")
        return
    unsorted, ordered = out_tgt + ".unsorted", out_tgt + ".sorted"
    with open(generated, encoding="utf-8") as f, open(unsorted, "w", encoding="utf-8") as out:
        source, target = {}, {}
        for line in f:
            kind, _, rest = line.rstrip("\n").partition("\t")
            if kind.startswith(("S-", "T-")):
                (source if kind[0] == "S" else target)[kind[2:]] = rest
            elif kind.startswith("H-"):
                i = kind[2:]
                hyp = rest.partition("\t")[2].strip()
                out.write(f"{i}\t{source.pop(i)}\t{hyp}\t{target.pop(i, '')}\n")
    subprocess.run(["sort", "-t", "\t", "-k1,1n", "-S", "25%", "-o", ordered, unsorted], check=True,
                   env=dict(os.environ, LC_ALL="C"))
    os.remove(unsorted)
    kept = 0
    with open(ordered, encoding="utf-8") as f, open(out_src + ".tmp", "w", encoding="utf-8") as fs, \
            open(out_tgt + ".tmp", "w", encoding="utf-8") as ft:
        n = 0
        for n, line in enumerate(f, 1):
            i, s, hyp, ref = line.rstrip("\n").split("\t")
            if int(i) != n - 1:
                fail(f"{generated}: sentence {n - 1} is missing or doubled (found id {i})")
            if not hyp:
                kept += 1
                hyp = ref
            fs.write(s + "\n")
            ft.write(hyp + "\n")
    os.remove(ordered)
    if n != count_train():
        fail(f"{generated} has {n} hypotheses for {count_train()} training sentences")
    if kept:
        log(f"{kept} empty hypothesis(es): the original target kept")
    os.replace(out_src + ".tmp", out_src)
    os.replace(out_tgt + ".tmp", out_tgt)
    log(f"distilled training set: {n} sentence pairs")


def n_train(data, src, tgt):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data, f"train.{pair}.{src}")
        if os.path.exists(prefix + ".idx"):
            return len(MMapIndexedDataset(prefix))
    fail(f"no training set {src}-{tgt} in {data}")


def binarize(data, text_prefix, dest, src, tgt):
    """Distilled train with the original dictionary; the original valid/test copied."""
    copies = [p for p in glob.glob(os.path.join(data, "*")) if os.path.basename(p).startswith(("valid.", "test."))]
    if os.path.exists(os.path.join(dest, f"train.{src}-{tgt}.{tgt}.bin")) and \
            all(os.path.exists(os.path.join(dest, os.path.basename(p))) for p in copies):
        log(f"binarise: done before, skipped ({dest})")
        return
    code = subprocess.run([*fairseq_tool("preprocess"), "--source-lang", src, "--target-lang", tgt,
                           "--trainpref", text_prefix, "--destdir", dest, "--joined-dictionary",
                           "--srcdict", os.path.join(data, f"dict.{src}.txt"),
                           "--workers", str(min(4, os.cpu_count() or 1))], cwd=ROOT, env=tool_env()).returncode
    if code != 0:
        fail(f"fairseq-preprocess failed (exit {code})")
    for p in copies:
        shutil.copyfile(p, os.path.join(dest, os.path.basename(p)))
    log(f"ready: {dest}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="the data-bin folder's name, e.g. multi30k_en_de")
    p.add_argument("--data-dir", default="data-bin")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--checkpoint-dir", default="checkpoints")
    p.add_argument("--src", default=os.environ.get("SRC", ""))
    p.add_argument("--tgt", default=os.environ.get("TGT", ""))
    p.add_argument("--suffix", default=os.environ.get("DISTILL_SUFFIX", DEFAULT_SUFFIX),
                   help=f"outputs data-bin/NAME-SUFFIX and work/NAME-SUFFIX (default: {DEFAULT_SUFFIX})")
    args = p.parse_args(argv)
    if not args.suffix or "/" in args.suffix:
        fail(f"--suffix must be a non-empty name without '/', got '{args.suffix}'")
    data = os.path.abspath(os.path.join(args.data_dir, args.name))
    if not os.path.isdir(data):
        fail(f"{data} does not exist: prepare the corpus first (make multi30k, make wmt-ro-en, ...)")
    src, tgt = (args.src, args.tgt) if args.src and args.tgt else languages(data)
    work = os.path.abspath(os.path.join(args.work_dir, f"{args.name}-{args.suffix}"))
    dest = os.path.abspath(os.path.join(args.data_dir, f"{args.name}-{args.suffix}"))
    os.makedirs(work, exist_ok=True)
    ckpt = train_teacher(data, os.path.abspath(teacher_dir(args.checkpoint_dir, args.name, args.suffix)))
    generated = os.path.join(work, "generate-train.txt")
    decode_train(data, ckpt, src, tgt, generated)
    write_corpus(generated, lambda: n_train(data, src, tgt), os.path.join(work, f"train.{src}"),
                 os.path.join(work, f"train.{tgt}"))
    binarize(data, os.path.join(work, "train"), dest, src, tgt)
    return dest


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
