"""Where a run over a prepared graph spends its anonymous memory, step by step: ``gaescale.train`` in this process,
with a thread reading this process's ``RssAnon`` (/proc/self/status) every 50 ms and the steps of training,
embedding, evaluation and writing timed by wrapping their functions. Prints each step's anonymous memory at its
start and its peak, per node, beside the planner's prediction for the run.

    .venv/bin/python bench/make_big_graph.py --nodes 10000000 --edges 112000000 --out /tmp/g10m
    .venv/bin/gaescale prepare /tmp/g10m/edges.npy --features /tmp/g10m/x.npy --out /tmp/g10m/prepared
    .venv/bin/python bench/bench_eval_memory.py /tmp/g10m/prepared --time-limit 30 --mapped-min-mib 100

The model and split are bench_scale.py's (GCN 8-16-16-8, neighbour sampling, 1 % validation and 1 % test).
"""
from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import gaescale
from gaescale.run.memory import proc_kib

# (module, function) of the steps measured; a function is wrapped wherever a gaescale module refers to it
STEPS = [("gaescale.run.pipeline", "_fit"), ("gaescale.training.trainer", "fit"),
         ("gaescale.training.trainer", "_train_epoch"), ("gaescale.training.trainer", "_validate"),
         ("gaescale.run.pipeline", "_evaluate"), ("gaescale.training.evaluate", "link_scores"),
         ("gaescale.training.evaluate", "hits_at_k"), ("gaescale.training.evaluate", "mrr"),
         ("gaescale.training.evaluate", "filtered_ranking"), ("gaescale.training.heldout", "baseline_metrics"),
         ("gaescale.training.heuristics", "heuristic_metrics"), ("gaescale.training.heuristics", "heuristic_ranking"),
         ("gaescale.run.ranking", "ranking_parts"), ("gaescale.run.ranking", "calibrate_structure"),
         ("gaescale.training.heldout", "test_metrics"), ("gaescale.training.evaluate", "auc_ap"),
         ("gaescale.run.pipeline", "_finish"), ("gaescale.run.rundir", "embeddings_and_bias"),
         ("gaescale.run.rundir", "write_run")]


class Sampler(threading.Thread):
    def __init__(self, every: float = 0.05):
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), proc_kib("/proc/self/status", "RssAnon") or 0))
            time.sleep(self.every)

    def peak(self, t0: float, t1: float) -> int:
        return max((a for t, a in self.samples if t0 <= t <= t1), default=0)


def wrap_steps(calls: list) -> None:
    """Replace each function of :data:`STEPS` with a timed wrapper in every gaescale module that refers to it."""
    import importlib
    for mod, _ in STEPS:
        importlib.import_module(mod)
    originals = {getattr(sys.modules[m], n): f"{m.rsplit('.', 1)[-1]}.{n}" for m, n in STEPS}
    wrappers = {}
    for fn, label in originals.items():
        def wrapper(*a, _fn=fn, _label=label, **k):
            t0 = time.perf_counter()
            anon0 = proc_kib("/proc/self/status", "RssAnon")
            try:
                return _fn(*a, **k)
            finally:
                calls.append((_label, t0, time.perf_counter(), anon0))
        wrappers[fn] = functools.wraps(fn)(wrapper)
    for m in [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("gaescale")]:
        for attr, value in list(vars(m).items()):
            if callable(value) and value in wrappers:
                setattr(m, attr, wrappers[value])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prepared", type=Path)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--strategy", default="neighbor")
    ap.add_argument("--mapped-min-mib", type=float, default=None,
                    help="map layer-wise arrays from this size on (default 1 GiB): a 10M-node graph then maps what "
                         "a 100M-node one does")
    args = ap.parse_args()
    if args.mapped_min_mib is not None:  # the pipeline's and the planner's threshold alike
        from gaescale import outputs
        from gaescale.run import plan as planner
        outputs.MappedBuffers.__init__.__defaults__ = (int(args.mapped_min_mib * 2**20),)
        planner.MAPPED_MIN_BYTES = int(args.mapped_min_mib * 2**20)
    calls: list = []
    wrap_steps(calls)
    sampler = Sampler()
    sampler.start()
    out = Path(tempfile.mkdtemp(prefix="eval-memory-", dir=args.prepared.parent)) / "run"
    options = dict(hidden="16,16", dim=8, batch_size=4096, fanouts="5,5,5", val_fraction=0.01, test_fraction=0.01,
                   strategy=args.strategy, epochs=1000, eval_every=1000, report=False, threads=2,
                   time_limit=args.time_limit)
    try:
        result = gaescale.train(edges=str(args.prepared), out=str(out), **options)
    finally:
        sampler.stop.set()
        shutil.rmtree(out.parent, ignore_errors=True)
    n = result.metrics["num_nodes"]
    print(f"\n{n:,} nodes, {result.metrics['num_edges']:,} edges, strategy {result.metrics['strategy']}")
    print("| step | seconds | anonymous at start GiB | peak GiB | peak - start, bytes per node |")
    print("|---|---:|---:|---:|---:|")
    for label, t0, t1, anon0 in sorted(calls, key=lambda c: c[1]):
        peak = sampler.peak(t0, t1)
        print(f"| {label} | {t1 - t0:.1f} | {anon0 / 2**30:.2f} | {peak / 2**30:.2f} | {(peak - anon0) / n:.1f} |")
    whole = max(a for _, a in sampler.samples)
    print(f"peak anonymous of the whole run: {whole / 2**30:.2f} GiB ({whole / n:.1f} bytes per node)")
    from gaescale.config import TrainConfig
    from gaescale.run.plan import plan
    config = TrainConfig(edges=str(args.prepared), **{k: v for k, v in options.items() if k != "report"})
    chosen = [p for p in plan(config, n, result.metrics["num_edges"], 8, prepared=True)
              if p.strategy == result.metrics["strategy"]][0]
    print(f"planner: {chosen.peak_bytes / 2**30:.2f} GiB (resident {chosen.resident_bytes / 2**30:.2f}, "
          f"step {chosen.step_bytes / 2**30:.2f})")


if __name__ == "__main__":
    main()
