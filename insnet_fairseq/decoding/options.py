"""The options of insertion decoding, and the flags they come from.

:class:`DecodingOptions` is what :class:`~insnet_fairseq.decoding.generator.InsertionGenerator` reads: the options of
the decoding core (:class:`~insnet_fairseq.decoding.core_options.CoreOptions`, :attr:`DecodingOptions.core`) and of
the extras beyond it (:class:`~insnet_fairseq.decoding.extra_options.ExtraOptions`, :attr:`DecodingOptions.extras`),
made and read under the flags' names (``DecodingOptions(mode="parallel", candidates=4)``, ``options.candidates``),
frozen, and checked when made (a value decoding cannot use stops with one line naming its flag).
:meth:`DecodingOptions.from_args` builds it from the task's decoding flags (:class:`DecodingFlags`, the fields
fairseq turns into ``--insertion-mode`` ...) and fairseq's own generation flags (``--sampling``, ``--lenpen``,
``--retain-iter-history`` ...). The flags' help is the flag reference (docs/flags.md, generated from it by
:mod:`insnet_fairseq.flag_reference`).

Defaults per mode (:data:`MODE_DEFAULTS`, applied by :meth:`DecodingOptions.for_mode`, which
:meth:`~DecodingOptions.from_args` calls): parallel decoding takes the settings chosen on a valid set,
``--slot-top-p 0.9 --skip-repeats --stop-check-prob 0.75`` (results/README.md); sequential decoding the plain rules. A
value given explicitly always wins: ``--slot-top-p 0.7 --no-skip-repeats --stop-check-prob 0`` is the paper's plain
parallel decoding. ``DecodingOptions(...)`` itself is exactly what it is given, every rule off unless given.
"""
import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Dict, Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from insnet_fairseq.decoding.core_options import MODE_DEFAULTS, MODES, CoreOptions, Sampling
from insnet_fairseq.decoding.extra_options import (COMPILE_MODES, UNREADABLE_SOURCE, ExtraOptions,
                                                   check_unreadable_source)
from insnet_fairseq.decoding.rerank import JUDGE_ORDERS
from insnet_fairseq.errors import FlagError

__all__ = ["DecodingOptions", "DecodingFlags", "MODES", "MODE_DEFAULTS", "check_stored", "stored_decoding",
           "check_constraints", "check_unreadable_source"]

# the flat names of fairseq's sampling flags -> the fields of the core's Sampling
SAMPLING_NAMES = {"sampling": "on", "sampling_topk": "topk", "sampling_topp": "topp", "temperature": "temperature"}
CORE_NAMES = {f.name for f in dataclasses.fields(CoreOptions)} - {"sampling"}
EXTRA_NAMES = {f.name for f in dataclasses.fields(ExtraOptions)}


