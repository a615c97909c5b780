"""The source/target graph autoencoder of a directed graph (after DiGAE, Kollias et al. 2022).

Every node has a source embedding ``z_s`` (built from its out-neighbourhood) and a target embedding ``z_t``
(built from its in-neighbourhood); the logit of the ordered pair ``(i, j)`` is ``s_ij = z_s_i . z_t_j``, so
``s_ij != s_ji`` in general. The model returns both halves side by side, ``z = [z_s | z_t]: (N, 2h)``; with
per-node biases (``--decoder bias``) the halves are ``[z_s, b_s, 1]`` and ``[z_t, 1, b_t]``, whose product
adds the source's bias ``b_s_i`` and the target's ``b_t_j`` (out- and in-degree need not live in ``z``).

With a symmetric part (``SourceTargetEncoder(symmetric=True)``; ``--directed-symmetric auto`` turns it on where
at least 1 in 10 training edges is reciprocated) each node also has
``z_u``, a GCN on the symmetrised graph, in both halves: ``[z_s, z_u | z_t, z_u]``, so ``s_ij = z_s_i . z_t_j +
z_u_i . z_u_j``. The second term is alike both ways: a link ``i -> j`` raises ``j -> i`` too, which is what a
graph with reciprocated links needs and a strict order (a layered DAG) does not (docs/directed.md, measured).
Every half-product below holds as it is, since the halves only grow.

The loss is :func:`gaescale.losses.reconstruction_loss`'s decomposition over the ``N^2`` ordered pairs with
the asymmetric logits: the edge term over each directed edge once, the dense term sampled (uniform ordered
pairs), exact in ``B x B`` tiles of ``Z_s Z_t^T`` over all tiles (the product is not symmetric: no tile
stands for its transpose), or closed (``linear-mse``: ``sum_ab (Z_s^T Z_s)_ab (Z_t^T Z_t)_ab``).
"""
from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn

from ..errors import ParameterError
from ..losses import (
    DENSE_STRATEGIES,
    PairLoss,
    ValueAndGrad,
    as_pair_index,
    block_size_for,
    draw_uniform,
    full_precision,
    pair_weights,
    resolve_kind,
)
from ..shifts import ShiftedPairs
from ..sparse import UniformPairs
from .graph import DiGraph

Tensor = torch.Tensor


def halves(z: Tensor) -> tuple[Tensor, Tensor]:
    """``(z_s, z_t)``, each ``(..., h)``, of ``z: (..., 2h)``."""
    h = z.shape[-1] // 2
    return z[..., :h], z[..., h:]


class SourceTarget(nn.Module):
    """The asymmetric decoder ``s_uv = z_s_u . z_t_v`` on rows ``zu, zv: (..., 2h)`` of ``[z_s | z_t]``; returns
    ``(...)``. No parameters: a pair decoder that :mod:`gaescale.training.evaluate` scores pairs and ranks with."""

    def forward(self, zu: Tensor, zv: Tensor) -> Tensor:
        return (halves(zu)[0] * halves(zv)[1]).sum(-1)


class Gravity(nn.Module):
    """The gravity-inspired decoder (Salha et al. 2019) on rows ``zu, zv: (..., k + 1)`` of ``[p | m]`` (a position
    ``p`` and a mass ``m``): ``s_uv = m_v - lam log(||p_u - p_v||^2 + eps)``; returns ``(...)``. Not a bilinear form:
    the loss takes it with ``dense='sampled'`` only, and ``(u, u)`` pairs are left out of the dense term."""

    def __init__(self, lam: float = 1.0, eps: float = 1e-6):
        super().__init__()
        self.lam, self.eps = float(lam), float(eps)

    def forward(self, zu: Tensor, zv: Tensor) -> Tensor:
        d2 = (zu[..., :-1] - zv[..., :-1]).square().sum(-1)
        return zv[..., -1] - self.lam * torch.log(d2 + self.eps)


