import atexit
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data():
    """../shared/data beside the checkout; tests that need it skip where it is absent (a user's clone)."""
    if not (SHARED / "cora.npz").exists():
        pytest.skip(f"shared data not found at {SHARED} (only present in the project's workspace)")
    return SHARED


_RESERVED: list[socket.socket] = []
atexit.register(lambda: [s.close() for s in _RESERVED])


def free_port() -> int:
    """A TCP port on 127.0.0.1 for a process group's rendezvous, reserved until the test session ends.

    This process keeps a socket bound to the port (with SO_REUSEADDR, never listening): the kernel then
    gives the port to no other bind to port 0 and to no outgoing connection, while the store that torchrun
    or ``init_process_group`` starts there (which binds with SO_REUSEADDR too) can still listen on it. A
    port released before the launch, as a plain bind-and-close leaves it, could be taken in between by
    another process (another test run's ranks, their gloo connections)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _RESERVED.append(s)
    return s.getsockname()[1]


def random_edges(n: int, e: int, seed: int = 0) -> np.ndarray:
    """(2, e) random undirected edges u < v, unique, no loops."""
    rng = np.random.default_rng(seed)
    keys = set()
    while len(keys) < e:
        u, v = sorted(rng.integers(0, n, 2).tolist())
        if u != v:
            keys.add((u, v))
    return np.array(sorted(keys), dtype=np.int64).T


def dense_adjacency(edge_index: np.ndarray, n: int) -> torch.Tensor:
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = 1
    a[edge_index[1], edge_index[0]] = 1
    return a


def dense_features(edges: np.ndarray, n: int) -> np.ndarray:
    """``(N, N, 3)`` float64 ``[CN, AA, RA]`` of every pair, from the dense adjacency."""
    a = dense_adjacency(edges, n).numpy()
    k = a.sum(1)
    inv_log = np.where(k > 1, 1 / np.log(np.maximum(k, 2)), 0.0)
    return np.stack([a @ a, a @ np.diag(inv_log) @ a, a @ np.diag(1 / np.maximum(k, 1)) @ a], -1)


def dense_structure(edges, n, weights) -> np.ndarray:
    """``(N, N)`` ``w . log(1 + phi)`` (gaescale.structure's part of the logit), 0 on the diagonal."""
    g = np.log1p(dense_features(edges, n)) @ np.asarray(weights, np.float64)
    np.fill_diagonal(g, 0.0)
    return g


def brute_force_ranks(scores: np.ndarray, pos: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Rank of each ``(u, v)`` from ``u`` among all ``w`` but ``u``, ``v`` and the ``known[u]`` row."""
    ranks = []
    for u, v in pos.T:
        keep = ~known[u].astype(bool)
        keep[[u, v]] = False
        s, t = scores[u, keep], scores[u, v]
        ranks.append(1 + np.sum(s > t) + 0.5 * np.sum(s == t))
    return np.array(ranks)


def tensorboard_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in ``log_dir``'s TensorBoard event files, by tag: ``[(step, value), ...]`` as TensorBoard shows
    them (its EventAccumulator, every event kept; values are float32)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def as_earlier_run(log_dir) -> None:
    """Rename ``log_dir``'s event files as if written long before (TensorBoard reads them in name order:
    ``events.out.tfevents.<seconds>.<host>.<pid>.<writer of the process>``), so that a run tracked after them in
    the same second and process, whose last field may sort before theirs (10 < 9), is read after them."""
    for i, path in enumerate(sorted(Path(log_dir).glob("events.out.tfevents.*"))):
        path.rename(path.with_name(f"events.out.tfevents.0000000001.earlier.0.{i}"))


def hide_packages(monkeypatch, *names: str) -> None:
    """As if the packages ``names`` (top-level modules: ``matplotlib``, ``faiss``, ...) were not installed:
    importing one or any of its submodules fails, as it does where the package is absent."""
    import sys
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)
        for sub in [m for m in sys.modules if m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, sub)


def hide_tensorboard(monkeypatch) -> None:
    """As if the tensorboard package were not installed: importing it fails, and torch.utils.tensorboard (which
    imports it) is imported afresh."""
    import sys
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    for name in [m for m in sys.modules if m.startswith(("tensorboard.", "torch.utils.tensorboard"))]:
        monkeypatch.delitem(sys.modules, name)


# Unit tests use small tensors: one thread avoids OpenMP spin-waits when the machine is shared.
torch.set_num_threads(1)


# The failure tables (test_errors.py, test_reliability_*.py, run/test_writer.py): a 30-node ring and quick flags.
RING = "".join(f"{i} {(i + 1) % 30}\n{i} {(i + 7) % 30}\n" for i in range(30))
FAST = ["--quiet", "--epochs", "2", "--hidden", "4", "--dim", "2", "--no-report"]


def tree(root, skip=None) -> list:
    """Every path under ``root`` (but under ``skip``) with each file's size and modification time: equal before and
    after a command that changed nothing (a directory's own time changes with a lock taken and let go in it)."""
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else 0,
                   p.stat().st_mtime_ns if p.is_file() else 0) for p in root.rglob("*")
                  if skip is None or (p != skip and skip not in p.parents))
