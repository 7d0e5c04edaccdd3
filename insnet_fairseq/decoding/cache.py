"""Preallocated decoding cache: every per-token tensor of a batch of partial sequences (token ids,
scores, last-layer states, the slot-representation parts, each layer's self-attention keys/values)
lives in a buffer with room for more tokens, and a decoding step writes its new tokens' columns in
place instead of concatenating (a ``torch.cat`` per step copies the whole cache: O(n^2) over a
sentence). Buffers grow by doubling when full, so the copies are O(n) in all.

A :class:`~insnet_fairseq.decoding.state.DecoderState` holds *views* of the first ``size`` columns
and the store; the next step appends after them. A state is never changed by a later step: columns
are only written past the newest state's size, and appending to an older state (a branch) copies the
store first.
"""
from typing import Dict, List, Tuple

from torch import Tensor

# the least room (columns) a row selection keeps past the filled columns (ColumnStore.select)
SELECT_ROOM = 8


def column_dim(name: str) -> int:
    """The column (token) dimension of a cached tensor: 2 for a layer's keys or values ``k0``, ``v0``, ...
    ([B, H, S, Dh]), 1 for every other ([B, S, ...])."""
    return 2 if name[:1] in ("k", "v") and name[1:].isdigit() else 1


def layer_names(n_layers: int) -> List[Tuple[str, str]]:
    """Buffer names of each layer's keys and values: [("k0", "v0"), ("k1", "v1"), ...]."""
    return [(f"k{i}", f"v{i}") for i in range(n_layers)]


class ColumnStore:
    """Named buffers ``[B, ..., C, ...]`` whose column dimension (:func:`column_dim`) has capacity C, of
    which ``filled`` columns are written.

    Example: ``ColumnStore({"tokens": t}, capacity=8)`` with ``t`` [2, 3] holds 3 of 8
    columns; ``store.append(3, {"tokens": u})`` with ``u`` [2, 2] writes columns 3-4 in place and returns
    the store, whose ``views(5)`` are [2, 5].
    """

    def __init__(self, tensors: Dict[str, Tensor], capacity: int):
        self.dims = {name: column_dim(name) for name in tensors}
        size = _columns(tensors, self.dims)
        self.capacity = max(capacity, size)
        self.buffers = {name: _allocate(t, self.dims[name], self.capacity) for name, t in tensors.items()}
        self.filled = size

    def views(self, size: int) -> Dict[str, Tensor]:
        """The first ``size`` columns of every buffer (no copy)."""
        return {name: buf.narrow(self.dims[name], 0, size) for name, buf in self.buffers.items()}

    def reserve(self, size: int, extra: int) -> "ColumnStore":
        """A store that can take ``extra`` columns after the first ``size``: this one, or a copy when it is
        full (capacity doubled) or when columns past ``size`` were already written (appending to an
        older state must not overwrite a newer one's)."""
        if size == self.filled and size + extra <= self.capacity:
            return self
        return type(self)(self.views(size), max(2 * self.capacity, size + extra))

    def write(self, size: int, new: Dict[str, Tensor]) -> None:
        """Write ``new`` (some buffers' next G columns) after the first ``size``, in place, without marking
        them filled: a step writes what it knows before its pass (see :meth:`reserve`), the rest after it
        with :meth:`append`."""
        extra = _columns(new, self.dims)
        for name, t in new.items():
            self.buffers[name].narrow(self.dims[name], size, extra).copy_(t)

    def append(self, size: int, new: Dict[str, Tensor]) -> "ColumnStore":
        """Write ``new`` (every buffer's next G columns) after the first ``size``; returns the store
        written to, whose first ``size + G`` columns are filled (:meth:`views`). Buffers not in ``new`` must
        have been written already (:meth:`write`, :meth:`writer`)."""
        extra = _columns(new, self.dims)
        store = self.reserve(size, extra)
        store.write(size, new)
        store.filled = size + extra
        return store

    def select(self, rows: Tensor, size: int) -> "ColumnStore":
        """A store of the batch rows ``rows``, their first ``size`` columns filled: one indexing copy per buffer
        (not a copy of the views into new buffers: two copies and four ops per buffer; a batch drops finished
        sentences at most steps) of the first ``min(capacity, max(2 * size, size + SELECT_ROOM))`` columns, the
        filled ones and room to grow (a buffer sized for the longest output is mostly empty early on, and copying
        its empty columns at every drop costs a batch of 64 a visible share of its decoding time).
        Example: capacity 80, size 10 -> the new store holds 20 columns, 10 filled."""
        capacity = min(self.capacity, max(2 * size, size + SELECT_ROOM))
        buffers = {name: buf.narrow(self.dims[name], 0, capacity)[rows] for name, buf in self.buffers.items()}
        return self._of_buffers(buffers, self.dims, capacity, size)

    @classmethod
    def _of_buffers(cls, buffers: Dict[str, Tensor], dims: Dict[str, int], capacity: int, filled: int) -> "ColumnStore":
        """A store around ``buffers`` as they are (already of ``capacity`` columns, ``filled`` written): no copy."""
        store = cls.__new__(cls)
        store.dims, store.buffers, store.capacity, store.filled = dims, buffers, capacity, filled
        return store

    def writer(self, key: str, value: str, size: int) -> "KVWriter":
        """Appends one layer's new keys/values in place during the step's pass (see :class:`KVWriter`)."""
        return KVWriter(self, key, value, size)


class KVWriter:
    """A layer's cache slot for :class:`~insnet_fairseq.modules.attention.OffsetSelfAttention`:
    ``extend(k, v)`` ([B, H, G, Dh] new keys/values) writes them after the ``size`` cached columns of the
    store's buffers (which :meth:`ColumnStore.reserve` made room for) and returns the views of all
    ``size + G`` columns [B, H, size + G, Dh], as ``torch.cat([past, new], 2)`` would."""

    def __init__(self, store: ColumnStore, key: str, value: str, size: int):
        self.store, self.key, self.value, self.size = store, key, value, size

    def extend(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        G = k.size(2)
        out = []
        for name, t in ((self.key, k), (self.value, v)):
            buf = self.store.buffers[name]
            buf[:, :, self.size : self.size + G].copy_(t)
            out.append(buf[:, :, : self.size + G])
        return out[0], out[1]


def _columns(tensors: Dict[str, Tensor], dims: Dict[str, int]) -> int:
    sizes = {t.size(dims[name]) for name, t in tensors.items()}
    if len(sizes) != 1:
        raise ValueError(f"every tensor of a column store needs the same number of columns, got {sorted(sizes)}")
    return sizes.pop()


def _allocate(t: Tensor, dim: int, capacity: int) -> Tensor:
    shape = list(t.shape)
    shape[dim] = capacity
    buf = t.new_empty(shape)
    buf.narrow(dim, 0, t.size(dim)).copy_(t)
    return buf

