"""Data-parallel training on torch.distributed (gloo on 127.0.0.1), through torchrun as a user runs it.

Each launch costs seconds of start-up (every rank imports torch and gaescale), so runs that do not depend on
each other start together, the single-process runs they are compared with train in this process (its
imports done), and one with the settings of another test's is trained once."""
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil
import pytest
import torch

from conftest import free_port
from gaescale.data.synthetic import community_graph

pytestmark = pytest.mark.slow  # every test here launches processes

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
# A rank waiting on a collective gives up after the CLI's timeout (gaescale.parallel.runtime.from_torchrun:
# 120 s; on rank 0's own work, an hour). A failure must stop every rank well before that: the tests allow
# half of it, counted from the failure (its first "gaescale: error" line, the kill, the signal), not from
# the launch, whose ranks take 4-7 s each to import on 2 shared cores.
COLLECTIVE_TIMEOUT = 120.0
STOPPED_WITHIN = COLLECTIVE_TIMEOUT / 2


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    d = tmp_path_factory.mktemp("ddp")
    data = community_graph(2000, 10_000, seed=4)
    f = d / "e.npz"
    np.savez(f, edge_index=data.edge_index, x=data.x)
    return f


def _cmd(edges, out, *launcher, extra=()):
    # --structure off: the structural part trains in one process only (auto turns it off under torchrun), and
    # one process is compared with several here
    return [*launcher, "-m", "gaescale", "train", str(edges), "--out", str(out), "--hidden", "16", "--dim", "8",
            "--epochs", "6", "--eval-every", "2", "--quiet", "--no-report", "--threads", "1", "--structure", "off",
            *extra]


def _torchrun(nproc=2):
    return [*TORCHRUN, "--nproc-per-node", str(nproc), "--master-port", str(free_port())]


class _Launch:
    """A command started in its own session, its output in files (a full pipe would stall it while
    another launch is waited for)."""

    def __init__(self, cmd):
        self.dir = tempfile.mkdtemp(prefix="gaescale-launch-")
        self.files = [open(os.path.join(self.dir, name), "w+b") for name in ("stdout", "stderr")]
        self.proc = subprocess.Popen(cmd, stdout=self.files[0], stderr=self.files[1], env=ENV, start_new_session=True)

    def _read(self, i):
        f = self.files[i]
        return os.pread(f.fileno(), os.fstat(f.fileno()).st_size, 0)  # pread: the child's file offset stays

    def finish(self, timeout=240):
        """Wait for the command: a CompletedProcess with text output, and ``after_error``: the seconds from
        the first "gaescale: error" on stderr (polled every 20 ms) to the exit, or None."""
        deadline, seen = time.monotonic() + timeout, None
        try:
            while self.proc.poll() is None:
                if seen is None and b"gaescale: error" in self._read(1):
                    seen = time.monotonic()
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(self.proc.args, timeout, stderr=self._read(1))
                time.sleep(0.02)
            ended = time.monotonic()
            out, err = (self._read(i).decode(errors="replace") for i in (0, 1))
        finally:
            if self.proc.poll() is None:  # the launcher and every rank it started
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            for f in self.files:
                f.close()
            shutil.rmtree(self.dir, ignore_errors=True)
        if seen is None and "gaescale: error" in err:
            seen = ended  # printed in the last 20 ms
        r = subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)
        r.after_error = None if seen is None else ended - seen
        return r


def _together(*cmds, timeout=240):
    """Run the commands at once (one's start-up overlaps the others'); their CompletedProcesses."""
    launches = [_Launch(c) for c in cmds]
    try:
        return [launch.finish(timeout) for launch in launches]
    finally:
        for launch in launches:
            if launch.proc.poll() is None:
                os.killpg(launch.proc.pid, signal.SIGKILL)


def _train(edges, out, *launcher, extra=(), timeout=240):
    return _together(_cmd(edges, out, *launcher, extra=extra), timeout=timeout)[0]


