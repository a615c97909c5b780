"""The structural part of the logit: learnt weights of sparse pair features of the training graph.

With ``--structure on`` (the default where it applies) the logit of a pair is

    s_uv = z_u . z_v + b_u + b_v + w . phi(u, v),   phi = log(1 + [CN, AA, RA](u, v)),   w = softplus(theta) >= 0

where CN, AA and RA are the common neighbours, Adamic-Adar and resource allocation of ``(u, v)`` on the training
graph (``sum over w in N(u) & N(v)`` of 1, ``1 / log k(w)`` and ``1 / k(w)``). ``phi`` is computed on the pairs
only (a chunk of pairs costs its endpoints' degrees; never N x N) and is 0 for every pair without a common
neighbour. So, since ``w . phi >= 0``, a ranking or top-k over all N candidates stays exact without scoring
N x N: the embedding scan over every node (pruned by length, :mod:`gaescale.training.evaluate`,
:mod:`gaescale.run.predict`), corrected on the query's two-hop candidates, the only nodes whose score the
structural part raises.

The weights are trained with the embeddings under the loss's one identity (:class:`TwoHop`,
:meth:`gaescale.models.GAE.loss`): the training edges' terms on the whole logit, and the all-pairs term corrected
on the two-hop pairs, where ``phi`` is not 0 (all of them, or an unbiased importance-weighted sample of wedges).
After training, their scale is calibrated on the validation ranking (:func:`calibrate`).
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from .graph import Graph, adjacency_rows, neighbour_pairs, sorted_unique
from .sparse import PairIndex

FEATURES = ("common_neighbours", "adamic_adar", "resource_allocation")
CANDIDATE_BUDGET = 1 << 22  # two-hop paths a batch of queries may expand at once (about 100 MiB of products)
MEMO_BYTES = 1 << 28  # pair features remembered for pair sets asked again (256 MiB at most)
# pair features (P, 3) are stored column-major, each feature's P values contiguous: the loss's w . phi and its gradient
# phi^T g then read them in long runs (at 3.9M pairs, 2x and 15x faster than row-major; BENCHMARKS.md)
PHI_ORDER = "F"


class PairFeatures:
    """Common neighbours, Adamic-Adar and resource allocation of node pairs on ``graph`` (the training graph:
    held-out edges must not be in it), computed on the pairs only, from the CSR rows of their endpoints
    (:func:`gaescale.graph.adjacency_rows`): no matrix or ``(N,)`` array beyond the graph's own degrees, so a
    memory-mapped graph of a billion edges costs only the rows a batch of pairs reads."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.num_nodes = graph.num_nodes
        self.degree = graph.degree
        # ordered two-hop paths u - w - v (v = u included) from all nodes: sum over w of k(w)^2
        self.total_paths = float(np.dot(self.degree, self.degree))  # int64: no (N,) temporary
        self._memo: dict[bytes, object] = {}  # results for pair sets asked again (validation, every epoch)
        self._memo_bytes = 0

    def _remembered(self, key: bytes, compute):
        """``compute()``, kept under ``key`` while the kept results stay within :data:`MEMO_BYTES`."""
        if key in self._memo:
            return self._memo[key]
        value = compute()
        size = sum(a.nbytes for a in (value if isinstance(value, tuple) else (value,)))
        if self._memo_bytes + size <= MEMO_BYTES:
            self._memo[key], self._memo_bytes = value, self._memo_bytes + size
        return value

    def paths_of(self, u: np.ndarray) -> np.ndarray:
        """``(b,)`` float64 two-hop paths from each of ``u`` (:func:`two_hop_paths`)."""
        return two_hop_paths(self.graph, u)

    def raw(self, u: np.ndarray, v: np.ndarray, *, remember: bool = True) -> np.ndarray:
        """``(P, 3)`` float64 ``[CN, AA, RA]`` of the pairs ``(u[i], v[i])`` (with ``remember``, kept for pair sets
        asked again, as validation asks every epoch: do not modify the result)."""
        u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
        if not remember:
            return self._raw(u, v)
        return self._remembered(_key(b"raw", u, v), lambda: self._raw(u, v))

    def _raw(self, u: np.ndarray, v: np.ndarray, chunk: int = 1 << 15) -> np.ndarray:
        out = np.zeros((u.size, 3), np.float64)
        for s in range(0, u.size, chunk):
            # the common neighbours' pattern only: int8 values (the float64 ones took 8 bytes an entry, twice)
            common = adjacency_rows(self.graph, u[s:s + chunk], np.int8).multiply(
                adjacency_rows(self.graph, v[s:s + chunk], np.int8)).tocsr()
            rows = np.repeat(np.arange(common.shape[0]), np.diff(common.indptr))
            k = self.degree[common.indices]
            b = common.shape[0]
            out[s:s + b, 0] = np.bincount(rows, minlength=b)
            out[s:s + b, 1] = np.bincount(rows, weights=inv_log_degree(k), minlength=b)
            out[s:s + b, 2] = np.bincount(rows, weights=_resource(k), minlength=b)
        return out

    def pairs(self, u: np.ndarray, v: np.ndarray, *, remember: bool = True, chunk: int = 1 << 20) -> torch.Tensor:
        """``phi: (P, 3)`` float32, ``log(1 + [CN, AA, RA])`` of the pairs, column-major (:data:`PHI_ORDER`); 0 for a
        pair ``(i, i)``. Without ``remember``, ``chunk`` pairs at a time: 12 bytes a pair beside the result, not the 48
        of float64 features."""
        u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
        if remember:  # a new array: a remembered one stays as it was
            phi = np.log1p(self.raw(u, v)).astype(np.float32, order=PHI_ORDER)
        else:
            phi = np.empty((u.size, len(FEATURES)), np.float32, order=PHI_ORDER)
            for s in range(0, u.size, chunk):
                phi[s:s + chunk] = np.log1p(self._raw(u[s:s + chunk], v[s:s + chunk]))
        phi[u == v] = 0.0
        return torch.from_numpy(phi)

    def query_batches(self, queries: np.ndarray, budget: int = CANDIDATE_BUDGET):
        """Consecutive slices of ``queries`` whose two-hop paths add up to at most ``budget`` (at least one query
        each): the batches :meth:`candidates` expands within bounded memory, however large the hubs."""
        return batches_by_paths(self.paths_of(queries), np.arange(np.size(queries)), budget)

    def candidates(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The two-hop candidates of queries ``u: (b,)``: ``(rows, nodes)``, every node ``nodes[i]`` other than
        ``u[rows[i]]`` with a common neighbour, sorted by row: the only nodes whose structural part is not 0.
        Memory: the queries' two-hop paths (batch them with :meth:`query_batches`)."""
        u = np.asarray(u, np.int64)
        return self._remembered(_key(b"candidates", u), lambda: self._candidates(u))

    def _candidates(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows, nodes, _ = self._candidate_features(u, features=False)
        return rows, nodes

    def candidate_features(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, nodes, raw)``: :meth:`candidates` with their ``(P, 3)`` float64 ``[CN, AA, RA]``, read from the
        queries' two-hop products (:func:`two_hop_products`: the queries' two-hop paths once, where :meth:`raw` of the
        same pairs reads both rows of every pair, a query's row once per candidate). Remembered as :meth:`raw`."""
        u = np.asarray(u, np.int64)
        return self._remembered(_key(b"candidate-features", u), lambda: self._candidate_features(u))

    def _candidate_features(self, u: np.ndarray, features: bool = True):
        """One product at a time: about 60 bytes a candidate at the peak (rows, nodes, the features, one product)."""
        reach = two_hop_products(self.graph, u, (_ones, _adamic_adar, _resource) if features else (_ones,))
        first = next(reach)
        rows = np.repeat(np.arange(u.size, dtype=np.int64), np.diff(first.indptr))
        nodes = first.indices.astype(np.int64)
        keep = nodes != u[rows]
        rows, nodes = rows[keep], nodes[keep]
        if not features:
            return rows, nodes, None
        raw = np.empty((rows.size, len(FEATURES)), np.float64)
        raw[:, 0] = first.data[keep]
        del first
        for j, product in enumerate(reach, 1):
            raw[:, j] = product.data[keep]
        return rows, nodes, raw


def _ones(degree: np.ndarray) -> np.ndarray:
    return np.ones(degree.size)


def _adamic_adar(degree: np.ndarray) -> np.ndarray:
    """:func:`inv_log_degree`, but 1 where ``k <= 1``: such a neighbour of ``u`` is a common neighbour of ``(u, u)``
    only, dropped, and a weight > 0 everywhere keeps every product's pattern that of the common neighbours."""
    return np.where(degree > 1, inv_log_degree(degree), 1.0)


def _resource(degree: np.ndarray) -> np.ndarray:
    return 1.0 / np.maximum(np.asarray(degree, np.float64), 1.0)


def two_hop_products(graph: Graph, u: np.ndarray, weights) -> Iterator[sp.csr_matrix]:
    """For each function ``weight`` of ``weights`` in turn, the ``(b, N)`` CSR with sorted indices ``A[u]
    diag(weight(k)) A``: the rows of the queries ``u: (b,)`` in the product of the 0/1 adjacency with itself, each
    common neighbour ``w`` counting ``weight(k(w))``. Reads the rows of ``u`` and of their neighbours once for all (a
    batch costs its two-hop paths). Weights > 0 give every product the same pattern, entry for entry."""
    mine = adjacency_rows(graph, u)
    mids = sorted_unique(mine.indices.astype(np.int64))
    cols = np.searchsorted(mids, mine.indices)
    right = adjacency_rows(graph, mids)
    for weight in weights:
        left = sp.csr_matrix((weight(graph.degree[mids])[cols], cols, mine.indptr), shape=(mine.shape[0], mids.size))
        reach = (left @ right).tocsr()
        reach.sort_indices()
        yield reach


def two_hop_rows(graph: Graph, u: np.ndarray, weight=None) -> sp.csr_matrix:
    """``(b, N)`` CSR with sorted indices: ``A[u] diag(weight(k)) A`` (:func:`two_hop_products`; ``weight``: a
    function of the degrees, 1 when None), so the common neighbours or, with :func:`inv_log_degree`, Adamic-Adar of
    ``u`` and every node."""
    return next(two_hop_products(graph, u, (_ones if weight is None else weight,)))


def inv_log_degree(degree: np.ndarray) -> np.ndarray:
    """``(N,)`` float64 Adamic-Adar's weight ``1 / log k(w)`` of each node, 0 where ``k(w) <= 1`` (a common
    neighbour has degree >= 2, so log k(w) > 0 wherever the weight is used)."""
    degree = np.asarray(degree, np.float64)
    return np.where(degree > 1, 1.0 / np.log(np.maximum(degree, 2.0)), 0.0)


def two_hop_paths(graph: Graph, u: np.ndarray) -> np.ndarray:
    """``(b,)`` float64 the two-hop paths from each of the nodes ``u``: the sum of its neighbours' degrees, a bound on
    its two-hop neighbourhood (what its row of ``A @ A`` stores); reads the rows of ``u`` only."""
    rows, nodes = neighbour_pairs(graph, np.asarray(u, np.int64))
    return np.bincount(rows, weights=graph.degree[nodes], minlength=np.size(u)).astype(np.float64)


def batches_by_paths(paths: np.ndarray, queries: np.ndarray, budget: int = CANDIDATE_BUDGET, batch: int | None = None):
    """Consecutive slices of ``queries`` whose ``paths`` (:func:`two_hop_paths`) add up to at most ``budget``, and of
    at most ``batch`` queries when given (at least one query each)."""
    queries = np.asarray(queries, np.int64)
    cost = np.cumsum(paths[queries] + 1)
    start = 0
    while start < queries.size:
        base = cost[start - 1] if start else 0.0
        stop = max(start + 1, int(np.searchsorted(cost, base + budget, side="right")))
        if batch is not None:
            stop = min(stop, start + batch)
        yield slice(start, stop)
        start = stop


def _key(kind: bytes, *arrays: np.ndarray) -> bytes:
    import hashlib
    h = hashlib.blake2b(kind, digest_size=16)
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8))
        h.update(b"|")
    return h.digest()


