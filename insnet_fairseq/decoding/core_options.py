"""The options of the decoding core: what its steps and loops read (:class:`CoreOptions`).

The core (:mod:`~insnet_fairseq.decoding.step`, :mod:`~insnet_fairseq.decoding.greedy`,
:mod:`~insnet_fairseq.decoding.beam`, :mod:`~insnet_fairseq.decoding.gaps` and the rules they call) decodes
sequentially, in parallel, by beam search, and by end-of-slot for ``--slot-objective gap`` models. The options of
what lies beyond it (candidates, rerank, verification, templates, compiled passes) are
:class:`~insnet_fairseq.decoding.extra_options.ExtraOptions`; :class:`~insnet_fairseq.decoding.options.DecodingOptions`
holds both, under the flags' names. Each field is checked when made; a value decoding cannot use stops with one line
naming its flag.
"""
import math
from dataclasses import dataclass, field
from typing import Tuple

from insnet_fairseq.decoding.sampling import check_temperature
from insnet_fairseq.errors import FlagError

MODES = ("sequential", "parallel")

# the defaults of the flags not given, per --insertion-mode (parallel: the best measured on valid; for_mode)
MODE_DEFAULTS = {
    "sequential": dict(slot_top_p=0.7, skip_repeats=False, stop_check_prob=0.0, end_of_slot=0.5, last_word=0.5),
    "parallel": dict(slot_top_p=0.9, skip_repeats=True, stop_check_prob=0.75, end_of_slot=0.5, last_word=0.5),
}


@dataclass(frozen=True)
class Sampling:
    """fairseq's --sampling, --sampling-topk K, --sampling-topp P, --temperature T: words sampled (from the K most
    probable, from the nucleus P, from softmax(log p / T)) instead of the most probable (``on`` False: greedy); scores
    stay log p."""

    on: bool = False
    topk: int = -1
    topp: float = -1.0
    temperature: float = 1.0

    def __post_init__(self):
        check_temperature(self.temperature, self.on)


@dataclass(frozen=True)
class CoreOptions:
    """How the core decodes. Each field with a flag is that flag's value; what it does is the flag's help
    (:class:`~insnet_fairseq.decoding.options.DecodingFlags`, printed in docs/flags.md). The comments say only what
    the help does not."""

    mode: str = "sequential"  # --insertion-mode
    slot_top_p: float = 0.7  # --slot-top-p; sequential decoding ignores it
    # --max-insertion-steps (0: length_cap's a x source length + b). A sentence it stops before the model does is
    # warned about, not refused: no cap is wrong for every sentence
    max_steps: int = 0
    # set by the task, no flag: (a, b), the step and output-length cap a x source length + b (insertion_lm: (0, its
    # --max-output-words))
    length_cap: Tuple[float, int] = (2.0, 10)
    use_cache: bool = True  # off: --no-insertion-cache
    sampling: Sampling = field(default_factory=Sampling)
    # fairseq's --retain-iter-history: each hypothesis keeps every partial output ("history")
    retain_history: bool = False
    # --skip-repeats / --no-skip-repeats; a sentence whose every word repeats takes, there, its best word that does not
    skip_repeats: bool = False
    min_token_prob: float = 0.0  # --min-token-prob
    stop_threshold: float = 0.5  # --stop-threshold
    stop_check_prob: float = 0.0  # --stop-check-prob
    stop_check_top_p: float = 0.9  # --stop-check-top-p
    # --end-of-slot, models trained with --slot-objective gap (decoding/gaps.py); the position, stop and repeat rules
    # above do not apply to such a model
    end_of_slot: float = 0.5
    last_word: float = 0.5  # --last-word, models trained with --last-word-head (1: the head is not read)
    reopen_done_slots: bool = False  # --reopen-done-slots
    beam: int = 1  # --insertion-beam, ranked with fairseq's --lenpen
    lenpen: float = 1.0

    def __post_init__(self):
        if self.mode not in MODES:
            raise FlagError(f"--insertion-mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if not 0.0 < self.slot_top_p <= 1.0:  # refused in every mode, though sequential decoding ignores it
            raise FlagError(f"--slot-top-p must be in (0, 1], got {self.slot_top_p}")
        for flag, value, ok, allowed in (
            ("--stop-threshold", self.stop_threshold, 0.0 < self.stop_threshold < 1.0, "in (0, 1)"),
            ("--end-of-slot", self.end_of_slot, 0.0 < self.end_of_slot < 1.0, "in (0, 1)"),
            ("--last-word", self.last_word, 0.0 < self.last_word <= 1.0, "in (0, 1] (1: off)"),
            ("--min-token-prob", self.min_token_prob, 0.0 <= self.min_token_prob < 1.0, "in [0, 1)"),
            ("--stop-check-prob", self.stop_check_prob, 0.0 <= self.stop_check_prob < 1.0, "in [0, 1)"),
            ("--stop-check-top-p", self.stop_check_top_p, 0.0 < self.stop_check_top_p <= 1.0, "in (0, 1]"),
            ("--max-insertion-steps", self.max_steps, self.max_steps >= 0, ">= 0 (0: 2 x source length + 10)"),
            ("--insertion-beam", self.beam, self.beam >= 1, ">= 1"),
        ):
            if not ok:
                raise FlagError(f"{flag} must be {allowed}, got {value}")
        self._check_beam()

    def _check_beam(self) -> None:
        if self.beam == 1:
            return
        if self.mode != "sequential":
            raise FlagError(f"--insertion-beam {self.beam} searches sequential insertions: add --insertion-mode "
                            f"sequential (got {self.mode}; parallel decoding keeps several hypotheses with "
                            "--insertion-candidates)")
        clash = [flag for flag, on in (("--sampling", self.sampling.on), ("--skip-repeats", self.skip_repeats),
                                       ("--stop-check-prob", self.stop_check_prob > 0),
                                       ("--min-token-prob", self.min_token_prob > 0)) if on]
        if clash:
            raise FlagError(f"--insertion-beam {self.beam} does not combine with {', '.join(clash)} (greedy decoding's "
                            "options): drop them, or decode with --insertion-beam 1")

    @property
    def stop_logit(self) -> float:
        """logit(--stop-threshold): a sentence stops when the termination head's logit exceeds it."""
        return math.log(self.stop_threshold / (1 - self.stop_threshold))
