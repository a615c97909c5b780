"""Data-parallel training on torch.distributed: ``DistributedDataParallel`` over processes that
``torchrun`` starts, on one host or several (``--nnodes``, rendezvous over TCP).

Mini-batch strategies (:mod:`gaescale.strategies`): each rank draws its own batches from its own
generator (:func:`rank_seed`); Cluster-GCN ranks train on their own METIS parts (rank 0 runs METIS and
broadcasts the parts); neighbour-sampling ranks each hold a shard of the training graph and features,
fetch the rest of a batch from their peers, and embed their own nodes for evaluation
(:mod:`gaescale.shards`). A step's gradient is DDP's mean
over the ranks' batches.

What is replicated and what is sharded (full batch, the graph replicated): every rank holds the whole
graph (rank 0 reads an edge list and sends the others its CSR, :func:`gaescale.transfer.arrays_from_main`; a prepared
graph each maps), splits it with the shared seed (so every rank holds the same split) and runs the whole forward
pass, so every rank computes the same ``z``; the loss is sharded: rank ``r`` of ``W`` scores the training
edges ``r, r + W, r + 2W, ...`` and the ``r``-th share of the dense term (of the sampled node pairs, which
all ranks draw alike from the shared seed, or of the exact term's tiles, see :class:`ShardedFullBatch`).
Each rank's loss is ``W`` times its additive share of the global loss
(:func:`gaescale.losses.minibatch_loss` with ``edge_fraction = 1 / W``), so DDP's average of the
gradients is the gradient of the single-process loss over the same pairs, and every update equals the
single-process update within float tolerance. Only rank 0 evaluates, logs and writes outputs and
checkpoints; decisions that end training (time limit, early stopping, an error) are broadcast from rank 0
so that no rank waits on a collective the others have left.

What only rank 0 reads and then sends (the checkpoint to resume, an edge list's graph or the run's copy
of it, METIS's parts) goes through :mod:`gaescale.transfer`.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator, Mapping

import numpy as np
import torch
import torch.distributed as dist

from ..errors import DistributedError
from ..graph import Graph
from ..losses import default_num_samples, dense_term, full_precision, minibatch_loss, pair_weights, resolve_kind
from ..sparse import PairIndex


@dataclass(frozen=True)
class Dist:
    """This process's place in the group: ``rank`` of ``world_size``, the backend, and ``local_rank``, its
    place among the processes of its host."""

    rank: int
    world_size: int
    backend: str
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_WAITING = None  # the gloo group of the collectives that wait for rank 0's own work (see from_torchrun)


def from_torchrun(environ: Mapping[str, str] | None = None, *, timeout: float = 120.0,
                  wait_timeout: float = 3600.0) -> Dist | None:
    """Join the process group described by torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``) in ``environ`` (default ``os.environ``); None for a process not started by torchrun
    (or a group of one). The backend follows the tensors: gloo for CPU tensors (the CPU model's gradients,
    and the small control messages on any device), NCCL for CUDA tensors where torch sees a GPU (a CUDA
    model's gradients). A collective of ranks that are all training raises after ``timeout`` seconds
    without a peer instead of hanging; one in which the others wait for rank 0's own work (METIS,
    evaluation, a checkpoint: minutes on a large graph) allows ``wait_timeout``. A peer that dies is
    noticed at once either way, through its closed connections."""
    global _WAITING
    environ = os.environ if environ is None else environ
    world = int(environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
        _WAITING = dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_timeout))
    except Exception as exc:  # torch raises RuntimeError/ValueError/DistStoreError variously
        raise DistributedError(f"could not join the process group at {environ.get('MASTER_ADDR')}:"
                               f"{environ.get('MASTER_PORT')} ({type(exc).__name__}: {exc}).") from None
    return Dist(dist.get_rank(), dist.get_world_size(), backend, int(environ.get("LOCAL_RANK", "0")))


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def mean(value: float) -> float:
    """The mean of ``value`` over the ranks."""
    t = torch.tensor([float(value)], dtype=torch.float64)
    _collective(dist.all_reduce, t)
    return float(t.item()) / dist.get_world_size()


def _int_from_main(value: int, *, waiting: bool = False) -> int:
    """Rank 0's ``value`` (what the other ranks pass is ignored), on every rank; ``waiting``: the others may
    wait long for rank 0 (see :func:`from_torchrun`)."""
    t = torch.tensor([value], dtype=torch.int64)
    _collective(dist.broadcast, t, 0, waiting=waiting)
    return int(t.item())


def from_main(flag: bool, *, waiting: bool = False) -> bool:
    """Rank 0's ``flag``, on every rank (``waiting``: see :func:`_int_from_main`)."""
    return bool(_int_from_main(1 if flag else 0, waiting=waiting))


def barrier() -> None:
    """Wait until every rank gets here (rank 0 may still be evaluating): no collective is still in flight
    when a rank leaves the group (a rank that left while a peer was still receiving its last message was
    seen to abort in gloo)."""
    _collective(dist.barrier, waiting=True)


def choice_from_main(choice: str | None, choices: tuple[str, ...]) -> str | None:
    """Rank 0's ``choice`` (one of ``choices``, or None when it failed to make one; the other ranks pass
    None), on every rank: a decision that must not differ between ranks, such as ``--strategy auto``'s,
    which reads the memory free now."""
    index = _int_from_main(-1 if choice is None else choices.index(choice), waiting=True)
    return None if index < 0 else choices[index]


def broadcast_state(module: torch.nn.Module) -> None:
    """Load rank 0's parameters and buffers into ``module`` on every rank (after training, rank 0 alone
    restored the weights of its best validation)."""
    with torch.no_grad():
        for value in module.state_dict().values():
            host = value.detach().cpu().clone()
            _collective(dist.broadcast, host, 0, waiting=True)
            value.copy_(host)