SCALES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)  # calibrate()'s grid


class StructuralPart(nn.Module):
    """``w . phi`` with ``w = softplus(theta) >= 0`` (one weight per feature of :data:`FEATURES`, initially
    ``init``). ``lr_scale``: its learning rate is this many times the encoder's (three scalars that must grow to
    the scale of the embeddings' logits within the epochs a run trains)."""

    lr_scale = 10.0

    def __init__(self, num_features: int = len(FEATURES), init: float = 0.5):
        super().__init__()
        self.theta = nn.Parameter(torch.full((num_features,), math.log(math.expm1(init))))

    @property
    def weights(self) -> torch.Tensor:
        return nn.functional.softplus(self.theta)

    def forward(self, phi: torch.Tensor) -> torch.Tensor:
        """``phi: (P, F)`` -> ``(P,)``, each ``>= 0``."""
        return phi.to(self.theta.dtype) @ self.weights

    def scale_(self, factor: float) -> None:
        """Multiply the weights by ``factor > 0`` (``theta`` set to the inverse softplus of the product)."""
        with torch.no_grad():
            w = (self.weights.double() * factor).clamp(min=1e-12)
            self.theta.copy_(w + torch.log(-torch.expm1(-w)))  # softplus^-1(w) = w + log(1 - exp(-w))


