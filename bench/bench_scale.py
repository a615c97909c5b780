"""A graph larger than memory end to end, every phase timed and its memory measured: generate (chunked, never the
whole graph in memory), ``gaescale prepare``, ``gaescale plan``, ``gaescale train --strategy auto`` from the prepared
directory (split, training capped by ``--time-limit``, layer-by-layer embedding, held-out evaluation against the
heuristics, outputs), then ``gaescale topk`` for a sample of nodes.

    .venv/bin/python bench/bench_scale.py --nodes 100000000 --rows 1120000000 --work /work/big100m --time-limit 2700

Each phase is its own process (``gaescale train``'s phases are told apart by the time its log lines arrive); a
thread reads its /proc/PID/smaps every 2 s (bench_prepare.monitored; every 0.1 s took a whole core at 100M nodes):
peak resident memory, its anonymous part, and the pages of files under the prepared directory and the run
(memory-mapped: page cache the kernel may drop).
Files already in WORK are reused (the graph, the prepared directory); the run and the top-k table are redone.
Needs about 45 bytes of disk per edge row (edges.npy, prepare's temporary buckets, the run's training graph).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_prepare import monitored  # noqa: E402

FLAGS = ["--hidden", "16,16", "--dim", "8", "--batch-size", "4096", "--fanouts", "5,5,5", "--val-fraction", "0.01",
         "--test-fraction", "0.01"]  # the motivating model; 1 % of the edges held out for validation and for test
# --featureless: the same graph without its features, the one-hop linear encoder's learnt table (N x 16) on disk
FEATURELESS = ["--encoder", "linear", "--dim", "16", "--val-fraction", "0.01", "--test-fraction", "0.01"]
TRAIN = ["--strategy", "auto", "--epochs", "1000", "--eval-every", "1000", "--no-report", "--threads", "2"]
STAGES = [("split", "split:"), ("training starts", "train:"), ("embedded", "embedded "),
          ("evaluated", "test AUC"), ("written", "outputs in")]


def gib(b) -> str:
    return "" if b is None else f"{b / 2**30:.2f}"


def stage_times(lines: list[tuple[float, str]]) -> dict[str, float | None]:
    """Seconds from the start of ``train`` to the first log line starting with each marker of :data:`STAGES`."""
    return {name: next((t for t, line in lines if line.startswith(marker)), None) for name, marker in STAGES}


def run_phase(rows: list, name: str, cmd: list[str], mapped: list[str], stamps: list | None = None):
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd[:12])}{' ...' if len(cmd) > 12 else ''}",
          file=sys.stderr, flush=True)
    wall, peaks, err = monitored(cmd, mapped, None, stamps, every=2.0)
    rows.append((name, wall, peaks))
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {wall:.0f} s, peak RSS {gib(peaks['rss'])} GiB, anonymous "
          f"{gib(peaks['anon'])} GiB", file=sys.stderr, flush=True)
    return err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000_000)
    ap.add_argument("--rows", type=int, default=1_120_000_000, help="edge rows to generate (~11%% are repeats)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--time-limit", type=float, default=2700.0, help="seconds of training")
    ap.add_argument("--topk-nodes", type=int, default=1000)
    ap.add_argument("--featureless", action="store_true", help="prepare the graph without its features (WORK/"
                    "prepared-featureless) and train the linear encoder's learnt table (--strategy auto: partitioned "
                    "where it does not fit in memory); the run in WORK/run-featureless")
    ap.add_argument("--resume", action="store_true", help="continue the run in WORK/run from its last checkpoint "
                                                          "(train --resume) instead of starting it again")
    args = ap.parse_args()
    py, work = sys.executable, args.work
    suffix = "-featureless" if args.featureless else ""
    graph, prepared, run = work / "graph", work / f"prepared{suffix}", work / f"run{suffix}"
    flags, topk = (FEATURELESS if args.featureless else FLAGS), work / f"topk{suffix}.tsv"
    work.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(work).free
    print(f"{free / 2**30:.0f} GiB free in {work}", file=sys.stderr)
    rows: list = []
    if not (graph / "edges.npy").exists():
        run_phase(rows, "generate", [py, str(Path(__file__).parent / "make_big_graph.py"), "--nodes", str(args.nodes),
                                     "--edges", str(args.rows), "--out", str(graph)], [])
    if not prepared.exists():
        features = [] if args.featureless else ["--features", str(graph / "x.npy")]
        run_phase(rows, "prepare", [py, "-m", "gaescale", "prepare", str(graph / "edges.npy"), *features,
                                    "--out", str(prepared)], [])
    plan = subprocess.run([py, "-m", "gaescale", "plan", str(prepared), *flags, "--strategy", "auto"], check=True,
                          capture_output=True, text=True).stdout
    (work / f"plan{suffix}.txt").write_text(plan)
    print(plan, file=sys.stderr, flush=True)
    for p in ([] if args.resume else [run]) + [topk]:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    stamps: list = []
    run_phase(rows, "train", [py, "-m", "gaescale", "train", str(prepared), "--out", str(run), *flags, *TRAIN,
                              "--time-limit", str(args.time_limit), *(["--resume"] if args.resume else [])],
              [str(prepared), str(run)], stamps)
    (work / f"train{suffix}.log").write_text("".join(f"{t:9.1f} {line}" for t, line in stamps))
    metrics = json.loads((run / "metrics.json").read_text())
    ids = (prepared / "nodes.tsv").read_text().split("\n", args.topk_nodes * 1000)[:-1][::1000][:args.topk_nodes]
    run_phase(rows, "topk", [py, "-m", "gaescale", "topk", str(run), "--k", "10", "--exclude-existing",
                             "--out", str(topk), "--node-ids", *ids], [str(prepared), str(run)])
    report(rows, metrics, plan, stage_times(stamps))


def report(rows, metrics: dict, plan: str, stages: dict) -> None:
    print("\n| phase | wall (s) | peak RSS GiB | anonymous GiB | mapped graph/run pages GiB |")
    print("|---|---:|---:|---:|---:|")
    for name, wall, p in rows:
        print(f"| {name} | {wall:.0f} | {gib(p['rss'])} | {gib(p['anon'])} | {gib(p['graph'])} |")
    print("\ntrain's stages, seconds from its start: " + ", ".join(
        f"{k} {'?' if v is None else f'{v:.0f}'}" for k, v in stages.items()) + "\n")
    keys = ["num_nodes", "num_edges", "train_edges", "strategy", "epochs", "seconds_per_epoch", "embed_seconds",
            "total_seconds", "test_auc", "test_ap", "filtered_mrr", "filtered_hits@10", "setup_peak_rss_bytes",
            "training_peak_rss_bytes", "evaluation_peak_rss_bytes", "peak_rss_bytes"]
    for k in keys:
        print(f"{k}: {metrics.get(k)}")
    for name, b in (metrics.get("baselines") or {}).items():
        print(f"{name}: AUC {b['auc']:.4f} AP {b['ap']:.4f} filtered MRR {b['filtered_mrr']:.4f} "
              f"Hits@10 {b['filtered_hits@10']:.4f} ({b['seconds']:.0f} s)")
    print("\n" + plan.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
