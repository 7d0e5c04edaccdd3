"""Let fairseq's ``insertion_transformer`` train with Stern et al.'s binary-tree loss (``--label-tau``).

fairseq 0.12's ``NegativeDistanceScore`` (``fairseq.models.nat.insertion_transformer.neg_scorer``)
returns numpy float64 scores when ``tau`` is set, so ``_get_ins_targets`` builds a float64 label
tensor and scatters it into a float32 one: every training step fails with ``scatter(): Expected
self.dtype to be equal to src.dtype``, on CPU and GPU alike. Only the default uniform loss
(``tau=None``, a Python float ``1 / L``) worked. The fix returns the same score as a Python float.

Bug: ``insertion_transformer._get_ins_targets(prev, target, pad, unk, V, tau=1.0)`` raises that error
(``tests/unit/test_fairseq_fixes.py``).
"""
from fairseq.models.nat import insertion_transformer


def install():
    cls = type(insertion_transformer.neg_scorer)
    if getattr(cls.__call__, "_insnet_float", False):
        return
    call = cls.__call__

    def __call__(self, i, L, tau):
        return float(call(self, i, L, tau))

    __call__._insnet_float = True
    __call__.__wrapped__ = call
    cls.__call__ = __call__
