"""Keep fairseq from dropping sentences when it batches.

fairseq's ``data_utils.batch_by_size`` (cython ``batch_by_size_vec``, as built by
fairseq-fixed 0.12.3.1) loses the last sentences of a split when the final batch is not a
multiple of ``--required-batch-size-multiple`` (default 8): e.g. 300 test sentences with
``--batch-size 16`` give batches of 16 x 18 + 8, and 4 sentences are never translated or
scored. The wrapper checks that the batches cover every index and appends what is missing
as a last batch, in order. Installed when ``insnet_fairseq`` is imported, so it covers every
model run with ``--user-dir insnet_fairseq``; batches that cover the split are returned as fairseq made them.

Bug: ``data_utils.batch_by_size(np.arange(300), ..., max_sentences=16, required_batch_size_multiple=8,
num_tokens_vec=...)`` returns batches of 296 indices (``tests/unit/test_fairseq_fixes.py``;
``tests/cli/test_plugin_neutral.py`` shows fairseq-generate leaving those sentences out).
"""
import logging

import numpy as np
from fairseq.data import data_utils

logger = logging.getLogger(__name__)


def _covering(batch_by_size):
    def batch_by_size_covering(indices, *args, **kwargs):
        batches = batch_by_size(indices, *args, **kwargs)
        covered = sum(len(b) for b in batches)
        if covered < len(indices):
            seen = np.concatenate(batches) if len(batches) else np.array([], dtype=np.int64)
            missing = np.asarray(indices)[~np.isin(indices, seen)]
            logger.debug(f"fairseq batching left out {len(missing)} sentence(s); added as a last batch")
            batches = list(batches) + [missing.astype(np.int64)]
        return batches

    batch_by_size_covering.__wrapped__ = batch_by_size
    return batch_by_size_covering


def install() -> None:
    if not hasattr(data_utils.batch_by_size, "__wrapped__"):
        data_utils.batch_by_size = _covering(data_utils.batch_by_size)