def _in_process(edges, out, extra=(), alongside=()):
    """`gaescale train` with _cmd's settings as one process, run in this one (no start-up), while the
    commands ``alongside`` run: its CompletedProcess (exit code and stderr), and theirs."""
    from gaescale.cli import main
    launches = [_Launch(c) for c in alongside]
    try:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(_cmd(edges, out, extra=extra)[2:])
        one = subprocess.CompletedProcess(["gaescale", "train"], code, "", err.getvalue())
        return one, [launch.finish() for launch in launches]
    finally:
        for launch in launches:
            if launch.proc.poll() is None:
                os.killpg(launch.proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def one_process(edges, tmp_path_factory):
    """Single-process runs of _train's settings and ``flags``, each trained once for the module:
    ``get(flags, *cmds)`` runs the commands (together with the single-process run, where it is not trained
    yet) and returns the run's directory and the commands' CompletedProcesses."""
    done = {}

    def get(flags, *cmds):
        key = tuple(flags)
        if key in done:
            return done[key], _together(*cmds)
        out = tmp_path_factory.mktemp("one")
        one, rest = _in_process(edges, out, flags, alongside=cmds)
        assert one.returncode == 0, one.stderr
        done[key] = out
        return out, rest
    return get


@pytest.mark.parametrize("loss,rtol", [([], 1e-5), (["--loss", "weighted-bce", "--dense", "exact"], 1e-5),
                                       (["--loss", "linear-mse", "--dense", "closed"], 1e-5),
                                       (["--precision", "fp16", "--variational"], 2e-3)],
                         ids=["sampled", "exact", "closed", "fp16-vgae"])
def test_two_processes_update_like_one_over_the_same_global_batch(edges, tmp_path, one_process, loss, rtol):
    # 8,500 training edges: the 8,500 sampled pairs split evenly, so both runs score the very same pairs;
    # the exact dense term's tiles split by row block, the closed form's value by 2. In fp16 each rank's
    # half-precision backward rounds its own share: agreement to rounding, not to float32's digits.
    one, (two,) = one_process(loss, _cmd(edges, tmp_path / "two", *_torchrun(), extra=loss))
    assert two.returncode == 0, two.stderr
    m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, tmp_path / "two"))
    assert (m1["processes"], m2["processes"]) == (1, 2)
    np.testing.assert_allclose([h["loss"] for h in m2["history"]], [h["loss"] for h in m1["history"]], rtol=rtol)
    p1, p2 = (torch.load(d / "model.pt", weights_only=True)["state_dict"] for d in (one, tmp_path / "two"))
    for k in p1:
        torch.testing.assert_close(p2[k], p1[k], rtol=10 * rtol, atol=1e-5 if rtol < 1e-4 else 1e-3)
    z1, z2 = (np.load(d / "embeddings.npy") for d in (one, tmp_path / "two"))
    np.testing.assert_allclose(z2, z1, rtol=100 * rtol, atol=1e-4 if rtol < 1e-4 else 1e-2)
    # only rank 0 wrote: one set of outputs, no rank's leftovers
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in one.iterdir())


@pytest.mark.slow
def test_a_weighted_graph_trains_on_two_processes_like_one(edges, tmp_path):
    # rank 0 reads the weights and sends them with the CSR: rank 1's operator and loss weigh as rank 0's, so two
    # processes over the same global batch step as one; FastGAE's subgraphs keep their weights on every rank
    with np.load(edges) as f:
        ei, x = f["edge_index"], f["x"]
    weighted = tmp_path / "w.npz"
    np.savez(weighted, edge_index=ei, x=x, edge_weight=np.random.default_rng(0).uniform(0.2, 3.0, ei.shape[1]))
    flags = ["--weighted"]
    one, (two, fast) = _in_process(weighted, tmp_path / "one", flags, alongside=[
        _cmd(weighted, tmp_path / "two", *_torchrun(), extra=flags),
        _cmd(weighted, tmp_path / "fast", *_torchrun(), extra=[*flags, "--strategy", "fastgae"])])
    assert (one.returncode, two.returncode, fast.returncode) == (0, 0, 0), two.stderr + fast.stderr
    m1, m2 = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert (m1["processes"], m2["processes"]) == (1, 2)
    np.testing.assert_allclose([h["loss"] for h in m2["history"]], [h["loss"] for h in m1["history"]], rtol=1e-5)
    z1, z2 = (np.load(tmp_path / d / "embeddings.npy") for d in ("one", "two"))
    np.testing.assert_allclose(z2, z1, rtol=1e-3, atol=1e-4)
    unweighted = _in_process(edges, tmp_path / "plain")[0]  # the same graph without its weights trains otherwise
    assert unweighted.returncode == 0
    z0 = np.load(tmp_path / "plain" / "embeddings.npy")
    assert np.abs(z0 - z1).max() > 1e-2
    for d in ("two", "fast"):
        with np.load(tmp_path / d / "graph.npz") as g:
            assert "data" in g.files and g["data"].size == g["indices"].size
    # neighbour sampling and Cluster-GCN read a prepared copy, which keeps no weights: refused before any work
    bad = _train(weighted, tmp_path / "bad", *_torchrun(), extra=[*flags, "--strategy", "neighbor"])
    assert bad.returncode != 0 and "The 'strategy' parameter of train must be 'full' or 'fastgae' for a weighted " \
                                   "graph under torchrun" in bad.stderr


