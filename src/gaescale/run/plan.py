"""Memory planner: the predicted peak memory and work of one training epoch for each strategy, from the
graph's size and the model's widths, counted array by array; and the choice behind ``--strategy auto``.

What is predicted is the peak resident memory of the training phase: everything the pipeline holds
while it trains (the edge list, the full graph's CSR kept for the outputs, the split, the training
graph and its GCN operator, features, the model) plus what the strategy's steps allocate. Reading the
edge list and building the graph peak separately and are not modelled. Every term is a count of the
arrays the code allocates (8 bytes per int64, 4 per int32/float32); ``BASE`` is the interpreter with
torch, NumPy, SciPy and scikit-learn imported, measured. bench/bench_plan.py checks the predictions
against measured peaks.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

from ..config import TrainConfig
from ..errors import ParameterError
from ..optional import available, install_hint
from ..outputs import MAPPED_MIN_BYTES
from ..rules import partitioned_refusals
from ..structure import CANDIDATE_BUDGET, MEMO_BYTES
from ..training.buckets import DiskTable, EdgeSample, PartitionBuckets

BASE = 480 * 2**20  # bytes: python + torch + numpy + scipy + sklearn + gaescale, measured on the CPU build
# Preference of --strategy auto among the strategies that fit: full batch optimises the exact objective;
# FastGAE keeps the full forward and subsamples the loss; Cluster-GCN only holds a batch's activations;
# neighbour sampling last (its computation graph reaches most of a well-connected graph; BENCHMARKS.md).
# A featureless graph whose learnt table does not fit: the table on disk, trained in partitions (PyTorch-BigGraph's).
AUTO_ORDER = ("full", "fastgae", "cluster", "neighbor", "partitioned")
MAX_TABLE_PARTS = 256  # partitioned: the most partitions the planner tries for a budget (32,896 buckets an epoch)
NEEDS = {"cluster": "pymetis"}  # the optional package (gaescale.optional) a strategy trains with


@dataclass(frozen=True)
class StrategyPlan:
    """One strategy's prediction: ``peak_bytes`` of the training phase (``resident_bytes`` held by the
    pipeline when training starts + ``step_bytes``, the most that training and evaluation add on top:
    building the full graph's operator, or a step or an evaluation pass with the operator kept), and its
    work per epoch: ``sparse_madds``
    (multiply-adds of sparse-dense products, forward and backward), ``pair_evals`` (inner products
    ``z_i . z_j`` scored by the loss) and ``steps``. ``setup_bytes``: what the strategy adds to the resident
    memory before training, once (METIS for Cluster-GCN); the peak is the larger of the two phases."""

    strategy: str
    resident_bytes: int
    step_bytes: int
    sparse_madds: float
    pair_evals: float
    steps: int
    note: str = ""
    setup_bytes: int = 0
    table_bytes: int = 0  # of resident_bytes: a featureless first layer's learnt table, its gradient and Adam's state
    table_parts: int = 0  # partitioned's partitions of the table on disk

    @property
    def peak_bytes(self) -> int:
        return self.resident_bytes + max(self.step_bytes, self.setup_bytes)


# Measured per-unit costs (torch 2.13 CPU, bench/bench_plan.py): building a graph's GCN operator peaks at
# 38 bytes per entry (SciPy's A + I, its sorted copy, float64 normalisation, the torch copy); a forward and
# backward pass holds 6.4 bytes per node and unit of width summed over layers, a no-grad forward 4.8; each
# scored pair (a training edge or a sampled pair) costs 23 bytes in the loss and its backward.
BUILD_PER_ENTRY = 38.0
TRAIN_PER_NODE_WIDTH = 6.4
EVAL_PER_NODE_WIDTH = 4.8
PER_PAIR = 23.0
# What the first step and evaluation add whatever the graph's size (MKL's and OpenMP's buffers, torch's
# autograd state, scikit-learn imported for the first validation AUC): measured at 200,000 nodes.
STEP_BASE = 280 * 2**20
# A partitioned bucket's step measured against the arrays counted in _partitions (BENCHMARKS.md, issue 31): at 100M
# nodes in 8 partitions 1.07x (anonymous peak 20.73 GiB, 19.63 predicted unscaled), at 8M nodes 1.24x (freed buffers
# the allocator keeps between buckets, and the pairs' CSR of sparse.ordered_pair_logits).
PARTITIONED_STEP_SCALE = 1.25
# METIS (pymetis.part_graph) on the whole graph's CSR, before Cluster-GCN trains: 76 bytes per CSR entry over what
# the process held (1,000,000 nodes, 17.8M entries: 1.35 GB; its coarsened copies and the int64 copy pymetis makes).
METIS_PER_ENTRY = 76.0
# The filtered ranking of the held-out edges against every node (gaescale.norm_order.NormOrder): float64 norms, the
# int64 order and the stable sort's buffers, 43 bytes per node over what evaluation held (bench/bench_eval_memory.py,
# 10,000,000 nodes).
RANKING_PER_NODE = 44.0
# The AUC/AP of a held-out set (validation's, then test's): its edges' and non-edges' float64 scores (16 bytes an
# edge) while gaescale.training.evaluate.auc_ap sorts them (24 bytes a score, 48 an edge).
HELDOUT_PER_EDGE = 64.0
# Full batch keeps the transpose of its training edges (gaescale.sparse.PairIndex.keep_transpose): their int32 rows
# in column order and that order, 8 bytes an edge, and an (N + 1,) int32 indptr.
TRANSPOSE_PER_PAIR = 8.0
# The structural part (gaescale.structure). Full batch keeps a two-hop pool of up to pool_ratio pairs a training edge
# (its PairIndex's int32 columns, float32 phi and weight, and its kept transpose: 28 bytes a pair and two (N + 1,)
# int32 indptrs) and phi of the training edges (12 bytes each); with hard negatives, the pool's non-edges too
# (columns and phi: up to 16 bytes a pool pair, another indptr). Above 2^31 - 1 pairs or nodes the indices are int64
# (gaescale.sparse.index_dtype): 4 bytes more a pair, within the margin of PER_PAIR's measured step.
# Every evaluation's pair features are remembered up to MEMO_BYTES, and a batch of queries expands at most
# CANDIDATE_BUDGET two-hop paths (their candidates' rows, nodes and three features, with one of the three sparse
# products they come from: 23-65 bytes a path at the peak, tracemalloc on email-Enron, hk-50k and musae-facebook).
POOL_PER_PAIR = 20.0 + TRANSPOSE_PER_PAIR
# Full batch draws its uniform pairs as shifts of a random node order (gaescale.shifts.ShiftedPairs), into arrays kept
# across epochs: the pairs' int32 second nodes, their transpose's first nodes and order (12 bytes a pair), two (N + 1,)
# indptrs and three (N,) arrays (the node order, its inverse, the positions).
SHIFTED_PER_PAIR = 12.0
SHIFTED_PER_NODE = 20.0
EDGE_PHI_PER_EDGE = 12.0
HARD_NEGATIVES_PER_PAIR = 16.0
STRUCTURE_EVAL = MEMO_BYTES + 72 * CANDIDATE_BUDGET
# A partitioned bucket's step with the structural part: its edges' global ends (16 bytes an edge) and phi (12; float32,
# computed in chunks), the structural logits and their sum with the embeddings' (8), its drawn two-hop pairs (fewer
# than its edges).
STRUCTURE_PER_EDGE = 40.0


def _structure_on(config: TrainConfig) -> bool:
    """Whether the strategies that can train the structural part count it: unless it is off or a pair decoder is used
    (where ``auto`` turns it on, :func:`gaescale.run.ranking.resolve_structure`)."""
    return config.structure != "off" and config.decoder != "hadamard"


def _activations(n: float, widths: list[int], sage: bool, *, train: bool = True) -> float:
    """Peak bytes of a pass over ``n`` nodes (GraphSAGE keeps a second linear output per layer)."""
    per = TRAIN_PER_NODE_WIDTH if train else EVAL_PER_NODE_WIDTH
    return per * n * sum(widths) * (1.5 if sage else 1.0)


def _build(n: float, e: float, sage: bool) -> float:
    """Peak bytes while building a graph's operator (GraphSAGE: ``D^-1 A`` and its transpose)."""
    return BUILD_PER_ENTRY * ((4 * e) if sage else (2 * e + n))


