#!/usr/bin/env python
"""Fill text-infilling templates with the self-attention baseline (``--arch infill_transformer_*``) and
score them as ``recipes/evaluate_infill.py`` does (its ``score()``, the same metrics and row format).

    python recipes/prepare_infill_seq2seq.py --data data-bin/lm_multi30k      # -> data-bin/lm_multi30k-infill
    MINUTES=60 THREADS=1 UPDATES=0 bash recipes/train.sh infill data-bin/lm_multi30k-infill checkpoints/infill_selfattn
        # = fairseq-train data-bin/lm_multi30k-infill --user-dir insnet_fairseq --task translation \\
        #   --arch infill_transformer_small --criterion label_smoothed_cross_entropy ... (train.sh's shared settings)
    python recipes/infill_seq2seq.py --data data-bin/lm_multi30k --model-data data-bin/lm_multi30k-infill \\
        --path checkpoints/infill_selfattn/checkpoint_best.pt \\
        --settings r30b1 r30b2 r40b1 r40b2 r50b1 r50b2 anchors --name "Self-attn baseline" \\
        --markdown results/infill.md --csv results/infill.csv

For each setting S the templates ``DATA/SUBSET.template.S`` (``recipes/prepare_infill.py``) are filled
blank by blank, left to right (the paper's Appendix A.2.1): round r runs fairseq's SequenceGenerator
(greedy; ``--beam N``: beam search) over the sentences that still have a blank, on the source of
:func:`prepare_infill_seq2seq.source` (earlier blanks hold the model's own fillings), and writes its best
hypothesis into the first blank. A blank gets 1 to ``--max-len`` words (fairseq's ``min_len`` 1; ``__m__``,
``<seg>`` and ``<s>`` are never generated). The filled sentences go to ``OUT/SUBSET.filled.S`` (``--out-dir``,
default: the checkpoint's folder), one per line. Template words are copied verbatim (never ``<unk>``),
so ``kept`` is 100 by construction. ``steps``: decoder steps per sentence (words + one ``</s>`` per
blank); ``wall_s``: seconds of filling the setting (model loading excluded).

``--ppl`` adds the paper's perplexity (its Tables 1 and 3): each test sentence's blanks, as its reference holds
them (:func:`evaluate_infill.reference_blanks`), scored by teacher forcing blank by blank, left to right, earlier
blanks holding their reference words (the training examples of ``prepare_infill_seq2seq.examples``);
``ppl`` = exp(NLL / tokens) over every blank's words and its closing ``</s>``.
"""
import argparse
import math
import os
import sys
import time
from typing import List, Sequence, Tuple

import torch

from insnet_fairseq.models.infill_transformer import BLANK, BOUNDARY
from recipes.common import append_row, read_lines
from recipes.evaluate_infill import ROUND, reference_blanks, score
from recipes.prepare_infill_seq2seq import examples, source


def make_generator(models, dictionary, beam: int = 1, max_len: int = 40):
    """fairseq's SequenceGenerator for one blank: ``beam`` (1: greedy), 1 to ``max_len`` words."""
    from fairseq.sequence_generator import SequenceGenerator

    return SequenceGenerator(models, dictionary, beam_size=beam, max_len_a=0, max_len_b=max_len, min_len=1,
                             tokens_to_suppress=(BLANK, BOUNDARY, dictionary.bos_word))


def encode(sources: Sequence[Sequence[str]], dictionary) -> Tuple[torch.Tensor, torch.Tensor]:
    """Source word lists -> (src_tokens [B, T] left-padded with ``</s>`` appended, as fairseq's
    LanguagePairDataset batches them, src_lengths [B])."""
    from fairseq.data import data_utils

    rows = [dictionary.encode_line(" ".join(s), add_if_not_exist=False, append_eos=True).long() for s in sources]
    tokens = data_utils.collate_tokens(rows, dictionary.pad(), dictionary.eos(), left_pad=True)
    return tokens, torch.tensor([len(r) for r in rows])


def fill(templates: List[List[str]], generator, models, dictionary, batch_size: int = 64):
    """Fill every blank of ``templates`` (word lists, BLANK at blanks) -> (filled word lists, decoder
    steps per sentence). Round r fills the r-th blank of the templates that have one, in batches."""
    fills = [[] for _ in templates]  # the fillings written so far, per sentence
    steps = [0] * len(templates)
    rounds = max((t.count(BLANK) for t in templates), default=0)
    device = next(models[0].parameters()).device
    for r in range(rounds):
        todo = [i for i, t in enumerate(templates) if t.count(BLANK) > r]
        for start in range(0, len(todo), batch_size):
            ids = todo[start : start + batch_size]
            src_tokens, src_lengths = encode([source(templates[i], fills[i]) for i in ids], dictionary)
            net_input = {"src_tokens": src_tokens.to(device), "src_lengths": src_lengths.to(device)}
            with torch.no_grad():
                hypos = generator.generate(models, {"net_input": net_input})
            for i, h in zip(ids, hypos):
                tokens = h[0]["tokens"].cpu()  # words then </s>
                fills[i].append(dictionary.string(tokens).split())
                steps[i] += len(tokens)
    filled = []
    for t, f in zip(templates, fills):
        blanks = iter(f)
        filled.append([w for x in t for w in (next(blanks) if x == BLANK else [x])])
    return filled, steps