def _host_cmds(tmp_path, edges, outs, *extra, nproc=(1, 2), host1_edges=None):
    """Two torchrun launchers on 127.0.0.1 (``--nnodes 2``, ``nproc`` processes each) training with
    neighbour sampling (or the ``--strategy`` of ``extra``, the flags of each host); host 1 is given a path
    where it has no file (or ``host1_edges``). The two commands."""
    endpoint = f"127.0.0.1:{free_port()}"
    return [[*TORCHRUN, "--nnodes", "2", "--node-rank", str(host), "--nproc-per-node", str(nproc[host]),
             "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "gaescale-hosts", "-m", "gaescale",
             "train", str(edges if host == 0 else host1_edges or tmp_path / "missing.npz"), "--out", str(outs[host]),
             "--strategy", "neighbor", "--hidden", "16", "--dim", "8", "--epochs", "2", "--no-report", "--threads", "1",
             *(extra[host] if extra else ())] for host in (0, 1)]


def _two_hosts(tmp_path, edges, outs, *extra, nproc=(1, 2), host1_edges=None):
    """Runs :func:`_host_cmds`' launchers; their exit codes and stderr."""
    runs = _together(*_host_cmds(tmp_path, edges, outs, *extra, nproc=nproc, host1_edges=host1_edges))
    return [r.returncode for r in runs], [r.stderr for r in runs]


def test_two_hosts_rendezvous_and_train_like_one_process_though_host_1_has_no_edge_list(edges, tmp_path, one_process):
    """Full batch replicates the graph: rank 0 alone reads the edge list and sends the others its CSR and
    features, and the two hosts' run updates as one process does (the same random split, on every rank)."""
    hosts = _host_cmds(tmp_path, edges, [tmp_path / "h0", tmp_path / "h1"],
                       *[["--strategy", "full", "--epochs", "6", "--eval-every", "2"]] * 2, nproc=(1, 1))
    one, runs = one_process([], *hosts)  # _train's settings, as the single process's
    codes, errs = [r.returncode for r in runs], [r.stderr for r in runs]
    assert not any(codes), errs
    assert "sent the graph and the features to the other processes (1), which do not read" in errs[0], errs[0][-2000:]
    m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, tmp_path / "h0"))
    assert (m2["processes"], m2["strategy"], m2["test_auc"] is not None) == (2, "full", True)
    np.testing.assert_allclose([h["loss"] for h in m2["history"]], [h["loss"] for h in m1["history"]], rtol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "h0" / "embeddings.npy"), np.load(one / "embeddings.npy"),
                               rtol=1e-3, atol=1e-4)
    assert not (tmp_path / "h1").exists()  # rank 1 wrote nothing, and needed no copy


@pytest.mark.parametrize("case", ["own-disk", "shared-disk", "blocked"])
def test_rank_0_alone_reads_the_edge_list_and_sends_its_copy_to_hosts_that_do_not_see_it(edges, tmp_path, case):
    """Host 1 is given a path where it has no file: only rank 0 reads the edge list. ``own-disk``: each host
    writes to its own OUT (as on its own disk), so host 1 does not see rank 0's OUT/prepared: its first
    process (rank 1) receives a copy while rank 2 waits. ``shared-disk``: both write to one OUT, and host 1
    maps rank 0's copy. ``blocked``: host 1's OUT/prepared is a file of the user's: every rank stops, and
    rank 1 names it."""
    outs = [tmp_path / "host0", tmp_path / ("host0" if case == "shared-disk" else "host1")]
    if case == "blocked":
        outs[1].mkdir()
        (outs[1] / "prepared").write_text("mine")
    codes, errs = _two_hosts(tmp_path, edges, outs)
    if case == "blocked":
        assert all(codes)
        assert f"gaescale: error (rank 1): {outs[1] / 'prepared'}: exists but is not a copy" in errs[1], errs[1][-2000:]
        assert "gaescale: error (rank 0): rank 1 failed to make" in errs[0], errs[0][-2000:]
        assert (outs[1] / "prepared").read_text() == "mine"
        assert sorted(p.name for p in outs[1].iterdir()) == ["prepared"]  # no partial copy left behind
        return
    assert not any(codes), errs
    assert json.loads((tmp_path / "host0" / "metrics.json").read_text())["processes"] == 3
    if case == "shared-disk":
        assert "sent to" not in errs[0], errs[0][-2000:]
        return
    assert "sent to ranks [1], whose hosts do not see it" in errs[0], errs[0][-2000:]
    for name in ("graph.json", "indptr.npy", "indices.npy", "nodes.tsv", "x.npy"):
        assert (outs[0] / "prepared" / name).read_bytes() == (outs[1] / "prepared" / name).read_bytes()
    assert sorted(p.name for p in outs[1].iterdir()) == ["prepared"]  # rank 0 alone writes outputs