def gather(obj, *, waiting: bool = False) -> list:
    """``obj`` of every rank, in rank order, on every rank (small picklable objects: random states)."""
    out = [None] * dist.get_world_size()
    _collective(dist.all_gather_object, out, obj, waiting=waiting)
    return out


def gather_to_main(obj, *, waiting: bool = False) -> list | None:
    """``obj`` of every rank, in rank order, on rank 0 (None on the others): picklable objects, such as the
    arrays of each rank's held-out edges."""
    out = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    _collective(dist.gather_object, obj, out, 0, waiting=waiting)
    return out


def rank_seed(seed: int, rank: int) -> int:
    """The seed of the generator from which rank ``rank`` draws its own batches: ``seed + 1`` on rank 0 (what
    a single process uses), a seed derived from ``(seed, rank)`` by NumPy's ``SeedSequence`` on the others."""
    if rank == 0:
        return seed + 1
    return int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def _collective(op, *args, waiting: bool = False) -> None:
    with peer_failures():
        op(*args, group=_WAITING if waiting else None)


@contextmanager
def peer_failures():
    """Turns what torch raises when a peer process dies or stops answering (in a collective of ours, or in
    DDP's gradient all-reduce during backward) into one :class:`DistributedError`; other errors pass."""
    try:
        yield
    except DistributedError:
        raise
    except (RuntimeError, dist.DistError) as exc:
        text = str(exc)
        if not (isinstance(exc, dist.DistError) or "gloo" in text or "Connection" in text or "NCCL" in text):
            raise
        first = text.splitlines()[0] if text else ""
        raise DistributedError(f"a peer process failed or stopped answering ({type(exc).__name__}: {first}); "
                               "every rank stops.") from None


class Replicated:
    """What a strategy sees of a DDP-wrapped model: calls go through ``DistributedDataParallel`` (which
    all-reduces the gradients in backward); ``loss``, ``kl`` and the rest come from the model itself."""

    def __init__(self, model: torch.nn.Module):
        device = next(model.parameters()).device
        self.ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
        self.model = model

    def __call__(self, *args, **kwargs):
        return self.ddp(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


class ShardedFullBatch:
    """Full batch over ``W`` ranks with the graph replicated (see the module's docstring): one step per
    epoch; the loss of rank ``r`` covers its shard of the training pairs and of the dense term: of the
    sampled pairs (``m`` rounded up to a multiple of ``W``), of the exact term's tiles (row blocks
    ``r, r + W, ...``: each rank forms about ``1/W`` of the ``N^2 / 2`` pair evaluations), or ``1/W`` of
    the closed form."""

    name = "full"
    shared_draws = True  # every rank draws the same pairs and keeps its share

    def __init__(self, group: Dist):
        self.group = group
        self._shard = None  # (the pairs it was cut from, this rank's PairIndex, their count, self loops)

    def steps(self, model, x, graph: Graph, pairs, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        w, r, n = self.group.world_size, self.group.rank, graph.num_nodes
        if self._shard is None or self._shard[0] is not pairs:  # cut once, reused every epoch
            every = pairs.pairs() if isinstance(pairs, PairIndex) else torch.as_tensor(pairs)
            self._shard = (pairs, PairIndex.from_pairs(every[:, r::w], n), every.shape[1],
                           int((every[0] == every[1]).sum()))
        z = full_precision(model(x, graph))  # the loss in float32 under mixed precision, as one process's
        with torch.autocast(z.device.type, enabled=False):
            loss = self._loss(z, generator, loss_kwargs, model)
        if hasattr(model, "kl"):
            loss = loss + model.kl() / n
        yield loss

    def _loss(self, z: torch.Tensor, generator, loss_kwargs: dict, model) -> torch.Tensor:
        """``W`` times this rank's additive share of the reconstruction loss of ``z: (N, d)`` under ``model``'s decoder."""
        metric = model.metric(z)

        def logits(pidx: PairIndex) -> torch.Tensor:
            return pidx.logits(z, metric) if model.pair_decoder is None else model.logits(z, pidx.pairs())
        w, r, n = self.group.world_size, self.group.rank, z.shape[0]
        _, mine, count, loops = self._shard
        dense, kind, weighting = loss_kwargs.get("dense", "sampled"), loss_kwargs.get("kind", "bce"), loss_kwargs.get("weighting")
        num_edge_pairs = 2 * count - loops
        if dense == "sampled":
            m = default_num_samples(num_edge_pairs, float(loss_kwargs.get("neg_ratio", 1.0)))  # as one process draws
            m = -(-m // w) * w
            sampled = PairIndex.uniform(n, m, generator).pairs()[:, r::w]  # every rank draws the same m pairs
            s_neg = logits(PairIndex.from_pairs(sampled, n))
        else:
            s_neg = z.new_zeros(0)  # no sampled pairs: the dense term's share is added below
        loss = minibatch_loss(logits(mine), s_neg, num_nodes=n, num_edge_pairs=num_edge_pairs, edge_fraction=1.0 / w,
                              pos_loops=mine.self_pair_mask(), kind=kind, weighting=weighting)
        if dense == "sampled":
            return loss
        # exact: this rank's tiles; closed (O(N d^2)): the whole term, of which a 1/W share
        pair_loss, weighting = resolve_kind(kind, weighting)
        w0, _ = pair_weights(weighting, n, num_edge_pairs)
        share = (dense_term(z, pair_loss, dense, shard=(r, w), metric=metric) if dense == "exact"
                 else dense_term(z, pair_loss, dense, metric=metric) / w)
        return loss + w * w0 * share  # W times this rank's share, as the edge term above