@dataclass(frozen=True, init=False)
class DecodingOptions:
    """How :class:`~insnet_fairseq.decoding.generator.InsertionGenerator` decodes (see the module docstring): the
    core's options and the extras', made from and read by the flags' names.

    Example: ``DecodingOptions.for_mode("parallel")`` (the command line's ``--insertion-mode parallel``) has slot_top_p
    0.9, skip_repeats True, stop_check_prob 0.75, and ``DecodingOptions.for_mode("parallel", skip_repeats=False)`` the
    same without the repeat rule; ``DecodingOptions(mode="parallel")`` has 0.7, False, 0.0 (the rules as given).
    """

    core: CoreOptions
    extras: ExtraOptions

    def __init__(self, core: Optional[CoreOptions] = None, extras: Optional[ExtraOptions] = None, **flat):
        unknown = sorted(set(flat) - CORE_NAMES - EXTRA_NAMES - set(SAMPLING_NAMES))
        if unknown:
            raise TypeError(f"DecodingOptions got unexpected options {', '.join(unknown)}")
        if flat or core is None:
            given = {k: v for k, v in flat.items() if k in CORE_NAMES}
            sampling = {SAMPLING_NAMES[k]: v for k, v in flat.items() if k in SAMPLING_NAMES}
            base = core or CoreOptions()
            core = dataclasses.replace(base, sampling=dataclasses.replace(base.sampling, **sampling), **given)
        if flat or extras is None:
            given = {k: v for k, v in flat.items() if k in EXTRA_NAMES}
            extras = dataclasses.replace(extras or ExtraOptions(), **given)
        object.__setattr__(self, "core", core)
        object.__setattr__(self, "extras", extras)
        self._check_combinations()

    def __getattr__(self, name: str):
        """An option by its flat name: the core's, the extras', or a field of the core's sampling."""
        if name in SAMPLING_NAMES:
            return getattr(self.core.sampling, SAMPLING_NAMES[name])
        if name in CORE_NAMES:
            return getattr(self.core, name)
        if name in EXTRA_NAMES:
            return getattr(self.extras, name)
        raise AttributeError(name)

    def _check_combinations(self) -> None:
        """Refuse the combinations of core and extras' options that decoding does not make, naming the flags."""
        core, extras = self.core, self.extras
        if core.beam > 1 and extras.candidates > 1:
            raise FlagError(f"--insertion-beam {core.beam} does not combine with --insertion-candidates (greedy "
                            "decoding's options): drop them, or decode with --insertion-beam 1")
        clash = [flag for flag, on in (("--insertion-candidates", extras.candidates > 1),
                                       ("--insertion-beam", core.beam > 1),
                                       ("--iter-decode-with-external-reranker", extras.reranking)) if on]
        if extras.verify and clash:
            raise FlagError(f"--insertion-verify does not combine with {', '.join(clash)}: the verifier chooses every "
                            "word of the output")

    @property
    def stop_logit(self) -> float:
        """logit(--stop-threshold): a sentence stops when the termination head's logit exceeds it."""
        return self.core.stop_logit

    @property
    def rows_per_sentence(self) -> int:
        """How many rows decode each sentence side by side: its beam or its candidates."""
        return self.core.beam if self.core.beam > 1 else self.extras.candidates

    @classmethod
    def for_mode(cls, mode: str = "sequential", stored: Optional[Dict[str, Dict[str, Any]]] = None,
                 **given) -> "DecodingOptions":
        """The options of ``mode`` with its defaults for the options of ``given`` that are None or absent: the
        model's own (``stored``: {mode: {option: value}}, written into its checkpoint by recipes/store_decoding.py,
        :func:`stored_decoding`), else :data:`MODE_DEFAULTS`. Example: for_mode("parallel", skip_repeats=None,
        slot_top_p=0.7) -> slot_top_p 0.7, skip_repeats True, stop_check_prob 0.75; with stored {"parallel":
        {"stop_check_prob": 0.5}}: stop_check_prob 0.5."""
        own = check_stored(stored).get(mode, {})
        for name, default in MODE_DEFAULTS.get(mode, {}).items():
            if given.get(name) is None:
                given[name] = own.get(name, default)
        return cls(mode=mode, **given)

    @classmethod
    def from_args(cls, cfg, args=None, stored: Optional[Dict[str, Dict[str, Any]]] = None,
                  **task_options) -> "DecodingOptions":
        """The options of the task's decoding flags ``cfg`` (:class:`DecodingFlags`) and fairseq's generation flags
        ``args``, with the model's ``stored`` settings for the flags not given (see :meth:`for_mode`);
        ``task_options``: the fields the task sets itself (caps, ``conditional`` ...).

        ``args`` None: the task's own check of its flags before a model loads, when fairseq's generation flags are
        not known yet; a flag that needs one of them (``--channel-weight``: the judge) is taken as given with it,
        and build_generator checks it again with the real ones.
        """
        known = args is not None
        args = args if known else SimpleNamespace()

        def gen(name, default):
            return getattr(args, name, default)

        for flag in ("skip_repeats", "fuse_slot_queries"):
            if getattr(cfg, flag) and getattr(cfg, "no_" + flag):
                dashed = flag.replace("_", "-")
                raise FlagError(f"--{dashed} and --no-{dashed} exclude each other: pass one of them")
        check_constraints(gen("constraints", None))
        reranking = gen("iter_decode_with_external_reranker", False) if known else cfg.channel_weight > 0 or \
            str(cfg.judge_order) != "l2r"
        return cls.for_mode(
            mode=str(cfg.insertion_mode),
            stored=stored,
            slot_top_p=cfg.slot_top_p,
            max_steps=cfg.max_insertion_steps,
            use_cache=not cfg.no_insertion_cache,
            sampling=gen("sampling", False),
            sampling_topk=gen("sampling_topk", -1),
            sampling_topp=gen("sampling_topp", -1.0),
            temperature=gen("temperature", 1.0),
            retain_history=gen("retain_iter_history", False),
            skip_repeats=True if cfg.skip_repeats else False if cfg.no_skip_repeats else None,
            min_token_prob=cfg.min_token_prob,
            stop_threshold=cfg.stop_threshold,
            stop_check_prob=cfg.stop_check_prob,
            stop_check_top_p=cfg.stop_check_top_p,
            min_length_ratio=cfg.min_length_ratio,
            end_of_slot=cfg.end_of_slot,
            last_word=cfg.last_word,
            reopen_done_slots=cfg.reopen_done_slots,
            candidates=cfg.insertion_candidates,
            candidates_finish=cfg.insertion_candidates_finish,
            candidates_mbr=cfg.insertion_candidates_mbr,
            reranking=reranking,
            channel_weight=cfg.channel_weight,
            judge_order=str(cfg.judge_order),
            anchor_depth=cfg.anchor_depth,
            beam=cfg.insertion_beam,
            lenpen=gen("lenpen", 1.0),
            verify=cfg.insertion_verify,
            verify_tolerance=cfg.verify_tolerance,
            verify_max_len=(gen("max_len_a", 0.0), gen("max_len_b", 200)),
            fuse_slot_queries="on" if cfg.fuse_slot_queries else "off" if cfg.no_fuse_slot_queries else "auto",
            compile_decoder=str(cfg.compile_decoder),
            unreadable_source=str(getattr(cfg, "unreadable_source", "translate")),
            **task_options,
        )