def test_hosts_without_a_shared_disk_resume_from_rank_0s_checkpoint(edges, tmp_path):
    """Rank 0 reads the checkpoint and sends it: host 1 has none in its own OUT, and the resumed run
    continues every rank where it stopped (the losses of an uninterrupted run, bit for bit)."""
    ckpt = ["--checkpoint-every", "1", "--batch-size", "2048", "--fanouts", "5,5"]
    outs = {name: [tmp_path / name, tmp_path / f"{name}-host1"] for name in ("whole", "part")}
    hosts = {name: _host_cmds(tmp_path, edges, outs[name], *[[*ckpt, "--epochs", epochs, *resume]] * 2, nproc=(1, 1))
             for name, epochs, resume in (("whole", "4", []), ("part", "2", []))}
    runs = {}

    def check(name, launched):
        assert not any(r.returncode for r in launched), [r.stderr for r in launched]
        runs[name] = json.loads((outs[name][0] / "metrics.json").read_text())["history"]
        assert sorted(p.name for p in outs[name][1].iterdir()) == ["prepared"]  # no checkpoint where rank 1 is

    first = _together(*hosts["whole"], *hosts["part"])  # the whole run and the first part, at once
    check("whole", first[:2])
    check("part", first[2:])
    check("part", _together(*_host_cmds(tmp_path, edges, outs["part"], *[[*ckpt, "--epochs", "4", "--resume"]] * 2,
                                        nproc=(1, 1))))
    assert len(runs["part"]) == 4
    assert [h["loss"] for h in runs["part"]] == [h["loss"] for h in runs["whole"]]


@pytest.mark.parametrize("where", ["host 0", "host 1", "both, other graphs"])
def test_a_prepared_directory_on_host_0_alone_is_sent_to_the_other(edges, tmp_path, where):
    """Rank 0 maps a directory of 'gaescale prepare' that host 1 does not have: host 1 receives a copy into
    its own OUT/prepared. The other way round (rank 0 has an edge list where host 1 has a prepared
    directory) the ranks would read different inputs: every rank stops; so they do when each host has a
    prepared directory, of another graph."""
    from gaescale.data.prepare import prepare
    prepare(edges, tmp_path / "g")
    outs = [tmp_path / "h0", tmp_path / "h1"]
    if where == "both, other graphs":
        data = np.load(edges)
        np.savez(tmp_path / "fewer.npz", edge_index=data["edge_index"][:, 1:], x=data["x"])
        prepare(tmp_path / "fewer.npz", tmp_path / "g1")
        codes, errs = _two_hosts(tmp_path, tmp_path / "g", outs, nproc=(1, 1), host1_edges=tmp_path / "g1")
        assert all(codes)
        assert (f"gaescale: error (rank 0): rank 1 maps a graph at {tmp_path / 'g1'} that is not rank 0's"
                in errs[0]), errs[0][-2000:]
        assert "9,999 edges" in errs[0]
        return
    if where == "host 1":
        codes, errs = _two_hosts(tmp_path, edges, outs, nproc=(1, 1), host1_edges=tmp_path / "g")
        assert all(codes)
        assert "gaescale: error (rank 0): rank 1 sees a directory of 'gaescale prepare'" in errs[0], errs[0][-2000:]
        assert f"gaescale: error (rank 1): {tmp_path / 'g'}: is a directory of 'gaescale prepare'" in errs[1]
        return
    codes, errs = _two_hosts(tmp_path, tmp_path / "g", outs, nproc=(1, 2))
    assert not any(codes), errs
    assert f"sent {tmp_path / 'g'} to ranks [1], whose hosts do not see it" in errs[0], errs[0][-2000:]
    for name in ("indptr.npy", "indices.npy", "nodes.tsv", "x.npy"):
        assert (tmp_path / "g" / name).read_bytes() == (outs[1] / "prepared" / name).read_bytes()
    assert json.loads((outs[0] / "graph.json").read_text()) == {"prepared": str(tmp_path / "g")}
    assert sorted(p.name for p in outs[1].iterdir()) == ["prepared"]


def test_ranks_started_with_other_settings_stop_before_any_work(edges, tmp_path):
    codes, errs = _two_hosts(tmp_path, edges, [tmp_path / "h0", tmp_path / "h1"], ["--lr", "0.01"], ["--lr", "0.02"],
                             nproc=(1, 1), host1_edges=edges)
    assert all(codes)
    assert ("gaescale: error (rank 0): rank 1 was started with other settings than rank 0: lr 0.02 (rank 0: 0.01)"
            in errs[0]), errs[0][-2000:]
    assert not (tmp_path / "h0").exists()  # nothing written


