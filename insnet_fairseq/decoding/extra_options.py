"""The options of what decoding offers beyond its core (:class:`ExtraOptions`): several candidates a sentence, their
ranking by minimum Bayes risk or an external judge, verification by an autoregressive model, the minimum length,
templates and keywords from the source, compiled or fused decoder passes, and the screening of unreadable input.

The core (:class:`~insnet_fairseq.decoding.core_options.CoreOptions`) never reads them: the generator
(:class:`~insnet_fairseq.decoding.generator.InsertionGenerator`) turns them into what the core takes (the rows of a
sentence, per-row minimum lengths, the start's tokens and blanks, the decoder's passes), or wraps the core (rerank,
MBR, verification). :class:`~insnet_fairseq.decoding.options.DecodingOptions` holds both, under the flags' names.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

from insnet_fairseq.decoding.rerank import JUDGE_ORDERS
from insnet_fairseq.errors import FlagError
from insnet_fairseq.geometry.orders import DEFAULT_ANCHOR_DEPTH

UNREADABLE_SOURCE = ("translate", "empty")  # --unreadable-source: a source line whose every token is <unk>
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")  # --compile-decoder: torch.compile's modes
FUSE_MODES = ("off", "on", "auto")  # --fuse-slot-queries / --no-fuse-slot-queries / neither


@dataclass(frozen=True)
class ExtraOptions:
    """The extras' options (see the module docstring). Each field with a flag is that flag's value; what it does is
    the flag's help (:class:`~insnet_fairseq.decoding.options.DecodingFlags`, printed in docs/flags.md)."""

    min_length_ratio: float = 0.0  # --min-length-ratio
    candidates: int = 1  # --insertion-candidates
    candidates_finish: int = 0  # --insertion-candidates-finish
    candidates_mbr: float = 0.0  # --insertion-candidates-mbr
    # fairseq's --iter-decode-with-external-reranker (--path INSNET.pt:JUDGE.pt): the last checkpoint judges the
    # candidates (an autoregressive model, or an InsNet one along --judge-order)
    reranking: bool = False
    channel_weight: float = 0.0  # --channel-weight
    judge_order: str = "l2r"  # --judge-order, with the task's --anchor-depth
    anchor_depth: int = DEFAULT_ANCHOR_DEPTH
    # --insertion-verify, --verify-tolerance; the AR model's greedy length limit is fairseq's --max-len-a x source
    # width + --max-len-b (verify_max_len)
    verify: bool = False
    verify_tolerance: float = 0.0
    verify_max_len: Tuple[float, int] = (0.0, 200)
    # on (--fuse-slot-queries), off (--no-fuse-slot-queries), auto (neither flag: step.auto_fuses). Not a rule:
    # every setting decodes the same outputs
    fuse_slot_queries: str = "auto"
    compile_decoder: str = "off"  # --compile-decoder
    compile_backend: str = "inductor"
    # set by the task, no flag: False without a source (insertion_lm); keywords_from_source: the source tokens are
    # the constrained start; blank_id: with it, the source is an infilling template and blank_id marks its blanks
    conditional: bool = True
    keywords_from_source: bool = False
    blank_id: Optional[int] = None
    # --unreadable-source: a raw source line whose every token is <unk> (after BPE, zero-width and format characters
    # removed) is warned about, naming the line, and translated (translate: the model's guess) or answered with an
    # empty output (empty); read by the raw-line screening of fairseq-interactive and the hub (decoding/inputs.py)
    unreadable_source: str = "translate"

    def __post_init__(self):
        check_unreadable_source(self.unreadable_source)
        if self.min_length_ratio < 0:
            raise FlagError(f"--min-length-ratio must be >= 0, got {self.min_length_ratio}")
        if self.candidates < 1:
            raise FlagError(f"--insertion-candidates must be >= 1, got {self.candidates}")
        if self.fuse_slot_queries not in FUSE_MODES:
            raise FlagError(f"fuse_slot_queries must be one of {', '.join(FUSE_MODES)} (--fuse-slot-queries: on, "
                            f"--no-fuse-slot-queries: off), got {self.fuse_slot_queries!r}")
        if self.compile_decoder not in COMPILE_MODES:
            raise FlagError(f"--compile-decoder must be one of {', '.join(COMPILE_MODES)}, got '{self.compile_decoder}'")
        self._check_candidates()
        tolerance = self.verify_tolerance
        if tolerance < 0 or (tolerance > 0 and not self.verify):
            raise FlagError(f"--verify-tolerance B (nats, >= 0) widens --insertion-verify's acceptance: use it with "
                            f"--insertion-verify (got {tolerance})")

    def _check_candidates(self) -> None:
        K = self.candidates
        if not 0 <= self.candidates_finish <= K:
            raise FlagError(f"--insertion-candidates-finish M stops a sentence once M of its --insertion-candidates K "
                            f"have finished: 0 (all) or 1..K (got M {self.candidates_finish}, K {K})")
        if self.reranking and K < 2:
            raise FlagError("--iter-decode-with-external-reranker chooses among candidates: add --insertion-candidates "
                            "K (K >= 2)")
        if self.channel_weight < 0 or (self.channel_weight > 0 and not self.reranking):
            raise FlagError("--channel-weight weighs the channel model of the autoregressive judge: a weight >= 0, "
                            "with --iter-decode-with-external-reranker and --path INSNET.pt:AR.pt:REV.pt "
                            f"(got {self.channel_weight})")
        if self.judge_order not in JUDGE_ORDERS:
            raise FlagError(f"--judge-order must be one of {', '.join(JUDGE_ORDERS)}, got '{self.judge_order}'")
        if self.judge_order != "l2r" and not self.reranking:
            raise FlagError(f"--judge-order {self.judge_order} is the trajectory an InsNet judge scores along: it needs "
                            "--iter-decode-with-external-reranker and --path INSNET.pt:JUDGE.pt")
        if self.candidates_mbr < 0 or (self.candidates_mbr > 0 and K < 2):
            raise FlagError("--insertion-candidates-mbr T ranks the candidates of --insertion-candidates K (K >= 2) by "
                            "their expected BLEU against each other, weighted by softmax(score / T): T > 0 (inf: "
                            f"uniform), 0: off (got T {self.candidates_mbr}, K {K})")


def check_unreadable_source(value) -> None:
    """``--unreadable-source`` (the hub's ``unreadable_source=``): one of :data:`UNREADABLE_SOURCE`."""
    if str(value) not in UNREADABLE_SOURCE:
        raise FlagError(f"--unreadable-source must be one of {', '.join(UNREADABLE_SOURCE)}, got {value!r}")
