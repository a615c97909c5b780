"""What rank 0's sends cost under torchrun (gloo on 127.0.0.1, 2 processes), against their floor: rank 0
sends ``--mib`` MiB to rank 1 as arrays (``transfer.arrays_from_main``: a graph's CSR and features
broadcast in 64 MiB pieces) and as the files of a directory (``transfer._send_directory``, what a
host without rank 0's prepared copy receives, written to its disk), and, for the floor, the same bytes
through one plain loopback TCP socket (``sendall`` / ``recv_into`` into fresh memory, no copies in
Python) and a memcpy, into fresh memory and into memory already touched.

    .venv/bin/python bench/bench_send.py --mib 512
"""
from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench_distributed import _port  # bench/ is on the path when run as a script


def _worker(rank: int, port: int, mib: int, tmp: str, results) -> None:
    from gaescale.parallel import transfer
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                           timeout=timedelta(seconds=600))
    size = mib << 20
    arrays = {"indices": np.arange(size // 8, dtype=np.int32), "x": np.ones((size // 16, 2), np.float32)}
    src, dst = Path(tmp) / "src", Path(tmp) / "dst"
    if rank == 0:
        src.mkdir()
        for k, a in arrays.items():
            np.save(src / f"{k}.npy", a)
    for _ in range(2):  # the second round is the one timed: the files are in the page cache
        dist.barrier()
        t = time.perf_counter()
        got = transfer.arrays_from_main(lambda: arrays, "arrays")
        dist.barrier()
        as_arrays = time.perf_counter() - t
        if rank == 1:
            assert all(np.array_equal(got[k], a) for k, a in arrays.items())
        dist.barrier()
        t = time.perf_counter()
        if rank == 0:
            transfer._send_directory(src, [1], {})
        else:
            transfer._receive_directory(dst, lambda: shutil.rmtree(dst, ignore_errors=True))
        dist.barrier()
        as_files = time.perf_counter() - t
    if rank == 0:
        results.put(("arrays_from_main (gloo broadcast)", as_arrays))
        results.put(("_send_directory, written to disk (gloo send)", as_files))
    dist.destroy_process_group()


def _socket_floor(mib: int) -> float:
    """Seconds to move ``mib`` MiB through a loopback TCP socket between two processes."""
    ctx = mp.get_context("spawn")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    p = ctx.Process(target=_receive, args=(server.getsockname()[1], mib))
    p.start()
    conn, _ = server.accept()
    payload = memoryview(np.ones(mib << 20, np.uint8))
    t = time.perf_counter()
    conn.sendall(payload)
    conn.recv(1)  # the receiver's acknowledgement, once it holds every byte
    elapsed = time.perf_counter() - t
    p.join()
    conn.close()
    server.close()
    return elapsed


def _receive(port: int, mib: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        buf = memoryview(np.empty(mib << 20, np.uint8))
        got = 0
        while got < buf.nbytes:
            got += s.recv_into(buf[got:])
        s.sendall(b"k")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512)
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = mp.get_context("spawn").SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="gaescale-send-") as tmp:
        mp.spawn(_worker, args=(_port(), args.mib, tmp, results), nprocs=2, join=True)
    rows = []
    while not results.empty():
        rows.append(results.get())
    rows.append(("loopback TCP socket, sendall / recv_into (floor)", min(_socket_floor(args.mib) for _ in range(3))))
    a, b = np.ones(args.mib << 20, np.uint8), np.ones(args.mib << 20, np.uint8)
    t = time.perf_counter()
    np.copyto(np.empty_like(a), a)  # what a receiver does: its pages are touched for the first time
    rows.append(("memcpy in one process, into fresh memory", time.perf_counter() - t))
    t = time.perf_counter()
    np.copyto(b, a)
    rows.append(("memcpy in one process, into memory already touched", time.perf_counter() - t))
    print(f"\n{args.mib} MiB from rank 0 to rank 1, one host\n")
    print("| how | seconds | MiB/s | x the socket's time |")
    print("|---|---:|---:|---:|")
    floor = rows[-3][1]
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {args.mib / s:,.0f} | {s / floor:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