@pytest.mark.parametrize("strategy", ["neighbor", "full"])
def test_a_malformed_edge_list_read_by_rank_0_stops_every_rank_naming_its_line(tmp_path, strategy):
    """Rank 0 alone reads the edge list: to prepare the run's copy (neighbour sampling) or to send its graph
    (full batch)."""
    bad = tmp_path / "e.csv"
    bad.write_text("0,1\n1,2\n2\n")
    run = _train(bad, tmp_path / "run", *_torchrun(), extra=["--strategy", strategy])
    assert run.returncode != 0 and run.after_error < STOPPED_WITHIN, (run.after_error, run.stderr)
    assert f"gaescale: error (rank 0): {bad}, line 3: expected at least 2 columns" in run.stderr, run.stderr[-2000:]
    assert "gaescale: error (rank 1): rank 0 failed to make" in run.stderr
    assert not (tmp_path / "run" / "prepared").exists()  # nothing half-written


def test_a_killed_rank_stops_the_others_with_a_clear_error(edges, tmp_path):
    out = tmp_path / "run"
    launcher = subprocess.Popen(
        [*_torchrun(), "-m", "gaescale", "train", str(edges),
         "--out", str(out), "--hidden", "16", "--dim", "8", "--epochs", "100000", "--eval-every", "100000",
         "--checkpoint-every", "1", "--quiet", "--no-report", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 240
        ckdir = out / ".staging" / "checkpoints"  # the run's while it trains
        while not ckdir.is_dir() or not any(ckdir.glob("epoch-*.pt")):
            assert launcher.poll() is None and time.monotonic() < deadline, "training never started"
            time.sleep(0.2)
        workers = [c for c in psutil.Process(launcher.pid).children(recursive=True)
                   if "gaescale" in " ".join(c.cmdline())]
        assert len(workers) == 2
        os.kill(workers[-1].pid, signal.SIGKILL)
        t = time.monotonic()
        _, err = launcher.communicate(timeout=COLLECTIVE_TIMEOUT + 30)
        stopped = time.monotonic() - t
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0 and stopped < STOPPED_WITHIN, stopped
    assert "exitcode" in err and "-9" in err  # torchrun names the rank that died and its signal
    assert all(not c.is_running() for c in workers if c.pid != workers[-1].pid)


def test_a_killed_host_makes_the_other_host_exit_with_a_clear_error(edges, tmp_path):
    port = str(free_port())
    out = tmp_path / "run"
    # static rendezvous: host 0 keeps the store and rank 0, so the survivor and its rank are known
    launchers = [subprocess.Popen(
        [*TORCHRUN, "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
         "--master-port", port, "-m", "gaescale", "train", str(edges),
         "--out", str(out), "--hidden", "16", "--dim", "8", "--epochs", "100000", "--eval-every", "100000",
         "--checkpoint-every", "1", "--quiet", "--no-report", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV) for rank in (0, 1)]
    try:
        deadline = time.monotonic() + 240
        ckdir = out / ".staging" / "checkpoints"  # the run's while it trains
        while not any(ckdir.glob("epoch-*.pt")) if ckdir.is_dir() else True:
            assert all(p.poll() is None for p in launchers) and time.monotonic() < deadline, "training never started"
            time.sleep(0.2)
        victim = next(c for c in psutil.Process(launchers[1].pid).children(recursive=True)
                      if "gaescale" in " ".join(c.cmdline()))
        victim.kill()
        t = time.monotonic()
        errs = [p.communicate(timeout=COLLECTIVE_TIMEOUT + 30)[1] for p in launchers]
        stopped = time.monotonic() - t
    finally:
        for p in launchers:
            if p.poll() is None:
                p.kill()
    assert stopped < STOPPED_WITHIN and all(p.returncode != 0 for p in launchers), stopped
    # the worker on the other host did not hang on the dead peer: it said so in one line and stopped
    assert "gaescale: error (rank 0): a peer process failed or stopped answering" in errs[0], errs[0][-2000:]


def _reference(edges, name, opts, epochs, world=2):
    """One process computing what ``world`` ranks do: each rank's batches from its own generator, one
    optimizer step on the mean of their losses (DDP's mean of their gradients)."""
    from gaescale.config import TrainConfig
    from gaescale.data.prepare import is_prepared, open_prepared
    from gaescale.data.readers import read_edges
    from gaescale.data.split import split_edges, split_hashed
    from gaescale.graph import Graph
    from gaescale.parallel.runtime import rank_seed
    from gaescale.run.kinds import build_model
    from gaescale.training.samplers import metis_parts
    from gaescale.training.strategies import ClusterGCN, FastGAE, NeighborLinks

    config = TrainConfig(hidden="16", dim=8, strategy=name, val_fraction=0.0, **opts)
    if is_prepared(edges):  # the memory-mapped graph and its hashed split
        p = open_prepared(edges)
        graph, x = split_hashed(p.graph, 0.0, 0.1, seed=0).train_graph(), torch.from_numpy(np.array(p.x))
    else:
        data = read_edges(edges)
        graph = split_edges(Graph.from_edge_index(data.edge_index, data.num_nodes), 0.0, 0.1, seed=0).train_graph()
        x = torch.from_numpy(data.x.astype(np.float32))
    torch.manual_seed(0)
    model = build_model(config, x.shape[1], graph.num_nodes)
    if name == "cluster":
        parts = metis_parts(graph, config.cluster_parts, seed=0)
        strategies = [ClusterGCN(parts, config.clusters_per_batch, rank=r, world_size=world,
                                 num_parts=config.cluster_parts) for r in range(world)]
    elif name == "neighbor":
        strategies = [NeighborLinks(list(config.fanouts), config.batch_size, world_size=world)] * world
    else:
        strategies = [FastGAE(config.fastgae_nodes, 1.0)] * world
    gens = [torch.Generator().manual_seed(rank_seed(0, r)) for r in range(world)]
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    kw = dict(kind="bce", dense="sampled", weighting=None, neg_ratio=1.0)
    losses = []
    for _ in range(epochs):
        steps = [s.steps(model, x, graph, None, g, kw) for s, g in zip(strategies, gens)]
        per_step = []
        for ranks in zip(*steps):
            loss = sum(ranks) / world
            opt.zero_grad()
            loss.backward()
            opt.step()
            per_step.append(float(loss.detach()))
        losses.append(np.mean(per_step))
    return losses, model.state_dict()


@pytest.mark.parametrize("name,flags", [
    ("cluster", {"cluster_parts": 8, "clusters_per_batch": 2}),
    ("neighbor", {"batch_size": 1024, "fanouts": "5,5"}),
    ("fastgae", {"fastgae_nodes": 500}),
])
def test_two_processes_of_a_minibatch_strategy_step_on_the_mean_of_their_own_batches(edges, tmp_path, name, flags):
    cli = [a for k, v in flags.items() for a in ("--" + k.replace("_", "-"), str(v))]
    run = _train(edges, tmp_path / "two", *_torchrun(),
                 extra=["--strategy", name, "--val-fraction", "0", "--epochs", "3", *cli])
    assert run.returncode == 0, run.stderr
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    # the strategies that partition the graph read the edge list through the run's own prepared copy
    copy = tmp_path / "two" / "prepared"
    assert copy.is_dir() == (name != "fastgae")
    losses, state = _reference(copy if copy.is_dir() else edges, name, flags, 3)
    # neighbour sampling: 9,000 edges / (2 x 1,024)
    assert metrics["history"][0]["steps"] == {"cluster": 2, "neighbor": 5, "fastgae": 1}[name]
    np.testing.assert_allclose([h["loss"] for h in metrics["history"]], losses, rtol=1e-5)
    saved = torch.load(tmp_path / "two" / "model.pt", weights_only=True)["state_dict"]
    for k in state:
        torch.testing.assert_close(saved[k], state[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,flags", [("neighbor", {"batch_size": 1024, "fanouts": "5,5"}),
                                        ("cluster", {"cluster_parts": 8, "clusters_per_batch": 2})])
def test_ranks_of_a_prepared_graph_step_like_one_process_holding_it_all(edges, tmp_path, name, flags):
    """Neighbour sampling: each rank reads and splits only its rows of the prepared graph (rank 0 joins the
    held-out edges and evaluates), and the batches, drawn from the sharded graph and features, are those of
    the whole graph. Cluster-GCN: rank 1 splits nothing and cuts its partition from the whole graph, keeping
    the edges the split's hash trains on. Both step as one process holding the training graph, and hold
    out the edges of one process's split. Cluster-GCN's ranks train each on its own memory-mapped split:
    half the steps of one process, about its test AUC, and only rank 0's outputs left."""
    from gaescale.data.prepare import prepare
    prepare(edges, tmp_path / "g")
    cli = ["--strategy", name, "--val-fraction", "0", "--epochs", "3",
           *(a for k, v in flags.items() for a in ("--" + k.replace("_", "-"), str(v)))]
    one, (run,) = _in_process(tmp_path / "g", tmp_path / "one", cli,
                              alongside=[_cmd(tmp_path / "g", tmp_path / "two", *_torchrun(), extra=cli)])
    assert run.returncode == 0, run.stderr
    assert one.returncode == 0, one.stderr
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    losses, state = _reference(tmp_path / "g", name, flags, 3)
    np.testing.assert_allclose([h["loss"] for h in metrics["history"]], losses, rtol=1e-5)
    saved = torch.load(tmp_path / "two" / "model.pt", weights_only=True)["state_dict"]
    for k in state:
        torch.testing.assert_close(saved[k], state[k], rtol=1e-4, atol=1e-5)
    if name == "neighbor":  # each rank split its own rows, in memory
        assert not (tmp_path / "two" / "split").exists()
    else:  # rank 0's training graph, for METIS; no other rank wrote one
        assert sorted(p.name for p in (tmp_path / "two" / "split").iterdir()) == ["train_indices.bin"]
        assert not [p for p in (tmp_path / "two").iterdir() if p.name.startswith(".rank")]
        single = json.loads((tmp_path / "one" / "metrics.json").read_text())
        assert metrics["processes"] == 2 and metrics["history"][0]["steps"] == 2  # 4 parts per rank, 2 per step
        assert single["history"][0]["steps"] == 4
        assert abs(metrics["test_auc"] - single["test_auc"]) < 0.05
        # rank 1 split the graph into its own scratch copy, gone with the run; only rank 0's outputs remain
        assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in
                                                                             (tmp_path / "one").iterdir())
    held = [np.load(tmp_path / run / "heldout.npz") for run in ("one", "two")]
    for k in ("test_pos", "test_neg"):
        assert np.array_equal(held[0][k], held[1][k])


def test_ranks_of_a_sharded_graph_embed_their_own_nodes_with_the_best_weights(edges, tmp_path):
    """Validation and the outputs come from embeddings that each rank computes for its own nodes (rank 0
    holds neither the training graph nor the features): they are what one process holding it all computes
    with the saved (best) weights."""
    from gaescale.config import TrainConfig
    from gaescale.data.prepare import open_prepared, prepare
    from gaescale.data.split import split_hashed
    from gaescale.models import split_bias
    from gaescale.run.kinds import build_model
    from gaescale.training.evaluate import link_scores
    prepare(edges, tmp_path / "g")
    run = _train(tmp_path / "g", tmp_path / "two", *_torchrun(),
                 extra=["--strategy", "neighbor", "--val-fraction", "0.1", "--epochs", "6", "--eval-every", "1",
                        "--batch-size", "1024", "--fanouts", "5,5", "--dropout", "0.3",
                        "--lr", "0.3"])  # high: the best epoch is not the last, so rank 0's weights must reach rank 1
    assert run.returncode == 0, run.stderr
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    saved = torch.load(tmp_path / "two" / "model.pt", weights_only=True)
    model = build_model(TrainConfig.from_dict(saved["config"]), saved["in_dim"], saved["num_nodes"])
    model.load_state_dict(saved["state_dict"])
    p = open_prepared(tmp_path / "g")
    z = model.embed(torch.from_numpy(np.array(p.x)), split_hashed(p.graph, 0.1, 0.1, seed=0).train_graph())
    zs, bias = split_bias(z)  # the default decoder: the embeddings and a bias per node, written apart
    np.testing.assert_allclose(np.load(tmp_path / "two" / "embeddings.npy"), zs.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / "two" / "node_bias.npy"), bias.numpy(), rtol=1e-4, atol=1e-5)
    held = np.load(tmp_path / "two" / "heldout.npz")
    best = metrics["history"][metrics["best_epoch"] - 1]
    m = model.metric(z)
    assert best["val_auc"] == pytest.approx(link_scores(z, held["val_pos"], held["val_neg"], metric=m)[0], abs=1e-6)
    assert metrics["test_auc"] == pytest.approx(link_scores(z, held["test_pos"], held["test_neg"], metric=m)[0],
                                                abs=1e-6)


def test_a_resumed_run_of_ranks_with_their_own_batches_continues_every_rank_where_it_stopped(edges, tmp_path):
    args = ["--strategy", "neighbor", "--batch-size", "2048", "--fanouts", "5,5", "--checkpoint-every", "1"]
    whole, part = _together(_cmd(edges, tmp_path / "whole", *_torchrun(), extra=args),
                            _cmd(edges, tmp_path / "part", *_torchrun(), extra=[*args, "--epochs", "3"]))
    rest = _train(edges, tmp_path / "part", *_torchrun(), extra=[*args, "--resume"])
    for r in (whole, part, rest):
        assert r.returncode == 0, r.stderr
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text())["history"] for d in ("whole", "part"))
    assert [h["loss"] for h in b] == [h["loss"] for h in a]  # bit for bit, rank 1's draws included
    # from here on, two resumes of the same run at once: one process on it, 3 processes on a copy of it
    shutil.copytree(tmp_path / "part", tmp_path / "copy")
    one, (three,) = _in_process(edges, tmp_path / "part", [*args, "--resume", "--epochs", "8"],
                                alongside=[_cmd(edges, tmp_path / "copy", *_torchrun(3),
                                                extra=[*args, "--resume", "--epochs", "10"])])
    assert one.returncode == 0, one.stderr  # one process may take over from rank 0, from the run's prepared copy
    prepared = json.loads((tmp_path / "part" / "metrics.json").read_text())["prepared"]
    assert prepared == str(tmp_path / "part" / "prepared")
    assert three.returncode != 0 and "resume with as many processes as wrote it" in three.stderr


