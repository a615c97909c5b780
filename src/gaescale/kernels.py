"""GPU kernel for the exact dense term: one fused Triton kernel, no ``B x N`` intermediate in memory.

Each program owns ``BM`` rows of ``Z``, walks all columns in ``BN`` tiles, and keeps the tile of logits
in registers: it adds ``l0(S)`` to a per-row partial sum and ``l0'(S) Z_C`` to the rows' gradient. No
atomics (every row's gradient has one owner); ``N^2`` pair evaluations (the GPU does not need the CPU
path's symmetry trick). Optional: imported only when ``z`` is on CUDA, or by tests under
``TRITON_INTERPRET=1`` on the CPU.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None

KERNEL_IDS = {"bce": 0, "mse": 1, "linear-mse": 2}


def available() -> bool:
    return triton is not None


if triton is not None:
    @triton.jit
    def _dense_kernel(z_ptr, grad_ptr, partial_ptr, n, row_start, row_stop, D: tl.constexpr, KIND: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, NEED_GRAD: tl.constexpr):
        pid = tl.program_id(0)
        rows = row_start + pid * BM + tl.arange(0, BM)
        rmask = rows < row_stop
        dims = tl.arange(0, D)
        zr = tl.load(z_ptr + rows[:, None] * D + dims[None, :], mask=rmask[:, None], other=0.0)
        acc = tl.zeros((BM,), dtype=tl.float32)
        g = tl.zeros((BM, D), dtype=tl.float32)
        for start in range(0, n, BN):
            cols = start + tl.arange(0, BN)
            cmask = cols < n
            zc = tl.load(z_ptr + cols[:, None] * D + dims[None, :], mask=cmask[:, None], other=0.0)
            s = tl.dot(zr, tl.trans(zc), input_precision="ieee")
            valid = rmask[:, None] & cmask[None, :]
            if KIND == 0:  # bce: softplus(s) = max(s, 0) + log(1 + exp(-|s|)); derivative sigmoid(s)
                e = tl.exp(-tl.abs(s))
                l0 = tl.maximum(s, 0.0) + tl.log(1.0 + e)
                d = tl.where(s >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
            elif KIND == 1:  # mse on sigmoid: sigmoid(s)^2
                p = tl.sigmoid(s)
                l0 = p * p
                d = 2.0 * p * p * (1.0 - p)
            else:  # linear-mse: s^2
                l0 = s * s
                d = 2.0 * s
            acc += tl.sum(tl.where(valid, l0, 0.0), axis=1)
            if NEED_GRAD:
                g += tl.dot(tl.where(valid, d, 0.0), zc, input_precision="ieee")
        tl.store(partial_ptr + rows, acc, mask=rmask)
        if NEED_GRAD:
            tl.store(grad_ptr + rows[:, None] * D + dims[None, :], g, mask=rmask[:, None])


def dense_value_and_grad(z: torch.Tensor, need_grad: bool = True, *, kind: str, block_m: int = 64,
                         block_n: int = 64,
                         shard: tuple[int, int] = (0, 1)) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(sum_{i,j} l0(z_i . z_j), dD/dz)`` for ``z: (N, d)`` float32 (the gradient is None without ``need_grad``).

    ``shard = (k, K)``: only the rows ``a`` of the ``k``-th of ``K`` equal row ranges: their partial sums
    ``sum_j l0(z_a . z_j)`` and *their rows of the whole term's gradient* (zero elsewhere). That is not the
    derivative of the shard's value, but the ``K`` shards' gradients add up to ``dD/dz`` as their values
    add up to ``D``, which is what data parallel training needs (each process computes one shard)."""
    if triton is None:
        raise RuntimeError("triton is not installed; the exact dense term runs with the CPU implementation")
    n, d = z.shape
    k, num_shards = shard
    row_start, row_stop = n * k // num_shards, n * (k + 1) // num_shards
    width = max(16, 1 << (d - 1).bit_length())  # tl.dot needs K >= 16 and a power of two
    zp = torch.zeros((n, width), dtype=torch.float32, device=z.device)
    zp[:, :d] = z.detach().float()
    partial = torch.zeros(n, dtype=torch.float32, device=z.device)
    grad = ((torch.zeros_like(zp) if num_shards > 1 else torch.empty_like(zp)) if need_grad
            else partial)  # any pointer when unused
    _dense_kernel[(max(1, triton.cdiv(row_stop - row_start, block_m)),)](
        zp, grad, partial, n, row_start, row_stop, D=width, KIND=KERNEL_IDS[kind], BM=block_m, BN=block_n,
        NEED_GRAD=need_grad)
    value = partial.double().sum()
    return value, (2.0 * grad[:, :d]).to(z.dtype) if need_grad else None

