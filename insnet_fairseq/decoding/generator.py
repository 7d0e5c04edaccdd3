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
(:meth:`InsertionGenerator.length_groups`) and encoded a few rows at a time (``ENCODE_CHUNK``),
so that one long constraint phrase neither slows its batch nor exhausts memory.
"""
import logging
import math
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from insnet_fairseq.data.orders import DEFAULT_ANCHOR_DEPTH
from insnet_fairseq.decoding.beam import BeamSearch
from insnet_fairseq.decoding.cache import ColumnStore, layer_names
from insnet_fairseq.decoding.flags import (COMPILE_MODES, check_beam_flags, check_blanks, check_decoding_flags,
                                          check_verify_flags, split_template)
from insnet_fairseq.decoding.mbr import mbr_order
from insnet_fairseq.decoding.rerank import Judge, pad_hypotheses
from insnet_fairseq.decoding.sampling import check_temperature, sample
from insnet_fairseq.decoding.state import HOLE, DecoderState, Picks, compact, group_offsets
from insnet_fairseq.models.offsets import offsets_from_rank, rank_matrix

logger = logging.getLogger(__name__)

ENCODE_CHUNK = 1 << 22  # rows x S x S elements per full encoding pass (see _encode_all)
GROUP_FREE = 64  # constrained starts up to this many tokens share a decoding group (see length_groups)


class InsertionGenerator:
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

    def context_pass(self, decoder, name: str):
        """The context encoder's pass ``name`` (``forward``: new tokens; ``forward_with_queries``: new tokens and the
        next step's slot queries) that a cached step runs: the module's own, or with ``--compile-decoder MODE`` the
        same compiled by ``torch.compile(mode=MODE, dynamic=True)``, once per model (the first steps compile it: a
        minute or more; later shapes reuse it). Its outputs equal the eager pass's within float rounding."""
        fn = getattr(decoder.context, name)
        if self.compile_decoder == "off":
            return fn
        key = (id(decoder.context), name)
        if key not in self._compiled:
            mode = None if self.compile_decoder == "default" else self.compile_decoder
            self._compiled[key] = torch.compile(fn, mode=mode, dynamic=True, backend=self.compile_backend)
        return self._compiled[key]

    def banned_on(self, device) -> Tensor:
        """:attr:`banned` on ``device``, copied there once (a copy to a GPU at every step waits for the device)."""
        key = str(device)
        if key not in self._banned_on:
            self._banned_on[key] = self.banned.to(device)
        return self._banned_on[key]

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
    def initial_state(self, decoder, B, device, source_kv, source_pad, initial_tokens=None, initial_order=None,
                      blanks=None, capacity: int = 16):
        """Encode ``<s> </s>`` (+ given tokens, in their insertion order) as a trajectory; with ``blanks``
        (see :meth:`generate`) only the blanks' slots are open. With the cache, its buffers have room for
        ``capacity`` more tokens (they grow when full)."""
        rows_tok, rows_pos, rows_open = [], [], []
        for b in range(B):
            given = list(initial_tokens[b]) if initial_tokens is not None else []
            order = list(initial_order[b]) if initial_order is not None and given else list(range(len(given)))
            if sorted(order) != list(range(len(given))):
                raise ValueError(f"initial_order[{b}] must be a permutation of 0..{len(given) - 1}")
            rows_tok.append([self.bos, self.eos] + [given[i] for i in order])
            rows_pos.append([0, len(given) + 1] + [i + 1 for i in order])
            if blanks is not None:  # token at position p (p template tokens before its right slot) opens it
                blank_at = set(blanks[b])
                rows_open.append([p in blank_at for p in rows_pos[-1]])
        S = max(len(r) for r in rows_tok)
        tokens = torch.full((B, S), self.pad, dtype=torch.long)
        positions = torch.full((B, S), HOLE, dtype=torch.long)
        for b in range(B):
            tokens[b, : len(rows_tok[b])] = torch.tensor(rows_tok[b])
            positions[b, : len(rows_pos[b])] = torch.tensor(rows_pos[b])
        tokens, positions = tokens.to(device), positions.to(device)
        real = tokens.ne(self.pad)
        open_right = None
        if blanks is not None:
            open_right = torch.zeros(B, S, dtype=torch.bool)
            for b, row in enumerate(rows_open):
                open_right[b, : len(row)] = torch.tensor(row, dtype=torch.bool)
            open_right = open_right.to(device)
        hidden, cache = self._encode_all(decoder, tokens, positions, real, source_kv, source_pad)
        state = DecoderState(
            tokens=tokens, positions=positions, real=real, hidden=hidden, cache=cache,
            last=real.sum(1) - 1, scores=torch.zeros(B, S, device=device),
            steps=torch.zeros(B, dtype=torch.long, device=device), open_right=open_right,
            parts=self.slot_parts(decoder, hidden),
        )
        if not self.use_cache:
            return state
        # room for as many insertions as the longest output may take (sequential decoding: exactly enough)
        store = ColumnStore(state.columns(), S + capacity)
        z = None
        if self.fused(decoder):  # every slot's query, for the first step
            z = decoder.context.query_stream(*self.query_geometry(positions, real, self.all_slots(positions)), cache,
                                             source_kv, source_pad)
        return DecoderState.from_store(store, S, positions, state.last, state.steps, z)

    def fused(self, decoder) -> bool:
        """Whether a step computes the next step's slot queries in its own pass (see ``fuse_slot_queries``)."""
        return self.fuse_slot_queries and self.use_cache and decoder.context.slot_query is not None

    @staticmethod
    def all_slots(positions: Tensor) -> Tensor:
        """[B, S - 1]: slot k of every sentence (k = 0 .. S - 2), those beyond its length included."""
        B, S = positions.shape
        return torch.arange(S - 1, device=positions.device).unsqueeze(0).expand(B, S - 1)

    @staticmethod
    def query_geometry(positions: Tensor, real: Tensor, slot_of: Tensor) -> Tuple[Tensor, Tensor]:
        """Offsets and mask of slot queries (``--slot-query-stream``): the query of slot ``slot_of[b, g]`` reads
        every token at the offset it will have from the word inserted there.

        positions [B, S] (HOLE at holes), real bool [B, S], slot_of [B, G] -> (offsets [B, G, S], blocked bool
        [B, G, S]). Example: "<s> a </s>" (positions [0, 2, 1]), slot 0 (between <s> and a): the word goes to
        position 1, so offsets [-1, 2, 1] (a and </s> move one to the right).
        """
        S = positions.size(1)
        p = (slot_of + 1).unsqueeze(2)  # [B, G, 1] the word's position once inserted
        pos = positions.unsqueeze(1)  # [B, 1, S] (HOLE at holes)
        offsets = (pos - p + (pos >= p).long()).clamp(-(S - 1), S - 1)  # [B, G, S], holes bounded
        blocked = ~real.unsqueeze(1).expand(-1, slot_of.size(1), -1)  # [B, G, S]
        return offsets, blocked

    @staticmethod
    def slot_parts(decoder, h: Tensor):
        """The tokens' halves of the slot representation (f_l(h), f_r(h)), or None for heads without them."""
        parts = getattr(decoder.heads, "parts", None)
        return None if parts is None else parts(h)

    def _encode_all(self, decoder, tokens, positions, real, source_kv, source_pad):
        """Full pass over a partial sequence in insertion order: [B, S] -> states, cache.

        Attention over S tokens builds several [rows, H, S, 2S] tensors, so long sequences (a long
        constraint, uncached decoding of a long sentence) are encoded a few rows at a time: at most
        ``ENCODE_CHUNK`` elements of rows x S x S per pass (all rows at once below S ~ 250 for 64 rows).
        """
        B, S = tokens.shape
        rows = max(1, ENCODE_CHUNK // (S * S))
        causal = torch.ones(S, S, dtype=torch.bool, device=tokens.device).triu(1)
        parts = []
        for i in range(0, B, rows):
            r = slice(i, i + rows)
            rank = rank_matrix(positions[r], ~real[r])
            mask = causal | ~real[r].unsqueeze(1)  # [rows, S, S]
            kv = [(k[r], v[r]) for k, v in source_kv]
            parts.append(decoder.context(tokens[r], offsets_from_rank(rank), mask, kv,
                                         None if source_pad is None else source_pad[r]))
        if len(parts) == 1:
            return parts[0]
        hidden = torch.cat([h for h, _ in parts])
        cache = [(torch.cat([c[l][0] for _, c in parts]), torch.cat([c[l][1] for _, c in parts]))
                 for l in range(len(parts[0][1]))]
        return hidden, cache

    # -- one insertion step ------------------------------------------------------------------------
    def choose_slots(self, pos_lprobs: Tensor, room: Tensor) -> Tensor:
        """bool [B, K]: the slots to insert into (at least one, at most ``room`` per sentence)."""
        if self.mode == "sequential":  # (not F.one_hot: it checks the classes' range with a host sync)
            return torch.zeros_like(pos_lprobs, dtype=torch.bool).scatter_(1, pos_lprobs.argmax(-1, keepdim=True), True)
        probs, idx = pos_lprobs.exp().sort(dim=-1, descending=True)  # [B, K]
        mass_before = probs.cumsum(-1) - probs
        rank = torch.arange(probs.size(1), device=probs.device).unsqueeze(0)
        take = ((mass_before < self.slot_top_p) | (rank == 0)) & (rank < room.unsqueeze(1)) & (probs > 0)
        return torch.zeros_like(take).scatter(1, idx, take)

    def insertable_lprobs(self, logits: Tensor) -> Tensor:
        """logits [N, V] -> log-probs [N, V] (float) over the words that may be inserted (not <s>, </s>, padding)."""
        logits = logits.float()
        logits[:, self.banned_on(logits.device)] = float("-inf")
        return torch.log_softmax(logits, -1)

    def best_words(self, decoder, state: DecoderState, source_kv, source_pad) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Every open slot's most probable word: (pos_lprobs [B, K], open bool [B, K] with N True, words [N],
        their log-probs [N]), row-major like every ``chosen`` mask (for --stop-check-prob and explanations)."""
        slots, pos_lprobs = self.slot_distribution(decoder, state)
        open_slots = torch.isfinite(pos_lprobs)  # closed and beyond-the-end slots are -inf
        logits = self.token_logits(decoder, state, slots, open_slots, source_kv, source_pad)  # [N, V]
        word_lprobs, words = self.insertable_lprobs(logits).max(-1)
        return pos_lprobs, open_slots, words, word_lprobs

    @staticmethod
    def neighbour_tokens(state: DecoderState, chosen: Tensor, picks: Optional[Picks] = None) -> Tuple[Tensor, Tensor]:
        """The tokens left and right of each ``chosen`` slot (bool [B, K], N True; ``picks``: the same, :class:`Picks`,
        made here when not given): ([N], [N])."""
        picks = picks or Picks.of(chosen)
        seq = state.tokens.gather(1, state.sequence_order())  # [B, S] tokens left to right
        return picks.take(seq[:, :-1]), picks.take(seq[:, 1:])

    def choose_tokens(self, logits: Tensor, rank: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """logits [N, V] -> (tokens [N], log-probs [N]); special symbols are never inserted. With ``rank``
        ([N], greedy decoding), row n takes its ``rank[n]``-th most probable token (0: the best). Sampling draws
        from softmax(log p / ``temperature``); the log-probs returned are the model's own."""
        lprobs = self.insertable_lprobs(logits)
        if rank is not None and not self.sampling:
            tokens = lprobs.topk(int(rank.max()) + 1, dim=-1).indices.gather(1, rank.unsqueeze(1)).squeeze(1)
        elif self.sampling:
            tokens = sample(lprobs, self.sampling_topk, self.sampling_topp, temperature=self.temperature)
        else:  # (max, not argmax + gather: on a CPU argmax over [N, V] costs about twice max's value-and-index pass)
            best, tokens = lprobs.max(-1)
            return tokens, best
        return tokens, lprobs.gather(1, tokens.unsqueeze(1)).squeeze(1)

    @staticmethod
    def slot_distribution(decoder, state: DecoderState) -> Tuple[Tuple[Tensor, Tensor], Tensor]:
        """Position log-probs of every slot of the partial sequences, and the slots' neighbours.

        Returns ((left, right) [B, K] steps of each slot's neighbours, pos_lprobs [B, K]), K = S - 1
        slots; slot k lies between the tokens of ranks k and k + 1 (left to right); slots beyond a
        sentence's length, and closed slots (infilling: outside the blanks), get -inf. The slots are
        scored from the tokens' cached parts (:meth:`~insnet_fairseq.models.slots.SlotHeads.step_position_logits`).
        """
        heads = decoder.heads
        h = state.hidden
        K = h.size(1) - 1
        by_pos = state.sequence_order()  # [B, S]
        left, right = by_pos[:, :-1], by_pos[:, 1:]  # [B, K] slot k between ranks k and k + 1
        slot_ok = torch.arange(K, device=h.device).unsqueeze(0) < (state.lengths - 1).unsqueeze(1)
        if state.open_right is not None:
            slot_ok = slot_ok & state.open_right.gather(1, left)  # [B, K] the left token's slot is open
        a, b = state.parts
        logits = heads.step_position_logits(a, b, state.last_hidden, left, right)  # [B, K]
        pos_lprobs = torch.log_softmax(logits.masked_fill(~slot_ok, float("-inf")), -1)
        return (left, right), pos_lprobs

    @staticmethod
    def chosen_slot_repr(decoder, state: DecoderState, slots: Tuple[Tensor, Tensor], chosen: Tensor,
                         picks: Optional[Picks] = None) -> Tensor:
        """Slot representations [N, D] of the ``chosen`` slots (bool [B, K], N True, row-major; ``picks``: the same,
        :class:`Picks`, made here when not given)."""
        picks = picks or Picks.of(chosen)
        left, right = slots
        a, b = state.parts
        return decoder.heads.slot_repr_from_parts(a[picks.rows, picks.take(left)], b[picks.rows, picks.take(right)],
                                                  state.last_hidden[picks.rows])

    @staticmethod
    def termination_logit(decoder, state: DecoderState) -> Tensor:
        """Logit [B] of q(stop | h_last): the global vector says the partial sequence is complete."""
        return decoder.heads.termination_logit(state.last_hidden).float()

    def step(self, decoder, state: DecoderState, source_kv, source_pad, max_len,
             one_word: Optional[Tensor] = None, word_rank: Optional[Tensor] = None,
             forced: Optional[Tuple[Tensor, Tensor, Tensor]] = None) -> DecoderState:
        """One insertion step; ``max_len`` (int or [B]) caps the length with <s> and </s>; the rows of
        ``one_word`` (bool [B]) insert a single word, at their best slot; row b's words are its
        ``word_rank[b]``-th most probable ones (LongTensor [B]; None: the best). ``forced``: (slots bool [B, K],
        words [B, K], their log-probs [B, K]) from :meth:`confident_slots`; a row with a forced slot inserts
        exactly those words there (as many as ``max_len`` leaves room for), which are not scored again."""
        slots, pos_lprobs = self.slot_distribution(decoder, state)
        room = (torch.as_tensor(max_len, device=pos_lprobs.device) - state.lengths).clamp_min(1)
        if one_word is not None:
            room = room.masked_fill(one_word, 1)
        chosen = self.choose_slots(pos_lprobs, room)  # [B, K]
        f_rows = None
        if forced is not None:
            f_slots = forced[0] & (forced[0].long().cumsum(1) <= room.unsqueeze(1))  # [B, K]
            f_rows = f_slots.any(1, keepdim=True)  # [B, 1]
            chosen = chosen & ~f_rows  # those rows' words are known: the others are chosen and scored as usual
        picks = self.picks_of(chosen, forced)  # the chosen slots by index: N read once (sequential: never)
        if picks.n > 0:
            logits = self.token_logits(decoder, state, slots, chosen, source_kv, source_pad, picks)  # [N, V]
            rank = None if word_rank is None else word_rank[picks.rows]  # [N]
            tokens, tok_lprobs = self.choose_tokens(logits, rank)  # [N]
            if self.skip_repeats or self.replace_repeats:
                chosen, tokens, tok_lprobs, picks = self.drop_repeats(state, chosen, logits, tokens, tok_lprobs, picks)
            if self.min_token_prob > 0 and self.mode == "parallel":
                chosen, tokens, tok_lprobs, picks = self.drop_unsure(chosen, tokens, tok_lprobs, pos_lprobs, picks)
        if f_rows is not None and bool(f_rows.any()):  # merge the forced rows' words, row-major like the others
            words, lprobs = forced[1].clone(), forced[2].clone()  # [B, K] (rows disjoint from the chosen ones)
            if bool(chosen.any()):
                words.masked_scatter_(chosen, tokens)
                lprobs.masked_scatter_(chosen, tok_lprobs)
            chosen = chosen | f_slots
            picks = Picks.of(chosen)
            tokens, tok_lprobs = picks.take(words), picks.take(lprobs)
        return self.insert(decoder, state, chosen, tokens, tok_lprobs + picks.take(pos_lprobs), source_kv, source_pad,
                           picks)

    def picks_of(self, chosen: Tensor, forced=None) -> Picks:
        """The step's chosen slots (bool [B, K]) as :class:`Picks`, by which it selects where boolean indexing
        (``x[chosen]``) would make the host wait for a GPU at every use: sequential decoding (one slot a row)
        without any read of the device, otherwise with one read of the count. Example: chosen [[F, T, F], [T, F, F]]
        -> rows [0, 1], cols [1, 0]."""
        if self.mode == "sequential" and forced is None and not (self.skip_repeats or self.replace_repeats):
            return Picks.one_per_row(chosen.byte().argmax(1), chosen.size(1))
        return Picks.of(chosen)

    def confident_slots(self, decoder, state: DecoderState, source_kv, source_pad,
                        rows: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """(sure bool [B, K], words [B, K], their log-probs [B, K]): for the sentences ``rows`` (bool [B]) that the
        termination head would stop, the open slots whose best word has probability >= ``stop_check_prob`` and
        repeats neither neighbour (``--stop-check-prob``), with those words: a sentence with such a slot is not
        finished, and inserts them (once; :meth:`step` takes the triple as ``forced``).

        Why: q(stop | h_last) of a layered model is trained only at the ends of gold layers, and a partial
        sequence that missed a word looks finished to it ("Eine Frau spielt ein Geige ." gets q(stop) = 1.00,
        while the slot "ein _ Geige" wants "Lied" at 0.87). The position distribution is no judge there (it is
        never trained on finished sequences: "._</s>" got 0.78), but the token head is.
        Example: the slots of "<s> ein Geige . </s>" with best words (Eine 0.95, Lied 0.87, "." 0.60,
        Im 0.08) and stop_check_prob 0.5 -> [True, True, False, False]: "." repeats its left neighbour.
        """
        B, K = rows.size(0), state.hidden.size(1) - 1
        sure = torch.zeros(B, K, dtype=torch.bool, device=rows.device)
        words = torch.full((B, K), self.pad, dtype=torch.long, device=rows.device)
        word_lprobs = torch.zeros(B, K, device=rows.device)
        idx = rows.nonzero().view(-1)  # [R] only those sentences are scored (a batch stops a few rows at a time)
        if len(idx) == 0:
            return sure, words, word_lprobs
        if len(idx) < B:
            state = state.select(idx)
            source_kv = [(k[idx], v[idx]) for k, v in source_kv]
            source_pad = None if source_pad is None else source_pad[idx]
        _, open_slots, best, best_lprobs = self.best_words(decoder, state, source_kv, source_pad)  # [R, K], [N]
        left, right = self.neighbour_tokens(state, open_slots)
        ok = (best_lprobs >= math.log(self.stop_check_prob)) & (best != left) & (best != right)  # [N]
        at = idx.unsqueeze(1).expand(-1, K)[open_slots]  # [N] batch row of each open slot
        col = open_slots.nonzero()[:, 1]  # [N] its slot
        sure[at, col], words[at, col], word_lprobs[at, col] = ok, best, best_lprobs
        return sure, words, word_lprobs

    @classmethod
    def token_logits(cls, decoder, state: DecoderState, slots, chosen: Tensor, source_kv, source_pad,
                     picks: Optional[Picks] = None) -> Tensor:
        """Token logits [N, V] at the ``chosen`` slots (bool [B, K], N True, row-major; ``picks``: the same, as
        :class:`Picks`, made here when not given); ``slots``: the neighbours from :meth:`slot_distribution`.

        With ``--slot-query-stream`` each chosen slot's query reads the whole partial sequence
        from the cache, at the offsets its word will have once inserted there.
        """
        picks = picks or Picks.of(chosen)
        e = cls.chosen_slot_repr(decoder, state, slots, chosen, picks)  # [N, D]
        if decoder.context.slot_query is None:
            return decoder.heads.token_logits(e)
        if state.slot_queries is not None:  # computed by the pass that made this state
            return decoder.heads.token_logits(e, picks.take(state.slot_queries))
        slot_of, _, _ = compact(chosen, picks)  # [B, G]
        offsets, blocked = cls.query_geometry(state.positions, state.real, slot_of)  # [B, G, S]
        z = decoder.context.query_stream(offsets, blocked, state.cache, source_kv, source_pad)  # [B, G, D]
        within = picks.take(chosen.long().cumsum(1) - 1)  # [N] each chosen slot's rank in its row: its column of z
        return decoder.heads.token_logits(e, z[picks.rows, within])

    def drop_repeats(self, state: DecoderState, chosen: Tensor, logits: Tensor, tokens: Tensor, tok_lprobs: Tensor,
                     picks: Optional[Picks] = None):
        """Leave out the insertions that repeat a neighbour of their slot.

        chosen bool [B, K] with N True; logits [N, V]; tokens, tok_lprobs [N].
        Returns (chosen' [B, K], tokens' [N'], tok_lprobs' [N'], chosen' as Picks); ``picks``: chosen as Picks
        (made here when not given). A sentence left with nothing keeps its slots, each with its best token that is neither neighbour;
        with ``replace_repeats`` every repeating slot does (N' = N).
        Example: "<s> die Kamera </s>" with "die" chosen for the slot between "die" and
        "Kamera" inserts nothing there; if that is the sentence's only slot, it gets the best
        token other than "die" and "Kamera".
        """
        picks = picks or Picks.of(chosen)
        left, right = self.neighbour_tokens(state, chosen, picks)  # [N] neighbours of each chosen slot
        repeat = (tokens == left) | (tokens == right)  # [N]
        keep = chosen.clone()
        keep[picks.rows, picks.cols] = ~repeat
        if self.replace_repeats:
            stuck = repeat  # [N] every repeat takes the slot's best other token
        else:
            stuck = (keep.sum(1) == 0)[picks.rows]  # [N] its sentence would insert nothing
        if bool(stuck.any()):
            logits = logits.float().scatter(1, left.unsqueeze(1), float("-inf")).scatter(1, right.unsqueeze(1), float("-inf"))
            alt, alt_lprobs = self.choose_tokens(logits)
            tokens, tok_lprobs = torch.where(stuck, alt, tokens), torch.where(stuck, alt_lprobs, tok_lprobs)
            keep[picks.rows, picks.cols] = ~repeat | stuck
        return self._kept(keep, tokens, tok_lprobs, picks)

    @staticmethod
    def _kept(keep: Tensor, tokens: Tensor, tok_lprobs: Tensor, picks: Picks):
        """The words [N] at ``picks`` kept at the slots ``keep`` (bool [B, K], a subset): (keep, tokens' [N'],
        tok_lprobs' [N'], the Picks of keep), with one read of N'."""
        kept = Picks.of(keep)
        return keep, kept.take(picks.place(tokens, 0)), kept.take(picks.place(tok_lprobs, 0.0)), kept

    def drop_unsure(self, chosen: Tensor, tokens: Tensor, tok_lprobs: Tensor, pos_lprobs: Tensor,
                    picks: Optional[Picks] = None):
        """Leave the slots whose token has probability below ``min_token_prob`` open for a later step,
        when the sentence has more context; a sentence always keeps its most likely insertion
        (slot and token).

        chosen bool [B, K] with N True; tokens, tok_lprobs [N]; pos_lprobs [B, K].
        Returns (chosen' [B, K], tokens' [N'], tok_lprobs' [N'], chosen' as Picks); ``picks``: chosen as Picks
        (made here when not given).
        Example: chosen slots with token probabilities 0.9, 0.2, 0.6 and min_token_prob 0.5 insert
        the first and third tokens; with probabilities 0.3 and 0.2 only the insertion of higher
        slot x token probability.
        """
        picks = picks or Picks.of(chosen)
        row = picks.rows  # [N] sentence of each insertion
        joint = tok_lprobs + picks.take(pos_lprobs)  # [N]
        best = torch.full((chosen.size(0),), float("-inf"), device=joint.device).scatter_reduce(
            0, row, joint, reduce="amax")  # [B]
        sure = (tok_lprobs >= math.log(self.min_token_prob)) | (joint == best[row])  # [N]
        keep = chosen.clone()
        keep[picks.rows, picks.cols] = sure
        return self._kept(keep, tokens, tok_lprobs, picks)

    def insert(self, decoder, state: DecoderState, chosen: Tensor, tokens: Tensor, scores: Tensor,
               source_kv, source_pad, picks: Optional[Picks] = None) -> DecoderState:
        """Insert ``tokens`` [N] (scores [N]) into the ``chosen`` slots (bool [B, K], N True, row-major)
        and encode them, left to right within a sentence; ``picks``: the same slots as :class:`Picks` (made here when
        not given), which spare the reads of the device that boolean indexing makes."""
        h = state.hidden
        B, S, D = h.shape
        picks = picks or Picks.of(chosen)
        slot_of, g_real, n_new = compact(chosen, picks)  # new tokens, left to right, [B, G]
        G = slot_of.size(1)
        if picks.n == B and picks.widest == 1:  # one new token a row: already in order
            g_tok, g_score = tokens.unsqueeze(1), scores.unsqueeze(1)  # [B, 1]
        else:
            new_tok, new_score = picks.place(tokens, self.pad), picks.place(scores.float(), 0.0)  # [B, K]
            g_tok = new_tok.gather(1, slot_of).masked_fill(~g_real, self.pad)
            g_score = new_score.gather(1, slot_of).masked_fill(~g_real, 0.0)

        # positions: an insertion at slot k shifts every token of rank > k by one
        csum = chosen.long().cumsum(1)  # [B, K]
        shift = torch.cat([csum.new_zeros(B, 1), csum], 1)  # [B, S] shift of rank r
        old_pos = state.positions
        moved = old_pos + shift.gather(1, old_pos.clamp(max=S - 1))
        old_pos = torch.where(state.real, moved, old_pos)
        g_pos = (slot_of + csum.gather(1, slot_of)).masked_fill(~g_real, HOLE)  # slot k -> k + #chosen <= k

        pos_all = torch.cat([old_pos, g_pos], 1)
        last, steps = S + n_new - 1, state.steps + 1
        if self.use_cache:  # encode the new tokens only, appending their columns to the cache in place
            store = state.store.reserve(S, G)
            known = dict(tokens=g_tok, real=g_real, scores=g_score)
            if state.open_right is not None:
                known["open_right"] = g_real
            store.write(S, known)  # before the pass, which needs the grown real mask
            real_all = store.buffers["real"][:, : S + G]  # [B, S + G]
            offsets = group_offsets(pos_all, g_pos, g_real)  # [B, G, S + G]
            mask = ~real_all.unsqueeze(1)  # [B, 1, S + G] holes are blocked
            fused = self.fused(decoder)
            if B == 1 and G == 1 and not fused:  # one sentence has no holes, one new token sees every token: no mask
                mask = None
            elif G > 1:  # and a new token does not see the new tokens right of it: [B, G, S + G]
                m = torch.arange(G, device=h.device)
                later_new = m.view(1, G) > m.view(G, 1)  # new key m' > query m
                mask = mask | torch.cat([torch.zeros(G, S, dtype=torch.bool, device=h.device), later_new], 1)
            names = layer_names(len(state.cache))
            # the pass writes each layer's new keys/values into the cache in place; for CUDA graphs (--compile-decoder
            # reduce-overhead) a pass must write none of its inputs: it reads the cached columns and returns all S + G,
            # whose new G columns are written here, after it
            functional = self.compile_decoder == "reduce-overhead"
            past = ([(store.buffers[kn][:, :, :S], store.buffers[vn][:, :, :S]) for kn, vn in names] if functional
                    else [store.writer(kn, vn, S) for kn, vn in names])
            z = None
            if functional:  # each step is a new replay of the CUDA graph: the last one's outputs are no longer read
                torch.compiler.cudagraph_mark_step_begin()
            if fused:  # the new tokens and every slot's query for the next step, in one pass
                q_geometry = self.query_geometry(pos_all, real_all, self.all_slots(pos_all))  # [B, S + G - 1, S + G]
                h_new, kv, z = self.context_pass(decoder, "forward_with_queries")(
                    g_tok, offsets, mask, source_kv, source_pad, past, *q_geometry)
            else:
                h_new, kv = self.context_pass(decoder, "forward")(g_tok, offsets, mask, source_kv, source_pad, past=past)
            if functional:  # kv: per layer (k, v) [B, H, S + G, Dh]; z outlives the next replay (the next step reads it)
                store.write(S, {name: t[:, :, S:] for (kn, vn), (k, v) in zip(names, kv) for name, t in ((kn, k), (vn, v))})
                z = None if z is None else z.clone()
            new = dict(hidden=h_new)
            if state.parts is not None:
                new["part_l"], new["part_r"] = self.slot_parts(decoder, h_new)
            store = store.append(S, new)
            return DecoderState.from_store(store, S + G, pos_all, last, steps, z)
        tokens_all = torch.cat([state.tokens, g_tok], 1)
        real_all = torch.cat([state.real, g_real], 1)
        hidden, cache = self._encode_all(decoder, tokens_all, pos_all, real_all, source_kv, source_pad)
        parts = self.slot_parts(decoder, hidden)
        return DecoderState(
            tokens=tokens_all, positions=pos_all, real=real_all, hidden=hidden, cache=cache,
            last=last, scores=torch.cat([state.scores, g_score], 1), steps=steps,
            open_right=None if state.open_right is None else torch.cat([state.open_right, g_real], 1),
            parts=parts,
        )

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