def test_an_interrupted_launcher_stops_every_rank_and_the_run_resumes(edges, tmp_path):
    out = tmp_path / "run"
    args = ["-m", "gaescale", "train", str(edges), "--out", str(out), "--hidden", "16", "--dim", "8",
            "--strategy", "cluster", "--cluster-parts", "8", "--clusters-per-batch", "2", "--epochs", "100000",
            "--eval-every", "100000", "--checkpoint-every", "1", "--quiet", "--no-report", "--threads", "1"]
    launcher = subprocess.Popen([*_torchrun(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=ENV)
    try:
        deadline = time.monotonic() + 240
        ckdir = out / ".staging" / "checkpoints"  # the run's while it trains
        while len(list(ckdir.glob("epoch-*.pt")) if ckdir.is_dir() else []) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, "training never started"
            time.sleep(0.2)
        workers = [c for c in psutil.Process(launcher.pid).children(recursive=True)
                   if "gaescale" in " ".join(c.cmdline())]
        launcher.send_signal(signal.SIGINT)  # Ctrl-C in the terminal that started torchrun
        t = time.monotonic()
        launcher.communicate(timeout=COLLECTIVE_TIMEOUT + 30)
        stopped = time.monotonic() - t
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0 and stopped < STOPPED_WITHIN, stopped
    psutil.wait_procs(workers, timeout=30)
    assert not any(c.is_running() for c in workers)  # no rank left behind
    last = max(int(p.stem.split("-")[1]) for p in ckdir.glob("epoch-*.pt"))
    args[args.index("--epochs") + 1] = str(last + 2)
    resumed = _together([*_torchrun(), *args, "--resume"])[0]
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert [h["epoch"] for h in history] == list(range(1, last + 3))  # continued after the last checkpoint


def test_rank_0_chooses_the_automatic_strategy_for_every_rank_and_a_failure_stops_them_all(edges, tmp_path):
    auto = ["--strategy", "auto", "--epochs", "2", "--memory-budget"]
    ok, bad = _together(_cmd(edges, tmp_path / "ok", *_torchrun(), extra=[*auto, "64"]),
                        _cmd(edges, tmp_path / "bad", *_torchrun(), extra=[*auto, "0.0001"]))
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "ok" / "metrics.json").read_text())["strategy"] == "full"
    # rank 1 did not wait out the collective timeout
    assert bad.returncode != 0 and bad.after_error < STOPPED_WITHIN, (bad.after_error, bad.stderr)
    assert "gaescale: error (rank 0): The 'memory_budget' parameter of train must be at least" in bad.stderr
    assert "gaescale: error (rank 1): rank 0 found no strategy that fits" in bad.stderr