class SourceTargetEncoder(nn.Module):
    """``(x, graph: DiGraph) -> [z_s | z_t]: (N, 2 dims[-1])`` (``symmetric``: ``[z_s, z_u | z_t, z_u]: (N, 4
    dims[-1])``, ``U_{k+1} = A_sym U_k W_u + b_u``). Layer ``k``: ``S_{k+1} = A_hat T_k W_s + b_s``,
    ``T_{k+1} = A_hat^T S_k W_t + b_t`` (ReLU and dropout between layers), ``S_0 = T_0 = X``, with
    ``A_hat = (D_out + I)^-1/2 (A + I) (D_in + I)^-1/2`` (:attr:`DiGraph.operator`). Featureless
    (``in_dim=None``): the first layer's weights are two ``(N, h1)`` tables, one per side."""

    def __init__(self, in_dim: int | None, dims, *, num_nodes: int | None = None, dropout: float = 0.0,
                 symmetric: bool = False):
        super().__init__()
        dims = list(dims)
        if not dims or any(not isinstance(d, int) or d < 1 for d in dims):
            raise ParameterError("dims", "SourceTargetEncoder", "a non-empty list of ints >= 1", dims)
        if in_dim is None and not (isinstance(num_nodes, int) and num_nodes >= 1):
            raise ParameterError("num_nodes", "SourceTargetEncoder", "an int >= 1 when in_dim is None", num_nodes)
        widths = [num_nodes if in_dim is None else in_dim] + dims
        self.featureless = in_dim is None
        self.source = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.target = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.shared = (nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:])) if symmetric
                       else None)
        self.dropout = float(dropout)
        self.checkpoint_activations = False  # accepted for the pipeline's sake; not used
        for lin in [*self.source, *self.target, *(self.shared or ())]:  # Glorot uniform, as gaescale's GCN
            bound = math.sqrt(6.0 / (lin.in_features + lin.out_features))
            nn.init.uniform_(lin.weight, -bound, bound)
            nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor | None, graph: DiGraph) -> Tensor:
        """``x: (N, F)`` or None -> ``(N, 2 d)``."""
        dev = self.source[0].weight.device
        op, op_t = graph.operator.on(dev), graph.operator_t.on(dev)
        s = t = None
        for k, (ws, wt) in enumerate(zip(self.source, self.target)):
            if k:
                s, t = (torch.nn.functional.dropout(h.relu(), self.dropout, self.training) for h in (s, t))
            if k == 0 and self.featureless:  # A_hat I W^T: the tables themselves
                hs, ht = ws.weight.T, wt.weight.T
            elif k == 0:  # S_0 = T_0 = X
                hs, ht = x @ ws.weight.T, x @ wt.weight.T
            else:  # S from the out-neighbours' targets, T from the in-neighbours' sources
                hs, ht = t @ ws.weight.T, s @ wt.weight.T
            s, t = op @ hs + ws.bias, op_t @ ht + wt.bias
        if self.shared is None:
            return torch.cat([s, t], dim=1)
        u = self._shared(x, graph)
        return torch.cat([s, u, t, u], dim=1)

    def _shared(self, x: Tensor | None, graph: DiGraph) -> Tensor:
        """The symmetric part ``U_{k+1} = A_sym U_k W_u + b_u``, ``(N, d)``, a GCN on the symmetrised graph
        (:attr:`DiGraph.operator_sym`) from ``U_0 = X`` (featureless: a third table)."""
        op = graph.operator_sym.on(self.shared[0].weight.device)
        u = None
        for k, w in enumerate(self.shared):
            if k:
                u = torch.nn.functional.dropout(u.relu(), self.dropout, self.training)
            h = w.weight.T if (k == 0 and self.featureless) else (x if k == 0 else u) @ w.weight.T
            u = op @ h + w.bias
        return u


def with_biases(z: Tensor, source_bias: Tensor, target_bias: Tensor) -> Tensor:
    """``[z_s, b_s, 1 | z_t, 1, b_t]: (N, 2h + 4)`` of ``z = [z_s | z_t]: (N, 2h)`` and the biases ``(N,)`` each:
    the product of a row's first half with another's second adds the source's and the target's bias."""
    zs, zt = halves(z)
    one = torch.ones_like(source_bias)[:, None].to(z.dtype)
    bs, bt = source_bias[:, None].to(z.dtype), target_bias[:, None].to(z.dtype)
    return torch.cat([zs, bs, one, zt, one, bt], dim=1)


