"""Every model that fairseq builds, in a process that imports insnet_fairseq, decodes and trains through the linear
layers of :mod:`insnet_fairseq.modules.packed_linear` (oneDNN's products on a CPU), not InsNet's alone.

InsNet's layers are built from them. The models it is compared with (fairseq's ``transformer``, the Levenshtein
Transformer, the Insertion Transformer: the baselines of ``recipes/`` and ``benchmarks/``) are fairseq's, made of
``nn.Linear`` and of fairseq's ``MultiheadAttention``. Left as they are, they would multiply through MKL's products
while InsNet multiplies through oneDNN's, and every comparison of time, at equal wall-clock budgets
(``make demo``) or per sentence (``benchmarks/frontier.py``), would measure the two libraries as well as the
models. So ``fairseq.models.build_model``, through which every task builds its model, is wrapped to apply
:func:`~insnet_fairseq.modules.packed_linear.pack_linears` to what it returns (on a GPU the layers compute
``F.linear``).
"""
from fairseq import models as fairseq_models

from insnet_fairseq.modules.packed_linear import pack_linears


def install() -> None:
    """Idempotently wrap ``fairseq.models.build_model`` (keeping the attributes of other wrappers)."""
    original = fairseq_models.build_model
    if getattr(original, "insnet_packed", False):
        return

    def build_model(cfg, task, from_checkpoint=False):
        return pack_linears(original(cfg, task, from_checkpoint))

    build_model.__dict__.update(original.__dict__)
    build_model.__doc__ = original.__doc__
    build_model.insnet_packed = True
    fairseq_models.build_model = build_model
