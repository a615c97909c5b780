"""Sparse-dense products with a backward pass that is itself one sparse-dense product.

torch's generic autograd for ``torch.sparse.mm(csr, dense)`` is about 10x slower than the forward
product on CPU. A graph operator ``A`` is applied to node features here through :class:`SparseOperator`,
which holds ``A`` and ``A^T`` as CSR (the same object when ``A`` is symmetric, as the GCN
normalisation is), so the gradient ``dL/dX = A^T dL/dY`` costs exactly one more product.
"""
from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
import torch

try:  # SciPy's kernel for Y += A X with A in CSC: columns_scipy writes into torch's buffers through it
    from scipy.sparse._sparsetools import csc_matvecs as _csc_matvecs
except ImportError:  # pragma: no cover - present in every SciPy gaescale supports
    _csc_matvecs = None


def csr_tensor(indptr: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A torch CSR tensor of ``shape`` over the given arrays (not copied, not checked)."""
    with warnings.catch_warnings():  # "sparse CSR support is in beta": we rely only on CSR @ dense
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(indptr, cols, values, shape, check_invariants=False)


def to_torch_csr(m: sp.csr_matrix, dtype: torch.dtype) -> torch.Tensor:
    """``m`` as a torch CSR tensor with values of ``dtype``."""
    # int32 indices when they fit: same result, less memory traffic (measured ~1.6x faster at d=8).
    idx = torch.int32 if m.nnz < 2**31 - 1 and m.shape[1] < 2**31 - 1 else torch.int64
    return csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)).to(idx),
                      torch.from_numpy(m.indices.astype(np.int64)).to(idx),
                      torch.from_numpy(np.asarray(m.data)).to(dtype), m.shape)


class SparseOperator:
    """A fixed sparse matrix ``A`` (N_out x N_in) applied to dense features.

    ``op @ x`` with ``x: (N_in, d)`` returns ``A x: (N_out, d)`` and is differentiable in ``x``;
    ``A`` itself is a constant. Build it from a SciPy CSR matrix; pass ``symmetric=True`` when
    ``A == A^T`` so that one matrix serves forward and backward.
    """

    def __init__(self, matrix: sp.spmatrix, *, symmetric: bool = False, dtype: torch.dtype = torch.float32):
        m = sp.csr_matrix(matrix)
        m.sort_indices()
        self.shape = m.shape
        self.symmetric = symmetric
        self.dtype = dtype
        self.csr = to_torch_csr(m, dtype)  # the only copy kept: scipy() is a view of it
        self.csr_t = self.csr if symmetric else to_torch_csr(m.T.tocsr(), dtype)

    def on(self, device: torch.device) -> SparseOperator:
        """The same operator with its tensors on ``device`` (moved once, then kept with this one)."""
        if self.csr.device == device:
            return self
        moved = getattr(self, "_moved", None)
        if moved is None or moved.csr.device != device:
            moved = object.__new__(SparseOperator)
            moved.__dict__.update(shape=self.shape, symmetric=self.symmetric, dtype=self.dtype, csr=self.csr.to(device))
            moved.csr_t = moved.csr if self.symmetric else self.csr_t.to(device)
            self._moved = moved
        return moved

    @property
    def nnz(self) -> int:
        return int(self.csr.values().numel())

    def to(self, dtype: torch.dtype) -> SparseOperator:
        """The same operator with values of another floating dtype (e.g. float64 for gradcheck)."""
        if dtype == self.dtype:
            return self
        return SparseOperator(self.scipy(), symmetric=self.symmetric, dtype=dtype)

    def scipy(self) -> sp.csr_matrix:
        """``A`` as SciPy CSR, sharing memory with the torch tensors."""
        c = self.csr
        return sp.csr_matrix((c.values().numpy(), c.col_indices().numpy(), c.crow_indices().numpy()), shape=self.shape)

    def __matmul__(self, x: torch.Tensor) -> torch.Tensor:
        return spmm(self, x)


# --precision: the dtype of the forward pass under autocast; the half types are cast up for sparse products
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
HALF = (torch.bfloat16, torch.float16)


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, op):  # x: (N_in, d)
        ctx.op = op
        return _mm(op.csr, x, op.dtype)

    @staticmethod
    def backward(ctx, grad_out):  # grad_out: (N_out, d)
        if not ctx.needs_input_grad[0]:
            return None, None
        return _mm(ctx.op.csr_t, grad_out.contiguous(), ctx.op.dtype), None


def _mm(csr: torch.Tensor, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``csr @ x``; a bfloat16/float16 ``x`` (mixed precision) is multiplied in the operator's float32, since
    torch's CPU CSR kernels have no half types, and the result is stored back in ``x``'s dtype. Autocast
    is off here: it would cast the product's inputs down again."""
    with torch.autocast(x.device.type, enabled=False):
        if x.dtype == dtype:
            return csr_mm(csr, x)
        return csr_mm(csr, x.to(dtype)).to(x.dtype)


def csr_mm(csr: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``csr @ x: (N_out, d)``. On the CPU, written straight into a new buffer: ``torch.sparse.mm`` there zeroes a
    result and copies the product into it, two more passes over ``(N_out, d)`` (BENCHMARKS.md, "Growth with the
    graph")."""
    if x.device.type != "cpu":
        return torch.sparse.mm(csr, x)
    out = x.new_empty(csr.shape[0], x.shape[1])
    return torch.addmm(out, csr, x, beta=0.0, out=out)  # beta=0: out's contents are ignored, NaN included


def spmm(op: SparseOperator, x: torch.Tensor) -> torch.Tensor:
    """``A x`` for a :class:`SparseOperator` ``A: (N_out, N_in)`` and ``x: (N_in, d)``; returns ``(N_out, d)``."""
    if x.dtype != op.dtype and x.dtype not in HALF:
        op = op.to(x.dtype)
    return _SpMM.apply(x.contiguous(), op)


def index_dtype(num_entries: int, num_nodes: int) -> torch.dtype:
    """int32 where ``num_entries`` pairs over ``num_nodes`` nodes can be indexed by it (a CSR pattern's ``indptr``
    counts up to ``num_entries``), else int64."""
    return torch.int32 if max(num_entries, num_nodes) < 2**31 - 1 else torch.int64


class PairIndex:
    """A multiset of ordered node pairs ``(i_k, j_k)``, ``k < m``, stored as a CSR pattern (sorted by ``i``).

    It computes the logits ``s_k = z_i . z_j`` of ``z: (N, d)`` with one sampled dense-dense product,
    and their gradient with two sparse-dense products (``G z`` and ``G^T z`` for ``G`` holding
    ``dL/ds``), instead of gathers and scatters of ``m x d`` rows (measured 5-10x slower on CPU).
    Pairs are kept in CSR order; losses are sums over pairs, so the order does not matter. The pattern's ``indptr:
    (N + 1,)`` and ``cols: (m,)`` are int32 where ``m`` and ``N`` fit (:func:`index_dtype`): half the index bytes,
    and torch's CSR product 1.6x faster; :meth:`rows` and :meth:`pairs` are int64.
    ``weights: (m,)`` float, in the same order: a weight per pair (a weighted graph's edges), or None for all 1.
    ``transpose``: the pattern sorted by second node, ``(indptr: (N + 1,), rows: (m,), order: (m,))`` with ``order``
    the positions of its pairs in this one (all of the index dtype), where the caller has it (else
    :meth:`keep_transpose` sorts for it).
    """

    def __init__(self, indptr: torch.Tensor, cols: torch.Tensor, num_nodes: int, weights: torch.Tensor | None = None,
                 *, transpose: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None):
        dtype = index_dtype(cols.numel(), num_nodes)
        self.indptr = indptr.to(dtype)
        self.cols = cols.to(dtype)
        self.num_nodes = int(num_nodes)
        self.weights = None if weights is None else weights.to(torch.float32)
        self._transpose = None if transpose is None else tuple(t.to(dtype) for t in transpose)  # keep_transpose()

    @property
    def num_pairs(self) -> int:
        return int(self.cols.numel())

    @classmethod
    def from_pairs(cls, pairs: torch.Tensor, num_nodes: int, weights: torch.Tensor | None = None) -> PairIndex:
        """From ``pairs: (2, m)`` int node indices (sorted by the first row here if they are not already) and
        optionally their ``weights: (m,)``. The columns are the second row itself where it is sorted: a view
        that keeps the whole ``(2, m)`` array alive where it has the index dtype (:meth:`from_rows` for pairs held as
        two arrays)."""
        return cls.from_rows(pairs[0], pairs[1], num_nodes, weights)

    @classmethod
    def from_rows(cls, i: torch.Tensor, j: torch.Tensor, num_nodes: int,
                  weights: torch.Tensor | None = None) -> PairIndex:
        """The pairs ``(i[k], j[k])`` of ``i, j: (m,)``, as :meth:`from_pairs`; ``j`` itself becomes the columns where
        it has the index dtype and ``i`` is sorted (no copy)."""
        if i.numel() > 1 and not bool((i[1:] >= i[:-1]).all()):
            order = torch.argsort(i, stable=True)
            i, j = i[order], j[order]
            weights = None if weights is None else weights[order]
        counts = torch.bincount(i, minlength=num_nodes)
        return cls(torch.cat([counts.new_zeros(1), counts.cumsum(0)]), j, num_nodes, weights)

    @classmethod
    def uniform(cls, num_nodes: int, num_pairs: int, generator: torch.Generator | None = None) -> PairIndex:
        """``num_pairs`` pairs drawn independently and uniformly from all ``N^2`` ordered pairs.

        The first nodes are drawn, then only their counts per node are kept (the CSR row lengths):
        the multiset of pairs has exactly the distribution of i.i.d. uniform draws. In new arrays
        (:class:`UniformPairs` draws into the same ones every time).
        """
        return UniformPairs().draw(num_nodes, num_pairs, generator)

    def to(self, device) -> PairIndex:
        """The same pairs on ``device`` (this index itself when they are there already)."""
        if self.cols.device == torch.device(device):
            return self
        return PairIndex(self.indptr.to(device), self.cols.to(device), self.num_nodes,
                         None if self.weights is None else self.weights.to(device))

    @property
    def nbytes(self) -> int:
        """Bytes of the storages this index's arrays keep alive (its kept transpose's too)."""
        arrays = (self.indptr, self.cols, self.weights, *(self._transpose or ()))
        return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in arrays if t is not None}.values())

    def keep_transpose(self) -> PairIndex:
        """Keep the pairs sorted by their second node too, for a pair set that many backward passes reuse (full
        batch's training edges and two-hop pool): the column product ``G^T z`` of their gradient is then torch's row
        product over the transposed pattern (:meth:`columns`), measured 2x faster than SciPy's column product at 3.9M
        pairs on 770k nodes. 8 bytes a pair and an ``(N + 1,)`` index more; a CPU index only. Returns this index."""
        if self._transpose is None and self.cols.device.type == "cpu":
            order = torch.argsort(self.cols, stable=True)
            rows = self.rows()[order].to(self.cols.dtype)
            counts = torch.bincount(self.cols, minlength=self.num_nodes)
            indptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(self.indptr.dtype)
            self._transpose = (indptr, rows, order.to(self.cols.dtype))
        return self

    def columns(self, g: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``G^T z: (N, d)`` for ``G`` holding ``g: (m,)`` on the pairs and ``z: (N, d)``: over the kept transpose
        (:meth:`keep_transpose`) where there is one, else :func:`columns_scipy` on the CPU and
        :func:`columns_scatter` elsewhere."""
        if self._transpose is not None and z.device.type == "cpu":
            indptr, rows, order = self._transpose
            # index_select takes the int32 order as it is (indexing with it converts it first: 2x slower at 3.9M)
            values = g.index_select(0, order)
            return csr_mm(csr_tensor(indptr, rows, values, (self.num_nodes, self.num_nodes)), z)
        return (columns_scipy if z.device.type == "cpu" else columns_scatter)(self, g, z)

    def slice(self, start: int, stop: int) -> PairIndex:
        """The pairs at positions ``[start, stop)`` of this index's CSR order, over the same nodes: its rows' pointers
        clamped to the range and its columns and weights viewed, not copied or sorted (a rank's share of a draw,
        :class:`gaescale.training.strategies.ShardedFullBatch`). No kept transpose."""
        if not 0 <= start <= stop <= self.num_pairs:
            raise ValueError(f"a slice of {self.num_pairs} pairs must have 0 <= start <= stop <= {self.num_pairs}; "
                             f"got [{start}, {stop})")
        return PairIndex(self.indptr.clamp(start, stop) - start, self.cols[start:stop], self.num_nodes,
                         None if self.weights is None else self.weights[start:stop])

    def num_self_pairs(self) -> int:
        """How many pairs are ``(i, i)`` (computed once)."""
        if not hasattr(self, "_self_pairs"):
            self._self_pairs = int((self.rows() == self.cols).sum())
        return self._self_pairs

    def self_pair_mask(self) -> torch.Tensor:
        return self.rows() == self.cols

    def rows(self) -> torch.Tensor:
        """``(m,)`` the first node of each pair, in CSR order."""
        return torch.repeat_interleave(torch.arange(self.num_nodes, device=self.indptr.device),
                                       self.indptr.diff().to(torch.int64))

    def pairs(self) -> torch.Tensor:
        """``(2, m)`` int64, the pairs in CSR order."""
        return torch.stack([self.rows(), self.cols.to(torch.int64)])

    def _csr(self, values: torch.Tensor) -> torch.Tensor:
        return csr_tensor(self.indptr, self.cols, values, (self.num_nodes, self.num_nodes))

    def logits(self, z: torch.Tensor, metric: torch.Tensor | None = None, *,
               scaled: torch.Tensor | None = None) -> torch.Tensor:
        """``s: (m,)`` with ``s_k = z[i_k] . z[j_k]`` for ``z: (N, d)`` (with ``metric: (d,)`` of signs,
        ``sum_c metric_c z[i_k, c] z[j_k, c]``); differentiable in ``z``. ``scaled``: ``z * metric``, where the caller
        computed it once for several pair sets (without autograd: only the forward reads it)."""
        if z.shape[0] != self.num_nodes:
            raise ValueError(f"z has {z.shape[0]} rows but the pairs index {self.num_nodes} nodes")
        z = z.contiguous()
        if metric is None:
            return _PairDot.apply(z, z, self.to(z.device))
        return _SignedPairDot.apply(z, metric.to(z.device, z.dtype), self.to(z.device), scaled)


    def cross_logits(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``s: (m,)`` with ``s_k = u[i_k] . v[j_k]`` for ``u, v: (N, d)`` (a directed graph's source and target
        sides); differentiable in both, by the same sparse products as :meth:`logits`."""
        if u.shape[0] != self.num_nodes or v.shape != u.shape:
            raise ValueError(f"u {tuple(u.shape)} and v {tuple(v.shape)} must both have {self.num_nodes} rows and "
                             "one width")
        return _PairDot.apply(u.contiguous(), v.contiguous(), self.to(u.device))


class UniformPairs:
    """Uniform pairs (:meth:`PairIndex.uniform`, the same draws) drawn again and again into the same arrays: each
    :meth:`draw` overwrites the pairs of the one before, so it is for a loop that is done with a draw before it
    draws again (full batch's epochs, :class:`gaescale.training.strategies.FullBatch`).

    Fresh arrays every epoch were most of what still grew faster than the graph at 10M nodes: their pages are new
    memory each time (BENCHMARKS.md, "Growth with the graph"). The first nodes are drawn :data:`DRAW_CHUNK` at a time
    and only counted, so no ``(m,)`` array of them is held either; memory: the ``(m,)`` columns and the ``(N + 1,)``
    row pointers of the index dtype."""

    def __init__(self):
        self._arrays: tuple | None = None  # ((num_nodes, num_pairs), indptr, cols, chunk)

    def draw(self, num_nodes: int, num_pairs: int, generator: torch.Generator | None = None) -> PairIndex:
        """``num_pairs`` pairs over ``num_nodes`` nodes as :meth:`PairIndex.uniform` draws them from ``generator``."""
        dtype = index_dtype(num_pairs, num_nodes)
        if self._arrays is None or self._arrays[0] != (num_nodes, num_pairs):
            self._arrays = ((num_nodes, num_pairs), torch.empty(num_nodes + 1, dtype=dtype),
                            torch.empty(num_pairs, dtype=dtype), torch.empty(min(num_pairs, DRAW_CHUNK), dtype=dtype))
        _, indptr, cols, chunk = self._arrays
        counts = indptr[1:].zero_()
        ones = torch.ones(1, dtype=dtype).expand(chunk.numel())
        for a in range(0, num_pairs, max(1, chunk.numel())):  # the first nodes, counted: one randint's draws
            part = chunk[:min(num_pairs - a, chunk.numel())]
            torch.randint(0, num_nodes, part.shape, generator=generator, dtype=dtype, out=part)
            counts.index_add_(0, part, ones[:part.numel()])
        indptr[0] = 0
        counts.cumsum_(0)
        torch.randint(0, num_nodes, (num_pairs,), generator=generator, dtype=dtype, out=cols)
        return PairIndex(indptr, cols, num_nodes)


DRAW_CHUNK = 1 << 20  # first nodes drawn and counted at a time by UniformPairs


def ordered_pair_logits(z: torch.Tensor, pairs: torch.Tensor, metric: torch.Tensor | None = None) -> torch.Tensor:
    """``s: (B,)``, ``s_k = z[pairs[0, k]] . z[pairs[1, k]]`` (with ``metric: (d,)`` of signs as in
    :meth:`PairIndex.logits`) for ``z: (N, d)`` and ``pairs: (2, B)`` in any order, differentiable in ``z``: the pairs
    sorted by their first node into a :class:`PairIndex` (a sampled product forward, two sparse products backward,
    where gathering ``(B, d)`` rows and scattering their gradients back was 5-10x slower), the logits then put back in
    the given order."""
    order = torch.argsort(pairs[0], stable=True)
    s = PairIndex.from_rows(pairs[0][order], pairs[1][order], z.shape[0]).logits(z, metric)
    return s.new_empty(s.shape).scatter(0, order, s)


class _PairDot(torch.autograd.Function):
    """``s_k = u[i_k] . v[j_k]``; ``u`` and ``v`` may be one tensor (then autograd adds both gradients)."""

    @staticmethod
    def forward(ctx, u, v, pidx: PairIndex):
        ctx.save_for_backward(u, v)
        ctx.pidx = pidx
        return _pair_values(u, v, pidx)

    @staticmethod
    def backward(ctx, grad_s):
        u, v = ctx.saved_tensors
        return *_pair_grads(ctx.pidx, grad_s, u, v), None


class _SignedPairDot(torch.autograd.Function):
    """``s_k = sum_c m_c z[i_k, c] z[j_k, c]`` for ``z: (N, d)`` and signs ``m: (d,)`` (the bias decoder's logits,
    :func:`gaescale.models.bias_metric`). For a diagonal ``M``, ``G^T (z M) = (G^T z) M``, so the gradient is
    ``M (G z + G^T z)``: backward keeps ``z`` alone, not ``z M`` too, and writes one ``(N, d)`` gradient where
    autograd would add two. ``scaled``: ``z M`` from the caller (shared by several pair sets), read by the forward
    only."""

    @staticmethod
    def forward(ctx, z, metric, pidx: PairIndex, scaled):
        ctx.save_for_backward(z, metric)
        ctx.pidx = pidx
        return _pair_values(z * metric if scaled is None else scaled, z, pidx)

    @staticmethod
    def backward(ctx, grad_s):
        z, metric = ctx.saved_tensors
        return _pair_grad_sum(ctx.pidx, grad_s, z).mul_(metric), None, None, None


def _pair_values(u: torch.Tensor, v: torch.Tensor, pidx: PairIndex) -> torch.Tensor:
    """``s: (m,)``, ``s_k = u[i_k] . v[j_k]`` for ``u, v: (N, d)``."""
    if pidx.num_pairs == 0:
        return v.new_zeros(0)
    if pidx.num_pairs > u.shape[0] * v.shape[0]:  # torch's CPU sampled_addmm refuses more entries than N x N
        return (u[pidx.rows()] * v[pidx.cols]).sum(-1)  # (a tiny graph's pairs): gathered rows instead
    # the logits written over the pattern's own values, with no copy of the pattern's indices and values into a
    # new result. Written in place, beta=0 still multiplies the old values (NaN in fresh memory shows through):
    # they start at 0
    pattern = pidx._csr(v.new_zeros(pidx.num_pairs))
    return torch.sparse.sampled_addmm(pattern, u, v.T, beta=0.0, out=pattern).values()


def _pair_grads(pidx: PairIndex, grad_s: torch.Tensor, u: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G v, G^T u)``, both ``(N, d)``, for ``G`` holding ``grad_s: (m,)`` on the pairs: ``dL/du`` and ``dL/dv``."""
    if pidx.num_pairs == 0:
        return torch.zeros_like(u), torch.zeros_like(v)
    g = grad_s.contiguous()
    # dL/du_i += g_k v_j (rows: G v);  dL/dv_j += g_k u_i (columns: G^T u)
    return csr_mm(pidx._csr(g), v), pidx.columns(g, u)


def _pair_grad_sum(pidx: PairIndex, grad_s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``G z + G^T z: (N, d)`` (:func:`_pair_grads` of ``u = v = z``, added) in one buffer: on the CPU the row product
    is added into the column product's own result by ``addmm`` (``beta=1``), without a third ``(N, d)`` buffer or a
    separate pass to add the two (BENCHMARKS.md, "Large buffers from the kernel")."""
    if pidx.num_pairs == 0 or z.device.type != "cpu":
        rows, columns = _pair_grads(pidx, grad_s, z, z)
        return rows.add_(columns)
    g = grad_s.contiguous()
    columns = pidx.columns(g, z)
    return torch.addmm(columns, pidx._csr(g), z, beta=1.0, out=columns)


def columns_scatter(pidx: PairIndex, g: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``G^T z: (N, d)`` by an atomic scatter of ``g_k z_{i_k}`` into row ``j_k``: fast on accelerators (the
    GPU path; tested on the CPU against :func:`columns_scipy`)."""
    return torch.zeros_like(z).index_add_(0, pidx.cols, g[:, None] * z[pidx.rows()])


def columns_scipy(pidx: PairIndex, g: torch.Tensor, z: torch.Tensor, parts: int | None = None) -> torch.Tensor:
    """``G^T z: (N, d)`` with SciPy's transposed CSR product: on the CPU, faster than torch's scatter. SciPy runs it on
    one core, so the pairs are cut into ``parts`` row ranges of equal pair counts (default: torch's threads), each
    range's ``G_r^T z_r`` runs in its own thread (SciPy lets go of the GIL) and the ``(N, d)`` results are added:
    1.7x faster on 2 cores at 3M nodes, for one more ``(N, d)`` buffer per part beyond the first. The results are
    torch's buffers, which SciPy's kernel adds into (:func:`_add_column_product`): through torch's allocator, and so
    from the pool of :mod:`gaescale.cpu_cache` during training, not new memory from NumPy every epoch."""
    n, m = pidx.num_nodes, pidx.num_pairs
    indptr, cols = pidx.indptr.numpy(), pidx.cols.numpy()
    dtype = torch.promote_types(g.dtype, z.dtype)
    gn, zn = (t.detach().to(dtype).contiguous().numpy() for t in (g, z))
    parts = max(1, min(parts or torch.get_num_threads(), m // (1 << 16) or 1))  # small products stay in one
    cuts = np.unique(np.searchsorted(indptr, np.linspace(0, m, parts + 1)[1:-1]))
    bounds = [0, *cuts.tolist(), n]
    outs = [torch.zeros((n, zn.shape[1]), dtype=dtype) for _ in bounds[1:]]

    def product(k: int) -> None:  # rows a:b of G, transposed, times z[a:b], added into outs[k]
        a, b = bounds[k], bounds[k + 1]
        lo, hi = int(indptr[a]), int(indptr[b])
        _add_column_product(indptr[a:b + 1] - lo, cols[lo:hi], gn[lo:hi], zn[a:b], outs[k].numpy())

    if len(outs) == 1:
        product(0)
    else:
        with ThreadPoolExecutor(len(outs)) as pool:
            list(pool.map(product, range(len(outs))))
    for r in outs[1:]:
        outs[0] += r
    return outs[0]


def _add_column_product(indptr: np.ndarray, cols: np.ndarray, g: np.ndarray, z: np.ndarray, out: np.ndarray) -> None:
    """``out += G^T z`` for the rows ``G: (r, N)`` of a pair index (``indptr: (r + 1,)`` from 0, ``cols``, ``g``),
    ``z: (r, d)``, ``out: (N, d)``, all C-contiguous, ``g``, ``z`` and ``out`` of one dtype: SciPy's CSC kernel
    (``G^T`` is ``G``'s arrays read as CSC) writing into ``out``; where this SciPy lacks it, its public product, added
    in."""
    n, d = out.shape
    if _csc_matvecs is None:  # pragma: no cover - SciPy's kernel has had this name and signature since 0.14
        out += np.asarray(sp.csr_matrix((g, cols, indptr), shape=(len(indptr) - 1, n)).T @ z)
        return
    index = np.promote_types(indptr.dtype, cols.dtype)
    _csc_matvecs(n, len(indptr) - 1, d, indptr.astype(index, copy=False), cols.astype(index, copy=False), g,
                 z.reshape(-1), out.reshape(-1))
