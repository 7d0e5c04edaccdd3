#!/usr/bin/env python
"""Print the insertion trajectory of one sentence, step by step (like the paper's Table 8).

    python recipes/show_trajectory.py --path ckpt.pt --data data-bin/multi30k_en_de \
        --bpe-codes work/multi30k_en_de/bpe.codes --src en --tgt de "A dog runs on the beach ." \
        [--mode parallel] [--keywords "Hund Strand"]

Raw text in: Moses tokenisation and BPE as in the recipes. ``--keywords`` starts from those
target words (constrained generation: they are kept, in order). ``--explain`` also prints, under each
partial output, the termination head's q(stop) and the most probable slots, each with its mass and its
best word (and that word's probability): why the model stopped, and what it would have inserted.
``--stop-check-prob P`` decodes with that flag. For a ``--slot-objective gap`` model (InsNet parallel) ``--explain``
prints every slot instead, left to right: its q(done), its best word and that word's probability, "*" where decoding
fills it (below --end-of-slot, as many as the length cap leaves room for).
"""
import argparse

import torch

import insnet_fairseq  # noqa: F401  (registers the tasks and models)
from insnet_fairseq.decoding.gaps import is_gap_model, open_slots, slot_done_logits, with_slot_queries
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.options import DecodingOptions, stored_decoding
from insnet_fairseq.decoding.output import Output
from insnet_fairseq.tasks import checkpoint_checks


class ExplainingGenerator(InsertionGenerator):
    """The generator, noting for every partial output (the start, then after each step) q(stop) and the ``top``
    most probable slots with their best words; ``notes[k]`` belongs to the history's k-th state. One sentence
    at a time."""

    def __init__(self, tgt_dict, options: DecodingOptions, top: int = 4):
        super().__init__(tgt_dict, options)
        self.top, self.notes, self.q_stops, self.source = top, [], [], None
        self.output = NotingOutput(self, self.eos, options.retain_history, options.max_steps)

    def encode_sources(self, model, sample, todo, K):
        source_kv, source_pad = super().encode_sources(model, sample, todo, K)
        if source_pad is not None and not bool(source_pad.any()):  # as the decoding reads it
            source_pad = None
        self.source = (model.decoder, source_kv, source_pad)  # one sentence: no row leaves the batch before the end
        a, b = self.options.core.length_cap  # the output length cap, as decode() sets it
        cap = int(sample["net_input"]["src_lengths"][0]) * a + b + 2
        self.max_len = min(int(cap), model.decoder.max_target_positions)
        return source_kv, source_pad

    @torch.no_grad()
    def explain(self, state) -> str:
        decoder, source_kv, source_pad = self.source
        if state.hidden is None:  # a last step's words, placed without a pass (--last-word): nothing to score
            return "every slot done: its last words placed without a pass"
        if is_gap_model(decoder):
            return self.explain_gaps(decoder, state, source_kv, source_pad)
        q_stop = torch.sigmoid(self.steps.termination_logit(decoder, state))[0].item()
        self.q_stops.append(q_stop)
        pos_lprobs, open_slots, words, word_lprobs = self.steps.best_words(decoder, state, source_kv, source_pad)
        left, right = state.neighbour_tokens(open_slots)  # [N] each open slot's neighbours
        mass = pos_lprobs[open_slots].exp()  # [N]
        d = self.tgt_dict
        cells = [f"{d[left[i]]} _ {d[right[i]]}: {mass[i]:.2f} -> {d[words[i]]} {word_lprobs[i].exp():.2f}"
                 for i in mass.argsort(descending=True)[: self.top].tolist()]
        return f"q(stop) {q_stop:.2f} | " + " | ".join(cells)


    def explain_gaps(self, decoder, state, source_kv, source_pad) -> str:
        """A ``--slot-objective gap`` model: every slot, left to right, with its q(done) and its best word (and that
        word's probability); "*" marks the slots that decoding fills (q(done) below --end-of-slot, as many as the
        length cap leaves room for)."""
        state = with_slot_queries(decoder, state, source_kv, source_pad)  # for both heads
        slots, done_logits = slot_done_logits(decoder, state)
        every = torch.isfinite(done_logits)  # [1, K] the slots that exist
        room = (self.max_len - state.lengths).clamp_min(0)
        filled = open_slots(done_logits, self.options.core.end_of_slot, room)[every]
        logits = self.steps.token_logits(decoder, state, slots, every, source_kv, source_pad)
        words, lprobs = self.steps.choose_tokens(logits)
        left, right = state.neighbour_tokens(every)
        q = torch.sigmoid(done_logits[every])
        d = self.tgt_dict
        return " | ".join(f"{d[left[i]]} _ {d[right[i]]}: done {q[i]:.2f}{'*' if filled[i] else ''} -> "
                          f"{d[words[i]]} {lprobs[i].exp():.2f}" for i in range(len(q)))


