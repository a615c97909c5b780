"""Checkpoint and resume: bit-identical continuation after SIGKILL, refusal of a foreign checkpoint,
random states restored, the last good checkpoint kept on a non-finite loss."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch

import gaescale
from gaescale.data.synthetic import community_graph
from gaescale.errors import CheckpointError, NonFiniteLossError
from gaescale.training.checkpoint import Checkpointer, list_checkpoints, rng_state, set_rng_state

KW = dict(hidden="16", dim=8, quiet=True, threads=1, report=False)


def _cli(graph, out, *extra):
    return [sys.executable, "-m", "gaescale", "train", str(graph), "--out", str(out), "--hidden", "16", "--dim", "8",
            "--threads", "1", "--no-report", "--eval-every", "2", *extra]


# `python -m gaescale` that SIGKILLs itself right after its optimizer's step number KILL_AFTER_STEP: the kill
# lands at a point the test chooses (mid-epoch, between checkpoints), not wherever a poll catches the run.
KILLED = """
import os, runpy, signal, sys
from gaescale.training.optim import Adam
step, steps = Adam.step, 0
def step_then_kill(self):
    global steps
    step(self)
    steps += 1
    if steps == int(os.environ["KILL_AFTER_STEP"]):
        os.kill(os.getpid(), signal.SIGKILL)
