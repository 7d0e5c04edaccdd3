"""The Python interface: ``InsNetModel.from_pretrained(...)`` returns an :class:`InsNetHubInterface`.

    from insnet_fairseq.models.insnet import InsNetModel
    ins = InsNetModel.from_pretrained("checkpoints/demo", checkpoint_file="checkpoint_last.pt",
                                      data_name_or_path="data-bin/multi30k_en_de", insertion_mode="parallel")
    ins.translate(["a man rides a horse ."])                        # -> one string per line
    ins.translate(["a man rides a horse .\tein Pferd"], constraints="ordered")   # phrases after tabs

Raw text is tokenised and BPE-split as the training data was, where the data-bin records it
(``DATA/preprocessing.json``, written by ``recipes/prepare_bitext.py``; :mod:`insnet_fairseq.data.preprocessing`);
``tokenizer=``/``bpe=`` that differ from the record are used, with a warning naming both.

fairseq's ``GeneratorHubInterface``, with fairseq-interactive's guarantees: one output per
input, in order, and no exception for a bad line. Lines are screened first
(:func:`insnet_fairseq.decoding.inputs.screen_lines`): a refused line (too long, unusable constraints, not text) gets
an empty output and one warning naming it (``input line N (sample id N-1)``, N counted from 1
in the list given). Bytes are decoded as UTF-8 (invalid bytes replaced, with a warning).
``constraints=...`` reads ``source<TAB>phrase<TAB>...`` lines as fairseq-interactive's
``--constraints`` does (fairseq's own interface cannot pass constraints per sentence); they are kept
in the order given, and ``constraints="unordered"`` is refused. ``unreadable_source="empty"`` answers
a line whose every token is ``<unk>`` with an empty output instead of the model's guess (both warn;
default: the checkpoint's ``--unreadable-source``, translate). The checkpoint's ``--max-tokens`` (a
training setting) never stops a line that fits the model.

An argument of another type (``translate(None)``, ``translate(5)``, ``generate(None)``, ``encode(3)``) is refused
with one ``ValueError`` naming the argument. ``generate`` takes token ids: a row that is not 1-D integer ids, an
empty row or an id outside the source dictionary is refused with a one-line ``ValueError`` naming
``tokenized_sentences[i]``
(:func:`~insnet_fairseq.decoding.inputs.check_source_ids`); a missing ``bpe_codes`` file is one
``DataError`` naming it.
"""
import copy
import logging
import warnings
from typing import Dict, List, Optional, Sequence

import torch
from fairseq import utils
from fairseq.hub_utils import GeneratorHubInterface
from fairseq.token_generation_constraints import pack_constraints
from omegaconf import open_dict

from insnet_fairseq.decoding.inputs import (as_text, check_bpe_files, check_source_ids, clean_line, integer_ids,
                                            line_label)
from insnet_fairseq.decoding.options import check_constraints, check_unreadable_source

logger = logging.getLogger(__name__)


