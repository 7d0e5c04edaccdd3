"""Task ``insertion_lm``: InsNet on monolingual text, the paper's lexically constrained generation
(section 4.1): train on one sentence per line, generate a sentence from its keywords.

Data: fairseq monolingual data (``fairseq-preprocess --only-source``: ``dict.txt``,
``{split}.bin/.idx``, one sentence per line), and for the splits to generate from, a keyword file
beside it: ``{split}.keywords``, one line per sentence, its keywords separated by spaces, in the
order they must appear (``make lm-multi30k`` / ``make lm-custom`` write them with YAKE,
``recipes/prepare_lm.py``). Every keyword must be a word of ``dict.txt``.

Batches are those of ``insertion_translation`` (fairseq's ``LanguagePairDataset`` + insertion
orders, :mod:`insnet_fairseq.data.dataset`) whose *source* side holds each sentence's keywords and ``</s>`` (``</s>``
alone without a keyword file, e.g. for training). The model (``--arch insnet_lm_*``,
:class:`insnet_fairseq.models.insnet.InsNetLMModel`) has no source encoder and no cross-attention: it never reads the
source. Decoding (fairseq-generate, fairseq-interactive, whose input lines are keywords) starts from
``<s> keywords </s>`` (the generator's constrained start), which insertion never deletes or
reorders; ``--no-keywords`` decodes from ``<s> </s>`` instead. Sequential, Dinic and uniform
training, the decoding modes and fairseq's ``--sampling --sampling-topk K`` / ``--sampling-topp P`` are those of
``insertion_translation``.

Text infilling (``--infill``): the source side is a *template* instead, read from
``{split}.{--template-suffix}`` (default ``template``): the sentence with each missing portion replaced by
``__m__`` (``recipes/prepare_infill.py`` writes them). Decoding starts from the template's words and inserts
only into its blanks (the generator's ``blanks``); a blank may take any number of words, none included.
fairseq-interactive lines are templates too. The source dictionary (:class:`TemplateDictionary`) reads
``__m__`` as ``<s>``, which never occurs inside a sentence, and prints it back as ``__m__``; a template word
outside the dictionary is kept as ``<unk>`` (the output shows ``<unk>`` there), with a warning naming the
line.

Bad data stops with one line naming the file (and line): a missing directory, dictionary or split,
an empty sentence, a keyword file whose line count differs from the split's, a keyword missing from
the dictionary, and (when generating) a missing keyword file.
"""
import logging
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq import utils
from fairseq.data import Dictionary, LanguagePairDataset, ListDataset, data_utils
from fairseq.tasks import register_task

from insnet_fairseq.data.dataset import InsertionPairDataset
from insnet_fairseq.data.dependency import levels_of_file
from insnet_fairseq.decoding.generator import InsertionGenerator
from insnet_fairseq.decoding.inputs import _short, line_label
from insnet_fairseq.errors import DataError, TreeError
from insnet_fairseq.geometry.orders import GIVEN_POLICIES, TREE_POLICIES
from insnet_fairseq.models.insnet import InsNetLMModel
from insnet_fairseq.tasks.base import InsertionConfig, InsertionTask, data_paths

logger = logging.getLogger(__name__)

KEYWORD_SUFFIX = "keywords"
BLANK = "__m__"  # a blank of an infilling template (the text-infilling paper's placeholder)


@dataclass
class InsertionLMConfig(InsertionConfig):
    """The options of every insertion task (orders, layerization, decoding) and the LM's own; the
    translation options (languages, source limits, BLEU during training) do not apply."""

    no_keywords: bool = field(
        default=False,
        metadata={"help": "generate without keywords (from <s> </s>; fairseq-interactive: lines are ignored)"},
    )
    infill: bool = field(
        default=False,
        metadata={"help": f"text infilling: generate from {{split}}.{{--template-suffix}} templates (fairseq-interactive: "
                  f"input lines are templates), inserting words only where {BLANK} marks a blank"},
    )
    template_suffix: str = field(
        default="template", metadata={"help": "with --infill: the templates of split S are read from S.SUFFIX"}
    )
    max_output_words: int = field(
        default=200,
        metadata={"help": "decoding caps: at most this many words per output, keywords included, and as many "
                  "insertion steps (--max-insertion-steps > 0 sets the step cap apart)"},
    )


