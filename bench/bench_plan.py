"""The memory planner's predicted peak of the training phase against the measured one (VmHWM reset
after the split), for each strategy and graph size. Each run is its own `gaescale demo` process.

    .venv/bin/python bench/bench_plan.py --sizes 200000:1200000 770000:4600000 2000000:12000000
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gaescale.cli import DEMO_DEFAULTS
from gaescale.config import TrainConfig
from gaescale.run.plan import plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["200000:1200000", "770000:4600000", "2000000:12000000"],
                    help="NODES:EDGES of each demo graph")
    ap.add_argument("--strategies", nargs="+", default=["full", "fastgae", "cluster", "neighbor"])
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for size in args.sizes:
        n, e = (int(v) for v in size.split(":"))
        for strategy in args.strategies:
            with tempfile.TemporaryDirectory(prefix="gaescale-plan-") as tmp:
                cmd = [sys.executable, "-m", "gaescale", "demo", "--nodes", str(n), "--num-edges", str(e),
                       "--epochs", str(args.epochs), "--eval-every", "1", "--no-report", "--checkpoint-every", "0",
                       "--quiet", "--strategy", strategy, "--out", tmp]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"{size} {strategy} failed:\n{r.stderr}")
                m = json.loads((Path(tmp) / "metrics.json").read_text())
            config = TrainConfig(**{**DEMO_DEFAULTS, "out": None, "edges": "demo", "strategy": strategy})
            (pred,) = [p for p in plan(config, n, e, 8) if p.strategy == strategy]
            measured = m["training_peak_rss_bytes"]
            rows.append((n, e, strategy, pred.peak_bytes, measured, m["setup_peak_rss_bytes"], m["seconds_per_epoch"]))
            print(f"{n:,} {e:,} {strategy}: predicted {pred.peak_bytes / 2**30:.3f} GiB "
                  f"(resident {pred.resident_bytes / 2**30:.3f}), measured {measured / 2**30:.3f} GiB "
                  f"(at the start {m['training_start_rss_bytes'] / 2**30:.3f})", file=sys.stderr, flush=True)
    print("\n| nodes | edges | strategy | predicted peak (GiB) | measured training peak (GiB) | predicted / measured "
          "| setup peak (GiB) | s/epoch |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for n, e, s, p, meas, setup, spe in rows:
        print(f"| {n:,} | {e:,} | {s} | {p / 2**30:.2f} | {meas / 2**30:.2f} | {p / meas:.2f} | {setup / 2**30:.2f} "
              f"| {spe:.2f} |")


if __name__ == "__main__":
    main()