PATIENCE = """
import sys, time
from gaescale.parallel import runtime as distributed
from gaescale.errors import DistributedError
group = distributed.from_torchrun(timeout=2, wait_timeout=60)
if group.rank == 0:
    time.sleep(5)  # rank 0's own work (METIS, evaluation): longer than the 2 s timeout
assert group.from_main(True, waiting=True)  # the others waited for it
import numpy as np
from gaescale.graph import Graph
from gaescale.parallel.shards import partition
path = Graph.from_edge_index(np.array([[0, 1, 2], [1, 2, 3]]), 4)
if group.rank == 0:
    time.sleep(5)  # rank 0 splits the whole graph while the others wait to gather the training degrees
assert partition(group, path, path, None)[0].indptr.tolist() == path.indptr.tolist()
if group.rank == 0:
    time.sleep(5)
try:
    group.from_main(True)  # every rank is expected at once: rank 1 gives up after 2 s
    print(f"rank {group.rank}: no timeout")
except DistributedError as exc:
    print(f"rank {group.rank}: {exc}")
"""


def test_ranks_wait_long_for_rank_0_only_where_it_works_alone(tmp_path):
    script = tmp_path / "patience.py"
    script.write_text(PATIENCE)
    r = subprocess.run([*TORCHRUN, "--nproc-per-node", "2", "--master-port", str(free_port()), str(script)],
                       capture_output=True, text=True, env=ENV, timeout=120)
    assert "rank 1: a peer process failed or stopped answering" in r.stdout, r.stdout + r.stderr[-2000:]