def _operator(n: float, e: float, sage: bool) -> float:
    """The torch CSR operator(s) of a graph with ``e`` undirected edges: int32 columns and float32
    values over ``2e + n`` entries (GCN, with self loops) or ``2e`` twice (GraphSAGE: A and A^T)."""
    return 2 * (8.0 * 2 * e + 4 * (n + 1)) if sage else 8.0 * (2 * e + n) + 4 * (n + 1)


def _graph(n: float, e: float) -> float:
    """A :class:`Graph`: int64 indptr, int32 indices of both directions, cached int64 degrees."""
    return 16.0 * n + 8 + 8.0 * e


def _layerwise(n: float, widths: list[int], in_width: float) -> float:
    """Peak anonymous bytes of layer-wise inference over a prepared graph (:meth:`gaescale.encoders.GCN.layerwise`):
    a layer's input (the features for the first, already resident), its output, and ``lin(h)`` for all nodes when the
    layer narrows; the row blocks are small next to them. An array of ``MAPPED_MIN_BYTES`` or more is a file's pages
    (:class:`gaescale.outputs.MappedBuffers`), not the process's."""
    def anonymous(width: float) -> float:
        size = 4 * n * width
        return size if size < MAPPED_MIN_BYTES else 0.0

    peak, prev = 0.0, 0.0
    for w_in, w_out in zip([in_width or widths[0]] + widths[:-1], widths):
        peak = max(peak, prev + anonymous(w_out) * (2 if w_in > w_out else 1))
        prev = anonymous(w_out)
    return peak


