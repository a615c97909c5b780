"""The Triton kernel for the exact dense term, run on the CPU by Triton's interpreter (and on CUDA when present)."""
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[test]' brings it)")

PROBE = """
import torch
from gaescale import kernels
from functools import partial
from gaescale.losses import KINDS, ValueAndGrad
torch.manual_seed(0)
for kind in ("bce", "mse", "linear-mse"):
    for n, d in ((70, 5), (130, 8), (64, 16)):
        z = (0.5 * torch.randn(n, d, dtype=torch.float64)).requires_grad_()
        ref = KINDS[kind].l0(z @ z.T).sum()
        g_ref, = torch.autograd.grad(ref, z)
        zk = z.detach().float().requires_grad_()
        value = ValueAndGrad.apply(zk, partial(kernels.dense_value_and_grad, kind=kind))
        value.backward()
        assert abs(value.item() - ref.item()) <= 1e-5 * abs(ref.item()), (kind, n, d, value.item(), ref.item())
        err = (zk.grad.double() - g_ref).abs().max().item()
        assert err <= 1e-4 * g_ref.abs().max().item(), (kind, n, d, err)
        v, g = kernels.dense_value_and_grad(zk.detach(), need_grad=False, kind=kind)
        assert g is None and abs(v.item() - ref.item()) <= 1e-5 * abs(ref.item())
        for shards in (2, 3):  # data parallel: the shards' values and gradients add up to the whole's
            parts = [kernels.dense_value_and_grad(zk.detach(), kind=kind, shard=(k, shards)) for k in range(shards)]
            assert abs(sum(p[0].item() for p in parts) - ref.item()) <= 1e-5 * abs(ref.item())
            err = (sum(p[1] for p in parts).double() - g_ref).abs().max().item()
            assert err <= 1e-4 * g_ref.abs().max().item(), (kind, n, d, shards, err)
print("ok")
"""


def test_kernel_matches_dense_reference_in_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_exact_loss_uses_kernel_and_matches_cpu():
    from gaescale.losses import reconstruction_loss
    z = (0.3 * torch.randn(3000, 8, dtype=torch.float64)).requires_grad_()
    ei = torch.randint(0, 3000, (2, 10000))
    cpu = reconstruction_loss(z, ei, 3000, kind="weighted-bce", dense="exact")
    g_cpu, = torch.autograd.grad(cpu, z)
    zc = z.detach().float().cuda().requires_grad_()
    gpu = reconstruction_loss(zc, ei.cuda(), 3000, kind="weighted-bce", dense="exact")
    gpu.backward()
    assert abs(gpu.item() - cpu.item()) <= 1e-4 * abs(cpu.item())
    assert torch.allclose(zc.grad.double().cpu(), g_cpu, rtol=1e-3, atol=1e-6)