RANKING_KEYS = ("val_mrr", "val_hits@10", "val_hits@100")  # what calibrate() weighs, by their geometric mean


def ranking_score(r: dict) -> float:
    """The geometric mean of the validation ranking's MRR, Hits@10 and Hits@100 (those present): the top of the
    list and its depth alike, each relative to its own scale."""
    vals = [max(float(r[k]), 1e-12) for k in RANKING_KEYS if r.get(k) is not None]
    return float(np.exp(np.mean(np.log(vals)))) if vals else 0.0


def calibrate(part: StructuralPart, rank, features: PairFeatures, scales=SCALES) -> tuple[float, float, float]:
    """Scale ``part``'s weights (in place) by the factor of ``scales`` whose validation ranking is best by
    :func:`ranking_score`: ``rank(structure) -> {"val_mrr", "val_hits@10", "val_hits@100"}`` (the trained
    embeddings fixed; validation edges only), the smallest factor on a tie. Returns ``(factor, score at 1, score
    at factor)``. Training weighs the structural part only as much as the balanced loss wants; where the ranking
    of the two-hop candidates decides (a graph whose links close triangles), the validation ranking asks for more
    of it (measured: hk-50k, validation filtered MRR 0.037 at 1, 0.055 at 32 against Adamic-Adar's 0.054; the
    770,000-node demo graph, Hits@100 0.431 at 1 and 0.487 at 2 against 0.44, MRR 0.077 and 0.075)."""
    w = part.weights.detach()
    scores = [ranking_score(rank(StructuralScores(features, w * f))) for f in scales]
    best = int(np.argmax(scores))
    part.scale_(scales[best])
    return scales[best], scores[0], scores[best]


