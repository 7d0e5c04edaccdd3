"""Iterative insertion decoding (paper 3.2-3.3, 4.1) behind fairseq-generate / -interactive.

Each step scores every slot of every sentence from the model's slot representations, then
inserts:

* ``sequential``: one token at the most probable slot;
* ``parallel``: a token into every slot whose probability lies in the top ``slot_top_p`` of the
  position distribution mass (paper 4.1: 70%; the command line's default is 90%, chosen on valid); tokens
  inserted in one step are encoded as if inserted left to right.

Tokens are greedy (or sampled). The generator is composed of its parts (the map: :mod:`insnet_fairseq.decoding`):
the core's steps (:class:`~insnet_fairseq.decoding.step.InsertionSteps`), the loop that drives them
(:func:`~insnet_fairseq.decoding.greedy.decode_greedy`, or :class:`~insnet_fairseq.decoding.beam.BeamSearch` with
``--insertion-beam``, or :func:`~insnet_fairseq.decoding.gaps.decode_gaps` for a ``--slot-objective gap`` model) and
the hypotheses' :class:`~insnet_fairseq.decoding.output.Output`. The options
(:class:`~insnet_fairseq.decoding.options.DecodingOptions`, whose fields are the flags' values; the flag reference:
docs/flags.md) hold the core's options, which switch on its rules:

* the word rules of a step, ``--skip-repeats`` and ``--min-token-prob`` (:mod:`insnet_fairseq.decoding.word_rules`);
* when a sentence stops: q(stop | h_last) > ``--stop-threshold`` and the stop check ``--stop-check-prob``
  (:mod:`insnet_fairseq.decoding.stopping`); a sentence also stops at its step or length cap, and leaves the batch;

and the extras' options, which the generator turns into what the core takes or runs around it:

* ``--min-length-ratio``: each row's minimum length before a stop is heard;
* ``--insertion-candidates K`` decoded side by side (:mod:`insnet_fairseq.decoding.candidates`, the greedy loop's
  row policy), ranked by the model's own score, by a judge (``--iter-decode-with-external-reranker``,
  :class:`insnet_fairseq.decoding.rerank.Judge`) or by minimum Bayes risk (``--insertion-candidates-mbr``,
  :func:`insnet_fairseq.decoding.mbr.mbr_ranks`);
* ``--insertion-verify`` (:mod:`insnet_fairseq.decoding.verify`), which drives the whole generator its own way;
* ``--compile-decoder`` and ``--fuse-slot-queries``: the passes the steps run (:mod:`insnet_fairseq.decoding.compiled`).

Cached context: a token's states never change once inserted, so every layer's keys/values
are kept and a step encodes only the new tokens; their offset rows are computed directly from
the current positions (O(new x all) per step). So are the token's halves of the slot
representation, f_l(h) and f_r(h): a step scores its slots from them
(:meth:`insnet_fairseq.modules.slots.SlotHeads.step_position_logits`), O(B S D) with no projection, and
projects to the vocabulary only the slots it inserts into. ``use_cache=False`` re-encodes the whole
partial sequence every step with the full offset matrix (for checking and timing).

Batches are rectangular: in parallel mode a sentence that inserts fewer tokens than the
widest one in a step gets *holes* (padding that no query attends to).

Without a source (task ``insertion_lm``: ``conditional=False``) the caps are ``length_cap``'s b steps and
words whatever the source holds, and with ``keywords_from_source`` each sentence's source tokens
(its keywords, ``</s>`` and padding removed) are its constrained start.

Infilling (``blanks``): a sentence's given tokens are a template, and words go only into its blanks: a
slot is open when the token on its left has ``open_right`` set (a template token followed by a blank,
and every inserted word, so a blank grows in place); the other slots get probability 0 and the template
never changes. A blank may stay empty: the termination head decides when the sentence is done.

Sentences whose output is known without decoding are answered at once, each with a warning
naming its sample id (:meth:`InsertionGenerator.settled_rows`): an empty source outputs exactly
its constraint tokens (none: an empty output), and so does a sentence whose constraints already
fill its output cap. Long constrained starts are decoded apart from the rest of their batch
(:meth:`InsertionGenerator.length_groups`) and encoded a few rows at a time (``step.ENCODE_CHUNK``),
so that one long constraint phrase neither slows its batch nor exhausts memory.
"""
import logging
from typing import List, Optional, Sequence

