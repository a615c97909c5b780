"""Uniform pairs drawn as shifts of a random node order: full batch's sampled all-pairs term.

The sampled estimate of the all-pairs term ``D = sum_ij l0(s_ij)`` (:func:`gaescale.losses.dense_term`) needs ``m``
ordered pairs of which every one is equally likely. :class:`gaescale.sparse.UniformPairs` draws them independently:
their second nodes are ``m`` random rows of ``z``, read at random three times a step (the sampled product and the
gradient's two products) and their transpose sorted or scattered anew. Here, with ``sigma`` a random order of the
nodes (drawn once) and ``K + 1`` shifts ``r_k`` drawn uniformly from ``[0, N)`` at every draw, the pairs are

    (sigma(t), sigma(t + r_k mod N))   for every position t and k < K = m // N,
    (sigma(t), sigma(t + r_K mod N))   for the R = m mod N positions t of a cyclic window at a uniform offset,

``m = K N + R`` pairs. A pair of positions is drawn by one shift with probability ``1 / N`` and by the window with
probability ``R / N^2``, so every ordered pair of nodes has the same probability and ``N^2 / m`` times the draw's sum
of ``l0`` is unbiased, as for independent pairs. In the permuted order the second nodes of position ``t`` lie on ``K``
diagonals: the products read ``z``'s rows in ``K + 1`` sequential streams and the transposed pattern (the second
nodes' rows ``t - r_k``) is written down, not sorted. Every node is the first node of ``K`` or ``K + 1`` pairs and the
second of as many (independent draws give it a Poisson count): a stratified draw.
"""
from __future__ import annotations

import torch

from .sparse import PairIndex, index_dtype

ORDER_SEED = 0x5EED_0F_5  # mixed into the run's seed for the node order, drawn apart from the run's other draws


