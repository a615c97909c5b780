"""A finished run as the Python API hands it (``gaescale.Run``): its directory read back
(:class:`gaescale.run.rundir.RunDir`: embeddings keyed by id, the graph, held-out pairs, metrics) and the commands
on it, as the CLI runs them: :meth:`Run.topk` (``gaescale topk``), :meth:`Run.score` (``gaescale score``) and
:meth:`Run.embed` (``gaescale embed``).

    run = gaescale.Run.open("runs/edges")
    run.topk(10, nodes=["alice", "bob"])
"""
from __future__ import annotations

from .embed import embed as embed_with
from .predict import score_pairs, topk_links
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
