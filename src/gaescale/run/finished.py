"""A finished run as the Python API hands it (``gaescale.Run``): its directory read back
(:class:`gaescale.run.rundir.RunDir`: embeddings keyed by id, the graph, held-out pairs, metrics) and the commands
on it, as the CLI runs them: :meth:`Run.topk` (``gaescale topk``), :meth:`Run.score` (``gaescale score``) and
:meth:`Run.embed` (``gaescale embed``); and :func:`to_pyg`, a run's embeddings and graph as a PyG ``Data``.

    run = gaescale.Run.open("runs/edges")
    run.topk(10, nodes=["alice", "bob"])
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import GaescaleError, Got, ParameterError
from ..pyg import csr_edge_index
from .embed import embed as embed_with
from .predict import score_pairs, topk_links
from .result import RunResult
from .rundir import RunDir


class Run(RunDir):
    """A finished run directory (``Run.open(path)``) with the commands of the Python API."""

    def topk(self, k: int = 10, *, nodes=None, exclude_existing: bool = False, out=None, index=None,
             log=None) -> dict:
        """The ``k`` most likely new links of every node, or of ``nodes`` (original ids: a list, a 1-D array, or one
        id), as ``gaescale topk`` ranks them: the columns ``node, rank, candidate, score`` (the logit),
        ``probability``, written to ``out`` (.tsv/.csv/.parquet) if given. See
        :func:`gaescale.run.predict.topk_links`."""
        return topk_links(self, k, nodes=nodes, exclude_existing=exclude_existing, out=out, log=log, index=index)

    def score(self, pairs, *, out=None) -> dict:
        """The scores of id pairs, as ``gaescale score`` gives them: ``pairs`` a file of id pairs (a path; ``-``:
        stdin) or an array of original ids, ``(P, 2)`` (a list of ``(source, target)`` tuples) or ``(2, P)``; the
        columns ``source, target, score`` (the logit of the run's decoder), ``probability``, written to ``out``
        (.tsv/.csv/.parquet) if given. See :func:`gaescale.run.predict.score_pairs`."""
        return score_pairs(self, pairs, out=out)

    def embed(self, edges, features=None, *, out=None, ids: str | None = None, header: str | None = None,
              block: int | str | None = "auto", log=None):
        """Embeddings of every node of the edge list ``edges`` (old and new ids) with this run's trained encoder,
        without retraining: an :class:`gaescale.run.embed.Embedded` (``node_ids``, ``embeddings: (N, d)``,
        ``node_bias``, ``known``), written to ``out`` (.npy, .tsv, .csv, .parquet) if given. See
        :func:`gaescale.run.embed.embed`."""
        return embed_with(self, edges, features, out=out, ids=ids, header=header, block=block, log=log)


def to_pyg(run):
    """A run's embeddings as a PyG ``Data``: ``x: (N, d)`` the embeddings, ``edge_index: (2, 2E)`` the run's
    graph (both directions, every edge of the cleaned input graph, held-out ones included; a directed run's
    ``(2, E)``, each edge ``(u, v)`` once), ``num_nodes``,
    ``node_ids: (N,)`` the original ids (a NumPy array), with the bias decoder ``node_bias: (N,)`` and, for a
    weighted run (``--weighted``), ``edge_weight: (2E,)`` float32, the weight of each column of ``edge_index``
    (graph.npz's ``data``; :func:`from_pyg` reads it back). ``run``: a :class:`gaescale.RunResult` or a run
    directory (``--out``)."""
    try:
        from torch_geometric.data import Data
    except ImportError:
        raise GaescaleError("to_pyg needs torch_geometric (pip install torch_geometric); it is optional for the "
                            "rest of gaescale.") from None
    if isinstance(run, RunResult):
        if run.csr is None:
            raise ParameterError("run", "to_pyg", "a RunResult holding its graph (rank 0's)", Got("csr=None"))
        emb, ids, bias = run.embeddings, run.node_ids, run.node_bias
        indptr, indices, weight = (*run.csr, None)[:3]  # a weighted run's csr holds its weights third
    else:
        r = RunDir.of(run)
        graph = r.graph()
        csr = graph.out if r.directed else graph  # a directed run's DiGraph: its out-CSR, each edge once
        emb, ids, bias, indptr, indices, weight = (r.embeddings, r.node_ids, r.node_bias, csr.indptr, csr.indices,
                                                   csr.data)
    data = Data(x=torch.from_numpy(np.ascontiguousarray(emb, dtype=np.float32)),
                edge_index=csr_edge_index(indptr, indices), num_nodes=int(emb.shape[0]))
    if weight is not None:
        data.edge_weight = torch.from_numpy(np.array(weight, np.float32))
    data.node_ids = np.asarray(ids)
    if bias is not None:
        data.node_bias = torch.from_numpy(np.asarray(bias, np.float32))
    return data
