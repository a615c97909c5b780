"""The kinds of graph that :func:`gaescale.train` trains on: an object chosen once from the configuration
(:func:`kind_of`) that owns what differs between them, while the pipeline (:mod:`gaescale.run.pipeline`) runs the
same steps for every kind.

A kind has (each called once, in this order, by the pipeline):

- ``check(config, runtime, *, prepared, custom)``: refuse, before anything is read, what it cannot do;
- ``read(config, data, log, *, out, runtime) -> Inputs``: the graph (:class:`gaescale.graph.Graph`, or a directed
  graph), its features and its ids;
- ``choose(config, graph, num_features, log, *, prepared, device, runtime) -> (strategy, config)``: the training
  strategy, and the configuration resolved for it;
- ``place(config, graph, x, strategy, *, prepared, out, runtime, device, log) -> (config, Placement)``: the split
  (and shards), logged, and the configuration resolved for the training graph;
- ``run_graph(graph) -> tuple``: the arrays graph.npz holds (a CSR, and a weighted graph's weights);
- ``build_model(config, num_features, num_nodes, custom=None)``: the model, its weights drawn from torch's
  generator;
- ``train_pairs(config, placed, train_graph)``: the pairs full-batch training reconstructs;
- ``heldout_metrics(config, model, fitted, placed, log, *, test) -> dict``: validation and test scores next to
  the link heuristics on the same split.

:class:`Undirected` is here; :class:`gaescale.directed.kind.Directed` keeps edge direction.
"""
from __future__ import annotations

import copy
from typing import Any

import torch

from ..config import TrainConfig
from ..data.inputs import Inputs, read_inputs
from ..data.weights import refuse_unsupported
from ..directed.kind import Directed
from ..encoders import ENCODERS
from ..graph import Graph, with_self_loops
from ..models import GAE, VGAE, HadamardMLP
from ..parallel.placement import Placement, place
from ..parallel.reading import read_on_ranks
from ..pyg import check_custom_encoder
from ..sparse import PairIndex
from ..structure import FEATURES, StructuralPart, StructuralScores
from ..training.buckets import EdgeSample
from ..training.evaluate import link_scores
from ..training.heldout import baseline_metrics, test_metrics, verdict
from ..training.strategies import weighted_pairs
from .ranking import resolve_structure
from .result import Fitted
from .strategy import choose_strategy, size_table


def kind_of(config: TrainConfig):
    """The kind of graph ``config`` trains on: :class:`gaescale.directed.kind.Directed` with ``directed=True``,
    else :class:`Undirected`."""
    return Directed() if config.directed else Undirected()


def build_model(config: TrainConfig, in_dim: int | None, num_nodes: int, custom=None, *, table: str = "weights") -> GAE:
    """The GAE (or VGAE) of ``config`` (``encoder='auto'`` resolved for ``in_dim`` features, None: a learnt
    table, in the first layer's weight or with ``table='input'`` given as the input, :class:`gaescale.encoders.GCN`);
    a VGAE's encoder outputs ``2 * dim`` columns (mean and log std). ``custom``: the encoder given as
    ``train(encoder=module)`` (e.g. :class:`gaescale.pyg.PyGEncoder`) instead of the config's."""
    config = config.for_graph(in_dim)
    dims = config.encoder_dims
    encoder = ENCODERS["gcn" if config.encoder == "linear" else config.encoder]
    pair_decoder = HadamardMLP(config.dim) if config.decoder == "hadamard" else None
    if custom is None:
        custom = encoder(in_dim, dims, num_nodes=num_nodes, dropout=config.dropout,
                         **({} if table == "weights" else {"table": table}))
    return (VGAE if config.variational else GAE)(custom,
                                                  node_bias=num_nodes if config.decoder == "bias" else None,
                                                  pair_decoder=pair_decoder,
                                                  structure=StructuralPart() if config.structure == "on" else None)


