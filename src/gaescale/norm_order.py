"""The nodes in decreasing order of embedding norm, block by block: what the length-bounded scans walk (the top-k of
:mod:`gaescale.run.scan`, the filtered ranking of :mod:`gaescale.training.evaluate`), without a sorted copy of the
embeddings. A block's rows are gathered when it is scanned; the scans prune most blocks, so the copy (``4 N d``
bytes, 4 GB at 100M nodes and d = 10) bought nothing but memory."""
from __future__ import annotations

import torch

NORM_CHUNK = 1 << 20  # rows whose norms are computed at once (a float64 copy of them is made)


class NormOrder:
    """``z: (N, d)`` seen in decreasing order of row norm (ties by index), in blocks of ``block`` rows.

    ``order: (N,)`` int64, the row of each sorted position; ``bucket_max: (ceil(N / block),)`` the largest norm of
    each block (its first), in ``dtype``; ``rows(j)``: block ``j``'s rows of ``z`` (gathered, ``(<= block, d)``).
    Memory: ``order`` and, while it is sorted, the norms in ``dtype`` and the sort's own buffers; ``z`` is not
    copied (it may be a memory-mapped array's tensor)."""

    def __init__(self, z: torch.Tensor, block: int, *, dtype: torch.dtype = torch.float32):
        self.z, self.block, self.n = z, int(block), int(z.shape[0])
        norms = torch.cat([z[s:s + NORM_CHUNK].to(dtype).norm(dim=1) for s in range(0, self.n, NORM_CHUNK)]
                          or [torch.zeros(0, dtype=dtype)])
        self.order = torch.argsort(norms, descending=True, stable=True)
        self.bucket_max = norms[self.order[::self.block]]  # a gather: no (N,) sorted copy of the norms

    @property
    def max_norm(self) -> float:
        return float(self.bucket_max[0]) if self.bucket_max.numel() else 0.0

    def __len__(self) -> int:
        return int(self.bucket_max.numel())

    def rows(self, j: int) -> torch.Tensor:
        """``(<= block, d)``: the rows of ``z`` at sorted positions ``[j * block, (j + 1) * block)``."""
        return self.z[self.order[j * self.block:(j + 1) * self.block]]

    def positions(self) -> torch.Tensor:
        """``(N,)`` int64: the sorted position of each row (the inverse of ``order``)."""
        pos = torch.empty_like(self.order)
        pos[self.order] = torch.arange(self.n)
        return pos
