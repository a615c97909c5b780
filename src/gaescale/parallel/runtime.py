"""The runtime: one process (:class:`Local`) or one rank of a data-parallel group (:class:`Torchrun`), resolved
once where a command starts (:func:`resolve`) and passed down; the code that trains never asks which.

Data-parallel training on torch.distributed: ``DistributedDataParallel`` over processes that
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

import contextlib
import os
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .. import logs
from ..errors import DistributedError


class Local:
    """One process (no torchrun): rank 0 of 1. Every collective is the identity or a no-op, so that the code
    that trains, evaluates and writes is the same for one process and for many, and never asks which it is."""

    rank = 0
    world_size = 1
    local_rank = 0
    backend = None
    is_main = True

    def gather(self, obj, *, waiting: bool = False) -> list:
        """``obj`` of every rank, in rank order, on every rank."""
        return [obj]

    def gather_to_main(self, obj, *, waiting: bool = False) -> list | None:
        """``obj`` of every rank, in rank order, on rank 0 (None on the others)."""
        return [obj]

    def from_main(self, value: bool, *, waiting: bool = False) -> bool:
        """Rank 0's ``value`` (a flag), on every rank."""
        return value

    def choice_from_main(self, choice: str | None, choices: tuple[str, ...]) -> str | None:
        """Rank 0's ``choice`` (one of ``choices``, or None when it failed to make one), on every rank."""
        return choice

    def on_main(self, make: Callable[[], Any], what: str) -> Any:
        """What ``make()`` returns on rank 0 (a picklable object), on every rank (:mod:`gaescale.parallel.transfer`)."""
        return make()

    def arrays_on_main(self, make: Callable[[], dict[str, np.ndarray]], what: str) -> dict[str, np.ndarray]:
        """The named arrays ``make()`` returns on rank 0, on every rank (:mod:`gaescale.parallel.transfer`)."""
        return make()

    def barrier(self) -> None:
        """Wait until every rank gets here."""

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the ranks."""
        return float(value)

    def broadcast_state(self, module: torch.nn.Module) -> None:
        """Load rank 0's parameters and buffers into ``module`` on every rank."""

    def wrap(self, model: torch.nn.Module):
        """What a strategy calls to run ``model`` (under torchrun: through ``DistributedDataParallel``)."""
        return model

    def guard(self):
        """A context in which a peer's failure becomes one :class:`DistributedError` (see :func:`peer_failures`)."""
        return contextlib.nullcontext()

    def seed(self, seed: int, *, own_draws: bool) -> int:
        """The seed of the generator a run of ``seed`` draws its batches from; ``own_draws``: this rank draws
        its own batches (every strategy but the sharded full batch), from its own stream (:func:`rank_seed`)."""
        return seed + 1

    def shutdown(self) -> None:
        """Leave the process group."""


