"""Full-batch training: Adam, periodic validation, early stopping with the best weights kept."""
from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import CheckpointError, NonFiniteLossError, ParameterError
from ..graph import Graph
from ..parallel.runtime import Local
from ..sparse import PRECISIONS, PairIndex
from .checkpoint import Checkpointer, rng_state, set_rng_state
from .evaluate import link_scores
from .optim import Adam
from .selection import EarlyStopping
from .strategies import FullBatch


@dataclass
class FitResult:
    history: list[dict[str, Any]]
    best_epoch: int
    best_val_auc: float | None
    stopped_early: bool
    train_seconds: list[float] = field(default_factory=list)
    # z: (N, d), the evaluation-mode embeddings of the returned weights when the last epoch's validation made them
    # with ``embed`` (not a collective one): what the caller would otherwise compute again (3 minutes at 100M nodes)
    z: torch.Tensor | None = None

    @property
    def seconds_per_epoch(self) -> float:
        return statistics.median(self.train_seconds) if self.train_seconds else 0.0


@dataclass
class FitState:
    """What the loop carries from epoch to epoch, checkpointed with the model, the optimizer, the stopper's
    state and the random streams: the epoch records, whether training stopped, each epoch's training seconds."""

    history: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False
    seconds: list[float] = field(default_factory=list)
    epoch: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "stopped": self.stopped, "seconds": self.seconds, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history, self.stopped, self.seconds, self.epoch = (state[k]
                                                                for k in ("history", "stopped", "seconds", "epoch"))


@dataclass
class _Loop:
    """The parts of one fit: the model and what its steps read, the optimizer, the precision's autocast and
    scaler, the generator the strategy draws from, the runtime, the stopper and the state."""

    model: torch.nn.Module
    forward: Any  # what the strategy calls: the model, or its DDP wrapper (runtime.wrap)
    x: torch.Tensor | None
    graph: Graph
    pairs: Any
    strategy: Any
    loss_kwargs: dict
    opt: torch.optim.Optimizer
    amp: Any
    scaler: Any
    gen: torch.Generator
    runtime: Local
    stopper: EarlyStopping
    state: FitState
    per_rank: bool  # the ranks draw their own batches: checkpoints keep every rank's random state


