"""Full-batch training: Adam, periodic validation, early stopping with the best weights kept."""
from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from ..parallel import runtime as distributed
from .checkpoint import Checkpointer, rng_state, set_rng_state
from ..errors import CheckpointError, NonFiniteLossError, ParameterError
from ..graph import Graph
from .evaluate import link_scores
from .strategies import FullBatch
from .selection import EarlyStopping
from ..sparse import PRECISIONS, PairIndex


@dataclass
class FitResult:
    history: list[dict[str, Any]]
    best_epoch: int
    best_val_auc: float | None
    stopped_early: bool
    train_seconds: list[float] = field(default_factory=list)

    @property
    def seconds_per_epoch(self) -> float:
        return statistics.median(self.train_seconds) if self.train_seconds else 0.0


def fit(model: torch.nn.Module, x: torch.Tensor | None, graph: Graph, train_edges: torch.Tensor | PairIndex | None, *,
        val: tuple[np.ndarray, np.ndarray] | None = None, epochs: int = 200, lr: float = 0.01, seed: int = 0,
        eval_every: int = 1, patience: int = 20, warmup: int = 0, loss_kwargs: dict | None = None, progress: bool = True,
        on_epoch: Callable[[dict], None] | None = None, checkpointer: Checkpointer | None = None,
        resume: dict[str, Any] | None = None, strategy=None, time_limit: float | None = None,
        embed: Callable[[], torch.Tensor] | None = None, embed_collective: bool = False, precision: str = "fp32",
        group=None) -> FitResult:
    """Train ``model`` (``model(x, graph) -> z: (N, d)``, with a ``loss(z, edge_index, **kw)`` method) on
    ``train_edges: (2, E)`` (each undirected edge once; None for the strategies that draw their pairs from
    ``graph``: Cluster-GCN, FastGAE, neighbour sampling). With ``val = (pos, neg)``, the weights of the best
    validation AUC after the first ``warmup`` epochs are restored at the end, and training stops after
    ``patience`` evaluations past the warm-up without a better one (:class:`gaescale.selection.EarlyStopping`).
    ``strategy`` (:mod:`gaescale.strategies`; default full batch) decides what each optimizer step sees;
    the recorded loss of an epoch is the mean over its steps. ``time_limit`` stops training once the
    training time (evaluation excluded) reaches it, checked after every optimizer step. ``embed()`` gives
    the evaluation-mode embeddings that validation scores (default: one no-grad forward pass).

    ``precision``: ``fp32``, or mixed precision (nanoGPT's one code path): the forward pass under
    ``torch.autocast`` with ``bf16`` or ``fp16`` (and for ``fp16`` a ``GradScaler``, whose state is
    checkpointed); losses and sparse products accumulate in float32 (:mod:`gaescale.sparse`).

    ``group`` (a :class:`gaescale.distributed.Dist`): this process is one rank of a data-parallel group;
    the model is wrapped in ``DistributedDataParallel`` for the strategy's steps (which shard the loss),
    the recorded loss is the mean over the ranks, only rank 0 validates, and rank 0's decisions to stop
    reach every rank. Pass ``checkpointer`` and ``val`` on rank 0 only. With ``embed_collective``,
    ``embed`` is a collective that every rank calls whenever rank 0 validates (the embeddings of a sharded
    graph, :func:`gaescale.shards.embed_sharded`; it returns them on rank 0). A strategy whose ranks draw their
    own batches (all but ``shared_draws`` ones) gets a generator per rank
    (:func:`gaescale.distributed.rank_seed`), and checkpoints keep every rank's random state.

    ``checkpointer`` saves the whole training state every ``checkpointer.every`` epochs and at the end;
    ``resume`` (a state it saved) continues from there and gives, on CPU, the same result bit for bit as
    a run that was never interrupted.
    """
    loss_kwargs = dict(loss_kwargs or {})
    strategy = strategy or FullBatch()
    device = next(model.parameters()).device
    if isinstance(train_edges, torch.Tensor) and isinstance(strategy, FullBatch):
        train_edges = PairIndex.from_pairs(train_edges, graph.num_nodes)  # built once, reused every epoch
    if isinstance(train_edges, PairIndex):
        train_edges = train_edges.to(device)  # moved once, where the model is
    if precision not in PRECISIONS:
        raise ParameterError("precision", "fit", f"one of {list(PRECISIONS)}", precision)
    amp = torch.autocast(device.type, dtype=PRECISIONS[precision], enabled=precision != "fp32")
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    # Ranks that draw their own batches have their own random streams (dropout and VGAE noise included).
    per_rank = group is not None and not getattr(strategy, "shared_draws", False)
    gen = torch.Generator().manual_seed(distributed.rank_seed(seed, group.rank) if per_rank else seed + 1)
    if per_rank:
        torch.manual_seed(gen.initial_seed())
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    stopper = EarlyStopping(patience, warmup)
    s = {"history": [], "stopped": False, "seconds": [], "epoch": 0}
    if resume is not None:
        model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["optimizer"])
        s.update({k: resume[k] for k in s})
        stopper.load_state_dict(resume)
        set_rng_state(_rank_rng(resume, group) if per_rank else resume["rng"], gen)
        if resume.get("scaler"):
            scaler.load_state_dict(resume["scaler"])
    forward = model if group is None else distributed.Replicated(model)
    bar = _progress(epochs, progress, initial=s["epoch"])
    for epoch in range(s["epoch"] + 1, epochs + 1):
        if s["stopped"]:
            break
        t0 = time.perf_counter()
        model.train()
        losses = []
        steps = strategy.steps(forward, x, graph, train_edges, gen, loss_kwargs)
        while True:
            with amp:  # the forward pass of a step runs inside the generator
                loss = next(steps, None)
            if loss is None:
                break
            value = loss.item() if group is None else distributed.mean(loss.item())  # the same on every rank
            if not math.isfinite(value):
                kept = f" The last good checkpoint is {checkpointer.last}." if checkpointer and checkpointer.last else ""
                raise NonFiniteLossError(f"the training loss became {value} at epoch {epoch}; lower --lr or "
                                         f"check the features' scale.{kept}")
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(value)
            out_of_time = bool(time_limit and sum(s["seconds"]) + time.perf_counter() - t0 >= time_limit)
            if out_of_time if group is None else distributed.from_main(out_of_time):
                break  # mid-epoch: a mini-batch epoch can be long
        s["seconds"].append(time.perf_counter() - t0)
        rec: dict[str, Any] = {"epoch": epoch, "loss": float(np.mean(losses)), "seconds": s["seconds"][-1],
                               "steps": len(losses)}
        time_up = bool(time_limit and sum(s["seconds"]) >= time_limit)  # rank 0's decides, through "stopped"
        due = val is not None and (epoch % eval_every == 0 or epoch == epochs or time_up)
        if embed_collective and group is not None:
            due = distributed.from_main(due)
        if due:
            model.eval()
            with torch.no_grad():
                z = embed() if embed else model(x, graph)
            if val is not None:
                rec["val_auc"], rec["val_ap"] = link_scores(z, *val, metric=model.metric(z), decoder=model.pair_decoder)
        if "val_auc" in rec:
            stopper.update(epoch, rec["val_auc"], model)
        s["history"].append(rec)
        s["epoch"] = epoch
        s["stopped"] = bool(val is not None and stopper.stop) or time_up
        # Several ranks: the others wait (in collectives that allow it) while rank 0 evaluates and saves.
        ranks_rng = distributed.gather(rng_state(gen), waiting=True) if per_rank else None  # every epoch
        if checkpointer is not None and (checkpointer.due(epoch) or s["stopped"] or epoch == epochs):
            checkpointer.save(epoch, {**s, **stopper.state_dict(), "model": model.state_dict(), "optimizer": opt.state_dict(),
                                      "rng": rng_state(gen), "scaler": scaler.state_dict(),
                                      **({"rank_rng": ranks_rng} if per_rank else {})})
        if group is not None:
            s["stopped"] = distributed.from_main(s["stopped"], waiting=True)  # rank 0's decision
        if on_epoch:
            on_epoch(rec)
        bar.update(rec, stopper.best_auc)
    bar.close()
    stopper.restore(model)
    return FitResult(s["history"], stopper.best_epoch or len(s["history"]),
                     stopper.best_auc if stopper.best_state is not None else None, s["stopped"], s["seconds"])


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
        if "val_auc" in rec:
            post["val_auc"] = f"{rec['val_auc']:.4f}"
        if best_auc >= 0:
            post["best"] = f"{best_auc:.4f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