class TwoHop:
    """What the loss needs of the training graph for the structural part (:meth:`gaescale.models.GAE.loss`).

    - ``phi`` of the training pairs, computed once per :class:`gaescale.sparse.PairIndex` (:meth:`phi_of`).
    - ``pool``: the two-hop pairs ``T`` (ordered, ``u != v``, a common neighbour), where the structural part is not
      0, so that the all-pairs term is the whole logits' (``reconstruction_loss``'s ``dense_offset``): all of ``T``
      with weight 1 where it has at most ``pool_size`` pairs, else ``pool_size`` ordered wedges ``u - c - v`` drawn
      uniformly (from ``seed``, once), the pair of ``CN(u, v)`` wedges weighing ``W / (pool_size CN(u, v))``, ``W``
      the graph's ordered wedges: an unbiased estimate of the sum over ``T``.
    - ``weight``: the weight of the hard-negative term, ``weight`` times the mean ``l0`` of the pool's non-edges'
      whole logits (0: none, and ``negatives`` is None: 20 bytes a pair not held)."""

    def __init__(self, graph: Graph, *, pool_size: int, weight: float = 0.0, seed: int = 0):
        self.features = PairFeatures(graph)
        self.weight = float(weight)
        self._pairs_phi: tuple[object, torch.Tensor] | None = None
        u, v, importance, raw = two_hop_pool(graph, self.features, pool_size, np.random.default_rng(seed))
        order = np.argsort(u, kind="stable")  # CSR order: the pair indices keep it (their logits are sparse products)
        u, v, importance, raw = u[order], v[order], importance[order], raw[order]
        n = graph.num_nodes
        # from the two rows, not a stacked (2, P) copy whose first row would stay behind the columns (8 bytes a pair)
        self.pool = PairIndex.from_rows(torch.from_numpy(u), torch.from_numpy(v), n).keep_transpose()
        self.pool_phi = torch.from_numpy(np.log1p(raw).astype(np.float32, order=PHI_ORDER))
        self.pool_weight = torch.from_numpy(importance.astype(np.float32))  # the loss's dtype: what it reads
        self.negatives: PairIndex | None = None  # the hard-negative term's pairs, only where it has a weight
        self.negatives_phi: torch.Tensor | None = None
        if self.weight:
            linked = graph.has_edges(u, v) if u.size else np.zeros(0, bool)
            self.negatives = PairIndex.from_rows(torch.from_numpy(u[~linked]), torch.from_numpy(v[~linked]), n)
            self.negatives_phi = self.pool_phi[torch.from_numpy(~linked)]

    def phi_of(self, pairs) -> torch.Tensor:
        """``phi: (E, 3)`` of the pairs of a :class:`gaescale.sparse.PairIndex`, in its order (cached for the last
        index asked, which full batch passes every epoch)."""
        if self._pairs_phi is None or self._pairs_phi[0] is not pairs:
            uv = pairs.pairs().cpu().numpy()
            self._pairs_phi = (pairs, self.features.pairs(uv[0], uv[1], remember=False))
        return self._pairs_phi[1]


