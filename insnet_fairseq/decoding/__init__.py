"""Insertion decoding: a small core, the extras beyond it, and the generator that joins them.

The core decodes sequentially, in parallel, by beam search, and by end-of-slot (``--slot-objective gap`` models), with
one options dataclass (:class:`~insnet_fairseq.decoding.core_options.CoreOptions`); it imports none of the extras:

* :mod:`.state`, :mod:`.cache`: the immutable decoder state and its cache;
* :mod:`.step`: one insertion step (:class:`~.step.InsertionSteps`: encode the start, score slots and words, insert);
* :mod:`.word_rules`, :mod:`.stopping`, :mod:`.sampling`: the rules a step and the loop apply;
* :mod:`.greedy`, :mod:`.beam`, :mod:`.gaps`: the loops that drive the steps; :mod:`.output`: the hypotheses.

The extras (:class:`~insnet_fairseq.decoding.extra_options.ExtraOptions`) wrap or drive the core: several candidates
a sentence (:mod:`.candidates`, entering the greedy loop through its :class:`~.greedy.RowPolicy`), their ranking by
minimum Bayes risk (:mod:`.mbr`) or an external judge (:mod:`.rerank`), verification by an autoregressive model
(:mod:`.verify`), templates and constraint phrases (:mod:`.templates`), compiled decoder passes (:mod:`.compiled`),
input screening (:mod:`.inputs`) and the hub interface (:mod:`.hub`).

:class:`~insnet_fairseq.decoding.generator.InsertionGenerator` is fairseq's entry point: it turns a batch and the
options (:class:`~insnet_fairseq.decoding.options.DecodingOptions`, the core's and the extras' under the flags' names)
into what the core takes, runs it, and hands the rows to the extras.
"""
