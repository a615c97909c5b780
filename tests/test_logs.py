"""The gaescale logger: the plain lines on standard error, rank 0's only under torchrun, and log= still taking them."""
import logging

import numpy as np
import pytest

import gaescale
from gaescale import logs
from gaescale.cli import main


@pytest.fixture
def clean_filters():
    yield
    for f in list(logs.logger.filters):
        logs.logger.removeFilter(f)


def _graph():
    return gaescale.community_graph(300, 1200, seed=0)


def test_train_writes_its_lines_through_the_gaescale_logger_as_plain_lines(capsys):
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logs.logger.addHandler(handler)
    try:
        gaescale.train(data=_graph(), epochs=2, report=False)
    finally:
        logs.logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert any(line.startswith("split: ") for line in seen)
    summary = next(m for m in seen if m.startswith("test AUC "))
    assert summary.splitlines()[0] in err  # the same line, as it is, on stderr
    assert "INFO" not in err and "gaescale:" not in err  # no level or logger name added


def test_a_log_callable_receives_the_lines_instead(capsys):
    lines = []
    gaescale.train(data=_graph(), epochs=2, report=False, log=lines.append)
    assert any(m.startswith("test AUC ") for m in lines)
    assert "test AUC" not in capsys.readouterr().err


def test_the_rank_filter_keeps_rank_0s_lines_only(capsys, clean_filters):
    logs.only_rank(1)
    logs.info("from rank 1")
    logs.only_rank(0)  # replaces the filter, does not add a second
    logs.info("from rank 0")
    assert capsys.readouterr().err == "from rank 0\n"
    assert sum(isinstance(f, logs.MainRank) for f in logs.logger.filters) == 1


def test_raising_the_level_silences_the_cli_progress_lines(tmp_path, capsys):
    edges = tmp_path / "e.txt"
    np.savetxt(edges, _graph().edge_index.T, fmt="%d")
    logs.logger.setLevel(logging.WARNING)
    try:
        assert main(["prepare", str(edges), "--out", str(tmp_path / "p")]) == 0
    finally:
        logs.logger.setLevel(logging.INFO)
    assert "wrote" not in capsys.readouterr().err
    assert main(["prepare", str(edges), "--out", str(tmp_path / "q")]) == 0
    assert "train with: gaescale train" in capsys.readouterr().err