def reference_nll(model, dictionary, pairs, batch_size: int = 64) -> Tuple[float, int]:
    """Teacher-forced NLL (nats) of the targets of ``pairs`` [(source words, target words)], each target's words
    and its ``</s>``, summed over the pairs: (nll, tokens). The decoder reads ``</s>`` then the words, as in training.
    Example: one pair (["a", "<seg>", "__m__"], ["b", "c"]) scores p(b | </s>) p(c | </s> b) p(</s> | </s> b c)."""
    from fairseq.data import data_utils

    pad, eos = dictionary.pad(), dictionary.eos()
    device = next(model.parameters()).device
    nll, tokens = 0.0, 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        src_tokens, src_lengths = encode([src for src, _ in chunk], dictionary)
        rows = [dictionary.encode_line(" ".join(t), add_if_not_exist=False, append_eos=True).long() for _, t in chunk]
        target = data_utils.collate_tokens(rows, pad, eos, left_pad=False)  # [B, T]: words </s> pad...
        prev = data_utils.collate_tokens(rows, pad, eos, left_pad=False, move_eos_to_beginning=True)  # </s> words
        with torch.no_grad():
            out = model(src_tokens.to(device), src_lengths.to(device), prev.to(device))
            lprobs = model.get_normalized_probs(out, log_probs=True).float()  # [B, T, V]
        target = target.to(device)
        real = target.ne(pad)
        nll -= float(lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[real].sum())
        tokens += int(real.sum())
    return nll, tokens


def reference_pairs(templates: List[List[str]], refs: List[List[str]], path: str):
    """Every (source, target) example of the test sentences' blanks as their references fill them."""
    pairs = []
    for j, (t, r) in enumerate(zip(templates, refs)):
        blanks = reference_blanks(r, t)
        if blanks is None:
            sys.exit(f"infill_seq2seq.py: {path}:{j + 1}: the reference sentence does not fit its template")
        pairs.extend(examples(t, blanks))
    return pairs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the LM data-bin: SUBSET.ref and SUBSET.template.S")
    p.add_argument("--model-data", required=True, help="the model's data-bin (prepare_infill_seq2seq.py)")
    p.add_argument("--path", required=True, help="checkpoint")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--settings", nargs="+", default=["r30b1", "r30b2", "r40b1", "r40b2", "r50b1", "r50b2", "anchors"])
    p.add_argument("--beam", type=int, default=1, help="beam size per blank (default 1: greedy)")
    p.add_argument("--max-len", type=int, default=40, help="most words per blank (default 40)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--out-dir", help="where SUBSET.filled.S go (default: the checkpoint's folder)")
    p.add_argument("--name", default=None, help="row label (default: the checkpoint path)")
    p.add_argument("--csv")
    p.add_argument("--markdown")
    p.add_argument("--cpu", action="store_true", help="stay on the CPU when CUDA is available")
    p.add_argument("--ppl", action="store_true", help="also the perplexity of the reference fillings (the paper's)")
    args = p.parse_args(argv)
    for flag, v in (("--beam", args.beam), ("--max-len", args.max_len), ("--batch-size", args.batch_size)):
        if v < 1:
            sys.exit(f"infill_seq2seq.py: {flag} must be >= 1, got {v}")
    refs_path = os.path.join(args.data, f"{args.gen_subset}.ref")
    paths = [refs_path] + [os.path.join(args.data, f"{args.gen_subset}.template.{s}") for s in args.settings]
    hints = {refs_path: "prepare_lm.py writes it", args.path: "--path: a checkpoint",
             os.path.join(args.model_data, "dict.tmpl.txt"): "python recipes/prepare_infill_seq2seq.py writes it"}
    for path in paths + [args.path, os.path.join(args.model_data, "dict.tmpl.txt")]:
        if not os.path.isfile(path):
            hint = hints.get(path, "python recipes/prepare_infill.py writes it")
            sys.exit(f"infill_seq2seq.py: {path} not found ({hint})")
    import insnet_fairseq  # noqa: F401  (registers infill_transformer)
    from insnet_fairseq.tasks import checkpoint_checks

    models, _, task = checkpoint_checks.load_model_ensemble_and_task([args.path],
                                                                    arg_overrides={"data": args.model_data})
    use_cuda = torch.cuda.is_available() and not args.cpu
    for m in models:
        m.eval()
        if use_cuda:
            m.cuda()
    dictionary = task.target_dictionary
    generator = make_generator(models, dictionary, args.beam, args.max_len)
    refs = read_lines(refs_path)
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.path))
    os.makedirs(out_dir, exist_ok=True)
    for setting, tpath in zip(args.settings, paths[1:]):
        templates = read_lines(tpath)
        template_words = [t.split() for t in templates]
        start = time.perf_counter()
        filled, steps = fill(template_words, generator, models, dictionary, args.batch_size)
        wall = time.perf_counter() - start
        with open(os.path.join(out_dir, f"{args.gen_subset}.filled.{setting}"), "w", encoding="utf-8") as f:
            f.writelines(" ".join(s) + "\n" for s in filled)
        metrics = score({i: " ".join(s) for i, s in enumerate(filled)}, dict(enumerate(steps)), refs, templates, tpath)
        row = {"system": args.name or args.path, "setting": setting, **metrics, "wall_s": wall}
        if args.ppl:  # (score() has refused a template file whose line count differs from the references')
            pairs = reference_pairs(template_words, [r.split() for r in refs], tpath)
            nll, tokens = reference_nll(models[0], dictionary, pairs, args.batch_size)
            row["ppl"] = math.exp(nll / tokens)
        row = {k: round(v, ROUND[k]) if k in ROUND else v for k, v in row.items()}
        print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        append_row(row, args.csv, args.markdown)


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
