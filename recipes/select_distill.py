#!/usr/bin/env python
"""A distilled corpus chosen with the student: the teacher's n-best re-ranked by it, or its own outputs.

    python recipes/select_distill.py NAME --student CKPT [--targets nbest|student] [--nbest 5] [--teacher-margin M]
        [--suffix S] [--student-args "--insertion-mode parallel"]

Sequence-level distillation (recipes/distill.py) gives the student the teacher's best beam hypothesis; where the
teacher's beam holds several good translations, the one it ranks first need not be the one a parallel decoder finds
easiest to produce. With ``--targets nbest`` (the default) the target of each training sentence is, among the
teacher's ``--nbest`` beam hypotheses (those it scores within ``--teacher-margin`` bits per token of its best), the one
closest (sentence BLEU, sacrebleu) to the student's own translation of its source, ties to the teacher's order: a
teacher translation, in the student's mode. With ``--targets student`` the
student's own translations are the targets (self-distillation; ``--student-args`` chooses how it decodes, e.g. with
candidates and MBR).

1. The teacher's n-best (``--targets nbest``): the checkpoint recipes/distill.py trained (or TEACHER), beam BEAM (5),
   ``--nbest N``, over the training set: work/NAME-SUFFIX/teacher-nbest.txt.
2. The student's translation of the training set: ``--task insertion_translation`` plus ``--student-args``:
   work/NAME-SUFFIX/student-train.txt.
3. The targets, in corpus order: work/NAME-SUFFIX/train.{SRC,TGT}; the number of sentences whose target is not the
   teacher's first hypothesis is reported.
4. fairseq-preprocess with the original dictionary into data-bin/NAME-SUFFIX (recipes/distill.py's binarize); valid
   and test are the original sets.

Every step is skipped when its output exists. GEN_BATCH (64) and GEN_ARGS (``--max-len-a 1.2 --max-len-b 10``) apply
to both decodings, as in recipes/distill.py. Example (the student: an InsNet-Dinic model part-way through its
training, which then goes on on the new corpus)::

    python recipes/select_distill.py multi30k_en_de --student checkpoints/dinic/checkpoint_5_500.pt
"""
import argparse
import os
import shlex

from recipes import distill
from recipes.distill import binarize, decode_train, fail, languages, log, n_train, train_teacher