def check_stored(stored) -> Dict[str, Dict[str, Any]]:
    """A model's stored decoding settings ({mode: {option: value}}, options of :data:`MODE_DEFAULTS` only), checked:
    a stored setting that decoding cannot use stops with one line naming it (None: {}). Example:
    check_stored({"parallel": {"stop_check_prob": 0.5}}) returns it; {"parallel": {"beam": 2}} raises FlagError."""
    stored = dict(stored or {})
    for mode, values in stored.items():
        if mode not in MODE_DEFAULTS or not isinstance(values, dict):
            raise FlagError(f"the checkpoint's stored decoding settings name the mode {mode!r}: one of {', '.join(MODES)}")
        unknown = sorted(set(values) - set(MODE_DEFAULTS[mode]))
        if unknown:
            raise FlagError(f"the checkpoint's stored decoding settings hold {', '.join(unknown)}: only "
                            f"{', '.join(MODE_DEFAULTS[mode])} are stored with a model")
    return stored


def stored_decoding(models) -> Optional[Dict[str, Dict[str, Any]]]:
    """The decoding settings stored with the first of ``models`` (``decoding_defaults`` of its training arguments,
    written by recipes/store_decoding.py), or None."""
    args = getattr(models[0], "args", None) if models else None
    return getattr(args, "decoding_defaults", None)


