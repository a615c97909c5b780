"""GPU checks and timings, for a machine with CUDA (one script, well under 5 minutes on one GPU).

    python bench/bench_gpu.py            # needs torch with CUDA and triton

1. Correctness: the fused Triton kernel for the exact dense term against the CPU tiles (value and gradient)
   for every loss kind, N = 5,000, d = 8.
2. Timing: the exact loss and gradient (weighted BCE) at N = 770,000, d = 8 (target <= 2 s on one H200),
   and pairs/s at N = 100,000.
3. A short full-batch training run of the core model on the GPU is not here yet: training has no
   --device flag (open issue).
"""
from __future__ import annotations

import sys
import time

import torch


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
        ok &= rel < 1e-4 and gerr < 1e-3
        print(f"check {kind:10s} value rel err {rel:.1e}  grad rel err {gerr:.1e}  {'ok' if rel < 1e-4 and gerr < 1e-3 else 'FAIL'}")
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
