"""GPU checks and timings, for a machine with CUDA: one script, under 5 minutes on one GPU.

    python bench/bench_gpu.py            # needs torch with CUDA (and triton for the fused kernel)
    python bench/bench_gpu.py --smoke    # every section on the CPU at small sizes (the kernel in Triton's
                                         # interpreter): checks that the script runs, in .ci/run

1. Correctness: the fused Triton kernel for the exact dense term against the CPU's float64 tiles (value
   and gradient) for every loss kind, N = 5,000, d = 8, whole and in 3 data-parallel shards.
2. Timing: the exact loss and gradient (weighted BCE) at N = 770,000, d = 8 (target <= 2 s on one H200),
   and pairs/s at N = 100,000.
3. Every training path on the GPU against the CPU, same seed and draws: full batch (sampled and exact
   dense term), Cluster-GCN, FastGAE, neighbour sampling, GraphSAGE, featureless, VGAE, bf16 and fp16,
   on a 50,000-node graph: s/epoch on each device and the largest relative difference of the losses.
4. Data parallel on the GPU: 2 processes sharing it (gloo, which carries CUDA tensors: NCCL refuses two
   ranks on one device, so NCCL itself needs 2 GPUs), full batch with the exact term's kernel sharded,
   and neighbour sampling on the sharded graph with sharded evaluation; against the same 2 processes on
   the CPU, and full batch against one process (the same global batch: the same losses and test AUC).
5. The core job on the GPU: the 3-layer GCN 8 -> 16 -> 16 -> 8 on 770,000 nodes, full batch, s/epoch.
6. The GPU tests of the suite (tests/test_devices.py, tests/test_kernels.py).
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch

START = time.perf_counter()
SIZES = {  # what each section runs on: the GPU run, and the smoke run on the CPU
    "gpu": dict(check=5000, timing=(100_000, 770_000), paths=(50_000, 250_000), epochs=4, parallel=(50_000, 250_000),
                core=(770_000, 4_600_000), core_epochs=5),
    "smoke": dict(check=150, timing=(2000,), paths=(1500, 6000), epochs=2, parallel=(1500, 6000),
                  core=(3000, 12_000), core_epochs=2),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="run every section on the CPU at small sizes")
    args = ap.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
        device, sizes = "cpu", SIZES["smoke"]
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to check (--smoke runs the script on the CPU)")
        return 0
    else:
        device, sizes = "cuda", SIZES["gpu"]
    from gaescale import kernels
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (smoke run)"
    print(f"device: {name}; torch {torch.__version__}; triton available: {kernels.available()}")
    ok = kernel_checks(device, sizes["check"])
    timings(device, sizes["timing"])
    print(f"[{time.perf_counter() - START:.0f} s]")
    ok &= training_paths(device, sizes["paths"], sizes["epochs"])
    print(f"[{time.perf_counter() - START:.0f} s]")
    ok &= data_parallel(device, sizes["parallel"], sizes["epochs"])
    print(f"[{time.perf_counter() - START:.0f} s]")
    core_job(device, sizes["core"], sizes["core_epochs"])
    print(f"[{time.perf_counter() - START:.0f} s]")
    if args.smoke:
        return 0 if ok else 1
    try:
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/test_devices.py", "tests/test_kernels.py"],
                               cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                               timeout=max(30.0, 285 - (time.perf_counter() - START)))  # the whole script in 5 minutes
    except subprocess.TimeoutExpired:
        print("GPU tests: stopped at the 5-minute mark; run them with: "
              "pytest tests/test_devices.py tests/test_kernels.py")
        return 1
    print("GPU tests:", tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else tests.stderr[-2000:])
    if tests.returncode:
        print(tests.stdout[-6000:])
    print(f"[{time.perf_counter() - START:.0f} s]")
    return 0 if ok and tests.returncode == 0 else 1


def kernel_checks(device: str, n: int) -> bool:
    """The kernel's value and gradient in 3 shards, and the loss module's exact dense term on ``device`` (on
    CUDA: the kernel), against the CPU's float64 exact term (itself tested against the dense matrix)."""
    from gaescale import kernels
    from gaescale.losses import KINDS, dense_term
    ok = True
    for kind in ("bce", "mse", "linear-mse"):
        z = (0.3 * torch.randn(n, 8, dtype=torch.float64)).requires_grad_()
        ref = dense_term(z, KINDS[kind], "exact")
        g_ref, = torch.autograd.grad(ref, z)
        zc = z.detach().float().to(device).requires_grad_()
        got = dense_term(zc, KINDS[kind], "exact")
        got.backward()
        rel = abs(got.item() - ref.item()) / abs(ref.item())
        gerr = (zc.grad.double().cpu() - g_ref).abs().max().item() / g_ref.abs().max().item()
        line = f"check {kind:10s} dense_term value rel err {rel:.1e}  grad rel err {gerr:.1e}"
        good = rel < 1e-4 and gerr < 1e-3
        if kernels.available():
            shares = [kernels.dense_value_and_grad(zc.detach(), kind=kind, shard=(k, 3)) for k in range(3)]
            srel = abs(sum(v.item() for v, _ in shares) - ref.item()) / abs(ref.item())
            sgerr = (sum(g for _, g in shares).double().cpu() - g_ref).abs().max().item() / g_ref.abs().max().item()
            good &= srel < 1e-4 and sgerr < 1e-3
            line += f"  kernel in 3 shards: {srel:.1e} / {sgerr:.1e}"
        ok &= good
        print(line + f"  {'ok' if good else 'FAIL'}")
    return ok