def _prepared_evaluation(n: float, widths: list[int], in_width: float, sage: bool, bias: bool,
                         heldout: float) -> float:
    """Peak bytes that embedding and evaluation add over a prepared graph: layer-wise inference, then the embeddings
    (with the bias decoder's two columns; mapped where large) and the largest of the filtered ranking's order of the
    nodes, the outputs' contiguous copy of the embeddings and biases, and a held-out set's AUC (``heldout``); and the
    training graph's ``(N, 1)`` float32 scale of the propagation, which the first layer-wise pass caches on it."""
    z = 4 * n * (widths[-1] + (2 if bias else 0))
    after = (z if z < MAPPED_MIN_BYTES else 0.0) + max(RANKING_PER_NODE * n, 4 * n * (widths[-1] + 1), heldout)
    return max(_layerwise(n, widths, in_width) * (1.5 if sage else 1.0), after) + STEP_BASE + 4 * n


def plan(config: TrainConfig, num_nodes: int, num_edges: int, num_features: int | None, *,
         prepared: bool = False, budget: int | None = None, sample: EdgeSample | None = None) -> list[StrategyPlan]:
    """Predictions for every strategy (in :data:`AUTO_ORDER`) for a graph of ``num_nodes`` nodes,
    ``num_edges`` undirected edges and ``num_features`` features per node (None: featureless), with the
    model, loss and strategy options of ``config`` (unset strategy options take their defaults).

    ``prepared``: the graph is a memory-mapped directory of ``gaescale prepare``. Its CSR arrays and the
    training graph's column indices are then file-backed pages (page cache the kernel can drop, not
    counted); the pipeline holds no edge list; Cluster-GCN and neighbour sampling evaluate layer by layer
    instead of building the whole graph's operator.

    ``partitioned`` without ``config.table_parts``: the fewest partitions whose peak fits ``budget`` bytes (given),
    with the largest bucket's edges from ``sample`` (the graph's, :class:`EdgeSample`), or without it every edge of
    a bucket's nodes (a locality order's worst case)."""
    for name, value in (("num_nodes", num_nodes), ("num_edges", num_edges)):
        if not isinstance(value, int) or value < 1:
            raise ParameterError(name, "plan", "an int >= 1", value)
    config = config.for_graph(num_features)
    n, e = float(num_nodes), float(num_edges)
    et = e * (1.0 - config.val_fraction - config.test_fraction)  # training edges
    f = float(num_features or 0)
    widths = config.encoder_dims
    sage = config.encoder == "sage"
    # The table of a featureless first layer: weight, gradient and Adam's two moments; so the per-node biases.
    table = 0.0 if num_features else 16.0 * n * widths[0] * (2 if sage else 1)
    bias = config.decoder == "bias"
    table_and_bias = table + (16.0 * n if bias else 0.0)
    resident = _resident(n, e, et, f, prepared) + table_and_bias
    # The full graph's operator is built on the first full forward (a step, or the first evaluation) and
    # kept with the propagated features; evaluation runs a no-grad forward over all nodes.
    first = _build(n, et, sage) + STEP_BASE
    kept = _operator(n, et, sage) + 4 * n * f
    heldout = HELDOUT_PER_EDGE * e * max(config.val_fraction, config.test_fraction)
    evaluation = max(_activations(n, widths, sage, train=False), heldout) + STEP_BASE
    # Mini-batch strategies on a prepared graph never build the whole graph's operator: layer-wise inference.
    minibatch_first, minibatch_kept, minibatch_eval = first, kept, evaluation
    if prepared:
        minibatch_first, minibatch_kept = 0.0, 0.0
        minibatch_eval = _prepared_evaluation(n, widths, f, sage, bias, heldout)
    # The structural part, where auto turns it on (full batch and neighbour sampling): its evaluation's pair features
    # and candidates, and full batch's two-hop pool and training edges' phi
    structure = STRUCTURE_EVAL if _structure_on(config) else 0.0
    m = config.neg_ratio * et  # sampled pairs of the dense term per full-batch step
    in_width = f if num_features else 0.0
    per_pass = sum(a * b for a, b in zip([in_width or widths[0]] + widths[:-1], widths))
    spmm_width = widths[0] + 2 * sum(widths[1:])  # forward + backward products, narrowest side first
    plans = []
    full_step = STEP_BASE + 8 * n + _activations(n, widths, sage) + PER_PAIR * (et + m)
    two_hop = _two_hop(config, n, et) if structure else 0.0
    transpose = TRANSPOSE_PER_PAIR * et + 4 * n + _shifted(n, m)
    plans.append(StrategyPlan("full", int(resident),
                              int(max(first, kept + transpose + two_hop + max(full_step, evaluation + structure))),
                              (2 * et + n) * spmm_width + n * per_pass, 2 * et + m, 1))
    opts = config.strategy_options(num_nodes)
    size = opts["fastgae_nodes"]
    es = et * (size / n) ** 2 * 4  # edges inside a degree-biased sample: ~4x a uniform one's (measured)
    fast_step = STEP_BASE + _activations(n, widths, sage) + 24 * n + PER_PAIR * es * (1 + config.neg_ratio) + 100 * es
    plans.append(StrategyPlan("fastgae", int(resident), int(max(first, kept + max(fast_step, evaluation))),
                              (2 * et + n) * spmm_width + n * per_pass, es * (1 + config.neg_ratio), 1,
                              f"{size:,}-node subgraphs"))
    parts, per_batch = opts["cluster_parts"], opts["clusters_per_batch"]
    nb = n * min(1.0, per_batch / parts)
    eb = et * 0.78 * min(1.0, per_batch / parts)  # METIS keeps ~78% of the edges inside parts (measured)
    steps = -(-parts // per_batch)
    batch_step = (STEP_BASE + 8 * n + _graph(nb, eb) + max(_build(nb, eb, sage), _operator(nb, eb, sage)
                  + _activations(nb, widths, sage) + PER_PAIR * eb * (1 + config.neg_ratio)))
    plans.append(StrategyPlan("cluster", int(resident + 8 * n),
                              int(max(minibatch_first, minibatch_kept + max(batch_step, minibatch_eval))),
                              steps * ((2 * eb + nb) * spmm_width + nb * per_pass),
                              steps * eb * (1 + config.neg_ratio), steps, f"{parts:,} parts, {per_batch} per step; "
                              f"METIS first: {METIS_PER_ENTRY * 2 * e / 2**30:.2f} GiB", int(METIS_PER_ENTRY * 2 * e)))
    plans.append(_neighbor(config, n, e, et, resident, (minibatch_first, minibatch_kept, minibatch_eval + structure),
                           per_pass, spmm_width))
    plans = [replace(p, table_bytes=int(table)) for p in plans]
    if not num_features and not sage:  # the table on disk: resident without it, only the per-node biases' state
        plans.append(_partitioned(config, n, et, resident - table, (minibatch_first, minibatch_kept,
                                  minibatch_eval + structure), per_pass, spmm_width, budget, sample))
    return plans


def _resident(n: float, e: float, et: float, f: float, prepared: bool) -> float:
    """Bytes held from the start of training to its end, but a learnt table and the per-node biases: over a prepared
    graph the training graph's indptr and degrees, the held-out edges and non-edges and the features (no edge list);
    in memory also the edge list, the full graph's CSR, the training edges and the training graph."""
    if prepared:
        return BASE + 16.0 * n + 32 * (e - et) + 4 * n * f
    return (BASE                          # what training starts from
            + 16 * e                      # the edge list (2, E) int64, kept by the caller
            + 8 * n + 8 * e               # the full graph's CSR, kept for graph.npz
            + 16 * et + 32 * (e - et)     # the split: training edges, held-out edges and non-edges
            + _graph(n, et) + 4 * n * f)


def _shifted(n: float, m: float) -> float:
    """Bytes full batch keeps for drawing ``m`` uniform pairs over ``n`` nodes (:data:`SHIFTED_PER_PAIR`)."""
    return SHIFTED_PER_PAIR * m + SHIFTED_PER_NODE * n + 8


def _two_hop(config: TrainConfig, n: float, et: float) -> float:
    """Bytes full batch keeps for the structural part: the two-hop pool and the training edges' phi, and with hard
    negatives the pool's non-edges (:data:`POOL_PER_PAIR`, :data:`EDGE_PHI_PER_EDGE`,
    :data:`HARD_NEGATIVES_PER_PAIR`; :meth:`gaescale.config.TrainConfig.pool_size` pool pairs)."""
    hard = bool(config.hard_negatives)
    pool = config.pool_size(et)
    return (POOL_PER_PAIR + hard * HARD_NEGATIVES_PER_PAIR) * pool + EDGE_PHI_PER_EDGE * et + 4 * (2 + hard) * n


def _neighbor(config: TrainConfig, n: float, e: float, et: float, resident: float,
              evaluation: tuple[float, float, float], per_pass: float, spmm_width: float) -> StrategyPlan:
    """``neighbor``: a step holds its sampled computation graph (:func:`_neighbour_reach`) and its operator; with the
    structural part (on unless ``structure='off'`` or a pair decoder), as many two-hop pairs as edges too (their
    endpoints seed the computation graph)."""
    first, kept, evaluation = evaluation
    opts, widths, sage = config.strategy_options(int(n)), config.encoder_dims, config.encoder == "sage"
    batch, fanouts = opts["batch_size"], opts["fanouts"]
    pairs = 1 + config.neg_ratio + _structure_on(config)
    nc, ec, sampled_edges = _neighbour_reach(n, e, et, batch * pairs, fanouts)
    steps = -(-int(et) // batch)
    step = (STEP_BASE + 17 * n + 48 * sampled_edges + _graph(nc, ec)
            + max(_build(nc, ec, sage), _operator(nc, ec, sage)
                  + _activations(nc, widths, sage) + PER_PAIR * batch * pairs))
    return StrategyPlan("neighbor", int(resident), int(max(first, kept + max(step, evaluation))),
                        steps * ((2 * ec + nc) * spmm_width + nc * per_pass), steps * batch * pairs,
                        steps, f"{batch:,} edges per step, fan-outs {','.join(map(str, fanouts))}; "
                        f"computation graph ~{int(nc):,} nodes")


def _partitioned(config: TrainConfig, n: float, et: float, resident: float, evaluation: tuple[float, float, float],
                 per_pass: float, spmm_width: float, budget: int | None, sample: EdgeSample | None) -> StrategyPlan:
    """``partitioned`` (:class:`gaescale.training.buckets.PartitionBuckets`) with ``config.table_parts`` partitions,
    or the fewest from 2 (up to :data:`MAX_TABLE_PARTS` or the default) that fit ``budget`` (an epoch's work on nodes
    grows with the partitions: each partition is read, encoded and updated once per bucket, ``P + 1`` times an
    epoch), or, where none fits, the default."""
    default = config.strategy_options(int(n))["table_parts"]
    if config.table_parts or budget is None:
        return _partitions(config, n, et, resident, evaluation, per_pass, spmm_width, default, sample)
    for parts in range(2, min(int(n), max(default, MAX_TABLE_PARTS)) + 1):
        p = _partitions(config, n, et, resident, evaluation, per_pass, spmm_width, parts, sample)
        if p.peak_bytes <= budget:
            return replace(p, note=p.note + " (the fewest that fit the budget)")
    return _partitions(config, n, et, resident, evaluation, per_pass, spmm_width, default, sample)


def _partitions(config: TrainConfig, n: float, et: float, resident: float, evaluation: tuple[float, float, float],
                per_pass: float, spmm_width: float, parts: int, sample: EdgeSample | None) -> StrategyPlan:
    """``partitioned`` with ``parts`` partitions: the table a file's pages (not counted); a step holds two partitions'
    rows and state, the rows' copy and gradient, the bucket's subgraph as it is read from the epoch's edge buckets
    (:meth:`gaescale.training.buckets.BucketEdges.subgraph`: the buckets' int64 edges, shifted, then joined: 48 bytes
    an edge), and a Cluster-GCN step over it. Its edges: ``sample``'s largest bucket, or every edge of its nodes."""
    first, kept, evaluation = evaluation
    widths = config.encoder_dims
    nb, w = min(n, 2 * n / parts), widths[0]
    eb = et * sample.largest_share(parts) if sample is not None else min(et, et * 2 * nb / n)
    steps = parts * (parts + 1) // 2
    on = _structure_on(config)
    structure = STRUCTURE_PER_EDGE * eb if on else 0.0
    kept += 12 * (et + n) if on and PartitionBuckets.keeps_phi(int(n), int(2 * et)) else 0.0  # phi, across epochs
    step = PARTITIONED_STEP_SCALE * (
        STEP_BASE + 8 * n + nb * (4 * w + 4) + 8 * nb * w + 48 * eb + _graph(nb, eb) + structure
        + max(_build(nb, eb, False), _operator(nb, eb, False) + _activations(nb, widths, False)
              + PER_PAIR * eb * (1 + config.neg_ratio)))
    return StrategyPlan("partitioned", int(resident), int(max(first, kept + max(step, evaluation))),
                        steps * ((2 * eb + nb) * spmm_width + nb * per_pass), et * (1 + config.neg_ratio), steps,
                        f"table of {int(n):,} x {w} on disk ({DiskTable.nbytes(int(n), w) / 2**30:.2f} GiB with its "
                        f"state), {parts:,} partitions, {steps:,} buckets", table_parts=parts)


def _neighbour_reach(n: float, e: float, et: float, pairs: float, fanouts) -> tuple[float, float, float]:
    """``(nodes, training edges, sampled edges)`` of one neighbour-sampling step's computation graph: the endpoints
    of its ``pairs`` (edges, sampled pairs, two-hop pairs), then up to ``k`` neighbours of every new node per hop."""
    seeds = min(n, 2.0 * pairs)
    reach, frontier = seeds, seeds
    sampled_edges = 0.0
    for k in fanouts:  # each hop: up to k neighbours of every new node, at most the graph
        sampled_edges += frontier * min(k, 2 * e / n)
        frontier = min(n - reach, frontier * min(k, 2 * e / n))
        reach += frontier
    return min(n, reach), min(et, sampled_edges), sampled_edges


def budget_bytes(config: TrainConfig, device=None, environ=None) -> int:
    """``config.memory_budget`` in bytes (per process), or when it is unset the memory available now to this
    process: the host's, divided among the processes torchrun started on it (``LOCAL_WORLD_SIZE`` in
    ``environ``), and on a CUDA ``device`` at most the device's free memory (the plan counts one memory)."""
    if config.memory_budget:
        return int(config.memory_budget * 2**30)
    environ = os.environ if environ is None else environ
    budget = available_memory() // max(1, int(environ.get("LOCAL_WORLD_SIZE", "1")))
    if device is not None and torch.device(device).type == "cuda":
        budget = min(budget, torch.cuda.mem_get_info(device)[0])
    return budget


def choose(plans: list[StrategyPlan], budget: int, config: TrainConfig | None = None) -> StrategyPlan:
    """The first strategy of :data:`AUTO_ORDER` whose predicted peak fits ``budget`` bytes, among those
    ``config`` can train with (neighbour sampling needs ``dense='sampled'``) and whose optional package
    (:data:`NEEDS`: Cluster-GCN's pymetis) is installed."""
    missing = [p for p in plans if p.strategy in NEEDS and not available(NEEDS[p.strategy])]
    plans = [p for p in plans if p not in missing]
    refused = partitioned_refusals(config)[:1] if config is not None else []  # why the table cannot go on disk
    if refused:
        plans = [p for p in plans if p.strategy != "partitioned"]
    if config is not None and config.dense != "sampled":
        plans = [p for p in plans if p.strategy != "neighbor"]
        if not plans:
            raise ParameterError("dense", "train", "'sampled' when neighbour sampling is the only strategy planned",
                                 config.dense)
    by_name = {p.strategy: p for p in plans}
    for name in AUTO_ORDER:
        if name in by_name and by_name[name].peak_bytes <= budget:
            return by_name[name]
    smallest = min(plans, key=lambda p: p.peak_bytes)
    if smallest.table_bytes and smallest.peak_bytes - smallest.table_bytes <= budget:
        held = (f"; --strategy partitioned would keep it on disk but needs {refused[0][0]} {refused[0][1]}, not "
                f"{refused[0][2]!r}" if refused else "; give the nodes features (--features), or a narrower first "
                                                      "layer (--hidden)")
        raise ParameterError("memory_budget", "train", f"at least {smallest.peak_bytes / 2**30:.2f} GiB for a graph "
                             f"without features: its learnt input table (N x the first width, with its gradient and "
                             f"Adam's two moments: {smallest.table_bytes / 2**30:.2f} GiB) is held in memory{held}",
                             f"{budget / 2**30:.2f} GiB")
    would = [f"; '{p.strategy}' would fit but needs {NEEDS[p.strategy]} ({install_hint(NEEDS[p.strategy])})"
             for p in missing if p.peak_bytes <= budget]
    hint = ("raise --table-parts or narrow the first layer" if smallest.strategy == "partitioned"
            else "lower --batch-size or raise --cluster-parts")
    raise ParameterError("memory_budget", "train", f"at least {smallest.peak_bytes / 2**30:.2f} GiB, the smallest "
                         f"predicted peak (strategy '{smallest.strategy}'); {hint}{''.join(would)}",
                         f"{budget / 2**30:.2f} GiB")


def available_memory() -> int:
    """Bytes of memory available to this process now (Linux ``MemAvailable``; else the total)."""
    from .memory import proc_kib
    available = proc_kib("/proc/meminfo", "MemAvailable")
    if available is not None:
        return available
    import os
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def format_table(plans: list[StrategyPlan], num_nodes: int, budget: int | None = None) -> str:
    """The planner's table; the dense N x N matrix is listed for reference (float32, never built)."""
    rows = ["| strategy | predicted peak | fits | steps/epoch | sparse multiply-adds/epoch "
            "| pair evaluations/epoch | notes |",
            "|---|---:|:---:|---:|---:|---:|---|"]
    for p in plans:
        fits = "" if budget is None else ("yes" if p.peak_bytes <= budget else "no")
        rows.append(f"| {p.strategy} | {p.peak_bytes / 2**30:.2f} GiB | {fits} | {p.steps:,} | {p.sparse_madds:.3g} | "
                    f"{p.pair_evals:.3g} | {p.note} |")
    dense = 4.0 * num_nodes ** 2
    rows.append(f"| dense N x N matrix (reference) | {dense / 2**30:,.1f} GiB | "
                f"{'' if budget is None else ('yes' if dense <= budget else 'no')} | 1 | | "
                f"{float(num_nodes) ** 2:.3g} | the adjacency as one float32 matrix; gaescale never builds it |")
    return "\n".join(rows)


def plan_command(config: TrainConfig, graph: str | None, num_nodes, num_edges, num_features, *, log=None) -> str:
    """``gaescale plan``: the table for an edge list (``graph``) or for ``num_nodes`` and ``num_edges`` counts, and
    the choice of ``--strategy auto`` under the budget that ``train`` would plan with on ``config.device``."""
    if (graph is None) == (num_nodes is None and num_edges is None):
        raise ParameterError("graph", "plan", "an edge list, or --num-nodes and --num-edges, not both",
                             "both" if graph is not None else None)
    f = _count("num_features", num_features, 0)
    device = _device(config)  # before the graph is read: --device cuda without a GPU is refused at once
    from ..data.prepare import is_prepared, open_prepared
    prepared = graph is not None and is_prepared(graph)
    g = None
    if prepared:
        opened = open_prepared(graph)
        g, manifest = opened.graph, opened.manifest
        n, e = int(manifest["num_nodes"]), int(manifest["num_edges"])
        f = f or int(manifest.get("features") or 0)
    elif graph is not None:
        from ..data.readers import read_edges
        from ..graph import Graph
        data = read_edges(graph)
        g = Graph.from_edge_index(data.edge_index, data.num_nodes)
        n, e = data.num_nodes, g.num_edges
        if log:
            log(f"read {data.source}: {n:,} nodes, {e:,} undirected edges")
    else:
        n, e = _count("num_nodes", num_nodes, 1), _count("num_edges", num_edges, 1)
    budget = budget_bytes(config, device)  # as train's --strategy auto plans (run/strategy.py): a GPU's memory too
    capped = f" (at most {device}'s free memory)" if device.type == "cuda" and not config.memory_budget else ""
    config = config.for_graph(f or None)
    sample = EdgeSample.of(g) if g is not None and not f else None  # as train sizes partitioned's buckets
    plans = plan(config, n, e, f or None, prepared=prepared, budget=budget, sample=sample)
    lines = [f"{n:,} nodes, {e:,} edges, {f or 'no'} features, {config.encoder} "
             f"{'-'.join(map(str, config.encoder_dims))}{', VGAE' if config.variational else ''}; "
             f"budget {budget / 2**30:.2f} GiB{capped}", "",
             format_table(plans, n, budget), ""]
    try:
        lines.append(f"--strategy auto would train with: {choose(plans, budget, config).strategy}")
    except ParameterError as exc:
        lines.append(f"--strategy auto: no strategy fits ({exc})")
    return "\n".join(lines)


def _device(config: TrainConfig) -> torch.device:
    """The device ``train`` would run on with ``config.device`` (:func:`gaescale.devices.resolve_device`)."""
    from ..devices import resolve_device
    try:
        return resolve_device(config.device)
    except ParameterError as exc:  # --device cuda where torch sees no GPU
        raise exc.of("plan") from None


def _count(name: str, value, low: int) -> int:
    try:
        v = int(value)
        if v >= low and float(value) == v:
            return v
    except (TypeError, ValueError):
        pass
    raise ParameterError(name, "plan", f"an int >= {low}", value)
