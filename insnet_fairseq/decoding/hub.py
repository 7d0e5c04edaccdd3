"""The Python interface: ``InsNetModel.from_pretrained(...)`` returns an :class:`InsNetHubInterface`.

    from insnet_fairseq.models.insnet import InsNetModel
    ins = InsNetModel.from_pretrained("checkpoints/demo", checkpoint_file="checkpoint_last.pt",
                                      data_name_or_path="data-bin/multi30k_en_de", insertion_mode="parallel")
    ins.translate(["a man rides a horse ."])                        # -> one string per line
    ins.translate(["a man rides a horse .\tein Pferd"], constraints="ordered")   # phrases after tabs

fairseq's ``GeneratorHubInterface``, with fairseq-interactive's guarantees: one output per
input, in order, and no exception for a bad line. Lines are screened first
(:func:`insnet_fairseq.decoding.inputs.screen_lines`): a refused line (too long, unusable constraints, not text) gets
an empty output and one warning naming it (``input line N (sample id N-1)``, N counted from 1
in the list given). Bytes are decoded as UTF-8 (invalid bytes replaced, with a warning).
``constraints=...`` reads ``source<TAB>phrase<TAB>...`` lines as fairseq-interactive's
``--constraints`` does (fairseq's own interface cannot pass constraints per sentence). The
checkpoint's ``--max-tokens`` (a training setting) never stops a line that fits the model.
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

from insnet_fairseq.decoding.inputs import as_text, clean_line, line_label

logger = logging.getLogger(__name__)


class InsNetHubInterface(GeneratorHubInterface):
    def sample(self, sentences, beam: int = 1, verbose: bool = False, **kwargs):
        """Translate one line (str or bytes) or a list of them; one string per line, in order."""
        if isinstance(sentences, (str, bytes, bytearray)):
            return self.sample([sentences], beam=beam, verbose=verbose, **kwargs)[0]
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
                                                 constrained=constrained)
        refused.update(self.task.refused_inputs)
        sources, phrases = [], []
        for line in lines:
            source, *rest = line.split("\t") if constrained else [line]
            sources.append(source)
            phrases.append(rest)
        tokens = [self.encode(s) for s in sources]
        constraint_tokens = None
        if constrained:
            constraint_tokens = [[self.tgt_dict.encode_line(self._encode_text(p), append_eos=False,
                                                            add_if_not_exist=False).long() for p in row]
                                 for row in phrases]
        hypos = self.generate(tokens, beam, verbose, constraint_tokens=constraint_tokens, refused=refused, **kwargs)
        return [self.decode(h[0]["tokens"]) for h in hypos]

    def _encode_text(self, text: str) -> str:
        return self.apply_bpe(self.tokenize(text))

    def generate(self, tokenized_sentences, beam: int = 5, verbose: bool = False, skip_invalid_size_inputs=False,
                 inference_step_args=None, prefix_allowed_tokens_fn=None,
                 constraint_tokens: Optional[Sequence[Sequence[torch.Tensor]]] = None,
                 refused: Optional[Dict[int, str]] = None, **kwargs) -> List[List[Dict[str, torch.Tensor]]]:
        """fairseq's ``generate`` (token ids in, hypotheses out, in order), one result per sentence.

        ``constraint_tokens[i]``: the constraint phrases (target ids) of sentence i;
        ``refused``: {index: reason} of sentences answered with an empty hypothesis, undecoded.
        A sentence longer than the model's source limit is refused here too (with a warning), and
        ``skip_invalid_size_inputs`` is ignored: no sentence is ever left out.
        """
        if torch.is_tensor(tokenized_sentences) and tokenized_sentences.dim() == 1:
            return self.generate(tokenized_sentences.unsqueeze(0), beam=beam, verbose=verbose, **kwargs)[0]
        tokens = [torch.as_tensor(t).long() for t in tokenized_sentences]
        refused = dict(refused or {})
        constraint_tokens = None if constraint_tokens is None else list(constraint_tokens)
        limit = self.max_positions[0]
        for i, t in enumerate(tokens):
            if i not in refused and t.numel() > limit:
                refused[i] = f"{t.numel()} source tokens, more than the limit of {limit} (--max-source-positions)"
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