class TemplateDictionary(Dictionary):
    """The LM dictionary as infilling templates read it: :data:`BLANK` is ``<s>`` (a blank), printed back as
    :data:`BLANK`; every other symbol as in the dictionary it copies (:meth:`of`)."""

    @classmethod
    def of(cls, dictionary: Dictionary) -> "TemplateDictionary":
        t = cls.__new__(cls)
        t.__dict__.update(dictionary.__dict__)
        t.indices = {**dictionary.indices, BLANK: dictionary.bos()}
        return t

    def string(self, tensor, *args, **kwargs):
        if not (torch.is_tensor(tensor) and tensor.dim() == 1):
            return super().string(tensor, *args, **kwargs)
        ids = tensor.tolist()
        cuts = [i for i, t in enumerate(ids) if t == self.bos()]
        pieces = [super(TemplateDictionary, self).string(torch.tensor(ids[a + 1 : b], dtype=torch.long), *args, **kwargs)
                  for a, b in zip([-1] + cuts, cuts + [len(ids)])]
        return f" {BLANK} ".join(pieces).strip()


class LMDataset(InsertionPairDataset):
    """Insertion trajectories of monolingual sentences; ``keyword_file`` is the keyword file read for
    the source side, or None (the source is ``</s>`` only); ``missing_keywords`` the file that was
    looked for in vain."""

    def __init__(self, dataset, policy, bos, seed, anchor_depth, keyword_file=None, missing_keywords=None, levels=None):
        super().__init__(dataset, policy, bos, seed=seed, anchor_depth=anchor_depth, levels=levels)
        self.keyword_file, self.missing_keywords = keyword_file, missing_keywords


def read_keywords(path: str, dictionary: Dictionary, n_sentences: int, data_file: str, template: bool = False):
    """The keyword file ``path`` -> one LongTensor of word ids per sentence.

    One line per sentence of ``data_file`` (``n_sentences``); words separated by whitespace, each a
    word of ``dictionary`` (not a special symbol). An empty line is a sentence without keywords.
    With ``template``, the file holds infilling templates and ``dictionary`` is a :class:`TemplateDictionary`:
    :data:`BLANK` is a blank (``<s>``), and a word outside the dictionary is kept as ``<unk>`` with a warning.
    Raises :class:`insnet_fairseq.errors.DataError` naming the file and line."""
    with open(path, encoding="utf-8", newline="\n") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if len(lines) != n_sentences:
        raise DataError(f"{path}: {len(lines):,} lines of keywords, but {data_file} holds {n_sentences:,} sentences: "
                        "the keyword file needs one line per sentence, in the same order")
    specials = {dictionary.bos(), dictionary.eos(), dictionary.pad()} | (set() if template else {dictionary.unk()})
    rows, empty, unknown = [], 0, []
    what = "template word" if template else "keyword"
    for i, line in enumerate(lines, 1):
        words = line.split()
        ids = [dictionary.index(w) for w in words]  # a template's dictionary reads BLANK as <s>
        bad = [w for w, t in zip(words, ids) if t in specials and not (template and w == BLANK)]
        unknown += [(i, w) for w, t in zip(words, ids) if template and t == dictionary.unk()]
        if bad:
            raise DataError(f"{path}:{i}: {what} {_short(bad, 1)} is not a word of the dictionary "
                            f"{getattr(dictionary, 'path', 'dict.txt')} ({len(dictionary):,} symbols): {what}s must be "
                            "words of the training vocabulary (prepare_lm.py / prepare_infill.py pick them so)")
        empty += not ids
        rows.append(torch.tensor(ids, dtype=torch.long))
    if unknown:
        logger.warning(f"{path}: {len(unknown)} template word(s) not in the dictionary, kept as <unk> (first: line "
                       f"{unknown[0][0]}, {unknown[0][1]!r})")
    if empty:
        logger.warning(f"{path}: {empty} sentence(s) without {what}s: generated from <s> </s>"
                       + (" (an empty template line is not a blank: write __m__)" if template else ""))
    return rows