class ShiftedPairs:
    """Draws :class:`PermutedPairs` into the same arrays every time (as :class:`gaescale.sparse.UniformPairs`): each
    :meth:`draw` overwrites the one before, for a loop done with a draw before it draws again (full batch's epochs).
    The node order ``sigma`` is drawn at the first draw, from the seed of its generator (:data:`ORDER_SEED` mixed in),
    and kept: a function of the run's seed, so a resumed run draws the pairs an unbroken one draws. Memory, kept
    between draws: the ``(m,)`` second nodes, their transpose's ``(m,)`` first nodes and order (12 bytes a pair), two
    ``(N + 1,)`` indptrs and three ``(N,)`` arrays (the order, its inverse, the positions), of the index dtype.
    ``transpose=False``: no transpose is written or kept (4 bytes a pair instead of 12), for a caller that scores a
    :meth:`PermutedPairs.share` of each draw, whose column products do without it; the same pairs."""

    def __init__(self, *, transpose: bool = True):
        self.transpose = bool(transpose)
        self._key: tuple[int, int] | None = None
        self._arrays: dict[str, torch.Tensor] = {}

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays kept between draws."""
        return sum(t.untyped_storage().nbytes() for t in self._arrays.values())

    def draw(self, num_nodes: int, num_pairs: int, generator: torch.Generator | None = None) -> PermutedPairs:
        """``num_pairs`` pairs over ``num_nodes`` nodes (module docstring), shifts drawn from ``generator``."""
        n, m = int(num_nodes), int(num_pairs)
        self._prepare(n, m, generator)
        k, extra = divmod(m, n)
        shifts = torch.randint(0, n, (k + (extra > 0),), generator=generator).tolist()
        start = int(torch.randint(0, n, (1,), generator=generator)) if extra else 0
        return self.at(n, m, shifts, start)

    def at(self, num_nodes: int, num_pairs: int, shifts: list[int], start: int = 0) -> PermutedPairs:
        """The draw of ``num_pairs = K N + R`` pairs with the given ``shifts`` (``K`` full ones, then the window's
        where ``R > 0``) and window ``start``; :meth:`draw` draws them uniformly. The node order is kept (drawn
        unseeded if no draw came before)."""
        n, m = int(num_nodes), int(num_pairs)
        k, extra = divmod(m, n)
        if len(shifts) != k + (extra > 0) or not all(0 <= r < n for r in shifts) or not 0 <= start < n:
            raise ValueError(f"{m} pairs over {n} nodes take {k + (extra > 0)} shifts in [0, {n}) and a start in "
                             f"[0, {n}); got shifts {shifts} and start {start}")
        a = self._prepare(n, m, None)
        _row_pointers(a["indptr"], n, k, start, extra)
        _diagonals(a["indptr"], a["cols"], a["positions"], n, shifts, start, extra)
        if not self.transpose:
            return PermutedPairs(a["perm"], a["inverse"], PairIndex(a["indptr"], a["cols"], n))
        back = [(n - r) % n for r in shifts]
        start_t = (start + shifts[-1]) % n if extra else 0
        _row_pointers(a["indptr_t"], n, k, start_t, extra)
        _diagonals(a["indptr_t"], a["rows_t"], a["positions"], n, back, start_t, extra)
        _diagonals(a["indptr_t"], a["order_t"], a["indptr"][:-1], n, back, start_t, extra, add_shift_index=True)
        index = PairIndex(a["indptr"], a["cols"], n, transpose=(a["indptr_t"], a["rows_t"], a["order_t"]))
        return PermutedPairs(a["perm"], a["inverse"], index)

    def _prepare(self, n: int, m: int, generator: torch.Generator | None) -> dict[str, torch.Tensor]:
        """The arrays for ``n`` nodes and ``m`` pairs: the kept ones where they fit, the node order drawn once."""
        if self._key == (n, m):
            return self._arrays
        dtype = index_dtype(m, n)
        if self._key is None or self._key[0] != n:  # the order: a function of the run's seed, the same on resuming
            order = None if generator is None else torch.Generator().manual_seed(generator.initial_seed() ^ ORDER_SEED)
            perm = torch.randperm(n, generator=order).to(dtype)
            inverse = torch.empty_like(perm)
            inverse[perm.long()] = torch.arange(n, dtype=dtype)
            self._arrays = {"perm": perm, "inverse": inverse, "positions": torch.arange(n, dtype=dtype)}
        a = {key: self._arrays[key].to(dtype) for key in ("perm", "inverse", "positions")}
        a.update(indptr=torch.empty(n + 1, dtype=dtype), cols=torch.empty(m, dtype=dtype))
        if self.transpose:
            a.update(indptr_t=torch.empty(n + 1, dtype=dtype), rows_t=torch.empty(m, dtype=dtype),
                     order_t=torch.empty(m, dtype=dtype))
        self._key, self._arrays = (n, m), a
        return a


class PermutedPairs:
    """A draw of :class:`ShiftedPairs`: the pairs ``(perm[i], perm[j])`` for the pairs ``(i, j)`` of ``index`` (a
    :class:`gaescale.sparse.PairIndex` over positions in the order ``perm: (N,)``, with its transpose kept);
    ``inverse: (N,)`` is ``perm``'s inverse. It scores pairs as a :class:`gaescale.sparse.PairIndex` does: the rows of
    ``z`` are put in ``perm``'s order once (one gather of ``N`` rows, whose gradient is the gather by ``inverse``) and
    the index scores the permuted rows."""

    def __init__(self, perm: torch.Tensor, inverse: torch.Tensor, index: PairIndex):
        self.perm, self.inverse, self.index = perm, inverse, index

    @property
    def num_pairs(self) -> int:
        return self.index.num_pairs

    def to(self, device) -> PermutedPairs:
        """The same pairs on ``device`` (these where they are there already)."""
        if self.perm.device == torch.device(device):
            return self
        return PermutedPairs(self.perm.to(device), self.inverse.to(device), self.index.to(device))

    def permute(self, z: torch.Tensor) -> torch.Tensor:
        """``z[perm]: (N, d)`` for ``z: (N, d)``, differentiable in ``z``."""
        return _Permute.apply(z, self.perm, self.inverse)

    def logits(self, z: torch.Tensor, metric: torch.Tensor | None = None, *,
               scaled: torch.Tensor | None = None) -> torch.Tensor:
        """``s: (m,)``, as :meth:`gaescale.sparse.PairIndex.logits` for ``z: (N, d)``. ``scaled = z M`` from the
        caller is not gathered into the node order: the permuted rows are multiplied by ``metric`` again instead (an
        elementwise pass over ``(N, d)``, a third of a gather of ``N`` random rows), the same values."""
        return self.index.logits(self.permute(z), metric)

    def cross_logits(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``s: (m,)``, ``s_k = u[i_k] . v[j_k]``, as :meth:`gaescale.sparse.PairIndex.cross_logits`."""
        return self.index.cross_logits(self.permute(u), self.permute(v))

    def share(self, start: int, stop: int) -> PermutedPairs:
        """The pairs at positions ``[start, stop)`` of this draw (in its CSR order over positions): a view
        (:meth:`gaescale.sparse.PairIndex.slice`), without the kept transpose; the shares of consecutive ranges add up
        to the draw."""
        return PermutedPairs(self.perm, self.inverse, self.index.slice(start, stop))

    def pairs(self) -> torch.Tensor:
        """``(2, m)`` int64, the pairs of nodes."""
        return self.perm.long()[self.index.pairs()]


