"""A run directory is a unit (gaescale/run/writer.py): issue 33's ways to lose a run, each reproduced on the code
before it and now refused with one line (or kept whole), and the lock, the staging directory and the commit."""
import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import FAST as QUICK
from conftest import RING, tree
from gaescale import Run
from gaescale.cli import main
from gaescale.run.writer import COMMIT, LOCK, STAGING, RunWriter, finish_commit

FAST = [*QUICK, "--checkpoint-every", "1"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    d = tmp_path_factory.mktemp("finished")
    (d / "e.txt").write_text(RING)
    assert main(["train", str(d / "e.txt"), "--out", str(d / "run")] + FAST) == 0
    return d


@pytest.fixture
def t(tmp_path, finished):
    import shutil
    shutil.copytree(finished, tmp_path, dirs_exist_ok=True)
    return tmp_path


def _graph_npz_dir(t):
    np.savez(t / "d" / "graph.npz", edge_index=np.array([[i for i in range(30)], [(i + 1) % 30 for i in range(30)]]))
    return str(t / "d" / "graph.npz")


# name: (setup -> argv, the message's key words). Each was a way to lose data before (issue 33); now a one-line
# error with exit 2 that changes nothing.
LOSS = {
    "retrain into a finished run": (lambda t: ["train", str(t / "e.txt"), "--out", str(t / "run")] + FAST,
                                    "{t}/run: holds a finished run; pass --overwrite to replace it"),
    "the input is where the run writes": (lambda t: ["train", _graph_npz_dir((t / "d").mkdir() or t), "--out",
                                                     str(t / "d")] + FAST,
                                          "{t}/d/graph.npz: is an input of this run and lies where it writes"),
    "a second process on the same --out": (lambda t: _locked(t, os.getppid()) + FAST,
                                           "is writing this run; wait for it, or choose another --out."),
    "embed over the run's embeddings": (lambda t: ["embed", str(t / "run"), str(t / "e.txt"), "--out",
                                                   str(t / "run" / "embeddings.npy")],
                                        "{t}/run/embeddings.npy: would replace a file of the run in {t}/run"),
    "score over the run's ids": (lambda t: ["score", str(t / "run"), _pairs(t), "--out", str(t / "run" / "nodes.tsv")],
                                 "{t}/run/nodes.tsv: would replace a file of the run in {t}/run"),
    "score over its own input": (lambda t: ["score", str(t / "run"), _pairs(t), "--out", _pairs(t)],
                                 "{t}/p.tsv: is an input of this command"),
    "topk into the run's checkpoints": (lambda t: ["topk", str(t / "run"), "--out",
                                                   str(t / "run" / "checkpoints" / "k.tsv")],
                                        "{t}/run/checkpoints/k.tsv: would replace a file of the run"),
    "--out under /proc": (lambda t: ["train", str(t / "e.txt"), "--out", "/proc/gaescale-x"] + FAST,
                          "/proc/gaescale-x: cannot"),
    "--out under a file": (lambda t: ["train", str(t / "e.txt"), "--out", str(t / "e.txt" / "run")] + FAST,
                           "{t}/e.txt"),
    "no room for the outputs": (lambda t: ["train", str(t / "e.txt"), "--out", str(t / "new")] + FAST,
                                "{t}/new: needs about"),
    "an unfinished run's checkpoints": (lambda t: _killed(t) + FAST,
                                        "{t}/run: holds the checkpoints of an unfinished run (epoch 2); pass --resume"),
}


def _pairs(t):
    (t / "p.tsv").write_text("1\t2\n")
    return str(t / "p.tsv")


def _locked(t, pid):
    (t / "run" / LOCK).write_text(json.dumps({"pid": pid, "host": os.uname().nodename, "started": "then"}))
    return ["train", str(t / "e.txt"), "--out", str(t / "run"), "--overwrite"]


def _killed(t):
    """A run killed after its second checkpoint: its staging directory holds them, its outputs are not there."""
    import shutil
    for name in os.listdir(t / "run"):
        if name != "checkpoints":
            (t / "run" / name).unlink()
    (t / "run" / STAGING).mkdir()
    shutil.move(t / "run" / "checkpoints", t / "run" / STAGING / "checkpoints")
    return ["train", str(t / "e.txt"), "--out", str(t / "run")]


@pytest.mark.parametrize("case", sorted(LOSS))
def test_a_way_to_lose_a_run_is_refused_before_any_work(t, capsys, monkeypatch, case):
    if case == "no room for the outputs":
        import shutil
        monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    make, expected = LOSS[case]
    argv = make(t)
    before = tree(t)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected.format(t=t) in err[0], err
    assert tree(t) == before  # nothing changed, the lock of the other process included


def test_the_same_command_twice_keeps_both_runs(t, monkeypatch):
    """Without --out a run goes to runs/NAME, then runs/NAME-2 (the README's commands work twice)."""
    monkeypatch.chdir(t)
    assert main(["train", "e.txt"] + FAST) == 0
    assert main(["train", "e.txt"] + FAST) == 0
    assert Run.open(t / "runs" / "e").embeddings.shape == Run.open(t / "runs" / "e-2").embeddings.shape == (30, 2)


def test_a_runs_config_never_sends_the_retrained_run_into_it(t, monkeypatch):
    """`train --config RUN/config.json --seed 1`, no --out: once it replaced RUN (config.json held out)."""
    monkeypatch.chdir(t)
    old = json.loads((t / "run" / "config.json").read_text())
    old["out"] = str(t / "run")  # as an earlier version wrote it
    (t / "run" / "config.json").write_text(json.dumps(old))
    before = tree(t / "run")
    assert main(["train", "--config", str(t / "run" / "config.json"), "--seed", "1", "--quiet"]) == 0
    assert tree(t / "run") == before
    assert json.loads((t / "runs" / "e" / "config.json").read_text())["seed"] == 1


def test_overwrite_replaces_a_run_whole_and_a_stale_lock_is_taken_over(t):
    old = Run.open(t / "run").embeddings
    (t / "run" / LOCK).write_text(json.dumps({"pid": 2**22 + 12345, "host": os.uname().nodename}))  # no such process
    assert main(["train", str(t / "e.txt"), "--out", str(t / "run"), "--overwrite", "--seed", "5"] + FAST) == 0
    run = Run.open(t / "run")
    assert json.loads((t / "run" / "config.json").read_text())["seed"] == 5 and not np.array_equal(run.embeddings, old)
    assert not (t / "run" / LOCK).exists() and not (t / "run" / STAGING).exists()
    assert sorted(json.loads((t / "run" / "manifest.json").read_text())["files"]) == sorted(
        p.name for p in (t / "run").iterdir() if p.name != "manifest.json")


@pytest.mark.parametrize("fail_at", ["heldout.npz", "metrics.json"])
def test_a_retrain_that_fails_while_writing_leaves_the_old_run_whole(t, capsys, monkeypatch, fail_at):
    """A full disk at the last writes: one line, the old run as it was, no leftovers but the failed run's
    checkpoints (kept for --resume)."""
    import gaescale.outputs as outputs
    real = outputs.atomic_write

    def full(path, write):
        if path.name == fail_at:
            raise outputs.OutputError(f"{path}: could not be written ({os.strerror(errno.ENOSPC)}).")
        return real(path, write)
    monkeypatch.setattr(outputs, "atomic_write", full)
    before = tree(t / "run", skip=t / "run" / STAGING)
    assert main(["train", str(t / "e.txt"), "--out", str(t / "run"), "--overwrite", "--seed", "7"] + FAST) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("could not be written (No space left on device).")
    assert tree(t / "run", skip=t / "run" / STAGING) == before
    assert Run.open(t / "run").metrics()["epochs"] == 2
    assert sorted(os.listdir(t / "run" / STAGING)) == ["checkpoints"]


def test_a_commit_cut_short_is_finished_by_the_next_reader(t, monkeypatch):
    """Killed between the moves of a commit: the next Run.open moves the rest in, and the run is the new one."""
    import gaescale.run.writer as writer
    moved, real = [], os.replace

    def cut(src, dst):
        if COMMIT in str(src):
            if len(moved) == 3:
                raise KeyboardInterrupt  # as a kill: nothing after it runs
            moved.append(dst)
        return real(src, dst)
    monkeypatch.setattr(writer.os, "replace", cut)
    assert main(["train", str(t / "e.txt"), "--out", str(t / "run"), "--overwrite", "--seed", "9"] + FAST) == 130
    monkeypatch.setattr(writer.os, "replace", real)
    assert (t / "run" / COMMIT).is_dir()
    run = Run.open(t / "run")
    assert not (t / "run" / COMMIT).exists() and run.config()["seed"] == 9
    assert run.node_ids.size == run.embeddings.shape[0] == 30 and run.metrics()["epochs"] == 2


def test_a_changed_file_of_a_finished_run_is_refused_by_its_manifest(t):
    z = np.load(t / "run" / "embeddings.npy")
    np.save(t / "run" / "embeddings.npy", np.vstack([z, z]))  # another run's embeddings of 60 nodes
    (t / "run" / "nodes.tsv").write_text("".join(f"{i}\n" for i in range(60)))
    with pytest.raises(Exception, match=r"(embeddings.npy|nodes.tsv): has .* bytes, but the run's manifest.json lists"):
        Run.open(t / "run")


def test_writer_open_creates_nothing_it_does_not_leave_when_it_fails(tmp_path):
    out = tmp_path / "a" / "b"
    w = RunWriter.open(out)
    assert (out / LOCK).is_file() and w.staging.is_dir()
    w.close()
    assert not (tmp_path / "a").exists()
    finish_commit(tmp_path)  # nothing to finish: nothing happens
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_sigkill_at_any_moment_leaves_the_old_run_or_the_new_one(t):
    """Real kills of `train --overwrite` at growing delays: the directory then opens as one whole run, the old or
    the new, and a second --overwrite completes."""
    old = np.load(t / "run" / "embeddings.npy")
    argv = [sys.executable, "-m", "gaescale", "train", str(t / "e.txt"), "--out", str(t / "run"), "--overwrite",
            "--seed", "11"] + FAST
    new = None
    for delay in (1.5, 2.5, 3.5, 4.5, 6.0):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        run = Run.open(t / "run")
        z = run.embeddings
        assert np.array_equal(z, old) or run.config()["seed"] == 11
        if run.config()["seed"] == 11:
            new = z
    assert subprocess.run(argv).returncode == 0
    assert new is None or np.array_equal(np.load(t / "run" / "embeddings.npy"), new)