@dataclass(frozen=True)
class Torchrun(Local):
    """This process as rank ``rank`` of ``world_size`` in a torch.distributed group (:func:`from_torchrun`), with
    the ``backend``, ``local_rank`` (its place among the processes of its host) and ``waiting``, the gloo group of
    the collectives in which the others wait for rank 0's own work (None: the default group)."""

    rank: int
    world_size: int
    backend: str
    local_rank: int = 0
    waiting: Any = field(default=None, compare=False, repr=False)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def collective(self, op, *args, waiting: bool = False) -> None:
        """``op(*args, group=...)`` under :func:`peer_failures`; ``waiting``: on the group that may wait long."""
        with peer_failures():
            op(*args, group=self.waiting if waiting else None)

    def gather(self, obj, *, waiting: bool = False) -> list:
        out = [None] * self.world_size
        self.collective(dist.all_gather_object, out, obj, waiting=waiting)
        return out

    def gather_to_main(self, obj, *, waiting: bool = False) -> list | None:
        out = [None] * self.world_size if self.is_main else None
        self.collective(dist.gather_object, obj, out, 0, waiting=waiting)
        return out

    def _int_from_main(self, value: int, *, waiting: bool = False) -> int:
        t = torch.tensor([value], dtype=torch.int64)
        self.collective(dist.broadcast, t, 0, waiting=waiting)
        return int(t.item())

    def from_main(self, value: bool, *, waiting: bool = False) -> bool:
        return bool(self._int_from_main(1 if value else 0, waiting=waiting))

    def choice_from_main(self, choice: str | None, choices: tuple[str, ...]) -> str | None:
        """A decision that must not differ between ranks, such as ``--strategy auto``'s, which reads the memory
        free now: rank 0's, the others passing None."""
        index = self._int_from_main(-1 if choice is None else choices.index(choice), waiting=True)
        return None if index < 0 else choices[index]

    def on_main(self, make: Callable[[], Any], what: str) -> Any:
        from .transfer import object_from_main
        return object_from_main(self, make, what)

    def arrays_on_main(self, make: Callable[[], dict[str, np.ndarray]], what: str) -> dict[str, np.ndarray]:
        from .transfer import arrays_from_main
        return arrays_from_main(self, make, what)

    def barrier(self) -> None:
        """No collective is still in flight when a rank leaves the group (a rank that left while a peer was
        still receiving its last message was seen to abort in gloo); rank 0 may still be evaluating."""
        self.collective(dist.barrier, waiting=True)

    def mean(self, value: float) -> float:
        t = torch.tensor([float(value)], dtype=torch.float64)
        self.collective(dist.all_reduce, t)
        return float(t.item()) / self.world_size

    def broadcast_state(self, module: torch.nn.Module) -> None:
        """After training, rank 0 alone restored the weights of its best validation: every rank gets them."""
        with torch.no_grad():
            for value in module.state_dict().values():
                host = value.detach().cpu().clone()
                self.collective(dist.broadcast, host, 0, waiting=True)
                value.copy_(host)

    def wrap(self, model: torch.nn.Module):
        return Replicated(model)

    def guard(self):
        return peer_failures()

    def seed(self, seed: int, *, own_draws: bool) -> int:
        """Ranks that draw their own batches have their own random streams (dropout and VGAE noise included):
        torch's global generator is seeded from the rank's too."""
        if not own_draws:
            return seed + 1
        own = rank_seed(seed, self.rank)
        torch.manual_seed(own)
        return own

    def shutdown(self) -> None:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


Dist = Torchrun  # the name of gaescale 0.1's record of a process's place in the group


def from_torchrun(environ: Mapping[str, str] | None = None, *, timeout: float = 120.0,
                  wait_timeout: float = 3600.0) -> Torchrun | None:
    """Join the process group described by torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``) in ``environ`` (default ``os.environ``); None for a process not started by torchrun
    (or a group of one: :func:`resolve` gives :class:`Local` then). The backend follows the tensors: gloo for
    CPU tensors (the CPU model's gradients, and the small control messages on any device), NCCL for CUDA
    tensors where torch sees a GPU (a CUDA model's gradients). A collective of ranks that are all training
    raises after ``timeout`` seconds without a peer instead of hanging; one in which the others wait for
    rank 0's own work (METIS, evaluation, a checkpoint: minutes on a large graph) allows ``wait_timeout``. A
    peer that dies is noticed at once either way, through its closed connections."""
    environ = os.environ if environ is None else environ
    world = int(environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
        waiting = dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_timeout))
    except Exception as exc:  # torch raises RuntimeError/ValueError/DistStoreError variously
        raise DistributedError(f"could not join the process group at {environ.get('MASTER_ADDR')}:"
                               f"{environ.get('MASTER_PORT')} ({type(exc).__name__}: {exc}).") from None
    rank = dist.get_rank()
    logs.only_rank(rank)  # the gaescale logger writes rank 0's lines only
    return Torchrun(rank, dist.get_world_size(), backend, int(environ.get("LOCAL_RANK", "0")), waiting)


def resolve(environ: Mapping[str, str] | None = None, **timeouts) -> Local:
    """The runtime of this process, resolved once where a command starts: :class:`Torchrun` under torchrun
    (:func:`from_torchrun`), else :class:`Local`."""
    return from_torchrun(environ, **timeouts) or Local()


def rank_seed(seed: int, rank: int) -> int:
    """The seed of the generator from which rank ``rank`` draws its own batches: ``seed + 1`` on rank 0 (what
    a single process uses), a seed derived from ``(seed, rank)`` by NumPy's ``SeedSequence`` on the others."""
    if rank == 0:
        return seed + 1
    return int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0] >> np.uint64(1))


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
        self.ddp = torch.nn.parallel.DistributedDataParallel(model,
                                                             device_ids=[device] if device.type == "cuda" else None)
        self.model = model

    def __call__(self, *args, **kwargs):
        return self.ddp(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)
