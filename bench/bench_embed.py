"""Seconds to embed a whole graph with a finished run's encoder (`gaescale embed`), in one process: the graph
grown by 1% new nodes (each attached to 5 old ones, with features), layer by layer and in one forward pass.

    python bench/bench_embed.py --nodes 100000          # trains a 2-epoch run first (into --work)
    python bench/bench_embed.py --run runs/demo         # an existing run trained on the demo graph

The run's own graph is regenerated (``community_graph(nodes, 6 * nodes, seed=0)``, the demo's shape) and
written as an .npy edge list with a .npy feature matrix (row i = node i), so reading is fast and the timing is
the encoder's.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import gaescale
from gaescale import Run
from gaescale.data.synthetic import community_graph
from gaescale.run.memory import peak_rss_bytes


def grown(nodes: int, num_edges: int, seed: int = 0):
    """``(edge_index: (2, E + 5k), x: (N + k, F))``: the community graph plus ``k = N / 100`` new nodes."""
    g = community_graph(nodes, num_edges, seed=seed)
    rng = np.random.default_rng(seed + 1)
    k = max(1, nodes // 100)
    new = np.repeat(np.arange(nodes, nodes + k), 5)
    ei = np.concatenate([g.edge_index, np.stack([new, rng.integers(0, nodes, new.size)])], axis=1)
    x = np.concatenate([g.x, g.x[rng.integers(0, nodes, k)]])
    return g, ei, x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--run", help="an existing run on community_graph(nodes, 6 * nodes) (default: train one)")
    ap.add_argument("--work", default=None, help="where to write the run and the edge list (default: a temp dir)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-embed-"))
    work.mkdir(parents=True, exist_ok=True)
    g, ei, x = grown(args.nodes, 6 * args.nodes)
    run_dir = args.run
    if run_dir is None:
        run_dir = work / "run"
        t = time.perf_counter()
        gaescale.train(data=g, out=str(run_dir), hidden="16,16", dim=8, epochs=2, quiet=True, report=False,
                       checkpoint_every=0, test=False)
        print(f"trained a 2-epoch GCN 8-16-16-8 run on {args.nodes:,} nodes [{time.perf_counter() - t:.1f}s]")
    np.save(work / "grown.npy", ei)
    np.save(work / "grown_x.npy", x)
    run = Run.open(run_dir)
    modes = {"one forward pass (the default for a file)": None, "layer by layer (65,536 rows)": 1 << 16}
    best = {label: [float("inf"), float("inf")] for label in modes}  # (total, encoder) seconds, best of the rounds
    for _ in range(args.rounds):  # the modes alternate, so that the machine's load falls on both alike
        for label, block in modes.items():
            lines: list[str] = []
            t = time.perf_counter()
            out = run.embed(work / "grown.npy", work / "grown_x.npy", out=work / "z.npy", block=block,
                            log=lines.append)
            total = time.perf_counter() - t
            encoder = float(lines[1].rsplit("[", 1)[1].rstrip("s]"))  # the 'embedded ...' line's own time
            best[label] = [min(best[label][0], total), min(best[label][1], encoder)]
    n, new = out.embeddings.shape[0], out.num_new
    print(f"\n| {args.nodes:,}-node run; its graph + {new:,} new nodes ({n:,}) | read + embed + write (s) | "
          "encoder (s) |")
    print("|---|---:|---:|")
    for label, (total, encoder) in best.items():
        print(f"| {label} | {total:.2f} | {encoder:.2f} |")
    (a_total, a_enc), (b_total, b_enc) = best.values()
    print(f"\nlayer by layer / one pass: {b_total / a_total:.2f}x the total, {b_enc / a_enc:.2f}x the encoder's "
          f"time (best of {args.rounds} alternating rounds)")
    print(f"\npeak RSS {peak_rss_bytes() / 2**30:.2f} GiB (the process's: generating the graph and, without --run, "
          f"training included); {args.threads} torch threads")


if __name__ == "__main__":
    main()
