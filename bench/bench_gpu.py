"""GPU checks and timings, for a machine with CUDA: one script, under 5 minutes on one GPU.

    python bench/bench_gpu.py            # needs torch with CUDA (and triton for the fused kernel)

1. Correctness: the fused Triton kernel for the exact dense term against the CPU tiles (value and gradient)
   for every loss kind, N = 5,000, d = 8, whole and in 3 data-parallel shards.
2. Timing: the exact loss and gradient (weighted BCE) at N = 770,000, d = 8 (target <= 2 s on one H200),
   and pairs/s at N = 100,000.
3. Every training path on the GPU against the CPU, same seed and draws: full batch (sampled and exact
   dense term), Cluster-GCN, FastGAE, neighbour sampling, GraphSAGE, featureless, VGAE, bf16 and fp16,
   on a 50,000-node graph: s/epoch on each device and the largest relative difference of the losses.
4. The core job on the GPU: the 3-layer GCN 8 -> 16 -> 16 -> 8 on 770,000 nodes, full batch, s/epoch.
5. The GPU tests of the suite (tests/test_devices.py, tests/test_kernels.py).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch


START = time.perf_counter()


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    from gaescale import kernels
    from gaescale.losses import KINDS, dense_term, reconstruction_loss
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; triton available: {kernels.available()}")
    ok = True
    for kind in ("bce", "mse", "linear-mse"):
        z = (0.3 * torch.randn(5000, 8, dtype=torch.float64)).requires_grad_()
        ref = dense_term(z, KINDS[kind], "exact")
        g_ref, = torch.autograd.grad(ref, z)
        zc = z.detach().float().cuda().requires_grad_()
        got = dense_term(zc, KINDS[kind], "exact")
        got.backward()
        rel = abs(got.item() - ref.item()) / abs(ref.item())
        gerr = (zc.grad.double().cpu() - g_ref).abs().max().item() / g_ref.abs().max().item()
        shares = [kernels.dense_value_and_grad(zc.detach(), kind=kind, shard=(k, 3)) for k in range(3)]
        srel = abs(sum(v.item() for v, _ in shares) - ref.item()) / abs(ref.item())
        sgerr = (sum(g for _, g in shares).double().cpu() - g_ref).abs().max().item() / g_ref.abs().max().item()
        good = rel < 1e-4 and gerr < 1e-3 and srel < 1e-4 and sgerr < 1e-3
        ok &= good
        print(f"check {kind:10s} value rel err {rel:.1e}  grad rel err {gerr:.1e}  3 shards: {srel:.1e} / {sgerr:.1e}  "
              f"{'ok' if good else 'FAIL'}")
    for n in (100_000, 770_000):
        z = (0.3 * torch.randn(n, 8, device="cuda")).requires_grad_()
        ei = torch.randint(0, n, (2, 6 * n), device="cuda")
        for rep in range(2):  # the first call compiles the kernel
            torch.cuda.synchronize()
            t = time.perf_counter()
            loss = reconstruction_loss(z, ei, n, kind="weighted-bce", dense="exact")
            loss.backward()
            torch.cuda.synchronize()
            sec = time.perf_counter() - t
        print(f"time N={n:,} d=8 weighted-bce exact loss + gradient: {sec:.3f} s ({n * n / sec:.3g} pairs/s)")
    print(f"[{time.perf_counter() - START:.0f} s]")
    ok &= training_paths()
    print(f"[{time.perf_counter() - START:.0f} s]")
    core_job()
    print(f"[{time.perf_counter() - START:.0f} s]")
    try:
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/test_devices.py", "tests/test_kernels.py"],
                               cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                               timeout=max(30.0, 285 - (time.perf_counter() - START)))  # the whole script in 5 minutes
    except subprocess.TimeoutExpired:
        print("GPU tests: stopped at the 5-minute mark; run them with: pytest tests/test_devices.py tests/test_kernels.py")
        return 1
    print("GPU tests:", tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else tests.stderr[-2000:])
    if tests.returncode:
        print(tests.stdout[-6000:])
    print(f"[{time.perf_counter() - START:.0f} s]")
    return 0 if ok and tests.returncode == 0 else 1


PATHS = [dict(strategy="full"), dict(strategy="full", loss="weighted-bce", dense="exact"),
         dict(strategy="cluster"), dict(strategy="fastgae"), dict(strategy="neighbor", batch_size=8192, fanouts="10,10"),
         dict(strategy="full", encoder="sage"), dict(strategy="cluster", featureless=True),
         dict(strategy="full", variational=True), dict(strategy="full", precision="bf16"),
         dict(strategy="neighbor", precision="fp16", batch_size=8192, fanouts="10,10")]


def training_paths() -> bool:
    """Each path for 4 epochs on the CPU and on the GPU: s/epoch (the median, first epoch included) and
    the largest relative difference between the two runs' epoch losses."""
    import gaescale
    from gaescale.synthetic import community_graph
    print(f"{'path':58s} {'cpu s/ep':>9s} {'gpu s/ep':>9s} {'ratio':>6s} {'loss diff':>9s}")
    ok = True
    for case in PATHS:
        case = dict(case)
        data = community_graph(50_000, 250_000, seed=0)
        if case.pop("featureless", False):
            data.x = None
            name = "featureless "
        else:
            name = ""
        name += " ".join(f"{k}={v}" for k, v in case.items())
        kw = dict(data=data, hidden="16", dim=8, epochs=4, quiet=True, seed=0, eval_every=4, **case)
        try:
            cpu, gpu = gaescale.train(device="cpu", **kw), gaescale.train(device="cuda", **kw)
        except Exception as exc:  # report every path, then fail
            print(f"{name:58s} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            ok = False
            continue
        a, b = (np.array([h["loss"] for h in r.metrics["history"]]) for r in (cpu, gpu))
        diff = float(np.max(np.abs(a - b) / np.abs(a)))
        sc, sg = cpu.metrics["seconds_per_epoch"], gpu.metrics["seconds_per_epoch"]
        tol = 5e-2 if case.get("precision") or case.get("variational") else 1e-2
        ok &= diff < tol
        print(f"{name:58s} {sc:9.3f} {sg:9.3f} {sc / sg:6.1f} {diff:9.1e}{'' if diff < tol else '  FAIL'}")
    return ok


def core_job() -> None:
    import gaescale
    from gaescale.synthetic import community_graph
    data = community_graph(770_000, 4_600_000, seed=0)
    for device in ("cuda", "cpu"):
        r = gaescale.train(data=data, hidden="16,16", dim=8, epochs=5, eval_every=5, quiet=True, device=device,
                           report=False)
        print(f"core job 770k nodes, GCN 8-16-16-8, full batch on {device}: {r.metrics['seconds_per_epoch']:.3f} "
              f"s/epoch, test AUC {r.metrics['test_auc']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