class DirectedGAE(nn.Module):
    """A graph autoencoder of a directed graph: ``z = model(x, graph)``, ``[z_s | z_t]`` (with ``num_nodes``, per
    node biases as two more columns on each side, see the module's docstring); ``model.loss(z, edge_index)``."""

    def __init__(self, encoder: nn.Module, *, num_nodes: int | None = None, decoder: nn.Module | None = None):
        super().__init__()
        if decoder is not None and num_nodes is not None:
            raise ParameterError("num_nodes", "DirectedGAE", "None with a decoder (the biases are source/target "
                                 "columns)", num_nodes)
        self.encoder = encoder
        self.pair_decoder = SourceTarget() if decoder is None else decoder
        self.node_bias = None  # the interface of gaescale.models.GAE: no symmetric per-node bias,
        self.structure = None  # no structural part of the logit (gaescale.structure)
        self.source_bias = None if num_nodes is None else nn.Parameter(torch.zeros(num_nodes))
        self.target_bias = None if num_nodes is None else nn.Parameter(torch.zeros(num_nodes))

    def forward(self, x: Tensor | None, graph: DiGraph) -> Tensor:
        """``(N, 2h)`` (``h = d``, or ``d + 2`` with biases)."""
        z = self.encoder(x, graph)
        if self.source_bias is None:
            return z
        return with_biases(z, self.source_bias, self.target_bias)

    encode = forward

    def metric(self, z: Tensor) -> None:
        return None

    @torch.no_grad()
    def embed(self, x: Tensor | None, graph: DiGraph, *, block: int | None = None) -> Tensor:
        """Evaluation-mode ``(N, 2h)`` without autograd (one forward pass; ``block`` is not used)."""
        was = self.training
        self.eval()
        try:
            return self(x, graph)
        finally:
            self.train(was)

    def logits(self, z: Tensor, pairs: Tensor) -> Tensor:
        """``(B,)`` logits ``z_s_u . z_t_v`` of ``pairs: (2, B)``."""
        return self.pair_decoder(z[pairs[0]], z[pairs[1]])

    def loss(self, z: Tensor, edge_index, **kwargs) -> Tensor:
        """:func:`directed_loss` of ``z`` on the directed edges ``edge_index: (2, E)``."""
        decoder = None if isinstance(self.pair_decoder, SourceTarget) else self.pair_decoder
        return directed_loss(z, edge_index, decoder=decoder, **kwargs)


def directed_dense_tiles(z: Tensor, need_grad: bool = True, *, loss: PairLoss, block: int) -> tuple[Tensor, Tensor]:
    """``(D, dD/dz)`` for ``D = sum_{i,j} l0(z_s_i . z_t_j)`` over all ``N^2`` ordered pairs, ``z = [z_s | z_t]:
    (N, 2h)``, in ``B x B`` tiles over every tile ``(R, C)``: with ``G = l0'(S_RC)``, ``dD/dz_s[R] += G z_t[C]`` and
    ``dD/dz_t[C] += G^T z_s[R]``. Memory ``O(N h + B^2)``; nothing ``N x N`` is formed."""
    zs, zt = halves(z)
    n = z.shape[0]
    total = torch.zeros((), dtype=torch.float64, device=z.device)
    gs = torch.zeros_like(zs) if need_grad else None
    gt = torch.zeros_like(zt) if need_grad else None
    for r in range(0, n, block):
        zr = zs[r:r + block]
        for c in range(0, n, block):
            s = zr @ zt[c:c + block].T  # dense-ok: a (block x block) tile
            total += loss.l0(s).sum(dtype=torch.float64)
            if need_grad:
                g = loss.dl0(s)
                gs[r:r + block].addmm_(g, zt[c:c + block])
                gt[c:c + block].addmm_(g.T, zr)
    return total, (torch.cat([gs, gt], dim=1) if need_grad else None)


