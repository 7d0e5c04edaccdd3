"""Iterative insertion decoding (paper 3.2-3.3, 4.1) behind fairseq-generate / -interactive.

Each step scores every slot of every sentence from the model's slot representations, then
inserts:

* ``sequential``: one token at the most probable slot;
* ``parallel``: a token into every slot whose probability lies in the top ``slot_top_p`` of the
  position distribution mass (paper 4.1: 70%); tokens inserted in one step are encoded as if
  inserted left to right.

Tokens are greedy (or top-k sampled). With ``skip_repeats``, a token equal to a neighbour of its
slot is not inserted (the slot stays open for a later step), the usual cure for the duplicated
words of parallel decoding; a sentence whose every choice repeats a neighbour takes, at those
slots, its best token that does not. With ``replace_repeats`` every such slot takes that token.
With ``min_token_prob``, a parallel step also leaves open the slots whose token is less likely than
that (each sentence keeps its best insertion): unsure words wait for more context, at the cost of
more steps. A sentence stops when the termination head says stop (q(stop | h_last) >
``stop_threshold``, 0.5 by default; with ``min_length_ratio``, not before that many words per source
word, one word per step while held back) or at its step cap, and leaves the batch. With
``stop_check_prob``, a sentence that the termination head stops first gets one more step that inserts
only the words of probability >= ``stop_check_prob`` that repeat neither neighbour (if it has any):
q(stop) of a layered model stops with words missing (:meth:`InsertionGenerator.confident_slots`).

Candidates (``candidates`` K > 1, the length beam of mask-predict and the noisy parallel decoding of
Gu et al. 2018, with the model as its own judge): each sentence is decoded K times side by side,
candidate j taking the j-th most probable word(s) at the first step (with sampling: K samples), and
the candidates are output best first by mean log-probability per insertion (``--nbest``: the first N). The first word is
the hardest guess of a layered model (a binary or anchored order starts from a sentence's middle
word), and every later step builds on it. The K candidates cost one batch K times as wide, not more
steps: a sentence reports the most steps any of its candidates took. With ``candidates_finish`` M < K a sentence
stops once M of its candidates have finished; the others are dropped unfinished (a candidate that needs far more steps
than its siblings is mostly one gone astray), so it reports the step its M-th candidate finished. With ``reranking`` (fairseq's
``--iter-decode-with-external-reranker``, ``--path INSNET.pt:AR.pt``) an autoregressive model is the judge, as
in Gu et al.: one teacher-forced pass scores every candidate of the batch (:mod:`insnet_fairseq.decoding.rerank`).
With ``candidates_mbr`` T the candidates are ranked by minimum Bayes risk instead, their expected BLEU+1 against each
other weighted by softmax(score / T) (:mod:`insnet_fairseq.decoding.mbr`).

Cached context: a token's states never change once inserted, so every layer's keys/values
are kept and a step encodes only the new tokens; their offset rows are computed directly from
the current positions (O(new x all) per step). So are the token's halves of the slot
representation, f_l(h) and f_r(h): a step scores its slots from them
(:meth:`insnet_fairseq.models.slots.SlotHeads.step_position_logits`), O(B S D) with no projection, and
projects to the vocabulary only the slots it inserts into. ``use_cache=False`` re-encodes the whole
partial sequence every step with the full offset matrix (for checking and timing).

Batches are rectangular: in parallel mode a sentence that inserts fewer tokens than the
widest one in a step gets *holes* (padding that no query attends to).

Without a source (task ``insertion_lm``: ``conditional=False``) the caps are ``max_steps_b`` steps and
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
import math
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from insnet_fairseq.data.orders import DEFAULT_ANCHOR_DEPTH
from insnet_fairseq.decoding.beam import BeamSearch
from insnet_fairseq.decoding.flags import (COMPILE_MODES, check_beam_flags, check_blanks, check_decoding_flags,
                                          check_verify_flags, split_template)
from insnet_fairseq.decoding.mbr import mbr_order
from insnet_fairseq.decoding.rerank import Judge, pad_hypotheses
from insnet_fairseq.decoding.sampling import check_temperature
from insnet_fairseq.decoding.state import DecoderState
from insnet_fairseq.decoding.step import InsertionSteps

logger = logging.getLogger(__name__)

GROUP_FREE = 64  # constrained starts up to this many tokens share a decoding group (see length_groups)


class InsertionGenerator(InsertionSteps):
    """fairseq's generator for InsNet: the decoding loop over :class:`~insnet_fairseq.decoding.step.InsertionSteps`' steps,
    candidates and beam rows, and the hypotheses it outputs (see the module docstring)."""

    def __init__(
        self,
        tgt_dict,
        mode: str = "sequential",
        slot_top_p: float = 0.7,
        max_steps: int = 0,
        max_steps_a: float = 2.0,
        max_steps_b: int = 10,
        use_cache: bool = True,
        sampling: bool = False,
        sampling_topk: int = -1,
        sampling_topp: float = -1.0,
        temperature: float = 1.0,
        retain_history: bool = False,
        skip_repeats: bool = False,
        replace_repeats: bool = False,
        min_token_prob: float = 0.0,
        stop_threshold: float = 0.5,
        stop_check_prob: float = 0.0,
        min_length_ratio: float = 0.0,
        dedupe: bool = False,
        conditional: bool = True,
        keywords_from_source: bool = False,
        blank_id: Optional[int] = None,
        candidates: int = 1,
        candidates_finish: int = 0,
        fuse_slot_queries: bool = False,
        reranking: bool = False,
        channel_weight: float = 0.0,
        judge_order: str = "l2r",
        anchor_depth: int = DEFAULT_ANCHOR_DEPTH,
        beam: int = 1,
        lenpen: float = 1.0,
        candidates_mbr: float = 0.0,
        verify: bool = False,
        verify_tolerance: float = 0.0,
        verify_max_len: Tuple[float, int] = (0.0, 200),
        verify_redraft: str = "suffix",
        compile_decoder: str = "off",
        compile_backend: str = "inductor",
    ):
        check_decoding_flags(mode, slot_top_p, max_steps, min_token_prob, stop_threshold, stop_check_prob)
        check_beam_flags(beam, mode, candidates=candidates, sampling=sampling, skip_repeats=skip_repeats,
                         replace_repeats=replace_repeats, stop_check_prob=stop_check_prob, min_token_prob=min_token_prob)
        self.beam, self.lenpen = beam, lenpen  # --insertion-beam (sequential beam search, decoding/beam.py), --lenpen
        if candidates < 1:
            raise ValueError(f"--insertion-candidates must be >= 1, got {candidates}")
        self.candidates = candidates
        if not 0 <= candidates_finish <= candidates:
            raise ValueError(f"--insertion-candidates-finish M stops a sentence once M of its --insertion-candidates K "
                             f"have finished: 0 (all) or 1..K (got M {candidates_finish}, K {candidates})")
        self.candidates_finish = candidates_finish if 0 < candidates_finish < candidates else 0  # 0: wait for all K
        # fairseq's --iter-decode-with-external-reranker: the last model is an autoregressive judge of the candidates
        if reranking and candidates < 2:
            raise ValueError("--iter-decode-with-external-reranker chooses among candidates: add --insertion-candidates K "
                             "(K >= 2)")
        self.reranking = reranking
        # --channel-weight W: the judge adds W x log p(source | candidate) of a target -> source AR model (rerank.py)
        if channel_weight < 0 or (channel_weight > 0 and not reranking):
            raise ValueError("--channel-weight weighs the channel model of the autoregressive judge: a weight >= 0, "
                             "with --iter-decode-with-external-reranker and --path INSNET.pt:AR.pt:REV.pt "
                             f"(got {channel_weight})")
        self.channel_weight = channel_weight
        if judge_order != "l2r" and not reranking:
            raise ValueError(f"--judge-order {judge_order} is the trajectory an InsNet judge scores along: it needs "
                             "--iter-decode-with-external-reranker and --path INSNET.pt:JUDGE.pt")
        self.judge_order, self.anchor_depth = judge_order, anchor_depth
        # --insertion-candidates-mbr T: the candidates ranked by expected BLEU+1 against each other (decoding/mbr.py)
        if candidates_mbr < 0 or (candidates_mbr > 0 and candidates < 2):
            raise ValueError("--insertion-candidates-mbr T ranks the candidates of --insertion-candidates K (K >= 2) by "
                             "their expected BLEU against each other, weighted by softmax(score / T): T > 0 (inf: "
                             f"uniform), 0: off (got T {candidates_mbr}, K {candidates})")
        self.candidates_mbr = candidates_mbr
        # --insertion-verify: the drafts of this generator verified by an autoregressive model (decoding/verify.py),
        # whose greedy length limit is fairseq's --max-len-a x source width + --max-len-b
        check_verify_flags(verify, verify_tolerance, candidates, beam, reranking, verify_redraft)
        self.verifying, self.verify_tolerance, self.verify_max_len = verify, verify_tolerance, verify_max_len
        self.verify_redraft = verify_redraft
        # --slot-query-stream models, cached decoding: a step's pass also computes every slot's query for the next
        # step (one pass per step instead of two; the same outputs). Off by default: the queries of every slot cost
        # more than the saved pass at large batches (CPU: 1.1x faster at batch 1, 0.8x at batch 64)
        self.fuse_slot_queries = fuse_slot_queries
        # --compile-decoder: each cached step's decoder pass through torch.compile (dynamic shapes), made on first use
        if compile_decoder not in COMPILE_MODES:
            raise ValueError(f"--compile-decoder must be one of {', '.join(COMPILE_MODES)}, got '{compile_decoder}'")
        self.compile_decoder, self.compile_backend = compile_decoder, compile_backend
        self._compiled = {}  # (id(context), pass name) -> the compiled pass
        self.tgt_dict = tgt_dict
        self.bos, self.eos, self.pad = tgt_dict.bos(), tgt_dict.eos(), tgt_dict.pad()
        self.mode = mode
        self.slot_top_p = slot_top_p
        self.max_steps, self.max_steps_a, self.max_steps_b = max_steps, max_steps_a, max_steps_b
        self.use_cache = use_cache
        check_temperature(temperature, sampling)
        self.sampling, self.sampling_topk, self.sampling_topp = sampling, sampling_topk, sampling_topp
        self.temperature = temperature  # --temperature: the words are sampled from softmax(log p / T); scores stay log p
        self.retain_history = retain_history
        if skip_repeats and replace_repeats:
            raise ValueError("--skip-repeats and --replace-repeats exclude each other: choose one")
        self.skip_repeats = skip_repeats
        self.replace_repeats = replace_repeats
        self.min_token_prob = min_token_prob
        self.stop_logit = math.log(stop_threshold / (1 - stop_threshold))  # q(stop) > threshold
        self.stop_check_prob = stop_check_prob  # q(stop) is overruled by a word this sure (see confident_slots)
        if min_length_ratio < 0:
            raise ValueError(f"--min-length-ratio must be >= 0, got {min_length_ratio}")
        self.min_length_ratio = min_length_ratio  # the termination head is not heard below this x source words
        self.dedupe = dedupe
        self.conditional = conditional  # False: no source (insertion_lm), no empty-source rule
        self.keywords_from_source = keywords_from_source
        self.blank_id = blank_id  # with keywords_from_source: the source is a template, blank_id its blanks
        self.symbols_to_strip_from_output = {self.bos, self.eos}
        self.banned = torch.tensor(sorted({self.bos, self.eos, self.pad}))
        self._banned_on = {}  # device -> self.banned there

    # -- entry point ---------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None,
                 initial_tokens: Optional[Sequence[Sequence[int]]] = None,
                 initial_order: Optional[Sequence[Sequence[int]]] = None,
                 blanks: Optional[Sequence[Sequence[int]]] = None):
        """fairseq's entry point: :meth:`decode`, or with ``--insertion-verify`` (``models``: the InsNet model, then
        the autoregressive verifier) InsNet drafts verified by the autoregressive model (decoding/verify.py)."""
        if not self.verifying:
            return self.decode(models, sample, prefix_tokens, constraints, initial_tokens, initial_order, blanks)
        if len(models) != 2:
            raise ValueError("--insertion-verify needs two checkpoints, the InsNet model and the autoregressive "
                             f"verifier: --path INSNET.pt:AR.pt (got {len(models)})")
        given = [("--prefix-size", prefix_tokens), ("--constraints", constraints), ("initial_tokens", initial_tokens),
                 ("blanks", blanks)]
        for name, value in given:
            if value is not None:
                raise ValueError(f"--insertion-verify outputs what the autoregressive verifier accepts and does not "
                                 f"take {name}: decode without --insertion-verify")
        from insnet_fairseq.decoding.verify import Speculation

        return Speculation(self, models[0], models[1], self.verify_tolerance, *self.verify_max_len,
                           redraft=self.verify_redraft).generate(sample)

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
        gives the same as packed phrases, in order.

        Infilling: ``blanks[b]`` lists the blanks of sentence b's template ``initial_tokens[b]``, each
        as the number of template tokens before it (0: before the first; sorted, no repeats); words
        are inserted there only. With ``blank_id`` set (task ``insertion_lm --infill``), the source
        holds the template, ``blank_id`` marking each blank.
        """
        reranker = None
        if self.reranking:  # --path INSNET.pt:AR.pt[:REV.pt]: the judge of the candidates (decoding/rerank.py)
            if self.channel_weight > 0 and len(models) != 3:
                raise ValueError("--channel-weight needs three checkpoints, the InsNet model, the autoregressive judge "
                                 f"and its channel model (target -> source): --path INSNET.pt:AR.pt:REV.pt (got {len(models)})")
            if self.channel_weight == 0 and len(models) != 2:
                raise ValueError("--iter-decode-with-external-reranker needs two checkpoints, the InsNet model and "
                                 f"the autoregressive judge: --path INSNET.pt:AR.pt (got {len(models)}; a third, the "
                                 "channel model, needs --channel-weight)")
            models, reranker = models[:1], Judge.from_models(models[1:], self.channel_weight, self.tgt_dict,
                                                                  self.judge_order, self.anchor_depth)
        if len(models) != 1:
            raise ValueError("InsNet decoding does not ensemble: pass one checkpoint to --path")
        if prefix_tokens is not None:
            raise ValueError("--prefix-size is not supported by insertion decoding; use --constraints")
        model = models[0]
        if any(m.training for m in model.modules()):  # eval() walks every module: 0.6 ms a call, the check 0.2
            model.eval()
        net_input = sample["net_input"]
        src_tokens, src_lengths = net_input["src_tokens"], net_input["src_lengths"]
        B = src_tokens.size(0)
        if constraints is not None and initial_tokens is None:
            from fairseq.token_generation_constraints import unpack_constraints

            initial_tokens = [[int(t) for c in unpack_constraints(row) for t in c] for row in constraints.cpu()]
        if self.keywords_from_source and initial_tokens is None:  # insertion_lm: the source holds the keywords
            words = (src_tokens != self.pad) & (src_tokens != self.eos)
            initial_tokens = [row[keep].tolist() for row, keep in zip(src_tokens.cpu(), words.cpu())]
            if self.blank_id is not None:  # ... or a template: split off its blanks
                initial_tokens, blanks = zip(*(split_template(row, self.blank_id) for row in initial_tokens))
        if initial_tokens is not None:
            initial_tokens = self.check_initial_tokens(initial_tokens, B)
            for b, row in enumerate(initial_tokens if initial_order is not None else []):
                if row and sorted(initial_order[b]) != list(range(len(row))):
                    raise ValueError(f"initial_order[{b}] must be a permutation of 0..{len(row) - 1}")
        if blanks is not None:
            blanks = check_blanks(blanks, [len(r) for r in initial_tokens] if initial_tokens is not None else [0] * B)
        given = initial_tokens if initial_tokens is not None else [[] for _ in range(B)]
        decoder = model.decoder
        # caps: steps (--max-insertion-steps, default a * source length + b) and output length
        # (the same a * source length + b words, and the model's --max-target-positions)
        auto = (src_lengths.float() * self.max_steps_a + self.max_steps_b).long()
        cap = torch.full_like(auto, self.max_steps) if self.max_steps > 0 else auto
        max_len = (auto + 2).clamp(max=decoder.max_target_positions)  # [B], with <s> and </s>
        # --min-length-ratio: at least ratio x source words (without </s>) before q(stop) is heard
        min_len = torch.minimum(((src_lengths - 1).float() * self.min_length_ratio).ceil().long() + 2, max_len)
        finalized: List[Optional[dict]] = [None] * B
        for b in self.settled_rows(sample, src_lengths, given, max_len, decoder.max_target_positions,
                                   conditional=self.conditional):
            finalized[b] = self.fixed_hypothesis(given[b])
        for b in range(B):  # a template without blanks is its own output
            if blanks is not None and not blanks[b] and finalized[b] is None:
                sid = int(sample["id"][b]) if sample.get("id") is not None else b
                logger.warning(f"sample id {sid}: its template has no blank (__m__): output is the template")
                finalized[b] = self.fixed_hypothesis(given[b])
        todo = [b for b in range(B) if finalized[b] is None]
        for rows in self.length_groups([len(given[b]) for b in todo]):
            self._decode_rows(model, sample, [todo[r] for r in rows], cap, max_len, min_len, initial_tokens,
                              initial_order, finalized, blanks, reranker)
        return [h if isinstance(h, list) else [h] for h in finalized]

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

    def _decode_rows(self, model, sample, todo: List[int], cap: Tensor, max_len: Tensor, min_len: Tensor, initial_tokens,
                     initial_order, finalized: List[Optional[dict]], blanks=None, reranker=None) -> None:
        """Decode the batch rows ``todo`` together; fills ``finalized[b]`` for each (of its K candidates, the best
        by the model's own score, or by the autoregressive ``reranker``'s when there is one)."""
        decoder = model.decoder
        src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        K = self.beam if self.beam > 1 else self.candidates
        owner = [b for b in todo for _ in range(K)]  # decoded row -> batch row (K candidates / beam rows each)
        if owner != list(range(src_tokens.size(0))):
            rows = torch.tensor(owner, device=src_tokens.device)
            src_tokens, src_lengths, cap, max_len, min_len = (src_tokens[rows], src_lengths[rows], cap[rows],
                                                              max_len[rows], min_len[rows])
            src_tokens = src_tokens[:, src_tokens.ne(self.pad).any(0)]  # left padding no row of the group needs
            if initial_tokens is not None:
                initial_tokens = [initial_tokens[b] for b in owner]
                initial_order = None if initial_order is None else [initial_order[b] for b in owner]
            blanks = None if blanks is None else [blanks[b] for b in owner]
        source_kv, source_pad = self.encode_sources(model, sample, todo, K)
        if source_pad is not None and not bool(source_pad.any()):  # nothing padded (batch 1): no mask on every step
            source_pad = None
        state = self.initial_state(decoder, len(owner), src_tokens.device, source_kv, source_pad, initial_tokens,
                                   initial_order, blanks, capacity=int(max_len.max()))
        ids = torch.arange(len(owner), device=src_tokens.device)  # decoded row of each sentence left
        if self.beam > 1:  # --insertion-beam: every finished hypothesis, best first
            found = BeamSearch(self, self.beam, self.lenpen).search(
                decoder, state, source_kv, source_pad, cap, max_len, min_len if self.min_length_ratio > 0 else None)
            for b, hyps in zip(todo, found):
                finalized[b] = hyps
            return
        # with candidates, the first step's words are each candidate's own rank (0: the best) of the word
        first_rank = ids % K if K > 1 and not self.sampling else None
        history = {i: [] for i in range(len(owner))}
        hyps: List[Optional[dict]] = [None] * len(owner)
        self._record(history, state, ids)
        finishing = torch.zeros(len(owner), dtype=torch.bool, device=src_tokens.device)  # [B] --stop-check-prob's step
        n_finished = torch.zeros(len(todo), dtype=torch.long, device=src_tokens.device)  # [G] per sentence, M of K
        while True:
            wants_stop = self.termination_logit(decoder, state) > self.stop_logit  # q(stop) > stop_threshold
            held = wants_stop & (state.lengths < min_len) if self.min_length_ratio > 0 else None  # [B] or off
            done = wants_stop if held is None else wants_stop & ~held
            # --stop-check-prob: a sentence that q(stop) stops gets one more step, which inserts only its sure words
            # (resume: their slots, words and log-probs, [B, K] each); after that step it stops, whatever q(stop) says
            resume = None
            if self.stop_check_prob > 0 and bool((done | finishing).any()):
                resume = self.confident_slots(decoder, state, source_kv, source_pad, done & ~finishing)
                done = (done | finishing) & ~resume[0].any(1)
                finishing = resume[0].any(1)
            stop = done | (state.steps >= cap) | (state.lengths >= max_len)
            cut = torch.zeros_like(stop)  # --insertion-candidates-finish: rows dropped unfinished
            if self.candidates_finish and bool(stop.any()):
                group = ids // K  # [B] each row's sentence
                n_finished.index_add_(0, group[stop], torch.ones_like(group[stop]))
                cut = ~stop & (n_finished[group] >= self.candidates_finish)
            if bool(stop.any()):
                at_limit = ~done & (state.lengths >= decoder.max_target_positions)  # [B]
                for row in stop.nonzero().view(-1).tolist():
                    i = int(ids[row])
                    b = owner[i]
                    hyps[i] = self._finalize(state, row, history[i])
                    if at_limit[row]:  # cut by the model's limit, not by the model: say so
                        sid = int(sample["id"][b]) if sample.get("id") is not None else b
                        logger.warning(f"sample id {sid}: output reached the model's limit of "
                                       f"{decoder.max_target_positions - 2} words before the model stopped "
                                       "(train with a larger --max-target-positions for longer outputs)")
                keep = (~stop & ~cut).nonzero().view(-1)
                if len(keep) == 0:
                    break
                state, ids, cap, max_len, min_len = state.select(keep), ids[keep], cap[keep], max_len[keep], min_len[keep]
                held = None if held is None else held[keep]
                resume = None if resume is None else tuple(x[keep] for x in resume)
                finishing = finishing[keep]
                first_rank = None if first_rank is None else first_rank[keep]
                source_kv = [(k[keep], v[keep]) for k, v in source_kv]
                source_pad = None if source_pad is None else source_pad[keep]
            # a sentence held back by --min-length-ratio inserts one word per step (its best slot)
            state = self.step(decoder, state, source_kv, source_pad, max_len, one_word=held, word_rank=first_rank,
                              forced=resume)
            first_rank = None
            self._record(history, state, ids)
        if reranker is not None:  # every candidate's score becomes the judge's (fairseq's rerank), one pass for all
            rows = [i for i, h in enumerate(hyps) if h is not None]  # (dropped unfinished: None)
            judged = reranker.score(src_tokens[rows], src_lengths[rows], [hyps[i]["tokens"] for i in rows], self.pad,
                                    self.eos)
            for i, s in zip(rows, judged.tolist()):
                hyps[i]["score"] = s
        ranks = self.mbr_ranks(hyps, len(todo), K) if self.candidates_mbr > 0 else None
        for j, b in enumerate(todo):
            finalized[b] = self.ranked_candidates([h for h in hyps[j * K: (j + 1) * K] if h is not None],
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

    def mbr_ranks(self, hyps: List[Optional[dict]], G: int, K: int) -> List[List[int]]:
        """--insertion-candidates-mbr: for each of the G sentences, its candidates' places (among those finished,
        in their order) by expected BLEU+1 against the sentence's candidates, best first (:mod:`.mbr`)."""
        ended = [torch.tensor([self.eos]) if h is None else h["tokens"] for h in hyps]  # each ends with </s>
        tokens = pad_hypotheses(ended, self.pad, self.eos)[:, 1:].view(G, K, -1)  # </s> and padding past each length
        lengths = torch.tensor([len(t) - 1 for t in ended]).view(G, K)  # words, without </s>
        valid = torch.tensor([h is not None for h in hyps]).view(G, K)
        scores = torch.tensor([0.0 if h is None else h["score"] for h in hyps]).view(G, K)
        order = mbr_order(tokens, lengths, scores, valid, self.candidates_mbr).tolist()  # [G, K] candidate indices
        place = (valid.long().cumsum(1) - 1).tolist()  # a finished candidate's index among its sentence's finished ones
        ok = valid.tolist()
        return [[place[g][k] for k in order[g] if ok[g][k]] for g in range(G)]

    @staticmethod
    def ranked_candidates(hyps: List[dict], order: Optional[List[int]] = None) -> List[dict]:
        """A sentence's candidates, best first by score (the model's mean log-probability per insertion, or the
        judge's with ``--iter-decode-with-external-reranker``; ``--nbest`` prints the first N), or in ``order``
        (--insertion-candidates-mbr); each reports the most steps any candidate took, as they decode side by side,
        and its own as ``candidate_steps``.
        Example: scores -0.9 (5 steps) and -0.4 (7 steps) -> [(-0.4, 7 steps), (-0.9, 7 steps, candidate_steps 5)]."""
        steps = max(h["steps"] for h in hyps)
        ranked = sorted(hyps, key=lambda h: -h["score"]) if order is None else [hyps[i] for i in order]
        return [dict(h, steps=steps, candidate_steps=h["steps"]) for h in ranked]

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

    def fixed_hypothesis(self, tokens: Sequence[int]) -> dict:
        """The hypothesis of a sentence that is not decoded: ``tokens`` (maybe none), then ``</s>``."""
        return self._hypothesis(torch.tensor(list(tokens) + [self.eos]), torch.zeros(len(tokens) + 1), 0, [])

    def check_initial_tokens(self, initial_tokens, B: int) -> List[List[int]]:
        """Rows of integer word ids, one per sentence; special symbols and ids outside the
        dictionary are refused with the row that holds them."""
        if len(initial_tokens) != B:
            raise ValueError(f"initial_tokens has {len(initial_tokens)} rows for a batch of {B} sentences")
        rows = []
        for b, row in enumerate(initial_tokens):
            ids = torch.as_tensor(row)
            if ids.numel() and (ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool):
                raise ValueError(f"initial_tokens[{b}] must be a list of integer token ids, got {row!r}")
            ids = ids.long()
            bad = (ids < 0) | (ids >= len(self.tgt_dict)) | torch.isin(ids, self.banned)
            if bool(bad.any()):
                raise ValueError(f"initial_tokens[{b}] holds {ids[bad].tolist()}: not word ids of the target "
                                 f"dictionary ({len(self.tgt_dict)} symbols; <s>, </s> and <pad> cannot be inserted)")
            rows.append(ids.tolist())
        return rows

    # -- initial state ----------------------------------------------------------------------------
    # -- output ---------------------------------------------------------------------------------
    def _sequence(self, state: DecoderState, row: int) -> Tuple[Tensor, Tensor]:
        n = int(state.lengths[row])
        idx = state.positions[row].argsort()[:n]
        return state.tokens[row, idx], state.scores[row, idx]

    def _record(self, history, state, ids):
        """--retain-iter-history: every sentence's partial output after this step, with one device-to-host
        copy for the batch (not one per sentence)."""
        if not self.retain_history:
            return
        order = state.sequence_order()  # [B, S] insertion index of each token, left to right, holes last
        seq, order = state.tokens.gather(1, order).cpu(), order.cpu()
        lengths, rows = state.lengths.cpu().tolist(), ids.cpu().tolist()
        for row, b in enumerate(rows):  # "inserted": each token's insertion index (<s>, </s>: 0, 1; given tokens next)
            history[b].append({"tokens": seq[row, 1 : lengths[row]], "inserted": order[row, 1 : lengths[row]]})

    def _hypothesis(self, tokens, scores, steps, history):
        inserted = scores[:-1]
        return {
            "tokens": tokens, "positional_scores": scores, "alignment": None, "steps": steps, "history": history,
            "score": float(inserted.mean()) if len(inserted) else 0.0,
        }

    def _finalize(self, state: DecoderState, row: int, history) -> dict:
        tokens, scores = self._sequence(state, row)
        return self._finalize_sequence(tokens, scores, int(state.steps[row]), history)

    def _finalize_sequence(self, tokens: Tensor, scores: Tensor, steps: int, history) -> dict:
        """The hypothesis of ``tokens`` [n] (``<s>`` ... ``</s>``, left to right) and their ``scores`` [n]."""
        if self.dedupe:  # a token equal to its left neighbour is dropped (<s>, </s> never repeat)
            keep = torch.ones_like(tokens, dtype=torch.bool)
            keep[1:] = tokens[1:] != tokens[:-1]
            tokens, scores = tokens[keep], scores[keep]
        return self._hypothesis(tokens[1:].cpu(), scores[1:].cpu(), steps, history)
