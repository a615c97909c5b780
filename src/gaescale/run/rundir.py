"""The run directory (the ``--out`` of ``gaescale train``): written by :func:`write_run` (and metrics.json by the
pipeline), read back by :class:`RunDir`: embeddings keyed by the user's ids, the graph, the held-out pairs and the
metrics, for ``topk``, ``score`` and ``report``.

Layout (every file written atomically)::

    embeddings.npy  (N, d) float32, row i = line i + 1 of nodes.tsv
    node_bias.npy   (N,) float32, with --decoder bias: the logit of (i, j) is z_i . z_j + b_i + b_j
                    (--directed: (N, 2h) [z_s | z_t], the logit of (u, v) is z_s_u . z_t_v; graph.npz holds the
                    directed graph's out-CSR, indices (E,); see gaescale/directed/)
    nodes.tsv       original node ids, one per line
    graph.npz       indptr (N + 1,) int64, indices (2E,) int32: the full undirected graph, CSR (with --weighted also
                    data (2E,) float32, the weight of each entry); or
    graph.json      {"prepared": DIR} when the run trained on a 'gaescale prepare' directory (relative to the
                    run: its own copy, OUT/prepared)
    heldout.npz     val_pos, val_neg, test_pos, test_neg: (2, P) int64 node indices
    metrics.json    test/val AUC and AP, Hits@K, MRR, per-epoch history
    config.json, model.pt, checkpoints/
"""
from __future__ import annotations

import json
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from .._moved import moved_names
from .._version import __version__
from ..directed.graph import DiGraph
from ..errors import RunDirError
from ..graph import Graph
from ..models import split_bias
from ..outputs import atomic_write, read_ids, rows_of_ids, write_ids, write_json, write_npy, write_npz, write_torch
from .writer import finish_commit, manifest_sizes, unfinished_epoch