def directed_dense_term(z: Tensor, loss: PairLoss, strategy: str, *, num_samples: int = 0,
                        generator: torch.Generator | None = None, block_size: int | None = None,
                        memory_budget: int = 256 * 2**20, uniform: UniformPairs | ShiftedPairs | None = None) -> Tensor:
    """``D = sum over all N^2 ordered pairs of l0(z_s_i . z_t_j)`` for ``z: (N, 2h)``: exact or an unbiased
    estimate (``num_samples`` uniform ordered pairs scaled by ``N^2 / m``, drawn into ``uniform``'s arrays where
    given, as :func:`gaescale.losses.dense_term`)."""
    n = z.shape[0]
    if strategy == "sampled":
        if num_samples < 1:
            raise ParameterError("num_samples", "directed_loss", "an int >= 1", num_samples)
        s = draw_uniform(uniform, n, num_samples, generator).cross_logits(*halves(z))
        return loss.l0(s).sum() * (float(n) * n / num_samples)
    if strategy == "exact":
        block = int(block_size or block_size_for(n, memory_budget, z.element_size()))
        return ValueAndGrad.apply(z, partial(directed_dense_tiles, loss=loss, block=block))
    if strategy == "closed":
        if not loss.polynomial_l0:
            raise ParameterError("dense", "directed_loss", "'closed' only with kind='linear-mse'", strategy)
        zs, zt = halves(z)
        return ((zs.T @ zs) * (zt.T @ zt)).sum()  # sum_ij (z_s_i . z_t_j)^2
    raise ParameterError("dense", "directed_loss", f"one of {DENSE_STRATEGIES}", strategy)


def directed_loss(z: Tensor, edge_index, num_nodes: int | None = None, *, kind: str = "bce", dense: str = "sampled",
                  weighting: str | None = None, num_samples: int | None = None, neg_ratio: float = 1.0,
                  block_size: int | None = None, memory_budget: int = 256 * 2**20,
                  generator: torch.Generator | None = None, decoder: nn.Module | None = None,
                  uniform: UniformPairs | ShiftedPairs | None = None) -> Tensor:
    """The reconstruction loss of ``z = [z_s | z_t]: (N, 2h)`` against the directed edges ``edge_index: (2, E)``
    (ordered pairs, each edge once; or a :class:`gaescale.sparse.PairIndex`, whose ``weights`` make a weighted
    graph's edge term as :func:`gaescale.losses.reconstruction_loss`'s): ``sum_ij w(a_ij) l(s_ij, a_ij)`` over
    all ``N^2`` ordered pairs, ``s_ij = z_s_i . z_t_j``, weights of :func:`gaescale.losses.pair_weights` for ``E``
    ordered edge pairs. ``num_samples`` defaults to ``neg_ratio`` per directed edge. ``decoder(zu, zv) -> s`` (e.g.
    :class:`Gravity`) replaces ``z_s_u . z_t_v``; it needs ``dense='sampled'``, whose draws of ``(i, i)`` then count
    zero. ``uniform``: as :func:`gaescale.losses.reconstruction_loss`'s. A scalar tensor."""
    n = z.shape[0] if num_nodes is None else int(num_nodes)
    if z.dim() != 2 or z.shape[0] != n or (decoder is None and z.shape[1] % 2):
        raise ParameterError("z", "directed_loss", f"a 2-D tensor with num_nodes={n} rows and an even number of "
                             "columns ([z_s | z_t])", tuple(z.shape))
    pl, weighting = resolve_kind(kind, weighting)
    if decoder is not None and dense != "sampled":
        raise ParameterError("dense", "directed_loss", "'sampled' with a pair decoder", dense)
    with torch.autocast(z.device.type, enabled=False):  # in float32 under mixed precision
        z = full_precision(z)
        pairs = as_pair_index(edge_index, n).to(z.device)
        w0, w1 = pair_weights(weighting, n, pairs.num_pairs)
        if decoder is None:  # z_s_u . z_t_v by sparse products (gathers and scatters of m rows are 5-10x slower)
            s = pairs.cross_logits(*halves(z))
        else:
            p = pairs.pairs()
            s = decoder(z[p[0]], z[p[1]])
        l1 = pl.l1(s) if pairs.weights is None else pl.l1w(s, pairs.weights.to(s.dtype))  # weighted: as undirected
        edge = (w1 * l1 - w0 * pl.l0(s)).sum()
        m = max(1, int(round(neg_ratio * pairs.num_pairs))) if num_samples is None else num_samples
        if decoder is not None:  # the sampled estimate over the pairs i != j, through the decoder
            q = draw_uniform(uniform, n, m, generator).to(z.device).pairs()
            d = (pl.l0(decoder(z[q[0]], z[q[1]])) * (q[0] != q[1])).sum() * (float(n) * n / m)
            return w0 * d + edge
        d = directed_dense_term(z, pl, dense, num_samples=m, generator=generator, block_size=block_size,
                                memory_budget=memory_budget, uniform=uniform)
        return w0 * d + edge