@register_task("insertion_lm", dataclass=InsertionLMConfig)
class InsertionLMTask(InsertionTask):
    cfg: InsertionLMConfig
    has_keywords = True
    insertion_task = "lm"  # the InsNet models it builds (models/task_fit.py)

    def length_cap(self):
        """An LM's output is at most --max-output-words words, whatever its keywords."""
        return 0.0, self.cfg.max_output_words

    @classmethod
    def setup_task(cls, cfg: InsertionLMConfig, **kwargs):
        paths = data_paths(cfg.data, "insertion_lm",
                           "make lm-multi30k, make lm-custom, or fairseq-preprocess --only-source --destdir")
        dict_path = os.path.join(paths[0], "dict.txt")
        if not os.path.isfile(dict_path):
            raise DataError(f"{dict_path} not found: insertion_lm reads fairseq monolingual data "
                            "(fairseq-preprocess --only-source writes dict.txt and {split}.bin/.idx)")
        dictionary = cls.load_dictionary(dict_path)
        dictionary.path = dict_path
        logger.info(f"dictionary {dict_path}: {len(dictionary)} types")
        return cls(cfg, TemplateDictionary.of(dictionary) if cfg.infill else dictionary, dictionary)

    def __init__(self, cfg: InsertionLMConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if cfg.max_output_words < 1:
            raise ValueError(f"--max-output-words must be >= 1, got {cfg.max_output_words}")
        if cfg.infill and cfg.no_keywords:
            raise ValueError("--infill fills templates; --no-keywords generates from nothing: pass one of them")
        if cfg.no_keywords and cfg.insertion_order in GIVEN_POLICIES:
            raise ValueError(f"--insertion-order {cfg.insertion_order} trains from each sentence's keywords; "
                             "--no-keywords generates without them: pass one of them")

    @property
    def dictionary(self):
        return self.tgt_dict

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)]
        prefix = os.path.join(data_path, split)
        tokens = data_utils.load_indexed_dataset(prefix, self.dictionary, self.cfg.dataset_impl)
        if tokens is None:
            raise DataError(f"{prefix}.bin / {prefix}.idx not found: split {split!r} was not binarised "
                            "(fairseq-preprocess --only-source --trainpref/--validpref/--testpref)")
        data_file = prefix + ".bin"
        sizes = np.asarray(tokens.sizes)
        empty = (sizes <= 1).nonzero()[0]  # only </s>: an empty line before binarisation
        if len(empty):
            lines = ", ".join(str(i + 1) for i in empty[:10])
            raise DataError(f"{data_file}: {len(empty)} empty sentence(s), line(s) {lines}{' ...' if len(empty) > 10 else ''}; "
                            "an insertion model needs at least one word per sentence: remove empty lines before "
                            "fairseq-preprocess (prepare_lm.py does)")
        keyword_path = f"{prefix}.{self.cfg.template_suffix if self.cfg.infill else KEYWORD_SUFFIX}"
        eos = torch.tensor([self.dictionary.eos()])
        given_order = self.cfg.insertion_order in GIVEN_POLICIES and not self.cfg.infill
        if given_order and not os.path.isfile(keyword_path):
            raise DataError(f"{keyword_path} not found: --insertion-order keywords trains on each sentence's keywords, "
                            f"one line per sentence of {data_file} (recipes/prepare_lm.py writes them for every split)")
        # the training split reads its keywords only for the keywords order (other orders train on </s> sources)
        training = split == getattr(self.cfg, "train_subset", "train")
        if os.path.isfile(keyword_path) and (not training or given_order or self.cfg.infill):
            keywords = [torch.cat([k, eos]) for k in read_keywords(keyword_path, self.source_dictionary, len(tokens),
                                                                   data_file, template=self.cfg.infill)]
            source = ListDataset(keywords, np.array([len(k) for k in keywords]))
            found, missing = keyword_path, None
        else:  # no keywords (training): the source is </s> alone
            source = ListDataset([eos] * len(tokens), np.ones(len(tokens), dtype=np.int64))
            found, missing = None, keyword_path
        pairs = LanguagePairDataset(source, source.sizes, self.source_dictionary, tokens, sizes, self.dictionary,
                                    left_pad_source=self.cfg.left_pad_source, left_pad_target=False)
        levels = self.dependency_levels(prefix, sizes - 1) if self.cfg.insertion_order in TREE_POLICIES else None
        self.datasets[split] = LMDataset(pairs, self.cfg.insertion_order, self.dictionary.bos(), self.cfg.seed,
                                         self.cfg.anchor_depth, keyword_file=found, missing_keywords=missing,
                                         levels=levels)
        logger.info(f"{split}: {len(tokens):,} sentences from {data_file}"
                    + (f", {'templates' if self.cfg.infill else 'keywords'} from {found}" if found else
                       " (no keyword file)"))

    def dependency_levels(self, prefix: str, word_counts):
        """``--insertion-order dependency``: the levels of the split's parses, ``{prefix}.deps``."""
        path = f"{prefix}.deps"
        if not os.path.isfile(path):
            raise DataError(f"{path} not found: --insertion-order dependency trains along each sentence's dependency "
                            "parse, one line per sentence (recipes/parse_dependencies.py; make lm-parse-multi30k)")
        try:
            flat, offsets, lifted, steps = levels_of_file(path, word_counts.tolist())
        except TreeError as e:
            raise DataError(str(e)) from None
        logger.info(f"dependency levels from {path}: {len(offsets) - 1:,} parses ({lifted:,} made projective), "
                    f"{steps / max(len(flat), 1):.2f} levels per word")
        return flat, offsets

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """fairseq-interactive: every input line is a sentence's keywords (its source side)."""
        return LanguagePairDataset(src_tokens, src_lengths, self.source_dictionary, tgt_dict=self.target_dictionary,
                                   constraints=constraints)

    def screen_inference_lines(self, lines, first_id, encode_fn, max_positions, constrained=False, max_tokens=None):
        """Lines of keywords (fairseq-interactive): the translation checks, then a line holding a word that
        is not in the dictionary is refused (empty output, one warning naming the line)."""
        lines = super().screen_inference_lines(lines, first_id, encode_fn, max_positions, constrained, max_tokens)
        if self.cfg.no_keywords:
            return lines
        unk = self.dictionary.unk()
        for i, line in enumerate(lines):
            sid = first_id + i
            if sid in self.refused_inputs:
                continue
            source = line.split("\t")[0] if constrained else line
            try:
                words = encode_fn(source).split()
            except Exception:  # noqa: BLE001 - the translation screening has reported tokeniser failures
                continue
            unknown = [w for w in words if self.dictionary.index(w) == unk and not (self.cfg.infill and w == BLANK)]
            if unknown and self.cfg.infill:  # a template keeps its words: unknown ones as <unk>
                logger.warning(f"{line_label(sid)}: template word(s) not in the dictionary "
                               f"{getattr(self.dictionary, 'path', 'dict.txt')}, kept as <unk>: {_short(unknown)}")
            elif unknown:
                reason = (f"keyword(s) not in the dictionary {getattr(self.dictionary, 'path', 'dict.txt')}: "
                          f"{_short(unknown)}")
                logger.warning(f"{line_label(sid)}: {reason}; not generated, output is empty")
                self.refused_inputs[sid] = reason
                lines[i] = ""
        return lines

    def check_keywords(self):
        """Before decoding: every loaded split to generate from has its keyword file (unless --no-keywords)."""
        if self.cfg.no_keywords:
            return
        for split, dataset in self.datasets.items():
            missing = getattr(dataset, "missing_keywords", None)
            if missing and self.cfg.infill:
                raise DataError(f"{missing} not found: insertion_lm --infill fills split {split!r}'s templates, one "
                                f"line per sentence with {BLANK} at each blank (recipes/prepare_infill.py writes them)")
            if missing:
                raise DataError(f"{missing} not found: insertion_lm generates split {split!r} from each sentence's "
                                "keywords, one line per sentence (make lm-multi30k / lm-custom write them, "
                                "recipes/prepare_lm.py), or pass --no-keywords for unconstrained generation")

    def build_generator(self, models, args, **unused):
        for model in models:
            if not isinstance(model, InsNetLMModel):
                raise ValueError(f"--task insertion_lm decodes InsNet language models (--arch insnet_lm_*), not "
                                 f"{type(model).__name__}")
        self.check_keywords()
        if self.cfg.insertion_verify:
            raise ValueError("--insertion-verify (drafts verified by an autoregressive translation model) applies to "
                             "--task insertion_translation, not insertion_lm")
        if getattr(args, "iter_decode_with_external_reranker", False):
            raise ValueError("--iter-decode-with-external-reranker (an autoregressive judge of translation candidates) "
                             "applies to --task insertion_translation, not insertion_lm")
        options = self.decoding_options(args, models, length_cap=self.length_cap(),
                                        conditional=False,
                                        keywords_from_source=not self.cfg.no_keywords,
                                        blank_id=self.dictionary.bos() if self.cfg.infill else None)
        return InsertionGenerator(self.target_dictionary, options)
