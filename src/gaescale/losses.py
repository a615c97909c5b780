"""Reconstruction losses built on one decomposition (derived in docs/losses.md).

For logits ``s_ij = z_i . z_j`` and a symmetric 0/1 adjacency with ordered edge set ``E``, every
elementwise loss with weights ``w0`` (non-edge) and ``w1`` (edge) is

    L = w0 * sum_{all i, j} l0(s_ij)  +  sum_{(i, j) in E} [ w1 * l1(s_ij) - w0 * l0(s_ij) ]
        \\______ dense term D ______/     \\________________ edge term, O(|E| d) ______________/

A loss kind is its pair ``(l0, l1)``; a weighting is ``(w0, w1)``; the dense term has three
strategies: ``sampled`` (m uniform ordered pairs scaled by N^2 / m: unbiased, no rejection of
positives, since the edge term already subtracts ``l0`` on every edge), ``exact`` (``B x B`` tiles on
and above the diagonal, value and gradient in one pass: O(N d + B^2) memory, nothing N x N is stored;
a fused Triton kernel on CUDA) and ``closed``
(``l0(s) = s^2``: ``||Z^T Z||_F^2``, O(N d^2)). Pairs range over all N^2 ordered pairs, the
diagonal included; a pair ``(i, i)`` is a non-edge unless ``edge_index`` holds a self loop.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .errors import ParameterError
from .shifts import ShiftedPairs
from .sparse import HALF, PairIndex, UniformPairs

Tensor = torch.Tensor


@dataclass(frozen=True)
class PairLoss:
    """Per-pair losses of one kind: ``l0(s)`` for a non-edge, ``l1(s)`` for an edge, and ``dl0/ds``;
    ``l1w(s, w)`` for an edge of weight ``w`` (a weighted graph): the MSE kinds take ``w`` as the edge's target,
    BCE multiplies its ``l1`` by ``w``; ``l1w(s, 1) == l1(s)``."""

    name: str
    l0: Callable[[Tensor], Tensor]
    l1: Callable[[Tensor], Tensor]
    dl0: Callable[[Tensor], Tensor]
    polynomial_l0: bool = False  # l0(s) == s^2, so the dense term has a closed form
    l1w: Callable[[Tensor, Tensor], Tensor] | None = None


def _sig2_grad(s: Tensor) -> Tensor:
    p = torch.sigmoid(s)
    return 2 * p * p * (1 - p)


KINDS: dict[str, PairLoss] = {
    # softplus(s) = -log(1 - sigmoid(s)); softplus(-s) = -log(sigmoid(s)); stable for any s.
    "bce": PairLoss("bce", F.softplus, lambda s: F.softplus(-s), torch.sigmoid,
                    l1w=lambda s, w: w * F.softplus(-s)),
    "mse": PairLoss("mse", lambda s: torch.sigmoid(s).square(), lambda s: torch.sigmoid(-s).square(), _sig2_grad,
                    l1w=lambda s, w: (torch.sigmoid(s) - w).square()),
    "linear-mse": PairLoss("linear-mse", torch.square, lambda s: (1 - s).square(), lambda s: 2 * s, True,
                           l1w=lambda s, w: (w - s).square()),
}
# Names that fix a weighting as well as the pair losses.
ALIASES = {"weighted-bce": ("bce", "gae")}
WEIGHTINGS = ("none", "balanced", "gae")
DENSE_STRATEGIES = ("sampled", "exact", "closed")
LOSS_NAMES = tuple(KINDS) + tuple(ALIASES)


def pair_weights(weighting: str, num_nodes: int, num_edge_pairs: int) -> tuple[float, float]:
    """``(w0, w1)`` for ``N`` nodes and ``|E|`` ordered edge pairs (both directions counted).

    - ``none``: the plain mean over all ``P = N^2`` pairs, ``w0 = w1 = 1 / P``.
    - ``balanced``: edges and non-edges weigh the same in total, ``w1 = 1 / |E|``, ``w0 = 1 / P``;
      with sampled pairs this is PyTorch Geometric's ``recon_loss`` (mean over edges plus mean over
      sampled pairs) without rejection sampling.
    - ``gae``: the GAE paper: ``pos_weight = (P - |E|) / |E|``, ``norm = P / (2 (P - |E|))``, mean over
      all P pairs, so ``w0 = norm / P`` and ``w1 = norm * pos_weight / P``.
    """
    p, e = float(num_nodes) ** 2, float(max(num_edge_pairs, 1))
    if weighting == "none":
        return 1.0 / p, 1.0 / p
    if weighting == "balanced":
        return 1.0 / p, 1.0 / e
    if weighting == "gae":
        norm, pos_weight = p / (2.0 * (p - e)), (p - e) / e
        return norm / p, norm * pos_weight / p
    raise ParameterError("weighting", "reconstruction_loss", f"one of {WEIGHTINGS}", weighting)


class ValueAndGrad(torch.autograd.Function):
    """A scalar whose gradient is computed together with its value: ``compute(z, need_grad)`` returns
    ``(value, dvalue/dz or None)``; backward only scales the stored ``(N, d)`` gradient. Serves the
    streamed CPU tiles and the fused GPU kernel alike: nothing of the pass but the gradient is kept."""

    @staticmethod
    def forward(ctx, z: Tensor, compute: Callable) -> Tensor:
        value, grad = compute(z.detach(), ctx.needs_input_grad[0])
        ctx.save_for_backward(grad)
        return value.to(z.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        (grad,) = ctx.saved_tensors
        return grad * g, None


PAIR_CHUNK = 1 << 18  # pairs per chunk of pair_sum: its temporaries (1 MiB each in float32) stay in the L2 cache


def pair_sum(f: Callable[..., Tensor], s: Tensor | tuple[Tensor, ...], consts: tuple[Tensor, ...] = (), *,
             overwrite: bool | tuple[bool, ...] = False) -> Tensor:
    """``sum_k f(s, *consts)_k`` for logits ``s: (m,)`` and per-pair constants ``consts`` (each ``(m,)``, not
    differentiated), differentiable in ``s``; ``s`` may be a tuple of such inputs, ``f(*s, *consts)``, differentiable in
    each. ``f`` is elementwise. It runs :data:`PAIR_CHUNK` pairs at a time and keeps only ``df/ds: (m,)`` (one per
    input) for backward: the same value and gradient as ``f(s, *consts).sum()``, without the half-dozen ``(m,)``
    temporaries (each fresh memory, once past glibc's 32 MiB) that the loss's elementwise steps and their backward would
    allocate: BENCHMARKS.md, "Growth with the graph". The chunks' sums add up in float64.

    ``overwrite=True``: ``df/ds`` is written over ``s`` itself, chunk by chunk, where a gradient is needed. Only for a
    caller whose ``s`` nothing else reads afterwards (no autograd node saved it, the caller reads it no more): the
    logits of :meth:`gaescale.sparse.PairIndex.logits`, which no node keeps. It saves a second ``(m,)`` buffer, which
    at 10M nodes is fresh memory of 200 MB a pair set every epoch (BENCHMARKS.md, "The pair gradient written over its
    logits"). With several inputs, a tuple: which of them may be overwritten."""
    inputs = s if isinstance(s, tuple) else (s,)
    overwrite = overwrite if isinstance(overwrite, tuple) else (overwrite,) * len(inputs)
    return _ChunkedSum.apply(f, tuple(consts), overwrite, *inputs)


class _ChunkedSum(torch.autograd.Function):
    """:func:`pair_sum`: ``forward(f, consts, overwrite, *s)``; backward scales the kept ``df/ds``."""

    @staticmethod
    def forward(ctx, f, consts, overwrite, *s):
        need = [ctx.needs_input_grad[3 + k] for k in range(len(s))]
        total, grads = _chunked_sum(s, need, f=f, consts=consts, overwrite=overwrite)
        ctx.save_for_backward(*grads)
        return total.to(s[0].dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        return None, None, None, *(None if d is None else d * g for d in ctx.saved_tensors)


def _chunked_sum(s: tuple[Tensor, ...], need: list[bool], *, f: Callable[..., Tensor], consts: tuple[Tensor, ...],
                 overwrite: tuple[bool, ...]) -> tuple[Tensor, list[Tensor | None]]:
    """``(sum f, [df/ds_k or None])`` of :func:`pair_sum`, :data:`PAIR_CHUNK` pairs at a time."""
    total = torch.zeros((), dtype=torch.float64, device=s[0].device)
    grads = [(x.detach() if mine else torch.empty_like(x)) if needed else None
             for x, needed, mine in zip(s, need, overwrite)]
    wanted = [k for k, needed in enumerate(need) if needed]  # the inputs whose gradient is computed
    for a in range(0, s[0].numel(), PAIR_CHUNK):
        b = min(a + PAIR_CHUNK, s[0].numel())
        chunks = [x[a:b].detach() for x in s]
        if wanted:
            with torch.enable_grad():
                for k in wanted:
                    chunks[k] = chunks[k].requires_grad_()
                value = f(*chunks, *(c[a:b] for c in consts)).sum()
                parts = torch.autograd.grad(value, [chunks[k] for k in wanted])
            for k, part in zip(wanted, parts):
                grads[k][a:b] = part  # over s[k][a:b] itself with overwrite: read already
        else:
            value = f(*chunks, *(c[a:b] for c in consts)).sum()
        total += value.detach().double()
    return total, grads


def exact_dense_tiles(z: Tensor, need_grad: bool = True, *, loss: PairLoss, block: int,
                      shard: tuple[int, int] = (0, 1), metric: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """``(D, dD/dz)`` for ``D = sum_{i,j} l0(z_i . z_j)`` over all N^2 ordered pairs, in ``B x B`` tiles.
    With ``metric: (d,)`` of signs ``M``, ``s_ij = z_i^T M z_j`` (still symmetric) and ``dD/dz_a = 2 M sum_j
    l0'(s_aj) z_j``.

    ``S = Z Z^T`` is symmetric, so only the tiles on and above the diagonal are formed (half the
    work): an off-diagonal tile counts twice. ``dD/dz_a = 2 sum_j l0'(s_aj) z_j``, so each tile
    ``(R, C)`` with ``G = l0'(S_RC)`` adds ``G Z_C`` to rows ``R`` and ``G^T Z_R`` to rows ``C``. Each
    tile is formed once, then dropped. Memory: O(N d + B^2); nothing N x N or B x N is stored.

    ``shard = (k, K)``: only the tiles of row blocks ``k, k + K, k + 2K, ...``, so the K shards' values
    and gradients add up to ``D``'s (data parallel: each process computes one).
    """
    n = z.shape[0]
    total = torch.zeros((), dtype=torch.float64, device=z.device)
    grad = torch.zeros_like(z) if need_grad else None
    k, num_shards = shard
    zm = z if metric is None else z * metric.to(z.dtype)
    for r in range(k * block, n, num_shards * block):
        zmr = zm[r:r + block]
        for c in range(r, n, block):
            zc, zmc = z[c:c + block], zm[c:c + block]
            s = zmr @ zc.T  # dense-ok: a (block x block) tile
            total += (1.0 if c == r else 2.0) * loss.l0(s).sum(dtype=torch.float64)
            if need_grad:
                g = loss.dl0(s)
                grad[r:r + block].addmm_(g, zmc)
                if c != r:
                    grad[c:c + block].addmm_(g.T, zmr)
    return total, (2 * grad if need_grad else None)


def block_size_for(num_nodes: int, memory_budget: int, itemsize: int = 4) -> int:
    """Tile side ``B``: a few ``B x B`` temporaries within ``memory_budget`` bytes, at most 1024 (measured
    fastest on CPU: tiles stay in cache) and at most ``N``."""
    return max(1, min(num_nodes, 1024, int((memory_budget / (4 * itemsize)) ** 0.5)))


def dense_term(z: Tensor, loss: PairLoss, strategy: str, *, num_samples: int = 0,
               generator: torch.Generator | None = None, block_size: int | None = None,
               memory_budget: int = 256 * 2**20, shard: tuple[int, int] = (0, 1),
               metric: Tensor | None = None, scaled: Tensor | None = None,
               uniform: UniformPairs | ShiftedPairs | None = None) -> Tensor:
    """``D = sum over all N^2 ordered pairs of l0(z_i . z_j)`` for ``z: (N, d)``: exact, or an unbiased estimate.
    ``metric: (d,)`` of signs: logits ``z_i^T diag(metric) z_j`` (:func:`gaescale.models.with_bias`); ``scaled``: ``z *
    metric`` where the caller has it already (the sampled estimate reuses it). ``uniform``: what draws the sampled
    estimate's pairs into its own arrays, kept across a training loop's epochs: a :class:`gaescale.sparse.UniformPairs`
    (independent pairs, the default) or a :class:`gaescale.shifts.ShiftedPairs` (shifts of a random node order).
    ``exact`` with ``shard = (k, K)``: the ``k``-th of ``K`` shares of the exact ``D``, whose values and gradients add
    up to ``D``'s (:func:`exact_dense_tiles`; on CUDA :func:`gaescale.kernels.dense_value_and_grad`)."""
    n = z.shape[0]
    if strategy == "sampled":
        if num_samples < 1:
            raise ParameterError("num_samples", "reconstruction_loss", "an int >= 1", num_samples)
        s = _logits(draw_uniform(uniform, n, num_samples, generator).to(z.device), z, metric, scaled)
        return pair_sum(loss.l0, s, overwrite=True) * (float(n) * n / num_samples)
    if strategy == "exact":
        if z.is_cuda:
            from . import kernels
            if metric is None and kernels.available() and loss.name in kernels.KERNEL_IDS:
                return ValueAndGrad.apply(z, partial(kernels.dense_value_and_grad, kind=loss.name, shard=shard))
        block = int(block_size or block_size_for(n, memory_budget, z.element_size()))
        return ValueAndGrad.apply(z, partial(exact_dense_tiles, loss=loss, block=block, shard=shard, metric=metric))
    if strategy == "closed":
        if not loss.polynomial_l0:
            raise ParameterError("dense", "reconstruction_loss",
                                 "'closed' only with kind='linear-mse' (whose l0 is s^2); use 'exact' or 'sampled'",
                                 strategy)
        gram = (z.T @ z).square()  # sum_ij (z_i^T M z_j)^2 = sum_ab M_a M_b (Z^T Z)_ab^2
        return gram.sum() if metric is None else (gram * torch.outer(metric, metric).to(gram.dtype)).sum()
    raise ParameterError("dense", "reconstruction_loss", f"one of {DENSE_STRATEGIES}", strategy)


def resolve_kind(kind: str, weighting: str | None) -> tuple[PairLoss, str]:
    """The pair losses and weighting for a loss name (``weighted-bce`` means ``bce`` with ``gae``)."""
    if kind in ALIASES:
        base, fixed = ALIASES[kind]
        if weighting not in (None, fixed):
            raise ParameterError("weighting", "reconstruction_loss", f"'{fixed}' (or None) with kind='{kind}'",
                                 weighting)
        return KINDS[base], fixed
    if kind not in KINDS:
        raise ParameterError("kind", "reconstruction_loss", f"one of {LOSS_NAMES}", kind)
    return KINDS[kind], weighting or "balanced"


def reconstruction_loss(z: Tensor, edge_index: Tensor | PairIndex, num_nodes: int | None = None, *, kind: str = "bce",
                        dense: str = "sampled", weighting: str | None = None, num_samples: int | None = None,
                        neg_ratio: float = 1.0, edges: str = "undirected", block_size: int | None = None,
                        memory_budget: int = 256 * 2**20, generator: torch.Generator | None = None,
                        metric: Tensor | None = None, decoder: Callable | None = None,
                        edge_weight: Tensor | None = None, edge_offset: Tensor | None = None,
                        dense_offset: tuple[Tensor, Tensor, Tensor] | None = None,
                        uniform: UniformPairs | ShiftedPairs | None = None) -> Tensor:
    """The reconstruction loss of embeddings ``z: (N, d)`` against the graph with edges ``edge_index: (2, E)``.

    ``edges='undirected'`` (default): each undirected edge appears once, in either orientation, and
    stands for both ordered pairs. ``edges='ordered'``: ``edge_index`` lists ordered pairs, so a
    symmetric graph lists both directions. The value equals (in expectation, for ``dense='sampled'``)
    ``sum_ij w(a_ij) * l(s_ij, a_ij)`` over all ``N^2`` ordered pairs with the weights of
    :func:`pair_weights`; no N x N tensor is formed. ``num_samples`` (sampled strategy) defaults to
    ``neg_ratio`` times the number of undirected edges. ``edge_index`` may also be a prebuilt
    :class:`gaescale.sparse.PairIndex` (what a training loop should pass: it is built once).
    ``metric: (d,)`` of signs: the logits are ``s_ij = z_i^T diag(metric) z_j`` (the per-node bias decoder,
    :func:`gaescale.models.with_bias`); every dense strategy supports it. ``decoder(zu, zv) -> s`` (e.g.
    :class:`gaescale.models.HadamardMLP`) replaces the inner product; it needs ``dense='sampled'``.
    ``edge_weight: (E,)`` (or the weights of a :class:`PairIndex`): a weighted graph, whose edge ``(i, j)`` of
    weight ``w`` has the target ``a_ij = w`` for the MSE kinds (``(sigmoid(s) - w)^2``, ``(w - s)^2``) and its BCE
    term ``w * l1(s)``; all weights 1 give the unweighted loss.

    A logit with an offset ``g_ij`` (the structural part of :mod:`gaescale.structure`, 0 but on a sparse set ``T``
    of pairs): ``edge_offset: (E,)`` (in the order of the :class:`PairIndex`'s ``pairs()``) is ``g`` on the edges,
    and ``dense_offset = (pairs, g: (P,), weight: (P,))`` the pairs of ``T`` (a :class:`PairIndex`; ``g`` and
    ``weight`` in the order of its ``pairs()``) (or an importance-weighted
    sample of them) with theirs. The loss is then the same identity of the whole logits ``s + g``: the dense term
    ``sum over all pairs of l0(s_ij)`` (sampled or exact, as without offsets) plus ``sum over T of
    weight * (l0(s + g) - l0(s))``, the edge term on ``s + g``. ``uniform``: what the sampled dense term draws its pairs
    with (:func:`dense_term`; a training loop passes the same one every epoch). Returns a scalar tensor.
    """
    n = z.shape[0] if num_nodes is None else int(num_nodes)
    if z.dim() != 2 or z.shape[0] != n:
        raise ParameterError("z", "reconstruction_loss", f"a 2-D tensor with num_nodes={n} rows", tuple(z.shape))
    if edges not in ("undirected", "ordered"):
        raise ParameterError("edges", "reconstruction_loss", "'undirected' or 'ordered'", edges)
    if decoder is not None and dense != "sampled":
        raise ParameterError("dense", "reconstruction_loss", "'sampled' with a pair decoder (an MLP of z_i * z_j has "
                             "no streamed or closed all-pairs form)", dense)
    if metric is not None and tuple(metric.shape) != (z.shape[1],):
        raise ParameterError("metric", "reconstruction_loss", f"None or a ({z.shape[1]},) tensor of signs",
                             tuple(metric.shape))
    if edge_weight is not None:
        edge_index = as_pair_index(edge_index, n, edge_weight)
    with torch.autocast(z.device.type, enabled=False):  # losses run in float32 under mixed precision
        return _reconstruction_loss(full_precision(z), edge_index, n, kind, dense, weighting, num_samples, neg_ratio,
                                    edges, block_size, memory_budget, generator, metric, decoder, edge_offset,
                                    dense_offset, uniform)


def default_num_samples(num_edge_pairs: int, neg_ratio: float) -> int:
    """Pairs the sampled dense term draws by default: ``neg_ratio`` per undirected edge (``num_edge_pairs``
    ordered edge pairs, a self loop counted once), at least one."""
    return max(1, int(round(neg_ratio * num_edge_pairs / 2)))


def full_precision(t: Tensor) -> Tensor:
    """``t`` in float32 when it is bfloat16/float16 (mixed precision), else unchanged."""
    return t.float() if t.dtype in HALF else t


def _reconstruction_loss(z, edge_index, n, kind, dense, weighting, num_samples, neg_ratio, edges, block_size,
                         memory_budget, generator, metric=None, decoder=None, edge_offset=None,
                         dense_offset=None, uniform=None) -> Tensor:
    loss, weighting = resolve_kind(kind, weighting)
    pairs = as_pair_index(edge_index, n).to(z.device)
    # An undirected edge stands for two ordered pairs, a self loop for one.
    loops = pairs.num_self_pairs() if edges == "undirected" else 0
    num_pairs = pairs.num_pairs * (2 if edges == "undirected" else 1) - loops
    w0, w1 = pair_weights(weighting, n, num_pairs)
    if weighting == "none" and num_pairs < 0.01 * float(n) ** 2:
        warnings.warn(f"kind='{kind}' without weighting on a graph of density {num_pairs / float(n) ** 2:.2g} < 1%: "
                      "non-edges dominate the loss and the model learns little beyond predicting 'no edge'; "
                      "use weighting='balanced' or kind='weighted-bce'.", stacklevel=2)
    if num_samples is None:
        num_samples = default_num_samples(num_pairs, neg_ratio)
    if metric is not None:
        metric = metric.to(z.device, z.dtype)
    scaled = None  # z M, once for every pair set's forward (their backward does without it: sparse._SignedPairDot)
    if metric is not None and decoder is None:
        with torch.no_grad():
            scaled = z.contiguous() * metric
    s = _logits(pairs, z, metric, scaled) if decoder is None else _pair_logits(decoder, z, pairs.pairs())
    if edge_offset is not None:
        s = s + edge_offset.to(s.dtype)
    per_pair, consts = _edge_pair_loss(loss, w0, w1, None if pairs.weights is None else pairs.weights.to(s.dtype))
    if loops:  # self pairs count once: their share taken back out, read before s is overwritten below
        mask = pairs.self_pair_mask()
        loop_term = pair_sum(per_pair, s[mask], tuple(c[mask] for c in consts))
    # s is this function's own (the logits, or their sum with edge_offset) where no decoder made it
    edge = pair_sum(per_pair, s, consts, overwrite=decoder is None) * (2 if edges == "undirected" else 1)
    if loops:
        edge = edge - loop_term
    if decoder is None:
        d = dense_term(z, loss, dense, num_samples=num_samples, generator=generator,
                       block_size=block_size, memory_budget=memory_budget, metric=metric, scaled=scaled,
                       uniform=uniform)
    else:  # the sampled estimate of the dense term, through the decoder
        drawn = draw_uniform(uniform, n, num_samples, generator).to(z.device).pairs()
        d = loss.l0(_pair_logits(decoder, z, drawn)).sum() * (float(n) * n / num_samples)
    if dense_offset is not None:  # sum over T of l0(s + g) - l0(s): the dense term of the whole logits
        at, g, weight = dense_offset
        e = _logits(at.to(z.device), z, metric, scaled)  # this function's own: its gradient may go over it
        d = d + offset_term(loss, e, g.to(e.dtype), weight.to(z.device, e.dtype), overwrite=(True, False))
    return w0 * d + edge


def offset_term(loss: PairLoss, e: Tensor, g: Tensor, weight: Tensor, *,
                overwrite: tuple[bool, bool] = (False, False)) -> Tensor:
    """``sum_k weight_k (l0(e_k + g_k) - l0(e_k))`` for ``e, g, weight: (P,)``: what the all-pairs term gains on pairs
    whose logits ``e`` (the embeddings') get ``g`` added (their structural part), differentiable in ``e`` and ``g``,
    summed by :func:`pair_sum` (``overwrite``: which of ``e``, ``g`` it may write its gradients over)."""
    return pair_sum(lambda e, g, w: w * (loss.l0(e + g) - loss.l0(e)), (e, g), (weight,), overwrite=overwrite)


def draw_uniform(uniform: UniformPairs | ShiftedPairs | None, num_nodes: int, num_pairs: int,
                 generator: torch.Generator | None):
    """``num_pairs`` pairs, every ordered pair equally likely: ``uniform``'s draw (into its arrays) where one is given,
    else independent pairs (:meth:`PairIndex.uniform`). A :class:`PairIndex` or a
    :class:`gaescale.shifts.PermutedPairs`, which score pairs alike."""
    return (uniform or UniformPairs()).draw(num_nodes, num_pairs, generator)


def _logits(pairs: PairIndex, z: Tensor, metric: Tensor | None, scaled: Tensor | None) -> Tensor:
    """The pairs' logits ``z_i^T M z_j`` (:meth:`PairIndex.logits`), with ``scaled = z M`` where the caller computed
    it once for several pair sets."""
    return pairs.logits(z, metric, scaled=scaled)


def _pair_logits(decoder: Callable, z: Tensor, pairs: Tensor) -> Tensor:
    return decoder(z[pairs[0]], z[pairs[1]]).to(z.dtype)


def _edge_pair_loss(loss: PairLoss, w0: float, w1: float, weights: Tensor | None = None):
    """``(f, consts)`` for :func:`pair_sum`: an edge's share ``w1 l1(s) - w0 l0(s)`` (``l1w(s, w)`` with per-pair
    ``weights: (m,)``), the ``l0`` of the all-pairs sum taken back out for the pairs that are edges."""
    if weights is None:
        return (lambda s: w1 * loss.l1(s) - w0 * loss.l0(s)), ()
    return (lambda s, w: w1 * loss.l1w(s, w) - w0 * loss.l0(s)), (weights,)


def minibatch_loss(s_pos: Tensor, s_neg: Tensor, *, num_nodes: int, num_edge_pairs: int, edge_fraction: float,
                   kind: str = "bce", weighting: str | None = None, pos_loops: Tensor | None = None,
                   pos_weight: Tensor | None = None, num_pairs: float | None = None,
                   dense_offset: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """An unbiased estimate of the full loss :func:`reconstruction_loss` (``dense='sampled'``) from one
    mini-batch of a link loader: ``s_pos: (B,)`` the logits of a uniformly drawn share ``edge_fraction``
    of the training edges (each undirected edge once; ``pos_loops: (B,)`` bool marks self pairs
    ``(i, i)``, which count once), ``s_neg: (m,)`` the logits of ``m`` ordered pairs drawn uniformly
    from all ``N^2``. The weights are the whole graph's (``num_nodes``, ``num_edge_pairs`` ordered edge
    pairs), so the estimate of every batch has the full loss as its mean:
    ``edge term of the batch / edge_fraction + w0 * N^2 / m * sum l0(s_neg)``. ``pos_weight: (B,)``: the
    drawn edges' weights (a weighted graph, as in :func:`reconstruction_loss`). ``num_pairs``: ``s_neg`` was drawn
    uniformly from a block of that many ordered pairs instead of all ``N^2`` (a bucket of
    :class:`gaescale.training.buckets.PartitionBuckets`, whose loss is then that block's share of the full loss).
    With the structural part of the logit (:mod:`gaescale.structure`), ``s_pos`` are the edges' whole logits, ``s_neg``
    the embeddings' alone, and ``dense_offset = (e: (P,), g: (P,), weight: (P,))`` the embeddings' logits of drawn
    two-hop pairs, their structural part and their weights (:meth:`gaescale.structure.SampledTwoHop.draw`): the dense
    term adds ``sum weight (l0(e + g) - l0(e))``, as :func:`reconstruction_loss`'s ``dense_offset``.
    """
    loss, weighting = resolve_kind(kind, weighting)
    w0, w1 = pair_weights(weighting, num_nodes, num_edge_pairs)
    s_pos, s_neg = full_precision(s_pos), full_precision(s_neg)
    per_pair, consts = _edge_pair_loss(loss, w0, w1, None if pos_weight is None else pos_weight.to(s_pos.dtype))
    edge = 2 * pair_sum(per_pair, s_pos, consts)
    if pos_loops is not None:
        edge = edge - pair_sum(per_pair, s_pos[pos_loops], tuple(c[pos_loops] for c in consts))
    pairs = float(num_nodes) ** 2 if num_pairs is None else float(num_pairs)
    dense = pair_sum(loss.l0, s_neg) * (pairs / max(s_neg.numel(), 1))
    if dense_offset is not None:
        e, g, weight = (full_precision(t) for t in dense_offset)
        dense = dense + offset_term(loss, e, g.to(e.dtype), weight.to(e.dtype))
    return edge / edge_fraction + w0 * dense


def as_pair_index(edge_index: Tensor | PairIndex, num_nodes: int, edge_weight: Tensor | None = None) -> PairIndex:
    """A :class:`PairIndex` for ``edge_index: (2, E)`` node indices (or the index itself), with ``edge_weight:
    (E,)`` when given."""
    if edge_weight is not None:
        return _weighted_pairs(edge_index, num_nodes, edge_weight)
    if isinstance(edge_index, PairIndex):
        if edge_index.num_nodes != num_nodes:
            raise ParameterError("edge_index", "reconstruction_loss", f"a PairIndex over num_nodes={num_nodes}",
                                 f"a PairIndex over {edge_index.num_nodes} nodes")
        return edge_index
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ParameterError("edge_index", "reconstruction_loss", "a tensor of shape (2, E)",
                             tuple(getattr(edge_index, "shape", ())) or type(edge_index).__name__)
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ParameterError("edge_index", "reconstruction_loss", f"node indices in [0, {num_nodes})",
                             f"indices in [{int(edge_index.min())}, {int(edge_index.max())}]")
    return PairIndex.from_pairs(edge_index, num_nodes)


def _weighted_pairs(edge_index: Tensor | PairIndex, num_nodes: int, edge_weight: Tensor) -> PairIndex:
    """The pairs of ``edge_index`` with ``edge_weight: (m,)`` (finite, >= 0), one per pair."""
    pairs = edge_index.pairs() if isinstance(edge_index, PairIndex) else edge_index
    index = as_pair_index(edge_index, num_nodes)
    w = torch.as_tensor(edge_weight)
    if w.dim() != 1 or w.numel() != index.num_pairs:
        raise ParameterError("edge_weight", "reconstruction_loss", f"a ({index.num_pairs},) tensor, one weight per "
                             "edge", tuple(w.shape))
    if w.numel() and not bool((torch.isfinite(w) & (w >= 0)).all()):
        raise ParameterError("edge_weight", "reconstruction_loss", "finite weights >= 0",
                             f"a weight of {w[~(torch.isfinite(w) & (w >= 0))][0].item()}")
    return PairIndex.from_pairs(torch.as_tensor(pairs), num_nodes, w)