class SampledTwoHop:
    """What a mini-batch loss needs of the training graph for the structural part (:class:`TwoHop`'s counterpart for
    :class:`gaescale.training.strategies.NeighborLinks`): the pair features of the batch's pairs, computed on them
    (``features``), and every step's own draw of two-hop pairs (:meth:`draw`), so that nothing is held per edge or
    per node beyond the graph (a memory-mapped graph of a billion edges)."""

    weight = 0.0  # no hard-negative term here (full batch only)

    def __init__(self, graph: Graph):
        self.graph = graph
        self.features = PairFeatures(graph)

    def phi(self, pairs: np.ndarray) -> torch.Tensor:
        """``phi: (P, 3)`` float32 of ``pairs: (2, P)`` (0 for a pair ``(i, i)``)."""
        return self.features.pairs(pairs[0], pairs[1], remember=False)

    def draw(self, count: int, generator: torch.Generator, ranges=None
             ) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """``(pairs: (2, P), phi: (P, 3) float32, weight: (P,) float64)``, ``P <= count``: two-hop pairs from
        :func:`draw_wedges` (or, with ``ranges``, :func:`draw_block_wedges`: those of a block of a partitioned
        graph), each weighing its wedge's inverse probability over ``CN(u, v)``: ``sum weight f(u, v)`` estimates
        ``sum over T of f`` without bias (``T`` the ordered two-hop pairs, of the block with ``ranges``)."""
        if ranges is None:
            u, v, inverse = draw_wedges(self.graph, count, generator)
        else:
            u, v, inverse = draw_block_wedges(self.graph, count, generator, ranges)
        raw = self.features.raw(u, v, remember=False)
        phi = torch.from_numpy(np.log1p(raw).astype(np.float32, order=PHI_ORDER))
        return np.stack([u, v]), phi, torch.from_numpy(inverse / np.maximum(raw[:, 0], 1.0))


def sampled_two_hop(model, loss_kwargs: dict) -> SampledTwoHop | None:
    """The loss's ``two_hop`` draws (:class:`SampledTwoHop`) of a mini-batch strategy for ``model``, or None: a model
    with a structural part needs them, and draws need a model with one (refused, not ignored)."""
    two_hop = loss_kwargs.get("two_hop")
    if (two_hop is None) != (getattr(model, "structure", None) is None):
        raise ValueError("a GAE with a structural part needs two_hop= (gaescale.structure.SampledTwoHop) in its "
                         "loss, and a two_hop= needs a GAE with one")
    return two_hop