def text_argument(name: str, value) -> str:
    """``value`` if it is a str, else a one-line ValueError naming the argument ``name`` and what it got."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str (one line of text), got {type(value).__name__}")
    return value


def lines_argument(name: str, value, bytes_ok: bool = True) -> list:
    """A list of lines given as argument ``name``: any iterable but a mapping (its items are screened one by one
    later); None, a number or another non-iterable is a one-line ValueError naming ``name``."""
    what = "a line (str or bytes) or a list of them" if bytes_ok else "a str or a list of str"
    if value is None or isinstance(value, dict) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be {what}, got {type(value).__name__}")
    return list(value)


class InsNetHubInterface(GeneratorHubInterface):
    def __init__(self, cfg, task, models):
        check_bpe_files(getattr(cfg, "bpe", None))  # before fairseq's encoder opens it
        super().__init__(cfg, task, models)
        if hasattr(task, "target_encoder"):  # raw text as the training data was tokenised (tasks/base.py)
            self.tokenizer = task.build_tokenizer(cfg.tokenizer, raw_text=True)
            self.bpe = task.build_bpe(cfg.bpe, raw_text=True)

    def sample(self, sentences, beam: int = 1, verbose: bool = False, unreadable_source: Optional[str] = None,
               **kwargs):
        """Translate one line (str or bytes) or a list of them; one string per line, in order.
        ``unreadable_source``: "translate" or "empty", for a line whose every token is ``<unk>``."""
        if isinstance(sentences, (str, bytes, bytearray)):
            return self.sample([sentences], beam=beam, verbose=verbose, unreadable_source=unreadable_source,
                               **kwargs)[0]
        sentences = lines_argument("sentences", sentences)
        check_constraints(kwargs.get("constraints") or self.cfg.generation.constraints)
        screen_args = {}
        if unreadable_source is not None:
            check_unreadable_source(unreadable_source)
            if not getattr(self.task, "has_keywords", False):  # keywords: the task checks its words itself
                screen_args["unreadable_source"] = unreadable_source
        constrained = bool(kwargs.get("constraints") or self.cfg.generation.constraints)
        lines, refused = [], {}
        for i, item in enumerate(sentences):
            text = as_text(item, i)
            if text is None:
                refused[i] = f"not text but {type(item).__name__}"
                logger.warning(f"{line_label(i)}: {refused[i]}; not translated, output is empty")
                text = ""
            lines.append(clean_line(text))
        lines = self.task.screen_inference_lines(lines, 0, self._encode_text, self.max_positions,
                                                 constrained=constrained, **screen_args)
        refused.update(self.task.refused_inputs)
        sources, phrases = [], []
        for line in lines:
            source, *rest = line.split("\t") if constrained else [line]
            sources.append(source)
            phrases.append(rest)
        tokens = [self.encode(s) for s in sources]
        constraint_tokens = None
        if constrained:
            encode_target = getattr(self.task, "target_encoder", lambda f: f)(self._encode_text)  # phrases: target text
            constraint_tokens = [[self.tgt_dict.encode_line(encode_target(p), append_eos=False,
                                                            add_if_not_exist=False).long() for p in row]
                                 for row in phrases]
        hypos = self.generate(tokens, beam, verbose, constraint_tokens=constraint_tokens, refused=refused, **kwargs)
        return [self.decode(h[0]["tokens"]) for h in hypos]

    def score(self, sentences, replace_newline_with_eos: bool = False, **kwargs):
        """fairseq's ``score``; ``sentences`` that are no line or list of lines are refused naming the argument."""
        if not isinstance(sentences, str):
            sentences = lines_argument("sentences", sentences, bytes_ok=False)
        return super().score(sentences, replace_newline_with_eos=replace_newline_with_eos, **kwargs)

    def encode(self, sentence: str) -> torch.LongTensor:
        """fairseq's ``encode`` (tokeniser, BPE, source ids); anything but a str is refused naming ``sentence``."""
        return super().encode(text_argument("sentence", sentence))

    def decode(self, tokens: torch.LongTensor) -> str:
        """fairseq's ``decode`` (target ids to text); ``tokens`` that are no 1-D integer ids are refused by name."""
        return super().decode(integer_ids("tokens", tokens, "a 1-D sequence of integer token ids"))

    def _encode_text(self, text: str) -> str:
        return self.apply_bpe(self.tokenize(text))

    def generate(self, tokenized_sentences, beam: int = 5, verbose: bool = False, skip_invalid_size_inputs=False,
                 inference_step_args=None, prefix_allowed_tokens_fn=None,
                 constraint_tokens: Optional[Sequence[Sequence[torch.Tensor]]] = None,
                 refused: Optional[Dict[int, str]] = None, **kwargs) -> List[List[Dict[str, torch.Tensor]]]:
        """fairseq's ``generate`` (token ids in, hypotheses out, in order), one result per sentence.

        ``constraint_tokens[i]``: the constraint phrases (target ids) of sentence i;
        ``refused``: {index: reason} of sentences answered with an empty hypothesis, undecoded.
        A sentence longer than the model's source limit, or whose constraints hold more words than
        its output may, is refused here too (with a warning), and ``skip_invalid_size_inputs`` is
        ignored: no sentence is ever left out. Ids that are no sentence are refused with a
        ValueError (:func:`~insnet_fairseq.decoding.inputs.check_source_ids`).
        """
        if tokenized_sentences is None or isinstance(tokenized_sentences, (str, bytes, int, float)):
            raise ValueError(f"tokenized_sentences must be a list of 1-D token id sequences (or one 1-D tensor), got "
                             f"{type(tokenized_sentences).__name__}: encode text with translate() or encode()")
        if torch.is_tensor(tokenized_sentences) and tokenized_sentences.dim() == 1:
            return self.generate(tokenized_sentences.unsqueeze(0), beam=beam, verbose=verbose, **kwargs)[0]
        tokens = check_source_ids(tokenized_sentences, len(self.src_dict))
        refused = dict(refused or {})
        constraint_tokens = None if constraint_tokens is None else list(constraint_tokens)
        if constraint_tokens is not None and len(constraint_tokens) != len(tokens):
            raise ValueError(f"constraint_tokens has {len(constraint_tokens)} rows for {len(tokens)} sentences")
        limit, words = self.max_positions[0], self.max_positions[1] - 1
        for i, t in enumerate(tokens):
            n = 0 if constraint_tokens is None else sum(len(p) for p in constraint_tokens[i])
            if i not in refused and t.numel() > limit:
                refused[i] = f"{t.numel()} source tokens, more than the limit of {limit} (--max-source-positions)"
            elif i not in refused and n > words:  # as the raw-line screening words it (decoding/inputs.py)
                refused[i] = (f"its constraint phrases have {n} tokens, more than the model's output limit of "
                              f"{words} words (--max-target-positions)")
            else:
                continue
            logger.warning(f"{line_label(i)}: {refused[i]}; not translated, output is empty")
        for i in refused:  # decoded as nothing: an empty source without constraints
            tokens[i] = torch.tensor([self.src_dict.eos()])
            if constraint_tokens is not None:
                constraint_tokens[i] = []
        if not tokens:
            return []
        gen_args = copy.deepcopy(self.cfg.generation)
        with open_dict(gen_args):
            gen_args.beam = beam
            for k, v in kwargs.items():
                setattr(gen_args, k, v)
        generator = self.task.build_generator(self.models, gen_args)
        lengths = torch.LongTensor([t.numel() for t in tokens])
        constraints = pack_constraints(constraint_tokens) if constraint_tokens is not None else None
        dataset = self.task.build_dataset_for_inference(tokens, lengths, constraints=constraints)
        max_tokens = self.cfg.dataset.max_tokens
        if max_tokens is not None:
            max_tokens = max(max_tokens, int(lengths.max()))  # a training setting must not stop a line
        batches = self.task.get_batch_iterator(
            dataset=dataset, max_tokens=max_tokens, max_sentences=self.cfg.dataset.batch_size,
            max_positions=self.max_positions, ignore_invalid_inputs=False, disable_iterator_cache=True,
        ).next_epoch_itr(shuffle=False)
        results = [None] * len(tokens)
        self.task.refused_inputs = refused
        try:
            with warnings.catch_warnings():  # torch's DataLoader warns on CPU that fairseq asks for pinned memory
                warnings.filterwarnings("ignore", message=".*pin_memory.*")
                for batch in batches:
                    batch = utils.apply_to_sample(lambda t: t.to(self.device), batch)
                    translations = self.task.inference_step(generator, self.models, batch,
                                                            constraints=batch.get("constraints"),
                                                            **(inference_step_args or {}))
                    for i, hypos in zip(batch["id"].tolist(), translations):
                        results[i] = hypos
        finally:
            self.task.refused_inputs = {}
        missing = [i for i, r in enumerate(results) if r is None]
        assert not missing, f"sentences {missing[:10]} were not decoded"  # batching covers every index
        if verbose:
            for i, (t, hypos) in enumerate(zip(tokens, results)):
                logger.info(f"S-{i}\t{self.string(t)}")
                logger.info(f"H-{i}\t{hypos[0]['score']}\t{self.decode(hypos[0]['tokens'])}")
        return results