class _Permute(torch.autograd.Function):
    """``z[perm]`` for a permutation ``perm``; its gradient is the gather of the output's by ``inverse`` (autograd's
    own for an index is an accumulating scatter)."""

    @staticmethod
    def forward(ctx, z, perm, inverse):
        ctx.inverse = inverse
        return z.index_select(0, perm)

    @staticmethod
    def backward(ctx, grad):
        return grad.index_select(0, ctx.inverse), None, None


def _row_pointers(indptr: torch.Tensor, n: int, k: int, start: int, extra: int) -> None:
    """Writes ``indptr: (n + 1,)`` of the pattern whose rows hold ``k`` entries, ``k + 1`` in the cyclic window
    ``[start, start + extra)`` (:func:`_diagonals`)."""
    counts = indptr[1:]
    counts.fill_(k)
    for lo, hi in _window(n, start, extra):
        counts[lo:hi] += 1
    indptr[0] = 0
    counts.cumsum_(0)


def _diagonals(indptr: torch.Tensor, out: torch.Tensor, source: torch.Tensor, n: int, shifts: list[int], start: int,
               extra: int, *, add_shift_index: bool = False) -> None:
    """The CSR pattern whose row ``t`` holds the entries ``k < K`` at ``(t + shifts[k]) mod n`` and, for ``t`` in the
    cyclic window ``[start, start + extra)``, one more (``k = K``) at ``(t + shifts[K]) mod n``, entries in the order
    of ``k``: ``out: (m,)`` written with ``source[(t + shifts[k]) mod n]`` (``source: (n,)``; plus ``k`` with
    ``add_shift_index``) at the rows of ``indptr: (n + 1,)`` (:func:`_row_pointers`' for the same window)."""
    k = len(shifts) - (extra > 0)
    for lo, hi, width in _segments(n, k, start, extra):
        base = int(indptr[lo])
        block = out[base:base + (hi - lo) * width].view(hi - lo, width)
        if width > MANY_SHIFTS:  # many shifts of few nodes (m >> N): one gather, not a loop over the shifts
            t = torch.arange(lo, hi)[:, None] + torch.tensor(shifts[:width])
            block.copy_(source[t % n] + (torch.arange(width) if add_shift_index else 0))
            continue
        for j in range(width):
            _shifted_copy(block[:, j], source, (lo + shifts[j]) % n)
            if add_shift_index and j:
                block[:, j] += j


MANY_SHIFTS = 32  # above this many shifts a row, _diagonals gathers an (n, K) block at once (an (n, K) int64 index)


def _window(n: int, start: int, extra: int) -> list[tuple[int, int]]:
    """The cyclic window ``[start, start + extra)`` of ``[0, n)`` as at most two ranges."""
    end = start + extra
    return [(start, min(end, n))] + ([(0, end - n)] if end > n else []) if extra else []


def _segments(n: int, k: int, start: int, extra: int) -> list[tuple[int, int, int]]:
    """``[0, n)`` cut into ranges ``(lo, hi, width)`` of rows with ``width > 0`` entries each: ``k + 1`` in the
    window, ``k`` outside it."""
    inside = _window(n, start, extra)
    cuts = sorted({0, n, *(c for r in inside for c in r)})
    ranges = [(lo, hi, k + any(a <= lo < b for a, b in inside)) for lo, hi in zip(cuts[:-1], cuts[1:]) if hi > lo]
    return [r for r in ranges if r[2]]


def _shifted_copy(dst: torch.Tensor, source: torch.Tensor, first: int) -> None:
    """``dst[i] = source[(first + i) mod n]`` for ``i < len(dst) <= n``: at most two slice copies."""
    n, length = source.numel(), dst.numel()
    head = min(length, n - first)
    dst[:head].copy_(source[first:first + head])
    dst[head:].copy_(source[:length - head])