def draw_wedges(graph: Graph, count: int, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(u, v, inverse)``: up to ``count`` ordered wedges ``u - c - v`` (``u != v``, both neighbours of ``c``). A
    uniform slot of the CSR names the centre ``c`` and ``u`` (probability ``1 / S``, ``S`` slots), then ``v`` is
    another neighbour of ``c`` drawn uniformly (``1 / (k(c) - 1)``); a slot at a centre of degree 1 names no wedge
    and is dropped. ``inverse = S (k(c) - 1) / count``, the inverse probability of the wedge over the ``count``
    draws: ``sum inverse f(u, v) / CN(u, v)`` estimates ``sum over T of f`` without bias, whatever the degrees. Reads
    ``2 count`` entries of the CSR, never the whole of it (no per-node table)."""
    slots = int(graph.indices.size)
    if not slots:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
    r = torch.randint(0, slots, (count,), generator=generator).numpy()
    other = torch.rand(count, generator=generator, dtype=torch.float64).numpy()
    c = np.searchsorted(graph.indptr, r, side="right") - 1
    k = np.asarray(graph.degree[c], np.int64)
    keep = k > 1
    r, c, k, other = r[keep], c[keep], k[keep], other[keep]
    start = np.asarray(graph.indptr[c], np.int64)
    i = r - start
    j = (i + 1 + np.minimum((other * (k - 1)).astype(np.int64), k - 2)) % k  # any neighbour but the i-th
    u = np.asarray(graph.indices[r], np.int64)
    v = np.asarray(graph.indices[start + j], np.int64)
    return u, v, slots * (k - 1).astype(np.float64) / count


def draw_block_wedges(graph: Graph, count: int, generator: torch.Generator, ranges
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(u, v, inverse)``: :func:`draw_wedges` within a block of a partitioned graph, the ordered pairs ``(u, v)``
    with ``u`` in one of ``ranges`` and ``v`` in the other (``ranges``: ``[(a, b)]``, the block ``a:b x a:b``, or
    ``[(a, b), (c, d)]``, the block ``a:b x c:d`` with its transpose). A uniform CSR slot of the ranges' rows names
    ``u`` (its row) and the centre ``c`` (probability ``1 / S``, ``S`` the ranges' slots), then ``v`` is any neighbour
    of ``c`` drawn uniformly (``1 / k(c)``); a draw with ``v = u`` or ``v`` outside the block is dropped. ``inverse =
    S k(c) / count``: ``sum inverse f(u, v) / CN(u, v)`` estimates the sum of ``f`` over the block's two-hop pairs
    without bias. Reads ``2 count`` entries of the CSR."""
    indptr = graph.indptr
    spans = [(int(indptr[a]), int(indptr[b])) for a, b in ranges]
    sizes = [b - a for a, b in spans]
    total = sum(sizes)
    if not total:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
    r = torch.randint(0, total, (count,), generator=generator).numpy()
    other = torch.rand(count, generator=generator, dtype=torch.float64).numpy()
    r = r + spans[0][0] if len(spans) == 1 else np.where(r < sizes[0], r + spans[0][0], r - sizes[0] + spans[1][0])
    u = np.searchsorted(indptr, r, side="right") - 1
    c = np.asarray(graph.indices[r], np.int64)
    k = np.asarray(graph.degree[c], np.int64)
    v = np.asarray(graph.indices[np.asarray(indptr[c], np.int64) + np.minimum((other * k).astype(np.int64), k - 1)],
                   np.int64)
    (a, b), (lo, hi) = ranges[0], ranges[-1]
    inside = lambda x, ab: (x >= ab[0]) & (x < ab[1])  # noqa: E731
    if len(ranges) == 1:
        keep = inside(v, (a, b))
    else:
        keep = (inside(u, (a, b)) & inside(v, (lo, hi))) | (inside(u, (lo, hi)) & inside(v, (a, b)))
    keep &= v != u
    return u[keep], v[keep], total * k[keep].astype(np.float64) / count


def two_hop_pool(graph: Graph, features: PairFeatures, size: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(u, v, weight, raw)``: every ordered two-hop pair (``u != v`` with a common neighbour) with weight 1 where the
    graph's two-hop paths number at most ``size``, else ``size`` ordered wedges drawn uniformly, each pair weighing
    ``W / (size CN(u, v))`` (``W`` ordered wedges): ``sum weight f(u, v)`` estimates ``sum over T of f`` without
    bias; ``raw: (P, 3)`` the pairs' :meth:`PairFeatures.raw`. :class:`TwoHop`."""
    degree = graph.degree.astype(np.float64)
    wedges = degree * (degree - 1)
    total = float(wedges.sum())
    if total == 0 or size < 1:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64), np.empty((0, 3))
    if features.total_paths <= size:  # all of T, exactly
        rows, nodes, raw = features.candidate_features(np.arange(graph.num_nodes))
        return rows, nodes, np.ones(rows.size, np.float64), raw
    centre = rng.choice(graph.num_nodes, size=size, p=wedges / total)
    k, start = graph.degree[centre].astype(np.int64), graph.indptr[centre]
    i = rng.integers(0, k)
    j = (i + 1 + rng.integers(0, k - 1)) % k  # another neighbour than the i-th
    u = np.asarray(graph.indices[start + i], np.int64)
    v = np.asarray(graph.indices[start + j], np.int64)
    raw = features.raw(u, v, remember=False)
    return u, v, total / (size * raw[:, 0]), raw


class StructuralScores:
    """The structural part of a trained model on a graph, in float64: ``w . phi`` of given pairs and of the two-hop
    candidates of queries (what evaluation, ``topk`` and ``score`` add to the embeddings' logits). ``graph``: the
    training graph while a run evaluates; the whole known graph (graph.npz) for a finished run's ``topk``/``score``.
    ``weights: (3,)`` the trained ``w`` (:attr:`StructuralPart.weights`)."""

    def __init__(self, graph: Graph | PairFeatures, weights):
        self.features = graph if isinstance(graph, PairFeatures) else PairFeatures(graph)
        self.weights = np.asarray(torch.as_tensor(weights).detach().cpu().double().numpy(), np.float64)
        self._last: tuple | None = None  # (queries, rows, nodes, values) of the last candidates asked

    def pairs(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``(P,)`` float64 ``w . phi(u, v)``; 0 for a pair ``(i, i)``."""
        out = np.log1p(self.features.raw(u, v)) @ self.weights
        out[np.asarray(u) == np.asarray(v)] = 0.0
        return out

    def candidates(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, nodes, values)``: :meth:`PairFeatures.candidates` with ``w . phi`` (float64) as the values. The
        last queries' are kept: a ranking batch asks for them three times (its counts, its targets, its known
        neighbours); they are let go before another batch's are computed."""
        u = np.asarray(u, np.int64)
        if self._last is None or not np.array_equal(self._last[0], u):
            self._last = None
            rows, nodes, raw = self.features.candidate_features(u)
            self._last = (u.copy(), rows, nodes, np.log1p(raw) @ self.weights)
        return self._last[1:]

    def of_candidates(self, u: np.ndarray, rows: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """``(K,)`` float64 ``w . phi(u[rows[i]], nodes[i])``, looked up among the two-hop candidates of the queries
        ``u: (b,)`` (:meth:`candidates`; remembered, so a ranking that expands them anyway reads no more rows): 0
        for a pair without a common neighbour and for ``(i, i)``, as :meth:`pairs`."""
        crow, cnode, values = self.candidates(u)
        n = self.features.num_nodes
        key = crow * n + cnode  # ascending: the candidates are sorted by row, then by node
        want = np.asarray(rows, np.int64) * n + np.asarray(nodes, np.int64)
        out = np.zeros(want.size, np.float64)
        if key.size:
            at = np.minimum(np.searchsorted(key, want), key.size - 1)
            hit = key[at] == want
            out[hit] = values[at[hit]]
        return out

    def batches(self, queries: np.ndarray, batch: int):
        """Slices of ``queries`` of at most ``batch`` each whose two-hop candidates fit the candidate budget."""
        return batches_by_paths(self.features.paths_of(queries), np.arange(np.size(queries)), batch=batch)
