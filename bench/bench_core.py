"""Side-by-side benchmark: gaescale vs PyTorch Geometric's GAE recipe on the synthetic community graph.

Each implementation runs in its own fresh subprocess, one after the other, with this interpreter:

    .venv-bench/bin/python bench/bench_core.py --epochs 20 [--nodes N --edges E --threads T]

Prints a Markdown table and writes the raw results to bench/results/core-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
GiB = 2 ** 30


class RunFailed(Exception):
    pass


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--nodes", type=int, default=770_000)
    p.add_argument("--edges", type=int, default=4_600_000, help="undirected edges")
    p.add_argument("--graph-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads for both (0: torch's default)")
    p.add_argument("--pyg-cached", action="store_true", help="PyG side uses GCNConv(cached=True)")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error("--epochs must be >= 1")
    return args


background: dict[str, float] = {}


def _cpu_seconds() -> tuple[float, float]:
    """(CPU seconds busy on the whole machine, CPU seconds of this process's finished children)."""
    c = psutil.cpu_times()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(c) - c.idle - getattr(c, "iowait", 0.0), kids.ru_utime + kids.ru_stime


def run(name: str, cmd: list[str]) -> tuple[str, float]:
    """Run ``cmd``, echoing its stderr live; return (stdout, wall seconds). Raise RunFailed on a non-zero exit."""
    print(f"\n== {name}: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=40)
    busy0, t = _cpu_seconds(), time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, cwd=BENCH.parent)
        for line in proc.stderr:
            sys.stderr.write(line)
            tail.append(line)
        rc = proc.wait()
        out.seek(0)
        stdout = out.read()
    wall = time.perf_counter() - t
    system, child = (b - a for a, b in zip(busy0, _cpu_seconds()))
    background[name] = max(0.0, system - child) / wall  # cores used by other processes meanwhile
    if rc != 0:
        raise RunFailed(f"{name} failed (exit {rc}): {shlex.join(cmd)}\n--- stderr tail ---\n{''.join(tail)}"
                        f"--- stdout tail ---\n{stdout[-2000:]}")
    return stdout, wall


def run_gaescale(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="gaescale-bench-") as tmp:
        cmd = [sys.executable, "-m", "gaescale", "demo", "--nodes", str(args.nodes), "--num-edges", str(args.edges),
               "--graph-seed", str(args.graph_seed), "--hidden", "16,16", "--dim", "8",
               "--epochs", str(args.epochs), "--eval-every", str(args.epochs), "--patience", "0",
               "--seed", "0", "--out", tmp, "--quiet", "--no-report", "--checkpoint-every", "0"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        _, wall = run("gaescale", cmd)
        path = Path(tmp) / "metrics.json"
        try:
            metrics = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise RunFailed(f"gaescale exited 0 but {path} is unreadable: {exc}") from exc
    history = metrics.get("history") or []
    return {**metrics, "impl": "gaescale", "first_epoch_seconds": history[0]["seconds"] if history else None,
            "epoch_seconds": [h["seconds"] for h in history], "wall_seconds": wall, "command": shlex.join(cmd)}


def run_pyg(args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(BENCH / "pyg_gae.py"), "--nodes", str(args.nodes), "--edges", str(args.edges),
           "--graph-seed", str(args.graph_seed), "--hidden", "16,16", "--dim", "8",
           "--epochs", str(args.epochs), "--seed", "0", "--threads", str(args.threads)]
    if args.pyg_cached:
        cmd.append("--cached")
    stdout, wall = run("pyg", cmd)
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError) as exc:
        raise RunFailed(f"pyg exited 0 but its last stdout line is not JSON: {stdout[-2000:]!r}") from exc
    return {**result, "wall_seconds": wall, "command": shlex.join(cmd)}


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    return {"nproc": os.cpu_count(), "affinity_cpus": len(os.sched_getaffinity(0)), "cpu_model": cpu,
            "total_ram_bytes": psutil.virtual_memory().total, "python": sys.version.split()[0],
            "torch": ver("torch"), "torch_geometric": ver("torch_geometric"), "gaescale": ver("gaescale")}


def _f(v, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def report(args: argparse.Namespace, results: dict, mach: dict, command: str) -> str:
    g, p = results["gaescale"], results["pyg"]
    rows = ["| implementation | s/epoch (median) | first epoch (s) | peak RSS (GiB) | test AUC | test AP "
            "| test filtered MRR | test filtered Hits@10 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in (("gaescale", g), ("PyG GAE", p)):
        rows.append(f"| {name} | {_f(r['seconds_per_epoch'], '.3f')} | {_f(r.get('first_epoch_seconds'), '.3f')} "
                    f"| {_f(r['peak_rss_bytes'] / GiB, '.2f')} | {_f(r['test_auc'], '.4f')} "
                    f"| {_f(r['test_ap'], '.4f')} | {_f(r.get('filtered_mrr'), '.4f')} "
                    f"| {_f(r.get('filtered_hits@10'), '.4f')} |")
    name, h = best_heuristic(g)
    if h:
        rows.append(f"| {name} (gaescale's split) | | | | {_f(h.get('auc'), '.4f')} | {_f(h.get('ap'), '.4f')} "
                    f"| {_f(h.get('filtered_mrr'), '.4f')} | {_f(h.get('filtered_hits@10'), '.4f')} |")
    ratio = results["ratios"]
    lines = [
        f"Graph: {args.nodes:,} nodes, {args.edges:,} undirected edges (graph seed {args.graph_seed}); "
        f"{args.epochs} epochs; GCN 8 -> 16 -> 16 -> 8; threads: {args.threads or 'default'}"
        + ("; PyG GCNConv(cached=True)" if args.pyg_cached else ""),
        "", *rows, "",
        f"- speed: PyG s/epoch / gaescale s/epoch = {_f(ratio['pyg_over_gaescale_seconds_per_epoch'], '.2f')}x",
        f"- memory: gaescale peak RSS / PyG peak RSS = {_f(ratio['gaescale_over_pyg_peak_rss'], '.2f')}",
        f"- quality: gaescale test AUC - PyG test AUC = {_f(ratio['auc_difference'], '+.4f')}",
        "",
        f"Machine: {mach['nproc']} CPUs ({mach['affinity_cpus']} usable), {mach['cpu_model']}, "
        f"{mach['total_ram_bytes'] / GiB:.1f} GiB RAM; Python {mach['python']}",
        f"Versions: torch {p.get('torch_version') or mach['torch']}, "
        f"torch_geometric {p.get('pyg_version') or mach['torch_geometric']}, "
        f"gaescale {mach['gaescale']}",
        f"Command: {command}",
    ]
    busy = {k: v for k, v in background.items() if v > 0.2}
    if busy:
        lines.append("WARNING: other processes used CPU during the runs (cores, averaged): "
                     + ", ".join(f"{k} {v:.2f}" for k, v in busy.items()) + "; timings are not clean.")
    return "\n".join(lines)


def best_heuristic(g: dict) -> tuple[str, dict | None]:
    """The link heuristic of gaescale's run with the highest filtered MRR on its test split (its metrics'
    ``baselines``), as ``(name, metrics)``; PyG's script ranks nothing, so its ranking columns stay n/a."""
    ranked = {k: v for k, v in (g.get("baselines") or {}).items() if isinstance(v, dict) and "filtered_mrr" in v}
    if not ranked:
        return "best heuristic", None
    name = max(ranked, key=lambda k: ranked[k]["filtered_mrr"])
    return name.replace("_", "-"), ranked[name]


def ratios(g: dict, p: dict) -> dict:
    div = lambda a, b: None if a is None or not b else a / b  # noqa: E731
    return {"pyg_over_gaescale_seconds_per_epoch": div(p["seconds_per_epoch"], g["seconds_per_epoch"]),
            "gaescale_over_pyg_peak_rss": div(g["peak_rss_bytes"], p["peak_rss_bytes"]),
            "auc_difference": None if g["test_auc"] is None or p["test_auc"] is None else g["test_auc"] - p["test_auc"]}


def main(argv=None) -> int:
    args = parse_args(argv)
    command = shlex.join([sys.executable, *sys.argv])
    mach = machine()
    try:
        results = {"gaescale": run_gaescale(args), "pyg": run_pyg(args)}
    except RunFailed as exc:
        print(f"\nbench_core: {exc}", file=sys.stderr)
        return 1
    results["ratios"] = ratios(results["gaescale"], results["pyg"])
    out_dir = BENCH / "results"
    out_dir.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = out_dir / f"core-{stamp}.json"
    out.write_text(json.dumps({"timestamp": stamp, "command": command, "args": vars(args), "machine": mach,
                               "background_cores": background,
                               **results}, indent=2) + "\n")
    print(report(args, results, mach, command))
    print(f"\nraw results: {out.relative_to(BENCH.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