def timings(device: str, sizes: tuple[int, ...]) -> None:
    from gaescale.losses import reconstruction_loss
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for n in sizes:
        z = (0.3 * torch.randn(n, 8, device=device)).requires_grad_()
        ei = torch.randint(0, n, (2, 6 * n), device=device)
        for _ in range(2):  # the first call compiles the kernel
            sync()
            t = time.perf_counter()
            loss = reconstruction_loss(z, ei, n, kind="weighted-bce", dense="exact")
            loss.backward()
            sync()
            sec = time.perf_counter() - t
        print(f"time N={n:,} d=8 weighted-bce exact loss + gradient: {sec:.3f} s ({n * n / sec:.3g} pairs/s)")


PATHS = [dict(strategy="full"), dict(strategy="full", loss="weighted-bce", dense="exact"),
         dict(strategy="cluster"), dict(strategy="fastgae"),
         dict(strategy="neighbor", batch_size=8192, fanouts="10,10"),
         dict(strategy="full", encoder="sage"), dict(strategy="cluster", featureless=True),
         dict(strategy="full", variational=True), dict(strategy="full", precision="bf16"),
         dict(strategy="neighbor", precision="fp16", batch_size=8192, fanouts="10,10")]


def _graph(size: tuple[int, int], featureless: bool = False):
    from gaescale.data.synthetic import community_graph
    data = community_graph(*size, seed=0)
    if featureless:
        data.x = None
    return data


def _compare(name: str, cpu: dict, dev: dict, tol: float) -> bool:
    """One table row: s/epoch on each side and the largest relative difference of the epoch losses."""
    a, b = (np.array([h["loss"] for h in m["history"]]) for m in (cpu, dev))
    diff = float(np.max(np.abs(a - b) / np.abs(a)))
    sc, sg = cpu["seconds_per_epoch"], dev["seconds_per_epoch"]
    print(f"{name:58s} {sc:9.3f} {sg:9.3f} {sc / sg:6.1f} {diff:9.1e}{'' if diff < tol else '  FAIL'}")
    return diff < tol