def fit(model: torch.nn.Module, x: torch.Tensor | None, graph: Graph, train_edges: torch.Tensor | PairIndex | None, *,
        val: tuple[np.ndarray, np.ndarray] | None = None, epochs: int = 200, lr: float = 0.01, seed: int = 0,
        eval_every: int = 1, patience: int = 20, warmup: int = 0, loss_kwargs: dict | None = None,
        progress: bool = True, on_epoch: Callable[[dict], None] | None = None, checkpointer: Checkpointer | None = None,
        resume: dict[str, Any] | None = None, strategy=None, time_limit: float | None = None,
        embed: Callable[[], torch.Tensor] | None = None, embed_collective: bool = False, precision: str = "fp32",
        runtime: Local | None = None, group=None, select: str = "auc", val_rank: Callable | None = None,
        structure=None) -> FitResult:
    """Train ``model`` (``model(x, graph) -> z: (N, d)``, with a ``loss(z, edge_index, **kw)`` method) on
    ``train_edges: (2, E)`` (each undirected edge once; None for the strategies that draw their pairs from
    ``graph``: Cluster-GCN, FastGAE, neighbour sampling). With ``val = (pos, neg)``, the weights of the best
    validation AUC after the first ``warmup`` epochs are restored at the end, and training stops after
    ``patience`` evaluations past the warm-up without a better one (:class:`gaescale.selection.EarlyStopping`).
    A strategy that ``keeps_last`` (:class:`gaescale.training.buckets.PartitionBuckets`, whose table trains in place
    on disk) keeps the last epoch's weights instead; patience still stops it.
    ``strategy`` (:mod:`gaescale.strategies`; default full batch) decides what each optimizer step sees;
    the recorded loss of an epoch is the mean over its steps. ``time_limit`` stops training once the
    training time (evaluation excluded) reaches it, checked after every optimizer step. ``embed()`` gives
    the evaluation-mode embeddings that validation scores (default: one no-grad forward pass).

    ``precision``: ``fp32``, or mixed precision (nanoGPT's one code path): the forward pass under
    ``torch.autocast`` with ``bf16`` or ``fp16`` (and for ``fp16`` a ``GradScaler``, whose state is
    checkpointed); losses and sparse products accumulate in float32 (:mod:`gaescale.sparse`).

    ``runtime`` (:mod:`gaescale.parallel.runtime`; ``group`` is its old name): under torchrun this process is
    one rank of a data-parallel group; the model is wrapped in ``DistributedDataParallel`` for the strategy's
    steps (which shard the loss), the recorded loss is the mean over the ranks, only rank 0 validates, and
    rank 0's decisions to stop reach every rank. Pass ``checkpointer`` and ``val`` on rank 0 only. With
    ``embed_collective``, ``embed`` is a collective that every rank calls whenever rank 0 validates (the
    embeddings of a sharded graph, :func:`gaescale.shards.embed_sharded`; it returns them on rank 0). A
    strategy whose ranks draw their own batches (all but ``shared_draws`` ones) gets a generator per rank
    (:func:`gaescale.distributed.rank_seed`), and checkpoints keep every rank's random state.

    ``select``: ``auc``, or ``mrr``: every evaluation also ranks ``val_rank(z, metric=, decoder=, structure=)``
    (:func:`gaescale.training.heldout.validation_ranking`), whose ``val_mrr`` keeps the weights and counts patience.
    ``structure``: the pair features of ``graph`` a model with a structural part is validated with.

    ``checkpointer`` saves the whole training state every ``checkpointer.every`` epochs and at the end;
    ``resume`` (a state it saved) continues from there and gives, on CPU, the same result bit for bit as
    a run that was never interrupted.
    """
    _check_options(precision, select, val, val_rank)
    key = f"val_{select}"
    loop = _start(model, x, graph, train_edges, strategy or FullBatch(), dict(loss_kwargs or {}), lr=lr, seed=seed,
                  patience=patience, warmup=warmup, precision=precision, runtime=runtime or group or Local())
    s, rt = loop.state, loop.runtime
    if resume is not None:
        _resume(loop, resume)
        if s.stopped and not loop.stopper.stop and not (time_limit and sum(s.seconds) >= time_limit):
            s.stopped = False  # the time limit stopped it, and this run's limit is higher or none: train on
    bar = _progress(epochs, progress, initial=s.epoch)
    last = None  # (epoch, z) of the last validation: released before the next epoch trains
    for epoch in range(s.epoch + 1, epochs + 1):
        if s.stopped:
            break
        last = None
        rec = _train_epoch(loop, epoch, time_limit, checkpointer)
        time_up = bool(time_limit and sum(s.seconds) >= time_limit)  # rank 0's decides, through "stopped"
        due = val is not None and (epoch % eval_every == 0 or epoch == epochs or time_up)
        if embed_collective:
            due = rt.from_main(due)
        if due:
            scores, z = _validate(model, x, graph, val, embed, val_rank if select == "mrr" else None, structure)
            rec.update(scores)
            last = (epoch, z) if embed is not None and not embed_collective else None
        if key in rec:
            loop.stopper.update(epoch, rec[key], model)
        s.history.append(rec)
        s.epoch = epoch
        s.stopped = bool(val is not None and loop.stopper.stop) or time_up
        # Several ranks: the others wait (in collectives that allow it) while rank 0 evaluates and saves.
        ranks_rng = rt.gather(rng_state(loop.gen), waiting=True) if loop.per_rank else None  # every epoch
        if checkpointer is not None and (checkpointer.due(epoch) or s.stopped or epoch == epochs):
            _save(loop, checkpointer, epoch, ranks_rng)
        s.stopped = rt.from_main(s.stopped, waiting=True)  # rank 0's decision
        if on_epoch:
            on_epoch(rec)
        bar.update(rec, loop.stopper.best_auc)
    bar.close()
    return _result(loop, last)


