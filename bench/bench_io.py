"""Reading speed of edge-list formats at the 770,000-node scale (4.6M undirected edges).

    .venv/bin/python bench/bench_io.py [--nodes 770000 --edges 4600000]

Writes the demo graph as whitespace text with integer ids, CSV with string ids, .npy and Parquet into a
temporary directory, then times gaescale.read_edges on each (best of 2) and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gaescale import community_graph, read_edges


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=770_000)
    ap.add_argument("--edges", type=int, default=4_600_000)
    args = ap.parse_args()
    ei = community_graph(args.nodes, args.edges, seed=0).edge_index
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        files = {"text, integer ids (.txt)": d / "e.txt", "CSV, string ids + header": d / "e.csv",
                 ".npy (2 x E)": d / "e.npy", "Parquet, string ids": d / "e.parquet"}
        np.savetxt(files["text, integer ids (.txt)"], ei.T, fmt="%d", delimiter=" ")
        names = np.char.add("user", ei.astype(str))
        with open(files["CSV, string ids + header"], "w") as fh:
            fh.write("source,target\n")
            np.savetxt(fh, names.T, fmt="%s", delimiter=",")
        np.save(files[".npy (2 x E)"], ei)
        pq.write_table(pa.table({"source": names[0], "target": names[1]}), files["Parquet, string ids"])
        print(f"{args.nodes:,} nodes, {ei.shape[1]:,} edges\n")
        print("| format | size (MB) | read_edges (s) | nodes found |\n|---|---:|---:|---:|")
        for label, path in files.items():
            best, el = float("inf"), None
            for _ in range(2):
                t = time.perf_counter()
                el = read_edges(path)
                best = min(best, time.perf_counter() - t)
            print(f"| {label} | {path.stat().st_size / 1e6:.0f} | {best:.2f} | {el.num_nodes:,} |")


if __name__ == "__main__":
    main()