def check_constraints(constraints) -> None:
    """fairseq's ``--constraints`` (``cfg.generation.constraints``, the hub's ``constraints=``): None or ordered.
    Insertion decoding keeps the phrases in the order given, so ``unordered`` is refused rather than read as
    ordered. Example: check_constraints("unordered") raises FlagError."""
    if constraints is not None and str(constraints) == "unordered":
        raise FlagError("--constraints unordered is not supported by insertion decoding: constraint phrases are kept "
                        "in the order given; use --constraints (ordered)")


@dataclass
class DecodingFlags(FairseqDataclass):
    """The decoding flags of the insertion tasks (their config inherits them); :meth:`DecodingOptions.from_args`
    reads them. Their help is the flag reference (docs/flags.md)."""

    insertion_mode: ChoiceEnum(list(MODES)) = field(
        default="sequential",
        metadata={"help": "decoding: sequential (one token per step, at the best slot) or parallel "
                  "(every slot in the top --slot-top-p of the position distribution mass)"},
    )
    slot_top_p: Optional[float] = field(
        default=None, metadata={"help": "parallel decoding: probability mass of the slots filled per step (default "
                                "0.9, the best on valid; the paper's 0.7)"}
    )
    max_insertion_steps: int = field(
        default=0, metadata={"help": "step cap per sentence, with a warning for each sentence it stops before the "
                             "model does; 0: 2 * source length + 10 (outputs are also capped at 2 * source length + "
                             "10 tokens)"}
    )
    skip_repeats: Optional[bool] = field(
        default=None,
        metadata={"help": "do not insert a token equal to a neighbour of its slot (the slot stays open): removes "
                  "the duplicated words of parallel decoding"},
    )
    no_skip_repeats: bool = field(
        default=False, metadata={"help": "parallel decoding without --skip-repeats (on by default there)"}
    )
    min_token_prob: float = field(
        default=0.0,
        metadata={"help": "parallel decoding: leave a slot open for a later step when its token's probability is "
                  "below this (every step keeps each sentence's most likely insertion); 0: off"},
    )
    stop_threshold: float = field(
        default=0.5,
        metadata={"help": "a sentence stops when the termination head's q(stop) exceeds this (higher: longer outputs)"},
    )
    stop_check_prob: Optional[float] = field(
        default=None,
        metadata={"help": "a sentence that the termination head stops gets one more step, inserting the best words of "
                  "the open slots that have at least this probability and repeat neither neighbour (the stop head "
                  "of a layered model stops with words missing); 0: off"},
    )
    end_of_slot: Optional[float] = field(
        default=None,
        metadata={"help": "models trained with --slot-objective gap: fill every slot whose end-of-slot probability is "
                  "below this with its best word; a sentence stops when no slot is below it"},
    )
    last_word: Optional[float] = field(
        default=None,
        metadata={"help": "models trained with --last-word-head: a filled slot whose q(last) is at least this took "
                  "its gap's last word, so the two slots beside that word are done without being asked, and a "
                  "sentence whose every slot is then done ends without another pass; 1: off"},
    )
    reopen_done_slots: bool = field(
        default=False,
        metadata={"help": "models trained with --slot-objective gap: score every slot at every step (default: a slot "
                  "that said end-of-slot is done for good, as in training, and its query is not computed again)"},
    )
    stop_check_top_p: float = field(
        default=0.9,
        metadata={"help": "with --stop-check-prob: the check reads only the open slots in the top P of the position "
                  "distribution's mass (only their words are computed); 1: every open slot"},
    )
    min_length_ratio: float = field(
        default=0.0,
        metadata={"help": "a sentence does not stop (whatever q(stop) says) before it has this many words per "
                  "source word (without </s>); while held back it inserts one word per step; 0: off"},
    )
    insertion_candidates: int = field(
        default=1,
        metadata={"help": "decode K candidates of every sentence side by side, whose first step's words are their "
                  "K most probable (with --sampling: K samples), and output the one of highest mean log-probability "
                  "per insertion (the model's own score); 1: off"},
    )
    insertion_candidates_finish: int = field(
        default=0,
        metadata={"help": "with --insertion-candidates K: a sentence stops once M of its K candidates have finished, "
                  "dropping the others unfinished, and reports the steps its M-th took; 0: wait for all K"},
    )
    insertion_candidates_mbr: float = field(
        default=0.0,
        metadata={"help": "with --insertion-candidates K: output the candidates best first by minimum Bayes risk, their "
                  "expected BLEU+1 against the sentence's candidates, each weighted by softmax(score / T) (the judge's "
                  "score with --iter-decode-with-external-reranker, else the model's own); inf: uniform weights; "
                  "0: off (best score first)"},
    )
    channel_weight: float = field(
        default=0.0,
        metadata={"help": "with --iter-decode-with-external-reranker: the judge's score adds this weight x the "
                  "source's mean log-probability given the candidate under a target -> source autoregressive "
                  "model, passed third: --path INSNET.pt:AR.pt:REV.pt (noisy-channel reranking); 0: off"},
    )
    judge_order: ChoiceEnum(list(JUDGE_ORDERS)) = field(
        default="l2r",
        metadata={"help": "with --iter-decode-with-external-reranker and an InsNet judge (--path INSNET.pt:JUDGE.pt, "
                  "JUDGE an insnet_* checkpoint): the trajectory it scores each candidate along: l2r, or the "
                  "InsNet-uniform layering of the anchored or binary order (with --anchor-depth)"},
    )
    insertion_verify: bool = field(
        default=False,
        metadata={"help": "InsNet drafts verified by an autoregressive model, passed last (--path INSNET.pt:AR.pt): "
                  "each draft is accepted up to the first word that is not the AR model's greedy word, which is "
                  "taken instead, and InsNet drafts again after it; the output is the AR model's greedy output (at "
                  "--verify-tolerance 0)"},
    )
    verify_tolerance: float = field(
        default=0.0,
        metadata={"help": "with --insertion-verify: also accept a draft word whose AR log-probability is within this "
                  "many nats of the greedy word's (0: greedy words only)"},
    )
    insertion_beam: int = field(
        default=1,
        metadata={"help": "beam search over sequential insertions (--insertion-mode sequential): each hypothesis "
                  "extends its B best slots x B best words, or stops; finished hypotheses ranked by log-probability "
                  "(termination, slots, words) / (steps + 1) ** --lenpen; all B are output (--nbest). 1: greedy "
                  "(fairseq's --beam is not read)"},
    )
    fuse_slot_queries: bool = field(
        default=False,
        metadata={"help": "--slot-query-stream models: each cached decoding step computes the next step's slot queries "
                  "in its own pass: one decoder pass per step instead of two, the same outputs. Default: fused on a "
                  "GPU, on a CPU at batch 1, and for --slot-objective gap models always"},
    )
    no_fuse_slot_queries: bool = field(
        default=False, metadata={"help": "--slot-query-stream models: two passes per step at any batch size"}
    )
    compile_decoder: ChoiceEnum(list(COMPILE_MODES)) = field(
        default="off",
        metadata={"help": "cached decoding: each step's decoder pass through torch.compile (dynamic shapes) in this "
                  "mode: fewer, fused kernels where a step is bound by the host (a GPU at batch 1); compiled on first "
                  "use (a minute or more), the same outputs within float rounding. off: eager"},
    )
    no_insertion_cache: bool = field(
        default=False, metadata={"help": "re-encode the whole partial sequence every step (for checks and timing)"}
    )
    unreadable_source: ChoiceEnum(list(UNREADABLE_SOURCE)) = field(
        default="translate",
        metadata={"help": "fairseq-interactive: a source line whose every token is <unk> after BPE (zero-width and "
                  "format characters removed) is warned about, naming the line, and translate: translated anyway "
                  "(the model's guess), empty: answered with an empty output; a line more than half <unk> is warned "
                  "about too"},
    )