def read_hypotheses(path: str) -> tuple:
    """fairseq-generate's output -> ({id: source}, {id: reference}, {id: [(score, hypothesis) in the order
    printed]}); ids are ints, scores fairseq's (log2-probability per token). Example: lines "S-3\tA dog .",
    "T-3\tEin Hund .", "H-3\t-0.2\tEin Hund .", "H-3\t-0.5\tDer Hund ." -> ({3: "A dog ."}, {3: "Ein Hund ."},
    {3: [(-0.2, "Ein Hund ."), (-0.5, "Der Hund .")]})."""
    sources, refs, hyps = {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            kind, _, rest = line.rstrip("\n").partition("\t")
            if kind.startswith(("S-", "T-")):
                (sources if kind[0] == "S" else refs)[int(kind[2:])] = rest
            elif kind.startswith("H-"):
                score, sep, text = rest.partition("\t")
                try:
                    score = float(score)
                except ValueError:
                    sep = ""
                if not sep:
                    fail(f"{path}, line {n}: an H- line without a score and a hypothesis")
                hyps.setdefault(int(kind[2:]), []).append((score, text.strip()))
    return sources, refs, hyps


def closest(candidates: list, pivot: str, margin: float = float("inf")) -> int:
    """The index of the candidate ((score, text), the teacher's best first) with the highest sentence BLEU against
    ``pivot``, among those scored within ``margin`` of the first; the first of equals (the teacher's order).
    Example: ([(-0.1, "a b c ."), (-0.3, "a b d .")], "a b d .") -> 1; with margin 0.1 -> 0."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    top = candidates[0][0]
    scores = [bleu.sentence_score(text, [pivot]).score if score >= top - margin else -1.0
              for score, text in candidates]
    return max(range(len(candidates)), key=lambda i: (scores[i], -i))


def write_targets(sources, refs, teacher, student, count, out_src, out_tgt, targets, margin=float("inf")):
    """One line per training sentence, in corpus order: the source and the chosen target (``targets`` "nbest": the
    teacher's hypothesis closest to the student's, "student": the student's); an empty choice keeps the original
    target, as recipes/distill.py does (counted). A sentence missing from a decoding is an error naming it."""
    if os.path.exists(out_src) and os.path.exists(out_tgt):
        log(f"targets: done before, skipped ({out_tgt})")
        return
    changed = kept = 0
    with open(out_src + ".tmp", "w", encoding="utf-8") as fs, open(out_tgt + ".tmp", "w", encoding="utf-8") as ft:
        for i in range(count):
            if i not in sources or i not in student or (targets == "nbest" and i not in teacher):
                fail(f"training sentence {i} is missing from a decoding (remove the decoding's output and rerun)")
            if targets == "nbest":
                k = closest(teacher[i], student[i][0][1], margin)
                changed += k > 0
                target = teacher[i][k][1]
            else:
                target = student[i][0][1]
            if not target:
                kept += 1
                target = refs[i]
            fs.write(sources[i] + "\n")
            ft.write(target + "\n")
    os.replace(out_src + ".tmp", out_src)
    os.replace(out_tgt + ".tmp", out_tgt)
    if targets == "nbest":
        log(f"{changed} of {count} targets ({100 * changed / max(count, 1):.1f}%) are not the teacher's first "
            "hypothesis")
    if kept:
        log(f"{kept} empty choice(s): the original target kept")
    log(f"training set: {count} sentence pairs ({out_tgt})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="the data-bin folder's name, e.g. multi30k_en_de")
    p.add_argument("--student", required=True, help="the student's checkpoint (an insertion_translation model)")
    p.add_argument("--targets", choices=("nbest", "student"), default="nbest",
                   help="nbest: the teacher's n-best hypothesis closest to the student's translation (default); "
                   "student: the student's translation")
    p.add_argument("--nbest", type=int, default=5, help="teacher hypotheses per sentence (at most BEAM; default 5)")
    p.add_argument("--teacher-margin", type=float, default=float("inf"),
                   help="choose among the teacher hypotheses scored within this many bits per token of its best "
                   "(fairseq-generate's score; default: all --nbest)")
    p.add_argument("--student-args", default="--insertion-mode parallel",
                   help="the student's fairseq-generate decoding flags (default: --insertion-mode parallel)")
    p.add_argument("--suffix", default=None, help="outputs data-bin/NAME-SUFFIX and work/NAME-SUFFIX "
                   "(default: distill-selected for nbest, distill-self for student)")
    p.add_argument("--data-dir", default="data-bin")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--checkpoint-dir", default="checkpoints")
    args = p.parse_args(argv)
    suffix = args.suffix or ("distill-selected" if args.targets == "nbest" else "distill-self")
    if "/" in suffix:
        fail(f"--suffix must be a name without '/', got '{suffix}'")
    if not args.teacher_margin >= 0:
        fail(f"--teacher-margin must be at least 0, got {args.teacher_margin}")
    if not os.path.isfile(args.student):
        fail(f"--student {args.student}: no such checkpoint")
    if args.targets == "nbest" and not 1 <= args.nbest <= int(os.environ.get("BEAM", "5")):
        fail(f"--nbest {args.nbest} must be between 1 and the beam, BEAM={os.environ.get('BEAM', '5')}")
    data = os.path.abspath(os.path.join(args.data_dir, args.name))
    if not os.path.isdir(data):
        fail(f"{data} does not exist: prepare the corpus first (make multi30k, make wmt-ro-en, ...)")
    src, tgt = languages(data)
    work = os.path.abspath(os.path.join(args.work_dir, f"{args.name}-{suffix}"))
    dest = os.path.abspath(os.path.join(args.data_dir, f"{args.name}-{suffix}"))
    os.makedirs(work, exist_ok=True)
    teacher = {}
    if args.targets == "nbest":
        ckpt = train_teacher(data, os.path.abspath(os.path.join(args.checkpoint_dir, f"{args.name}-teacher")))
        nbest_out = os.path.join(work, "teacher-nbest.txt")
        decoding = distill.teacher_decoding(distill.checkpoint_task(ckpt), int(os.environ.get("BEAM", "5")))
        decode_train(data, ckpt, src, tgt, nbest_out, decoding=decoding + ["--nbest", str(args.nbest)])
        _, _, teacher = read_hypotheses(nbest_out)
    student_out = os.path.join(work, "student-train.txt")
    decode_train(data, os.path.abspath(args.student), src, tgt, student_out,
                 decoding=["--task", "insertion_translation", *shlex.split(args.student_args)])
    sources, refs, student = read_hypotheses(student_out)
    write_targets(sources, refs, teacher, student, n_train(data, src, tgt), os.path.join(work, f"train.{src}"),
                  os.path.join(work, f"train.{tgt}"), args.targets, args.teacher_margin)
    binarize(data, os.path.join(work, "train"), dest, src, tgt)
    return dest


if __name__ == "__main__":
    main()