class NotingOutput(Output):
    """The generator's output, which has its :class:`ExplainingGenerator` explain every partial output it records."""

    def __init__(self, explainer: ExplainingGenerator, *args):
        super().__init__(*args)
        self.explainer = explainer

    def record(self, history, state, ids):
        super().record(history, state, ids)
        self.explainer.notes.append(self.explainer.explain(state))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sentence")
    p.add_argument("--path", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--bpe-codes", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--mode", default="sequential", choices=["sequential", "parallel"])
    p.add_argument("--slot-top-p", type=float, default=0.7, help="parallel mode: slot probability mass filled per step")
    p.add_argument("--skip-repeats", action="store_true", help="do not insert a word equal to a neighbour of its slot")
    p.add_argument("--keywords", default="")
    p.add_argument("--explain", action="store_true", help="print q(stop) and the best slots with their words per state")
    p.add_argument("--stop-check-prob", type=float, default=0.0, help="decode with --stop-check-prob")
    p.add_argument("--end-of-slot", type=float, help="a --slot-objective gap model: decode with --end-of-slot "
                   "(default: the value stored with the model, else 0.5)")
    args = p.parse_args()
    from sacremoses import MosesDetokenizer, MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    with open(args.bpe_codes, encoding="utf-8") as f:
        bpe = BPE(f)
    # one sentence, decoded on the CPU also where there is a GPU: starting CUDA would cost more than the decoding
    models, _, task = checkpoint_checks.load_model_ensemble_and_task([args.path], arg_overrides={"data": args.data})

    def encode(text, lang, dictionary, eos):
        toks = bpe.process_line(MosesTokenizer(lang=lang).tokenize(text, escape=False, return_str=True))
        return dictionary.encode_line(toks, add_if_not_exist=False, append_eos=eos).long()

    src = encode(args.sentence, args.src, task.source_dictionary, True).unsqueeze(0)
    keywords = [encode(args.keywords, args.tgt, task.target_dictionary, False).tolist()] if args.keywords else None
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}}
    generator = ExplainingGenerator if args.explain else InsertionGenerator
    stored = (stored_decoding(models) or {}).get(args.mode, {})
    end_of_slot = args.end_of_slot if args.end_of_slot is not None else stored.get("end_of_slot", 0.5)
    gen = generator(task.target_dictionary, DecodingOptions(mode=args.mode, slot_top_p=args.slot_top_p, retain_history=True,
                                                            skip_repeats=args.skip_repeats,
                                                            stop_check_prob=args.stop_check_prob,
                                                            end_of_slot=end_of_slot))
    hypo = gen.generate(models, sample, initial_tokens=keywords)[0][0]
    detok = MosesDetokenizer(lang=args.tgt)
    for step, h in enumerate(hypo["history"]):
        text = task.target_dictionary.string(h["tokens"], "subword_nmt")
        print(f"step {step:2d}: {detok.detokenize(text.split())}")
        if args.explain and step < len(gen.notes):
            print(f"         {gen.notes[step]}")
    print(f"{hypo['steps']} steps, {len(hypo['tokens']) - 1} tokens")


if __name__ == "__main__":
    from insnet_fairseq.tasks.cli_errors import use_one_line_errors

    use_one_line_errors()  # this script's errors on bad input in one line, as the package's tasks print them
    main()