@dataclass
class RunDir:
    """A finished run directory read back (every file on first use; see the module's docstring). The Python API's
    :class:`gaescale.Run` adds the commands on it (topk, score, embed)."""

    path: Path

    @classmethod
    def of(cls, run) -> RunDir:
        """``run`` itself if it is one, else the run directory at the path ``run`` (:meth:`open`)."""
        return run if isinstance(run, RunDir) else cls.open(run)

    @classmethod
    def open(cls, path) -> RunDir:
        p = Path(path)
        if not p.is_dir():
            raise RunDirError(f"{p}: no such run directory; pass the --out directory of a finished 'gaescale train'.")
        _complete(p)
        for name in ("embeddings.npy", "nodes.tsv", "config.json"):
            if not (p / name).is_file():
                interrupted = " (an interrupted run's checkpoints are there: --resume continues it)" \
                    if unfinished_epoch(p) is not None else ""
                raise RunDirError(f"{p}: not a finished gaescale run ({name} is missing){interrupted}; "
                                  "pass the --out directory of a finished 'gaescale train'.")
        run = cls(p)
        if run.node_ids.size != run.embeddings.shape[0]:
            raise RunDirError(f"{p / 'nodes.tsv'}: has {run.node_ids.size} ids but embeddings.npy has "
                              f"{run.embeddings.shape[0]} rows; the run directory is inconsistent.")
        _check_sizes(p)
        return run

    @cached_property
    def node_bias(self) -> np.ndarray | None:
        """``(N,)`` float32 per-node biases of a ``--decoder bias`` run, else None."""
        if not (self.path / "node_bias.npy").is_file():
            return None
        try:
            b = np.load(self.path / "node_bias.npy", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise RunDirError(f"{self.path / 'node_bias.npy'}: not a readable .npy array ({exc}).") from None
        if b.shape != (self.embeddings.shape[0],):
            raise RunDirError(f"{self.path / 'node_bias.npy'}: expected shape ({self.embeddings.shape[0]},), one bias "
                              f"per row of embeddings.npy; got {b.shape}. The run directory is inconsistent.")
        return b.astype(np.float32, copy=False)

    def logits_form(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(z', metric)`` whose logits ``z'_u^T diag(metric) z'_v`` are the run's decoder's (:mod:`gaescale.models`):
        the embeddings and None, or with ``--decoder bias`` :func:`gaescale.models.with_bias` and its signs."""
        from ..models import bias_metric, with_bias
        z = torch.from_numpy(np.ascontiguousarray(self.embeddings, dtype=np.float32))
        if self.node_bias is None:
            return z, None
        z = with_bias(z, torch.from_numpy(self.node_bias))
        return z, bias_metric(z.shape[1])

    def ranking_form(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(queries, metric, targets)`` for :func:`gaescale.run.scan.top_k`: :meth:`logits_form` and None, or for
        a directed run ``z_s`` of the queries against ``z_t`` of the candidates (the halves of embeddings.npy)."""
        if not self.directed:
            return (*self.logits_form(), None)
        z = torch.from_numpy(np.ascontiguousarray(self.embeddings, dtype=np.float32))
        h = z.shape[1] // 2
        return z[:, :h], None, z[:, h:]

    @property
    def decoder(self) -> str | None:
        """The run's ``--decoder`` (None for a directory without config.json)."""
        return self.config().get("decoder") if (self.path / "config.json").is_file() else None

    @property
    def directed(self) -> bool:
        """Whether the run trained with ``--directed``: embeddings.npy holds ``[z_s | z_t]`` (two halves, with
        ``--decoder bias`` ``[z_s, b_s, 1 | z_t, 1, b_t]``; the symmetric part's ``z_u`` in both), the logit of
        ``(u, v)`` is the product of ``u``'s first half and ``v``'s second, and graph.npz
        the out-CSR of the directed graph (:mod:`gaescale.directed`)."""
        return bool((self.path / "config.json").is_file() and self.config().get("directed"))

    def pair_decoder(self):
        """The trained pair decoder of a ``--decoder hadamard`` run (:class:`gaescale.models.HadamardMLP`, from
        model.pt), else None."""
        if self.directed:
            from ..directed.model import SourceTarget
            return SourceTarget()
        if self.decoder != "hadamard":
            return None
        from ..models import HadamardMLP
        state = torch.load(self._file("model.pt"), weights_only=True)["state_dict"]
        own = {k[len("pair_decoder."):]: v for k, v in state.items() if k.startswith("pair_decoder.")}
        if "hidden.weight" not in own:
            raise RunDirError(f"{self.path / 'model.pt'}: holds no pair decoder, but config.json says "
                              "decoder='hadamard'; the run directory is inconsistent.")
        decoder = HadamardMLP(own["hidden.weight"].shape[1], own["hidden.weight"].shape[0])
        decoder.load_state_dict(own)
        return decoder.eval()

    def _file(self, name: str) -> Path:
        f = self.path / name
        if not f.is_file():
            raise RunDirError(f"{self.path}: {name} is missing; it is written by 'gaescale train' "
                              "at the end of a run: train again (or resume) to create it.")
        return f

    @cached_property
    def embeddings(self) -> np.ndarray:
        """``(N, d)`` float32."""
        try:
            # mapped copy-on-write: its pages are the file's (a 100M-node run's are 3 GB), writes never reach it
            z = np.load(self._file("embeddings.npy"), mmap_mode="c", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise RunDirError(f"{self.path / 'embeddings.npy'}: not a readable .npy array ({exc}).") from None
        if z.ndim != 2 or not np.issubdtype(z.dtype, np.floating):
            raise RunDirError(f"{self.path / 'embeddings.npy'}: expected a 2-D float array. "
                              f"Got shape {z.shape}, dtype {z.dtype}.")
        return np.ascontiguousarray(z, dtype=np.float32)

    @cached_property
    def node_ids(self) -> np.ndarray:
        """``(N,)`` the original ids from nodes.tsv (:func:`gaescale.outputs.read_ids`): int64 when every line is an
        integer written canonically (so ``007`` stays text), else str objects."""
        return read_ids(self._file("nodes.tsv"))

    def rows(self, ids, source: str, *, line_of=None, field: str | None = None) -> np.ndarray:
        """Rows ``(k,)`` int64 of the given original ids (compared as text); an unknown id is an error that
        names ``source`` (and its line, through ``line_of(i)``)."""
        from ..errors import InputFileError
        found = rows_of_ids(self.node_ids, ids)
        out = np.empty(len(found), np.int64)
        for i, (v, r) in enumerate(zip(ids, found)):
            if r is None:
                raise InputFileError(source, f"node id {str(v)!r} is not in the run ({self.path / 'nodes.tsv'}).",
                                     line=line_of(i) if line_of else None, field=field)
            out[i] = r
        return out

    def graph(self) -> Graph | DiGraph:
        """The run's whole graph: a :class:`Graph`, or for a directed run a :class:`gaescale.directed.graph.DiGraph`
        (graph.npz holds its out-CSR: ``num_edges`` counts the directed edges, as metrics.json does)."""
        ref = self.path / "graph.json"
        if ref.is_file() and not (self.path / "graph.npz").is_file():
            from ..data.prepare import open_prepared
            # relative: the run's own copy
            return open_prepared(self.path / str(self._json("graph.json").get("prepared"))).graph
        g = self._arrays("graph.npz")
        indptr, indices, data = g["indptr"], g["indices"], g.get("data")  # data: a weighted graph's edge weights
        if self.directed:
            n = int(indptr.size - 1)
            rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
            return DiGraph.from_edge_index(np.stack([rows, indices.astype(np.int64)]), n, clean=False,
                                           edge_weight=data)
        return Graph(indptr.astype(np.int64), indices, int(indptr.size - 1), data=data)

    def training_graph(self) -> Graph:
        """The graph the run trained on: :meth:`graph` less the held-out validation and test edges (heldout.npz)."""
        graph, held = self.graph(), self.heldout()
        drop = np.concatenate([held.get("val_pos", np.empty((2, 0), np.int64)),
                               held.get("test_pos", np.empty((2, 0), np.int64))], axis=1)
        if not drop.shape[1]:
            return graph
        adj = graph.adjacency()
        gone = sp.csr_matrix((np.ones(2 * drop.shape[1]), (np.r_[drop[0], drop[1]], np.r_[drop[1], drop[0]])),
                             shape=adj.shape)
        kept = sp.triu(adj - adj.multiply(gone > 0), k=1).tocoo()
        return Graph.from_edge_index(np.stack([kept.row, kept.col]).astype(np.int64), graph.num_nodes, canonical=True)

    def structure_scores(self, *, training: bool = False, graph: Graph | None = None):
        """The structural part of a ``--structure on`` run (:class:`gaescale.structure.StructuralScores`: its trained
        weights from model.pt on the run's whole graph, or with ``training`` on the graph it trained on, as its
        held-out metrics were scored), else None. ``graph``: the run's whole graph where the caller has read it
        already (:meth:`graph`)."""
        if not (self.path / "config.json").is_file() or self.config().get("structure") != "on":
            return None
        from ..structure import StructuralPart, StructuralScores
        state = torch.load(self._file("model.pt"), weights_only=True)["state_dict"]
        if "structure.theta" not in state:
            raise RunDirError(f"{self.path / 'model.pt'}: holds no structural part, but config.json says "
                              "structure='on'; the run directory is inconsistent.")
        part = StructuralPart(int(state["structure.theta"].numel()))
        part.load_state_dict({"theta": state["structure.theta"]})
        if training:
            graph = self.training_graph()
        return StructuralScores(self.graph() if graph is None else graph, part.weights)

    def heldout(self) -> dict[str, np.ndarray]:
        return self._arrays("heldout.npz")

    def metrics(self) -> dict:
        return self._json("metrics.json")

    def config(self) -> dict:
        return self._json("config.json")

    def _arrays(self, name: str) -> dict[str, np.ndarray]:
        """Every array of the run's ``.npz`` file ``name``; a truncated or damaged one is a :class:`RunDirError`."""
        path = self._file(name)
        try:
            with np.load(path, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
            raise RunDirError(f"{path}: not a readable .npz file ({type(exc).__name__}); the run directory is "
                              "damaged: train again (with --overwrite).") from None

    def _json(self, name: str) -> dict:
        path = self._file(name)
        try:
            d = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise RunDirError(f"{path}: not valid JSON ({str(exc).splitlines()[0][:120]}); the run directory is "
                              "damaged: train again (with --overwrite).") from None
        if not isinstance(d, dict):
            raise RunDirError(f"{path}: expected a JSON object. Got {type(d).__name__}.")
        return d


def _complete(path: Path) -> None:
    """Finish a commit into ``path`` that a killed run left half done (:func:`gaescale.run.writer.finish_commit`)."""
    try:
        finish_commit(path)
    except OSError as exc:
        raise RunDirError(f"{path}: a run's outputs were being moved in when it stopped, and they cannot be moved "
                          f"now ({exc.strerror or exc}); run any gaescale command on it where it can write.") from None


def _check_sizes(path: Path) -> None:
    """Refuse a run whose files are not those its manifest lists (one replaced or cut short since it finished); a
    missing one is named where a command needs it (:meth:`RunDir._file`)."""
    for name, size in (manifest_sizes(path) or {}).items():
        f = path / name
        if size is not None and f.suffix != ".json" and f.is_file() and f.stat().st_size != size:
            raise RunDirError(f"{f}: has {f.stat().st_size:,} bytes, but the run's manifest.json lists "
                              f"{size:,}; it was changed after the run finished: train again (with --overwrite).")


def embeddings_and_bias(model, z: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
    """``(embeddings: (N, d), node_bias: (N,) or None)`` float32 of the model's output ``z`` (:func:`split_bias`)."""
    bias = None
    if model.node_bias is not None:
        z, bias = split_bias(z)
        bias = bias.numpy().astype(np.float32)
    return np.ascontiguousarray(z.numpy(), dtype=np.float32), bias


def custom_encoder_name(model) -> str | None:
    """``module.Class`` of an encoder given to ``train(encoder=...)`` (model.pt then holds weights that
    gaescale cannot rebuild a model for, e.g. a :class:`gaescale.pyg.PyGEncoder`); None for gaescale's own."""
    from ..directed.model import SourceTargetEncoder
    from ..encoders import ENCODERS
    enc = type(model.encoder)
    own = enc in ENCODERS.values() or enc is SourceTargetEncoder
    return None if own else f"{enc.__module__}.{enc.__qualname__}"


def write_run(out: Path, config, model, inputs, csr, split, embeddings: np.ndarray,
               bias: np.ndarray | None, num_features: int | None, num_nodes: int) -> None:
    """The run directory's files but metrics.json and the report (layout: :mod:`gaescale.rundir`), each atomically,
    into ``out``: the run's staging directory, which :class:`gaescale.run.writer.RunWriter` commits."""
    write_npy(out / "embeddings.npy", embeddings)
    if bias is not None:
        write_npy(out / "node_bias.npy", bias)
    if inputs.prepared is not None:
        with open(inputs.prepared / "nodes.tsv", "rb") as ids:
            atomic_write(out / "nodes.tsv", lambda fh: shutil.copyfileobj(ids, fh))
    else:
        write_ids(out / "nodes.tsv", inputs.node_ids)
    write_torch(out / "model.pt", {"state_dict": {k: v.cpu() for k, v in model.state_dict().items()},
                                   "config": config.model_dict(), "in_dim": num_features,
                                   "num_nodes": int(num_nodes), "gaescale_version": __version__,
                                   "custom_encoder": custom_encoder_name(model)})
    write_json(out / "config.json", config.model_dict())
    if inputs.prepared is not None:  # the graph stays where it is; the run names it (its own copy: relatively)
        own = inputs.prepared.resolve().parent in (out.resolve(), out.resolve().parent)  # OUT/prepared (torchrun)
        write_json(out / "graph.json", {"prepared": inputs.prepared.name if own else str(inputs.prepared.resolve())})
    else:
        write_npz(out / "graph.npz", indptr=csr[0], indices=csr[1], **({"data": csr[2]} if len(csr) > 2 else {}))
    write_npz(out / "heldout.npz", val_pos=split.val_pos, val_neg=split.val_neg, test_pos=split.test_pos,
              test_neg=split.test_neg)


__getattr__ = moved_names(__name__)  # names that moved elsewhere (gaescale._moved)