import torch
from fairseq.token_generation_constraints import unpack_constraints
from torch import Tensor

from insnet_fairseq.decoding.beam import BeamSearch
from insnet_fairseq.decoding.candidates import Candidates
from insnet_fairseq.decoding.compiled import passes_of
from insnet_fairseq.decoding.gaps import decode_gaps, is_gap_model
from insnet_fairseq.decoding.greedy import Rows, decode_greedy
from insnet_fairseq.decoding.inputs import integer_ids
from insnet_fairseq.decoding.mbr import mbr_ranks
from insnet_fairseq.decoding.options import DecodingOptions
from insnet_fairseq.decoding.output import Output
from insnet_fairseq.decoding.rerank import Judge
from insnet_fairseq.decoding.step import InsertionSteps
from insnet_fairseq.decoding.templates import check_blanks, phrase_template, split_template
from insnet_fairseq.decoding.verify import verified

logger = logging.getLogger(__name__)

GROUP_FREE = 64  # constrained starts up to this many tokens share a decoding group (see length_groups)


class InsertionGenerator:
    """fairseq's generator for InsNet (see the module docstring), composed of its parts: :attr:`steps`, the
    :class:`~insnet_fairseq.decoding.step.InsertionSteps` that encode, score and insert; :attr:`output`, the
    :class:`~insnet_fairseq.decoding.output.Output` that makes the hypotheses; the loops that drive the steps
    (:func:`~insnet_fairseq.decoding.greedy.decode_greedy`, :class:`~insnet_fairseq.decoding.beam.BeamSearch`,
    :func:`~insnet_fairseq.decoding.gaps.decode_gaps`)."""

    steps_class = InsertionSteps  # the step a subclass decodes with (InDIGO: its own)

    def __init__(self, tgt_dict, options: DecodingOptions = DecodingOptions()):
        self.tgt_dict, self.options = tgt_dict, options
        self.bos, self.eos, self.pad = tgt_dict.bos(), tgt_dict.eos(), tgt_dict.pad()
        self.steps = self.steps_class(tgt_dict, options.core, passes_of(options.extras))
        self.output = Output(self.eos, options.core.retain_history, options.core.max_steps)
        self.symbols_to_strip_from_output = {self.bos, self.eos}  # fairseq-generate strips them from the output

    def fixed_hypothesis(self, tokens: Sequence[int]) -> dict:
        """The hypothesis of a sentence that is not decoded: ``tokens`` (maybe none), then ``</s>``."""
        return self.output.fixed(tokens)

    # -- entry point ---------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None,
                 initial_tokens: Optional[Sequence[Sequence[int]]] = None,
                 initial_order: Optional[Sequence[Sequence[int]]] = None,
                 blanks: Optional[Sequence[Sequence[int]]] = None):
        """fairseq's entry point: :meth:`decode`, or with ``--insertion-verify`` (``models``: the InsNet model, then
        the autoregressive verifier) InsNet drafts verified by the autoregressive model (decoding/verify.py)."""
        if not self.options.verify:
            return self.decode(models, sample, prefix_tokens, constraints, initial_tokens, initial_order, blanks)
        given = {"--prefix-size": prefix_tokens, "--constraints": constraints, "initial_tokens": initial_tokens,
                 "blanks": blanks}
        return verified(self, models, sample, given)

    @torch.no_grad()
    def decode(self, models, sample, prefix_tokens=None, constraints=None,
               initial_tokens: Optional[Sequence[Sequence[int]]] = None,
               initial_order: Optional[Sequence[Sequence[int]]] = None,
               blanks: Optional[Sequence[Sequence[int]]] = None):
        """Decode a fairseq batch; returns, per sentence, a list with one hypothesis dict.

        Constrained start: ``initial_tokens[b]`` lists target token ids in left-to-right order
        that the output must contain (never deleted or reordered); ``initial_order[b]`` (a
        permutation of their indices, default left to right) is the order in which they are
        inserted after ``<s> </s>``. ``constraints`` (fairseq-interactive ``--constraints``)
        gives packed phrases, kept in order and whole in every mode: words are inserted only between phrases
        (:func:`~insnet_fairseq.decoding.templates.phrase_template`), and never a word that joins the next one (BPE
        ``x@@``) right before a phrase (:class:`~insnet_fairseq.decoding.state.Phrases`), so that after BPE removal
        every phrase appears as whole words.

        Infilling: ``blanks[b]`` lists the blanks of sentence b's template ``initial_tokens[b]``, each
        as the number of template tokens before it (0: before the first; sorted, no repeats); words
        are inserted there only. With ``blank_id`` set (task ``insertion_lm --infill``), the source
        holds the template, ``blank_id`` marking each blank.
        """
        o = self.options
        judge = None
        if o.reranking:  # --path INSNET.pt:AR.pt[:REV.pt]: the judge of the candidates (decoding/rerank.py)
            models, judge = Judge.split(models, o, self.tgt_dict)
        if len(models) != 1:
            raise ValueError("InsNet decoding does not ensemble: pass one checkpoint to --path")
        if prefix_tokens is not None:
            raise ValueError("--prefix-size is not supported by insertion decoding; use --constraints")
        model = models[0]
        if is_gap_model(model.decoder):
            self.check_gap_options(o, judge)
        if any(m.training for m in model.modules()):  # eval() walks every module: dearer than the check
            model.eval()
        net_input = sample["net_input"]
        src_tokens, src_lengths = net_input["src_tokens"], net_input["src_lengths"]
        B = src_tokens.size(0)
        phrases = constraints is not None and initial_tokens is None and blanks is None
        if phrases:  # each phrase kept whole: blanks only between phrases, no joining word right before one
            initial_tokens, blanks = zip(*(phrase_template(unpack_constraints(row)) for row in constraints.cpu()))
        if o.keywords_from_source and initial_tokens is None:  # insertion_lm: the source holds the keywords
            words = (src_tokens != self.pad) & (src_tokens != self.eos)
            initial_tokens = [row[keep].tolist() for row, keep in zip(src_tokens.cpu(), words.cpu())]
            if o.blank_id is not None:  # ... or a template: split off its blanks
                initial_tokens, blanks = zip(*(split_template(row, o.blank_id) for row in initial_tokens))
        if initial_tokens is not None or initial_order is not None:
            initial_tokens = self.check_initial_tokens(initial_tokens, B, initial_order, model)
        if blanks is not None:
            blanks = check_blanks(blanks, [len(r) for r in initial_tokens] if initial_tokens is not None else [0] * B)
        given = initial_tokens if initial_tokens is not None else [[] for _ in range(B)]
        decoder = model.decoder
        # caps: steps (--max-insertion-steps, default a * source length + b) and output length
        # (the same a * source length + b words, and the model's --max-target-positions)
        auto = (src_lengths.float() * o.length_cap[0] + o.length_cap[1]).long()
        cap = torch.full_like(auto, o.max_steps) if o.max_steps > 0 else auto
        max_len = (auto + 2).clamp(max=decoder.max_target_positions)  # [B], with <s> and </s>
        # --min-length-ratio: at least ratio x source words (without </s>) before q(stop) is heard
        min_len = torch.minimum(((src_lengths - 1).float() * o.min_length_ratio).ceil().long() + 2, max_len) \
            if o.min_length_ratio > 0 else None
        finalized: List[Optional[dict]] = [None] * B
        for b in self.settled_rows(sample, src_lengths, given, max_len, decoder.max_target_positions,
                                   conditional=o.conditional):
            finalized[b] = self.fixed_hypothesis(given[b])
        for b in range(B):  # a template without blanks is its own output
            if blanks is not None and not blanks[b] and finalized[b] is None:
                sid = int(sample["id"][b]) if sample.get("id") is not None else b
                logger.warning(f"sample id {sid}: its template has no blank (__m__): output is the template")
                finalized[b] = self.fixed_hypothesis(given[b])
        todo = [b for b in range(B) if finalized[b] is None]
        for rows in self.length_groups([len(given[b]) for b in todo]):
            self._decode_rows(model, sample, [todo[r] for r in rows], cap, max_len, min_len, initial_tokens,
                              initial_order, finalized, blanks, judge, phrases)
        return [h if isinstance(h, list) else [h] for h in finalized]

    @staticmethod
    def check_gap_options(o: DecodingOptions, judge=None) -> None:
        """A model trained with ``--slot-objective gap`` decodes by its slots' end-of-slot (decoding/gaps.py): the
        options that drive several rows a sentence are refused in one line."""
        clash = [flag for flag, on in (("--insertion-beam", o.beam > 1), ("--insertion-candidates", o.candidates > 1),
                                       ("--insertion-verify", o.verify), ("--min-length-ratio", o.min_length_ratio > 0),
                                       ("--iter-decode-with-external-reranker", judge is not None)) if on]
        if clash:
            raise ValueError(f"this model was trained with --slot-objective gap and decodes by its slots' end-of-slot "
                             f"(--insertion-mode parallel or sequential, --end-of-slot): drop {', '.join(clash)}")

    @staticmethod
    def length_groups(n_given: Sequence[int]) -> List[List[int]]:
        """Split a batch by the length of its constrained starts: those of up to ``GROUP_FREE`` tokens
        form one group, longer ones one group per power of two. Every row of a group pays for the
        longest start of the group at every step; a sentence with a 600-token constraint no longer
        slows the 63 others of its batch. Example: [0, 3, 100, 0, 300] -> [[0, 1, 3], [2], [4]]."""
        groups = {}
        for i, n in enumerate(n_given):
            groups.setdefault(0 if n <= GROUP_FREE else int(n).bit_length(), []).append(i)
        return [groups[k] for k in sorted(groups)]

    def _decode_rows(self, model, sample, todo: List[int], cap: Tensor, max_len: Tensor, min_len: Optional[Tensor],
                     initial_tokens, initial_order, finalized: List[Optional[dict]], blanks=None, judge: Optional[Judge] = None,
                     phrases: bool = False) -> None:
        """Decode the batch rows ``todo`` together; fills ``finalized[b]`` for each: its beam's hypotheses, or its
        candidates best first (by the model's own score, the ``judge``'s, or minimum Bayes risk). ``phrases``: the
        given tokens are constraint phrases, kept whole words."""
        o = self.options
        decoder = model.decoder
        src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        K = o.rows_per_sentence
        owner = [b for b in todo for _ in range(K)]  # decoded row -> batch row (K candidates / beam rows each)
        if owner != list(range(src_tokens.size(0))):
            rows = torch.tensor(owner, device=src_tokens.device)
            src_tokens, src_lengths, cap, max_len = src_tokens[rows], src_lengths[rows], cap[rows], max_len[rows]
            min_len = None if min_len is None else min_len[rows]
            src_tokens = src_tokens[:, src_tokens.ne(self.pad).any(0)]  # left padding no row of the group needs
            if initial_tokens is not None:
                initial_tokens = [initial_tokens[b] for b in owner]
                initial_order = None if initial_order is None else [initial_order[b] for b in owner]
            blanks = None if blanks is None else [blanks[b] for b in owner]
        source_kv, source_pad = self.encode_sources(model, sample, todo, K)
        if source_pad is not None and not bool(source_pad.any()):  # nothing padded (batch 1): no mask on every step
            source_pad = None
        state = self.steps.initial_state(decoder, len(owner), src_tokens.device, source_kv, source_pad, initial_tokens,
                                         initial_order, blanks, capacity=int(max_len.max()), phrases=phrases)
        if is_gap_model(decoder):  # --slot-objective gap: every slot that is not done filled, until all are
            ids = torch.arange(len(owner), device=src_tokens.device)
            hyps = decode_gaps(self.steps, self.output, decoder, sample, state,
                               Rows(ids, cap, max_len, min_len, source_kv, source_pad), owner)
            for b, h in zip(todo, hyps):
                finalized[b] = [h]
            return
        if o.beam > 1:  # --insertion-beam: every finished hypothesis, best first
            found = BeamSearch(self.steps, self.output, o.beam, o.lenpen).search(
                decoder, state, source_kv, source_pad, cap, max_len, min_len)
            for b, hyps in zip(todo, found):
                finalized[b] = hyps
            # the best hypothesis of a sentence stopped by --max-insertion-steps (the beam stops every one there)
            capped = [b for b, hyps in zip(todo, found) if hyps and hyps[0]["steps"] >= o.max_steps]
            self.output.warn_at_cap(sample, capped)
            return
        ids = torch.arange(len(owner), device=src_tokens.device)
        hyps = decode_greedy(self.steps, self.output, decoder, sample, state,
                             Rows(ids, cap, max_len, min_len, source_kv, source_pad), owner,
                             Candidates(o, len(todo), src_tokens.device))
        if judge is not None:
            judge.rescore(hyps, src_tokens, src_lengths, self.pad, self.eos)
        ranks = mbr_ranks(hyps, len(todo), K, o.candidates_mbr, self.pad, self.eos) if o.candidates_mbr > 0 else None
        for j, b in enumerate(todo):
            finalized[b] = Candidates.ranked([h for h in hyps[j * K: (j + 1) * K] if h is not None],
                                             None if ranks is None else ranks[j])

    def encode_sources(self, model, sample, todo: List[int], K: int):
        """The cross-attention keys/values and padding mask of the decoded rows (each of the batch rows ``todo`` K
        times: its candidates or beam rows), from one encoding of each source: (per-layer (k, v) [len(todo) * K, H,
        L, Dh], padding [len(todo) * K, L] or None). ``sample["encoder_out"]``, where given, is the whole batch's
        encoding, made once for every round (decoding/verify.py). Example: todo [0, 2], K 2: sources 0 and 2 are
        encoded (not 0, 0, 2, 2), and their keys/values repeated for the decoded rows [0, 0, 2, 2]."""
        src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        device = src_tokens.device
        encoder_out = sample.get("encoder_out")
        if encoder_out is None:  # the sources of todo, without the left padding none of them needs
            if todo != list(range(src_tokens.size(0))):
                rows = torch.tensor(todo, device=device)
                src_tokens, src_lengths = src_tokens[rows], src_lengths[rows]
                src_tokens = src_tokens[:, src_tokens.ne(self.pad).any(0)]
            encoder_out = model.forward_encoder(src_tokens, src_lengths)
            of_row = list(range(len(todo)))  # decoded row -> row of encoder_out
        else:
            of_row = todo
        source_kv, source_pad = model.decoder.encode_source(encoder_out)
        of_row = [r for r in of_row for _ in range(K)]
        if of_row != list(range(source_kv[0][0].size(0))):
            index = torch.tensor(of_row, device=device)
            source_kv = [(k[index], v[index]) for k, v in source_kv]
            source_pad = None if source_pad is None else source_pad[index]
        return source_kv, source_pad

    @staticmethod
    def settled_rows(sample, src_lengths: Tensor, given: Sequence[Sequence[int]], max_len: Tensor,
                     max_target_positions: int, conditional: bool = True) -> List[int]:
        """Batch rows whose output is known without decoding, each with a warning naming its sample id.

        An empty source (``</s>`` only) gets exactly its constraint tokens (none: an empty output);
        so does a sentence whose constraints already fill its output cap ``max_len - 2`` words
        (2 x source length + 10, at most the model's target limit), which is never encoded: a
        long constraint phrase costs nothing, however large its batch. Without a source
        (``conditional`` False) only the second rule applies.
        """
        rows = []
        lengths, caps = src_lengths.tolist(), (max_len - 2).tolist()
        for b, (n_src, n_cap) in enumerate(zip(lengths, caps)):
            n = len(given[b])
            if (n_src > 1 or not conditional) and n < n_cap:
                continue
            sid = int(sample["id"][b]) if sample.get("id") is not None else b
            name = "sample id" if sample.get("id") is not None else "batch row"
            if not conditional:
                logger.warning(f"{name} {sid}: its {n} keyword/constraint tokens fill the output cap of {n_cap} words "
                               "(--max-output-words, or the model's --max-target-positions): output is the keywords only")
            elif n_src <= 1:
                output = f"its {n} constraint tokens only" if n else "empty"
                logger.warning(f"empty source sentence ({name} {sid}): nothing to translate, output is {output}")
            else:
                limit = f", the model's limit (--max-target-positions {max_target_positions})" \
                    if n_cap == max_target_positions - 2 else ""
                logger.warning(f"{name} {sid}: its {n} constraint tokens fill the output cap of {n_cap} words "
                               f"(2 x {n_src} source tokens + 10{limit}): output is the constraints only")
            rows.append(b)
        return rows

    def check_initial_tokens(self, initial_tokens, B: int, initial_order=None, model=None) -> Optional[List[List[int]]]:
        """Rows of integer word ids, one per sentence (None: none given); special symbols and ids outside the
        dictionary are refused with the row that holds them, and so is a row of more words than the output of
        ``model`` holds (its decoder's ``max_target_positions`` - 2, as the command line refuses long constraints;
        no limit without ``model``). ``initial_order`` is checked against them (:meth:`check_initial_order`), and
        refused without them. Each refusal is a one-line ValueError. Example: B 2, [[5, 6], []] -> [[5, 6], []];
        [[5]] -> "initial_tokens has 1 rows for a batch of 2 sentences"."""
        if initial_tokens is None:
            if initial_order is not None:
                raise ValueError("initial_order orders the tokens of initial_tokens: pass initial_tokens (or "
                                 "--constraints) with it")
            return None
        if len(initial_tokens) != B:
            raise ValueError(f"initial_tokens has {len(initial_tokens)} rows for a batch of {B} sentences")
        max_target_positions = None if model is None else model.decoder.max_target_positions
        limit = None if max_target_positions is None else max_target_positions - 2  # <s> and </s> around the words
        rows = []
        for b, row in enumerate(initial_tokens):
            ids = integer_ids(f"initial_tokens[{b}]", row, "a list of integer token ids")
            bad = (ids < 0) | (ids >= len(self.tgt_dict)) | torch.isin(ids, self.steps.banned)
            if bool(bad.any()):
                raise ValueError(f"initial_tokens[{b}] holds {ids[bad].tolist()[:10]}: not word ids of the target "
                                 f"dictionary ({len(self.tgt_dict)} symbols; <s>, </s> and <pad> cannot be inserted)")
            if limit is not None and len(ids) > limit:
                raise ValueError(f"initial_tokens[{b}] has {len(ids)} tokens, more than the model's output limit of "
                                 f"{limit} words (--max-target-positions {max_target_positions})")
            rows.append(ids.tolist())
        if initial_order is not None:
            self.check_initial_order(initial_order, rows)
        return rows

    @staticmethod
    def check_initial_order(initial_order, rows: Sequence[Sequence[int]]) -> None:
        """``initial_order[b]``: the order in which the tokens ``rows[b]`` are inserted, a permutation of their
        indices (a row without tokens takes any); anything else is a one-line ValueError naming the row. Example:
        rows [[5, 6]]: [[1, 0]] passes; [[0, 0]] -> "initial_order[0] must be a permutation of 0..1"; [] ->
        "initial_order has 0 rows for a batch of 1 sentences"."""
        if len(initial_order) != len(rows):
            raise ValueError(f"initial_order has {len(initial_order)} rows for a batch of {len(rows)} sentences")
        for b, (order, row) in enumerate(zip(initial_order, rows)):
            if not row:
                continue
            ids = integer_ids(f"initial_order[{b}]", order, f"a permutation of 0..{len(row) - 1}")
            if ids.sort().values.tolist() != list(range(len(row))):
                raise ValueError(f"initial_order[{b}] must be a permutation of 0..{len(row) - 1}, got {order!r:.80}")