Adam.step = step_then_kill
sys.argv[0] = "gaescale"
runpy.run_module("gaescale", run_name="__main__", alter_sys=True)
"""


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    d = community_graph(3000, 15000, seed=0)
    p = tmp_path_factory.mktemp("g") / "graph.npz"
    np.savez(p, edge_index=d.edge_index, x=d.x)
    return p


@pytest.mark.slow  # three runs of `python -m gaescale`
def test_sigkill_then_resume_gives_identical_embeddings(tmp_path, graph_file):
    epochs, every, killed_at = 14, 3, 8  # killed two epochs after the checkpoint of epoch 6
    cmd = _cli(graph_file, tmp_path / "run", "--epochs", str(epochs), "--checkpoint-every", str(every), "--quiet")
    runs = {"ref": _cli(graph_file, tmp_path / "ref", "--epochs", str(epochs), "--quiet"),  # the two at once
            "killed": [sys.executable, "-c", KILLED, *cmd[3:]]}
    env = {**os.environ, "KILL_AFTER_STEP": str(killed_at)}
    with tempfile.TemporaryDirectory() as logs:
        files = {k: open(os.path.join(logs, k), "w+") for k in runs}
        procs = {k: subprocess.Popen(c, stderr=files[k], env=env) for k, c in runs.items()}
        try:
            codes = {k: p.wait(timeout=300) for k, p in procs.items()}
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
        errs = {}
        for k, f in files.items():
            f.seek(0)
            errs[k] = f.read()
            f.close()
    assert codes["ref"] == 0, errs["ref"]
    ma = json.loads((tmp_path / "ref" / "metrics.json").read_text())
    assert all(h["steps"] == 1 for h in ma["history"])  # full batch: step k ends epoch k
    assert codes["killed"] == -signal.SIGKILL, errs["killed"]
    assert [e for e, _ in list_checkpoints(tmp_path / "run" / ".staging" / "checkpoints")] == [3, 6]  # unfinished
    assert not (tmp_path / "run" / "embeddings.npy").exists()

    res = subprocess.run(_cli(graph_file, tmp_path / "run", "--epochs", str(epochs), "--checkpoint-every",
                              str(every), "--resume"), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    resumed_from = int(re.search(r"resuming from .*epoch-(\d+)\.pt \(epoch (\d+)", res.stderr).group(2))
    assert resumed_from == 6  # the last checkpoint: epochs 7 and 8 are done again
    a, b = np.load(tmp_path / "ref" / "embeddings.npy"), np.load(tmp_path / "run" / "embeddings.npy")
    assert np.array_equal(a, b)  # bit for bit
    mb = json.loads((tmp_path / "run" / "metrics.json").read_text())
    strip = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert strip(ma["history"]) == strip(mb["history"]) and ma["test_auc"] == mb["test_auc"]
    assert [e for e, _ in list_checkpoints(tmp_path / "run" / "checkpoints")] == [12, 14]  # the last two are kept


@pytest.fixture(scope="module")
def small():
    return community_graph(800, 4000, seed=2)


def test_resume_refuses_a_changed_configuration_and_another_graph(tmp_path, small):
    gaescale.train(data=small, out=str(tmp_path), epochs=4, checkpoint_every=2, overwrite=True, **KW)
    with pytest.raises(CheckpointError, match=r"epoch-000004\.pt: the checkpoint was written with a different "
                                              r"configuration \(changed: lr 0\.01 -> 0\.02, seed 0 -> 1\); resume"):
        gaescale.train(data=small, out=str(tmp_path), epochs=8, resume=True, lr=0.02, seed=1, **KW)
    other = community_graph(800, 4000, seed=3)
    with pytest.raises(CheckpointError, match=r"trained on a different graph or features"):
        gaescale.train(data=other, out=str(tmp_path), epochs=8, resume=True, **KW)
    # more epochs and other runtime settings are allowed
    r = gaescale.train(data=small, out=str(tmp_path), epochs=6, resume=True, **{**KW, "threads": 2})
    assert r.metrics["epochs"] == 6


def test_resume_errors_without_checkpoint_or_output(tmp_path, small):
    with pytest.raises(CheckpointError, match=r"checkpoints: no checkpoint to resume from; run without --resume"):
        gaescale.train(data=small, out=str(tmp_path), epochs=2, resume=True, **KW)
    with pytest.raises(gaescale.ParameterError, match=r"The 'resume' parameter of train must be used with an "
                                                      r"output directory"):
        gaescale.train(data=small, epochs=2, resume=True, **KW)


@pytest.mark.parametrize("damage", ["empty", "truncated", "one byte changed"])
def test_an_unreadable_latest_checkpoint_is_reported_and_the_one_before_resumed(tmp_path, small, damage):
    """Empty, cut short, or not the bytes its checksum names: the run resumes from epoch 1, bit for bit as a run
    never stopped; with every checkpoint unreadable it stops, naming each."""
    straight = gaescale.train(data=small, out=str(tmp_path / "straight"), epochs=3, checkpoint_every=1, **KW)
    gaescale.train(data=small, out=str(tmp_path / "run"), epochs=2, checkpoint_every=1, **KW)
    (_, first), (_, bad) = list_checkpoints(tmp_path / "run" / "checkpoints")
    data = bad.read_bytes()
    bad.write_bytes({"empty": b"", "truncated": data[:100],
                     "one byte changed": data[:-200] + bytes([data[-200] ^ 1]) + data[-199:]}[damage])
    said = []
    resumed = gaescale.train(data=small, out=str(tmp_path / "run"), epochs=3, resume=True, log=said.append,
                             **{**KW, "quiet": False})
    assert any(m.startswith(f"{bad}: ") and m.endswith("trying the checkpoint before it") for m in said), said
    assert [h["epoch"] for h in resumed.metrics["history"]] == [1, 2, 3]
    assert np.array_equal(resumed.embeddings, straight.embeddings)
    for _, p in list_checkpoints(tmp_path / "run" / "checkpoints"):
        p.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"^no readable checkpoint to resume from: .*epoch-000003\.pt: .*; "
                                              r".*epoch-000001\.pt: .*; run without --resume"):
        gaescale.train(data=small, out=str(tmp_path / "run"), epochs=4, resume=True, **KW)


def test_fresh_run_replaces_stale_checkpoints(tmp_path, small):
    gaescale.train(data=small, out=str(tmp_path), epochs=9, checkpoint_every=3, **KW)
    assert [e for e, _ in list_checkpoints(tmp_path / "checkpoints")] == [6, 9]
    gaescale.train(data=small, out=str(tmp_path), epochs=4, checkpoint_every=2, overwrite=True, **KW)
    assert [e for e, _ in list_checkpoints(tmp_path / "checkpoints")] == [2, 4]


def test_non_finite_loss_keeps_the_last_good_checkpoint(tmp_path, small):
    kw = dict(KW, hidden="", encoder="linear", loss="linear-mse", dense="closed", lr=1e12, checkpoint_every=1)
    with pytest.raises(NonFiniteLossError, match=r"the training loss became (nan|inf) at epoch (\d+); lower --lr .* "
                                                 r"The last good checkpoint is .*epoch-\d+\.pt\.") as info:
        gaescale.train(data=small, out=str(tmp_path), epochs=50, **kw)
    epoch = int(re.search(r"at epoch (\d+)", str(info.value)).group(1))
    kept = list_checkpoints(tmp_path / ".staging" / "checkpoints")  # the failed run's, kept for --resume
    assert kept[-1][0] == epoch - 1 and str(kept[-1][1]) in str(info.value)
    state = torch.load(kept[-1][1], weights_only=True)
    assert all(torch.isfinite(v).all() for v in state["model"].values())


def test_rng_states_round_trip(tmp_path):
    gen = torch.Generator().manual_seed(5)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    ck = Checkpointer(tmp_path, 1, {"lr": 0.1}, "h")
    ck.save(1, {"rng": rng_state(gen)})
    expect = (random.random(), np.random.rand(), torch.rand(1).item(), torch.rand(1, generator=gen).item())
    random.seed(9), np.random.seed(9), torch.manual_seed(9), gen.manual_seed(9)
    set_rng_state(ck.load_latest()["rng"], gen)
    assert (random.random(), np.random.rand(), torch.rand(1).item(), torch.rand(1, generator=gen).item()) == expect