def training_paths(device: str, size: tuple[int, int], epochs: int) -> bool:
    """Each path for ``epochs`` epochs on the CPU and on ``device``: s/epoch (the median, first epoch
    included) and the largest relative difference between the two runs' epoch losses."""
    import gaescale
    print(f"{'path':58s} {'cpu s/ep':>9s} {'dev s/ep':>9s} {'ratio':>6s} {'loss diff':>9s}")
    ok = True
    for case in PATHS:
        case = dict(case)
        featureless = case.pop("featureless", False)
        name = ("featureless " if featureless else "") + " ".join(f"{k}={v}" for k, v in case.items())
        kw = dict(data=_graph(size, featureless), hidden="16", dim=8, epochs=epochs, quiet=True, seed=0,
                  eval_every=epochs, report=False, **case)
        try:
            runs = {where: gaescale.train(device=where, **kw) for where in dict.fromkeys(("cpu", device))}
            cpu, dev = runs["cpu"], runs[device]
        except Exception as exc:  # report every path, then fail
            print(f"{name:58s} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            ok = False
            continue
        tolerance = 5e-2 if case.get("precision") or case.get("variational") else 1e-2
        ok &= _compare(name, cpu.metrics, dev.metrics, tolerance)
    return ok


PARALLEL = [dict(strategy="full", loss="weighted-bce", dense="exact"),
            dict(strategy="neighbor", batch_size=4096, fanouts="10,10")]


# the data-parallel runs' settings; the structural part trains in one process only (auto turns it off under
# torchrun), and one process is compared with two here
RUN = dict(hidden="16", dim=8, quiet=True, seed=0, report=False, threads=1, structure="off")


def data_parallel(device: str, size: tuple[int, int], epochs: int) -> bool:
    """2 processes (gloo) on the CPU and on ``device`` (both on the one GPU), each case: s/epoch and the
    largest relative difference of the losses; the test AUCs. Full batch steps on one global batch: one
    process on ``device`` must give the 2 processes' losses and test AUC (to rounding)."""
    import torch.multiprocessing as mp

    import gaescale
    print(f"{'2 processes':58s} {'cpu s/ep':>9s} {'dev s/ep':>9s} {'ratio':>6s} {'loss diff':>9s}  test AUC cpu / dev")
    ok = True
    with tempfile.TemporaryDirectory(prefix="gaescale-gpu-ddp-") as tmp:
        outs = {where: [Path(tmp) / f"{i}-{where}.json" for i in range(len(PARALLEL))]
                for where in dict.fromkeys(("cpu", device))}  # one device in the smoke run
        errors = {}
        for where, files in outs.items():  # one group of 2 processes runs every case, in turn
            try:
                mp.spawn(_rank, args=(_port(), where, PARALLEL, size, epochs, [str(f) for f in files]), nprocs=2,
                         join=True)
            except Exception as exc:
                errors[where] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}"
        for i, case in enumerate(PARALLEL):
            name = " ".join(f"{k}={v}" for k, v in case.items())
            missing = [where for where, files in outs.items() if not files[i].exists()]
            if missing:  # this case, or one before it, failed there
                print(f"{name:58s} FAILED on {', '.join(missing)}: {errors.get(missing[0], 'no output')}")
                ok = False
                continue
            runs = {where: json.loads(files[i].read_text()) for where, files in outs.items()}
            ok &= _compare(name, runs["cpu"], runs[device], 1e-2)
            print(f"{'':58s} test AUC {runs['cpu']['test_auc']:.4f} / {runs[device]['test_auc']:.4f}")
            if case["strategy"] == "full":
                one = gaescale.train(data=_graph(size), device=device, epochs=epochs, eval_every=epochs, **RUN,
                                     **case).metrics
                two = runs[device]
                a, b = (np.array([h["loss"] for h in m["history"]]) for m in (one, two))
                diff = float(np.max(np.abs(a - b) / np.abs(a)))
                same = diff < 1e-3 and abs(one["test_auc"] - two["test_auc"]) < 1e-3
                print(f"{'one process, the same global batch':58s} loss diff {diff:.1e}  "
                      f"test AUC {one['test_auc']:.4f} / 2 processes {two['test_auc']:.4f}{'' if same else '  FAIL'}")
                ok &= same
    return ok


def _rank(rank: int, port: int, device: str, cases: list[dict], size: tuple[int, int], epochs: int,
          outs: list[str]) -> None:
    """One of 2 processes: joins a gloo group on 127.0.0.1 and trains each case in turn; rank 0 writes the
    metrics of each to its path in ``outs``."""
    import torch.distributed as dist

    import gaescale
    from gaescale.parallel.runtime import Dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=300))
    try:
        for case, out in zip(cases, outs):
            r = gaescale.train(data=_graph(size), group=Dist(rank, 2, "gloo"), device=device, epochs=epochs,
                               eval_every=epochs, **RUN, **case)
            if rank == 0:
                Path(out).write_text(json.dumps({k: r.metrics[k] for k in ("history", "seconds_per_epoch",
                                                                            "test_auc")}))
    finally:
        dist.destroy_process_group()


_RESERVED: list[socket.socket] = []
atexit.register(lambda: [s.close() for s in _RESERVED])


def _port() -> int:
    """A port on 127.0.0.1 for the ranks' rendezvous, reserved while this script runs: a socket stays bound
    to it (SO_REUSEADDR, not listening), so no other process is given it before rank 0's store listens
    there (binding with SO_REUSEADDR too). A port released before the launch could be taken in between."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _RESERVED.append(s)
    return s.getsockname()[1]


def core_job(device: str, size: tuple[int, int], epochs: int) -> None:
    import gaescale
    data = _graph(size)
    for where in dict.fromkeys((device, "cpu")):
        r = gaescale.train(data=data, hidden="16,16", dim=8, epochs=epochs, eval_every=epochs, quiet=True, device=where,
                           report=False)
        print(f"core job {size[0]:,} nodes, GCN 8-16-16-8, full batch on {where}: {r.metrics['seconds_per_epoch']:.3f} "
              f"s/epoch, test AUC {r.metrics['test_auc']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