def _check_options(precision: str, select: str, val, val_rank) -> None:
    if precision not in PRECISIONS:
        raise ParameterError("precision", "fit", f"one of {list(PRECISIONS)}", precision)
    if select not in ("auc", "mrr") or (select == "mrr" and val is not None and val_rank is None):
        raise ParameterError("select", "fit", "'auc', or 'mrr' with val_rank", select)


def _result(loop: _Loop, last: tuple[int, torch.Tensor] | None) -> FitResult:
    """The fit's result, the model holding its best weights (a strategy that ``keeps_last``: the last ones) and no
    gradients, with ``last``'s embeddings (the last validation's ``(epoch, z)``) where those weights are the ones it
    embedded."""
    loop.model.zero_grad(set_to_none=True)  # the last step's gradients (a featureless table's, the biases'): gone
    s, stopper = loop.state, loop.stopper
    z = last[1] if last is not None and last[0] == s.epoch else None
    if getattr(loop.strategy, "keeps_last", False):  # its table trained in place: the last epoch's model is whole
        return FitResult(s.history, len(s.history), s.history[-1].get("val_auc") if s.history else None, s.stopped,
                         s.seconds, z)
    if stopper.best_state is not None and stopper.best_epoch != s.epoch:
        z = None  # the best weights are an earlier epoch's
    stopper.restore(loop.model)
    return FitResult(s.history, stopper.best_epoch or len(s.history),
                     stopper.best_auc if stopper.best_state is not None else None, s.stopped, s.seconds, z)


def _start(model, x, graph: Graph, train_edges, strategy, loss_kwargs: dict, *, lr: float, seed: int, patience: int,
           warmup: int, precision: str, runtime: Local) -> _Loop:
    """The loop's parts before the first epoch (or the resumed one)."""
    device = next(model.parameters()).device
    if isinstance(train_edges, torch.Tensor) and isinstance(strategy, FullBatch):
        train_edges = PairIndex.from_pairs(train_edges, graph.num_nodes)  # built once, reused every epoch
    if isinstance(train_edges, PairIndex):
        train_edges = train_edges.to(device)  # moved once, where the model is
    amp = torch.autocast(device.type, dtype=PRECISIONS[precision], enabled=precision != "fp32")
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    own_draws = not getattr(strategy, "shared_draws", False)
    gen = torch.Generator().manual_seed(runtime.seed(seed, own_draws=own_draws))
    groups = model.param_groups(lr) if hasattr(model, "param_groups") else model.parameters()
    opt = Adam(groups, lr=lr)  # torch.optim.Adam's numbers without its import of torch._dynamo (1.4 s, 140 MiB)
    return _Loop(model, runtime.wrap(model), x, graph, train_edges, strategy, loss_kwargs, opt, amp, scaler, gen,
                 runtime, EarlyStopping(patience, warmup), FitState(), runtime.world_size > 1 and own_draws)


def _resume(loop: _Loop, resume: dict[str, Any]) -> None:
    """Continue from a checkpoint's state (see :class:`gaescale.checkpoint.Checkpointer`)."""
    loop.model.load_state_dict(resume["model"])
    loop.opt.load_state_dict(resume["optimizer"])
    loop.state.load_state_dict(resume)
    loop.stopper.load_state_dict(resume)
    set_rng_state(_rank_rng(resume, loop.runtime) if loop.per_rank else resume["rng"], loop.gen)
    if resume.get("scaler"):
        loop.scaler.load_state_dict(resume["scaler"])


