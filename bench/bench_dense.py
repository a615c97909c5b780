"""Throughput and memory of the exact dense term sum_{i,j} l0(z_i . z_j) (forward + backward).

    .venv/bin/python bench/bench_dense.py [--sizes 20000,100000 --dim 8 --kind bce]

Compares gaescale's streamed, symmetric, single-pass implementation with the straightforward blocked
torch reference (1024-row blocks of Z_R Z^T, the backward recomputing each block), each measured in its
own subprocess so that peak RSS is its own. Prints pairs/s (N^2 / seconds) and the peak extra memory
over the process's RSS after Z was allocated.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import psutil
import torch


class NaiveBlocked(torch.autograd.Function):
    """The reference: row blocks of Z_R Z^T (B x N); backward recomputes each block."""

    @staticmethod
    def forward(ctx, z, loss, block):
        ctx.save_for_backward(z)
        ctx.loss, ctx.block = loss, block
        total = torch.zeros((), dtype=torch.float64)
        for r in range(0, z.shape[0], block):
            total += loss.l0(z[r:r + block] @ z.T).sum(dtype=torch.float64)
        return total.to(z.dtype)

    @staticmethod
    def backward(ctx, g):
        (z,) = ctx.saved_tensors
        dz = torch.empty_like(z)
        for r in range(0, z.shape[0], ctx.block):
            dz[r:r + ctx.block] = ctx.loss.dl0(z[r:r + ctx.block] @ z.T) @ z
        return dz * (2 * g), None, None


def one(impl: str, n: int, d: int, kind: str) -> dict:
    from gaescale.losses import KINDS, dense_term
    loss = KINDS[kind]
    z = (torch.randn(n, d, generator=torch.Generator().manual_seed(0)) / d ** 0.5).requires_grad_()
    base = psutil.Process().memory_info().rss
    t = time.perf_counter()
    if impl == "gaescale":
        value = dense_term(z, loss, "exact")
    else:
        value = NaiveBlocked.apply(z, loss, 1024)
    value.backward()
    seconds = time.perf_counter() - t
    from gaescale.run.memory import peak_rss_bytes
    peak = peak_rss_bytes()
    return {"impl": impl, "n": n, "seconds": seconds, "pairs_per_s": n * n / seconds,
            "extra_peak_mb": max(0, peak - base) / 1e6, "value": float(value), "grad_norm": float(z.grad.norm())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,100000")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--kind", default="bce")
    ap.add_argument("--one", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.dim, args.kind)))
        return
    print(f"exact dense term, kind={args.kind}, d={args.dim}, torch threads={torch.get_num_threads()}\n")
    print("| N | implementation | seconds | pairs/s | peak extra memory (MB) | value |\n|---:|---|---:|---:|---:|---:|")
    for n in map(int, args.sizes.split(",")):
        rows = {}
        for impl in ("naive-blocked", "gaescale"):
            out = subprocess.run([sys.executable, __file__, "--one", impl, str(n), "--dim", str(args.dim),
                                  "--kind", args.kind], capture_output=True, text=True, check=True).stdout
            rows[impl] = r = json.loads(out.strip().splitlines()[-1])
            print(f"| {n:,} | {impl} | {r['seconds']:.2f} | {r['pairs_per_s']:.3g} | {r['extra_peak_mb']:.0f} "
                  f"| {r['value']:.6g} |", flush=True)
        a, b = rows["naive-blocked"], rows["gaescale"]
        rel = abs(a['value'] - b['value']) / abs(a['value'])
        print(f"|  | speed-up | {a['seconds'] / b['seconds']:.2f}x | | | rel. diff {rel:.1e} |")


if __name__ == "__main__":
    main()