class Undirected:
    """An undirected graph (edges ``u < v``, symmetric CSR): every strategy, torchrun, prepared graphs, custom
    encoders and the structural part of the logit."""

    name = "undirected"

    def check(self, config: TrainConfig, runtime, *, prepared: bool, custom: torch.nn.Module | None) -> None:
        """The weights' refusals (:func:`gaescale.data.weights.refuse_unsupported`) and what a ``custom`` encoder
        module cannot do (:func:`gaescale.pyg.check_custom_encoder`)."""
        refuse_unsupported(config, prepared=prepared, world_size=runtime.world_size)
        if custom is not None:
            check_custom_encoder(custom, config, runtime, prepared=prepared)

    def read(self, config: TrainConfig, data, log, *, out, runtime) -> Inputs:
        """:func:`gaescale.data.inputs.read_inputs`; the ranks of a torchrun group read as
        :func:`gaescale.parallel.reading.read_on_ranks` says (given ``data``, each holds it already)."""
        if data is None and runtime.world_size > 1:
            return read_on_ranks(config, log, out, runtime)
        return read_inputs(config, data, log, out=out)

    def choose(self, config: TrainConfig, graph: Graph, num_features: int | None, log, *, prepared: bool, device,
               runtime) -> tuple[str, TrainConfig]:
        # the largest bucket of a featureless graph's table on disk (partitioned) from its edges, not the worst case
        sample = EdgeSample.of(graph) if num_features is None else None
        strategy, chosen = choose_strategy(config, graph.num_nodes, graph.num_edges, num_features, log,
                                           prepared=prepared, device=device, runtime=runtime, sample=sample)
        if strategy == "partitioned":
            config = size_table(config, graph, num_features, log, prepared=prepared, device=device, sample=sample,
                                chosen=chosen)
        return strategy, resolve_structure(config, strategy, runtime)

    def place(self, config: TrainConfig, graph: Graph, x, strategy: str, *, prepared: bool, out, runtime, device,
              log) -> tuple[TrainConfig, Placement]:
        return config, place(config, graph, x, strategy, prepared=prepared, out=out, runtime=runtime, device=device,
                             log=log)

    def run_graph(self, graph: Graph) -> tuple:
        """The full graph's CSR ``(indptr, indices[, data])``: graph.npz (topk --exclude-existing, the report)."""
        return (graph.indptr, graph.indices) if graph.data is None else (graph.indptr, graph.indices, graph.data)

    build_model = staticmethod(build_model)

    def train_pairs(self, config: TrainConfig, placed: Placement, train_graph: Graph) -> PairIndex:
        """The training edges (plus ``(i, i)`` for every node when the target is ``A + I``) as the
        :class:`gaescale.sparse.PairIndex` full batch trains on, a weighted graph's with their weights; read from the
        training graph's CSR, with no ``(2, E)`` array left behind."""
        if train_graph.weighted:
            return weighted_pairs(train_graph, config.self_loops)
        edges = with_self_loops(train_graph.edge_index(), train_graph.num_nodes, config.self_loops)
        return PairIndex.from_pairs(torch.from_numpy(edges), train_graph.num_nodes)

    def heldout_metrics(self, config: TrainConfig, model: GAE, fitted: Fitted, placed: Placement, log, *,
                        test: bool) -> dict[str, Any]:
        """Validation and test scores of ``fitted.z: (N, d)`` (:func:`gaescale.training.heldout.test_metrics`) with
        the model's decoder and structural part, and the heuristics on the same test pairs; None where a split part
        is empty."""
        split = placed.split
        train_graph = placed.train_graph if placed.shards is None else None
        structure = None if model.structure is None else StructuralScores(fitted.features, model.structure.weights)
        how = dict(metric=model.metric(fitted.z), decoder=_on_cpu(model.pair_decoder), structure=structure)
        metrics = _heldout(fitted.z, split, train_graph, config.seed, log, how=how, test=test)
        if structure is not None:
            metrics["structure_weights"] = dict(zip(FEATURES, structure.weights.tolist()))
        return metrics


def _heldout(z: torch.Tensor, split, train_graph: Graph | None, seed: int, log, *, how: dict,
             test: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {"val_auc": None, "val_ap": None, "test_auc": None, "test_ap": None}
    if split.val_pos.shape[1]:
        metrics["val_auc"], metrics["val_ap"] = link_scores(z, split.val_pos, split.val_neg, **how)
    if test and split.test_pos.shape[1]:
        metrics.update(test_metrics(z, split, seed=seed, train_graph=train_graph, **how, embeddings_only=True))
        metrics["baselines"] = _baselines(train_graph, split, log, seed)
        metrics.update(verdict(metrics))
    return metrics


def _baselines(train_graph: Graph | None, split, log, seed: int) -> dict | None:
    """The link heuristics on the test split (:func:`gaescale.heldout.baseline_metrics`), or None where rank 0
    does not hold the whole training graph (neighbour sampling over several processes: it holds its shard)."""
    if train_graph is None:
        log("baselines: not computed (the training graph is sharded over the processes)")
        return None
    return baseline_metrics(train_graph, split, seed=seed)


def _on_cpu(module: torch.nn.Module | None) -> torch.nn.Module | None:
    """A CPU copy of ``module`` (the pair decoder scores the CPU embeddings; the model stays where it is)."""
    return None if module is None else copy.deepcopy(module).cpu()
