"""Data-parallel training on torch.distributed (gloo on 127.0.0.1), through torchrun as a user runs it."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import torch

from gaescale.synthetic import community_graph

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    data = community_graph(2000, 10_000, seed=4)
    f = d / "e.npz"
    np.savez(f, edge_index=data.edge_index, x=data.x)
    return f


def _train(edges, out, *launcher, extra=(), timeout=240):
    cmd = [*launcher, "-m", "gaescale", "train", str(edges), "--out", str(out), "--hidden", "16", "--dim", "8",
           "--epochs", "6", "--eval-every", "2", "--quiet", "--no-report", "--threads", "1", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)


def test_two_processes_update_like_one_over_the_same_global_batch(edges, tmp_path):
    # 8,500 training edges: the 8,500 sampled pairs split evenly, so both runs score the very same pairs
    one = _train(edges, tmp_path / "one", sys.executable)
    two = _train(edges, tmp_path / "two", *TORCHRUN, "--nproc-per-node", "2", "--master-port", str(_port()))
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    m1, m2 = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in ("one", "two"))
    assert (m1["processes"], m2["processes"]) == (1, 2)
    np.testing.assert_allclose([h["loss"] for h in m2["history"]], [h["loss"] for h in m1["history"]], rtol=1e-5)
    p1, p2 = (torch.load(tmp_path / r / "model.pt", weights_only=True)["state_dict"] for r in ("one", "two"))
    for k in p1:
        torch.testing.assert_close(p2[k], p1[k], rtol=1e-4, atol=1e-5)
    z1, z2 = (np.load(tmp_path / r / "embeddings.npy") for r in ("one", "two"))
    np.testing.assert_allclose(z2, z1, rtol=1e-3, atol=1e-4)
    # only rank 0 wrote: one set of outputs, no rank's leftovers
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


def test_two_hosts_rendezvous_and_finish(edges, tmp_path):
    endpoint = f"127.0.0.1:{_port()}"
    procs = [subprocess.Popen(
        [*TORCHRUN, "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
         "--rdzv-endpoint", endpoint, "--rdzv-id", "gaescale-test", "-m", "gaescale", "train", str(edges),
         "--out", str(tmp_path / "run"), "--hidden", "16", "--dim", "8", "--epochs", "4", "--quiet", "--no-report",
         "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        for rank in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["processes"] == 2


def test_a_killed_rank_stops_the_others_with_a_clear_error(edges, tmp_path):
    out = tmp_path / "run"
    launcher = subprocess.Popen(
        [*TORCHRUN, "--nproc-per-node", "2", "--master-port", str(_port()), "-m", "gaescale", "train", str(edges),
         "--out", str(out), "--hidden", "16", "--dim", "8", "--epochs", "100000", "--eval-every", "100000",
         "--checkpoint-every", "1", "--quiet", "--no-report", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.time() + 120
        while not (out / "checkpoints").is_dir() or not any((out / "checkpoints").glob("epoch-*.pt")):
            assert launcher.poll() is None and time.time() < deadline, "training never started"
            time.sleep(0.2)
        workers = [c for c in psutil.Process(launcher.pid).children(recursive=True) if "gaescale" in " ".join(c.cmdline())]
        assert len(workers) == 2
        os.kill(workers[-1].pid, signal.SIGKILL)
        t = time.time()
        _, err = launcher.communicate(timeout=90)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0 and time.time() - t < 90
    assert "exitcode" in err and "-9" in err  # torchrun names the rank that died and its signal
    assert all(not c.is_running() for c in workers if c.pid != workers[-1].pid)


def test_a_killed_host_makes_the_other_host_exit_with_a_clear_error(edges, tmp_path):
    port = str(_port())
    out = tmp_path / "run"
    # static rendezvous: host 0 keeps the store and rank 0, so the survivor and its rank are known
    launchers = [subprocess.Popen(
        [*TORCHRUN, "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
         "--master-port", port, "-m", "gaescale", "train", str(edges),
         "--out", str(out), "--hidden", "16", "--dim", "8", "--epochs", "100000", "--eval-every", "100000",
         "--checkpoint-every", "1", "--quiet", "--no-report", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV) for rank in (0, 1)]
    try:
        deadline = time.time() + 120
        while not any((out / "checkpoints").glob("epoch-*.pt")) if (out / "checkpoints").is_dir() else True:
            assert all(p.poll() is None for p in launchers) and time.time() < deadline, "training never started"
            time.sleep(0.2)
        victim = next(c for c in psutil.Process(launchers[1].pid).children(recursive=True)
                      if "gaescale" in " ".join(c.cmdline()))
        victim.kill()
        t = time.time()
        errs = [p.communicate(timeout=90)[1] for p in launchers]
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
    assert time.time() - t < 90 and all(p.returncode != 0 for p in launchers)
    # the worker on the other host did not hang on the dead peer: it said so in one line and stopped
    assert "gaescale: error (rank 0): a peer process failed or stopped answering" in errs[0], errs[0][-2000:]
