"""What ``--tensorboard DIR`` costs a run: the same training with and without it, alternating, side by side in one
process (the tensorboard import paid once, before the first run). Per run: the wall time of ``gaescale.train``, its
median training seconds per epoch (metrics.json), and the seconds spent in the tracker's ``log_epoch`` (timed
around each call: add_scalar for each scalar, then a flush to disk), per epoch.

    .venv/bin/python bench/bench_tensorboard.py --nodes 20000 --num-edges 120000 --epochs 50 --repeats 3
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import gaescale
from gaescale.training import tracker as tracker_module


def timed_log_epoch(spent: list[float]):
    """``TensorBoardTracker.log_epoch`` that adds the seconds of each call to ``spent``."""
    log_epoch = tracker_module.TensorBoardTracker.log_epoch

    def timed(self, record, **kw):
        t = time.perf_counter()
        log_epoch(self, record, **kw)
        spent.append(time.perf_counter() - t)
    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20_000)
    ap.add_argument("--num-edges", type=int, default=120_000)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = gaescale.community_graph(args.nodes, args.num_edges, seed=0)
    import torch.utils.tensorboard  # noqa: F401  (imported once, before any run is timed)
    spent: list[float] = []
    tracker_module.TensorBoardTracker.log_epoch = timed_log_epoch(spent)
    rows: dict[str, list[tuple[float, float, float]]] = {"without": [], "--tensorboard": []}
    with tempfile.TemporaryDirectory(prefix="gaescale-tb-") as d:
        for r in range(args.repeats):
            for case in rows:
                spent.clear()
                tb = str(Path(d) / f"tb{r}") if case == "--tensorboard" else None
                t = time.perf_counter()
                res = gaescale.train(data=data, epochs=args.epochs, eval_every=1, patience=0, quiet=True,
                                     report=False, tensorboard=tb, hidden="32", dim=16)
                wall = time.perf_counter() - t
                rows[case].append((wall, res.metrics["seconds_per_epoch"], sum(spent) / args.epochs))
    print(f"{args.nodes:,} nodes, {args.num_edges:,} edges, GCN 8-32-16, {args.epochs} epochs evaluated every epoch, "
          f"median of {args.repeats} alternating runs")
    print("| run | wall (s) | s/epoch (training) | tracker s/epoch |")
    print("|---|---:|---:|---:|")
    med = {case: [statistics.median(v[i] for v in vals) for i in range(3)] for case, vals in rows.items()}
    for case, (wall, spe, tr) in med.items():
        print(f"| {case} | {wall:.2f} | {spe:.4f} | {tr * 1e3:.2f} ms |")
    (w0, s0, _), (w1, s1, t1) = med["without"], med["--tensorboard"]
    print(f"| ratio | {w1 / w0:.3f}x | {s1 / s0:.3f}x | {t1 / s0:.1%} of an epoch |")


if __name__ == "__main__":
    main()
