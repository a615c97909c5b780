"""What training reads: a run's own prepared copy of its edge list (OUT/prepared) is reused only by a
resumed run of the same files, and removed by a fresh run that reads the edge list into memory. The copy
is made under torchrun (tests/test_distributed.py)."""
import os

import numpy as np
import pytest

from gaescale.config import TrainConfig
from gaescale.data.inputs import read_inputs
from gaescale.data.prepare import origin, prepare
from gaescale.data.synthetic import community_graph
from gaescale.errors import InputFileError


@pytest.fixture
def run(tmp_path):
    """An edge list and a run directory holding its own prepared copy of it."""
    edges = tmp_path / "e.csv"
    data = community_graph(300, 1200, seed=1)
    np.savetxt(edges, data.edge_index.T, fmt="%d", delimiter=",")
    out = tmp_path / "run"
    prepare(edges, out / "prepared", made_from=origin(edges))
    return edges, out


def _read(edges, out, **opts):
    return read_inputs(TrainConfig(edges=str(edges), out=str(out), **opts), None, lambda m: None, out=out)


def test_a_resumed_run_reads_its_own_copy_of_unchanged_files(run):
    edges, out = run
    inputs = _read(edges, out, resume=True)
    assert inputs.prepared == out / "prepared" and inputs.node_ids is None
    assert inputs.graph.num_edges == _read(edges, out / "elsewhere").graph.num_edges  # the same graph, in memory


def test_a_changed_file_or_option_is_read_again(run):
    edges, out = run
    assert _read(edges, out, resume=True, header="no").prepared is None  # read with another option
    st = os.stat(edges)
    os.utime(edges, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the file changed since it was prepared
    assert _read(edges, out, resume=True).prepared is None
    assert (out / "prepared").is_dir()  # a resumed run removes nothing


def test_a_fresh_run_removes_the_copy_an_earlier_run_left(run):
    edges, out = run
    inputs = _read(edges, out)
    assert inputs.prepared is None and inputs.node_ids is not None
    assert not (out / "prepared").exists()


def test_a_directory_prepared_by_the_user_is_never_taken_for_a_copy(run, tmp_path):
    edges, out = run
    mine = tmp_path / "mine"
    prepare(edges, mine / "prepared")  # 'gaescale prepare' into what is then given as --out
    assert _read(edges, mine, resume=True).prepared is None
    _read(edges, mine)
    assert (mine / "prepared").is_dir()


def test_origin_names_a_missing_file():
    with pytest.raises(InputFileError, match="no such file"):
        origin("/nonexistent/edges.csv")


def test_a_run_resumed_from_its_copy_continues_and_is_refused_once_the_file_changed(run):
    """The copy's split (by hash) is not the in-memory one: the checkpoint holds which, and a resumed run that
    would split otherwise is refused."""
    from gaescale.errors import CheckpointError
    from gaescale.run.pipeline import train
    edges, out = run
    opts = dict(hidden="8", dim=4, epochs=2, checkpoint_every=1, quiet=True, report=False)
    train(edges=str(out / "prepared"), out=str(out), **{**opts, "epochs": 1})  # as a torchrun run trains from it
    resumed = train(edges=str(edges), out=str(out), resume=True, **opts)
    assert resumed.metrics["epochs"] == 2 and resumed.metrics["prepared"] == str(out / "prepared")
    st = os.stat(edges)
    os.utime(edges, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(CheckpointError, match="split 'hashed' -> 'random'"):
        train(edges=str(edges), out=str(out), resume=True, **{**opts, "epochs": 3})