def _train_epoch(loop: _Loop, epoch: int, time_limit: float | None,
                 checkpointer: Checkpointer | None) -> dict[str, Any]:
    """One epoch's optimizer steps (the time limit checked after each); its record: mean loss, seconds, steps."""
    s, rt = loop.state, loop.runtime
    t0 = time.perf_counter()
    loop.model.train()
    losses = []
    steps = loop.strategy.steps(loop.forward, loop.x, loop.graph, loop.pairs, loop.gen, loop.loss_kwargs)
    while True:
        with loop.amp:  # the forward pass of a step runs inside the generator
            loss = next(steps, None)
        if loss is None:
            break
        value = rt.mean(loss.item())  # the same on every rank
        if not math.isfinite(value):
            kept = f" The last good checkpoint is {checkpointer.last}." if checkpointer and checkpointer.last else ""
            raise NonFiniteLossError(f"the training loss became {value} at epoch {epoch}; lower --lr or "
                                     f"check the features' scale.{kept}")
        loop.opt.zero_grad(set_to_none=True)
        loop.scaler.scale(loss).backward()
        loop.scaler.step(loop.opt)
        loop.scaler.update()
        losses.append(value)
        out_of_time = bool(time_limit and sum(s.seconds) + time.perf_counter() - t0 >= time_limit)
        if rt.from_main(out_of_time):
            break  # mid-epoch: a mini-batch epoch can be long
    steps.close()  # a strategy's own end of epoch (a table on disk written back), also when it stopped mid-epoch
    s.seconds.append(time.perf_counter() - t0)
    return {"epoch": epoch, "loss": float(np.mean(losses)), "seconds": s.seconds[-1], "steps": len(losses)}


def _validate(model, x, graph: Graph, val, embed, val_rank=None, features=None) -> tuple[dict[str, float], Any]:
    """``val_auc`` and ``val_ap`` of the evaluation-mode embeddings (``embed()``, or one no-grad forward pass), and
    with ``val_rank`` the validation ranking; none where ``val`` is None (the ranks other than 0 of a sharded graph,
    which only help embed). ``features``: the pair features of a model with a structural part. With the scores, the
    embeddings ``z: (N, d)``."""
    model.eval()
    with torch.no_grad():
        z = embed() if embed else model(x, graph)
    if val is None:
        return {}, z
    how = dict(metric=model.metric(z), decoder=model.pair_decoder, structure=structural_scores(model, features))
    auc, ap = link_scores(z, *val, **how)
    return {"val_auc": auc, "val_ap": ap, **(val_rank(z, **how) if val_rank is not None else {})}, z


def structural_scores(model, features):
    """The structural part of ``model`` (:class:`gaescale.structure.StructuralScores` on ``features``), or None for
    a model without one."""
    if getattr(model, "structure", None) is None:
        return None
    if features is None:
        raise ParameterError("structure", "fit", "the pair features of the training graph for a model with a "
                                                 "structural part", None)
    from ..structure import StructuralScores
    return StructuralScores(features, model.structure.weights)


def _save(loop: _Loop, checkpointer: Checkpointer, epoch: int, ranks_rng: list | None) -> None:
    checkpointer.save(epoch, {**loop.state.state_dict(), **loop.stopper.state_dict(), "model": loop.model.state_dict(),
                              "optimizer": loop.opt.state_dict(), "rng": rng_state(loop.gen),
                              "scaler": loop.scaler.state_dict(), **({"rank_rng": ranks_rng} if loop.per_rank else {})})


def _rank_rng(resume: dict[str, Any], group) -> dict[str, Any]:
    """This rank's random state in a checkpoint of a data-parallel run whose ranks draw their own batches."""
    states = resume.get("rank_rng")
    if not states or len(states) != group.world_size:
        raise CheckpointError(f"the checkpoint was written by {len(states) if states else 1} process(es) drawing "
                              f"their own batches and this run has {group.world_size}; resume with as many "
                              "processes as wrote it.")
    return states[group.rank]


class _progress:
    """tqdm bar with loss, validation AUC and seconds per epoch; silent when disabled."""

    def __init__(self, total: int, enabled: bool, initial: int = 0):
        self.bar = None
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, desc="train", unit="epoch", file=sys.stderr,
                            dynamic_ncols=True)

    def update(self, rec: dict, best_auc: float) -> None:
        if self.bar is None:
            return
        post = {"loss": f"{rec['loss']:.4f}", "s/epoch": f"{rec['seconds']:.2f}"}
        for k in ("val_auc", "val_mrr"):
            if k in rec:
                post[k] = f"{rec[k]:.4f}"
        if best_auc >= 0:
            post["best"] = f"{best_auc:.4f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
