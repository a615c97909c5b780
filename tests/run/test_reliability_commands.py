"""Issue 33, "Never lose a run": misuse of tune, train --directed, index and topk --index that gave a traceback,
was silently accepted, had a misleading message or left a file that blocked the next attempt.

Each row: the setup, the command (run in-process), the key words of its one-line message and the verdict on the
old behaviour. Every row asserts exit code 2, exactly one line on stderr holding the key words, and that nothing
in the directory changed (no partial output, no study.db left behind).
"""
import shutil

import pytest

import gaescale.run.pipeline
from conftest import FAST, RING, tree
from gaescale.cli import main
from gaescale.errors import ParameterError

TUNE = ["--quiet", "--epochs", "2", "--trials", "2"]
VERDICTS = {"traceback", "silent", "misleading", "leftover"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run of the 30-node ring, and its index."""
    from gaescale.run.index import build_index
    d = tmp_path_factory.mktemp("trained")
    (d / "e.txt").write_text(RING)
    assert main(["train", str(d / "e.txt"), "--out", str(d / "run")] + FAST) == 0
    build_index(d / "run", d / "i.idx")
    return d


def _write(t, name, text):
    (t / name).write_text(text)
    return str(t / name)


def _run(t, trained):
    shutil.copytree(trained / "run", t / "run")
    return str(t / "run")


def _truncated_index(t, trained):
    data = (trained / "i.idx").read_bytes()
    (t / "i.idx").write_bytes(data[:len(data) // 2])  # a copy that stopped half-way
    return str(t / "i.idx")


WEIGHTED = "src,dst,w\n" + "".join(f"{i},{(i + 1) % 30},0.5\n{i},{(i + 7) % 30},2\n" for i in range(30))

# name: (argv from (tmp dir, trained fixture), key words, verdict, argv that then works in the same --out or None)
CASES = {
    "tune: --hidden that the searched linear encoder refuses": (
        lambda t, tr: ["tune", _write(t, "e.txt", RING), "--out", str(t / "T"), "--hidden", "64"] + TUNE,
        ["The 'hidden' parameter of tune", "encoder='linear'", "--encoder gcn", "drop --hidden", "Got '64'"],
        "leftover",
        lambda t: ["tune", str(t / "e.txt"), "--out", str(t / "T"), "--hidden", "64", "--encoder", "gcn"] + TUNE),
    "tune: --weighting that the searched weighted-bce loss refuses": (
        lambda t, tr: ["tune", _write(t, "e.txt", RING), "--out", str(t / "T"), "--weighting", "balanced"] + TUNE,
        ["The 'weighting' parameter of tune", "loss='weighted-bce'", "--loss bce", "drop --weighting"],
        "leftover", None),
    "tune: --fanouts for two layers, the searched linear encoder has one": (
        lambda t, tr: ["tune", _write(t, "e.txt", RING), "--out", str(t / "T"), "--strategy", "neighbor",
                       "--fanouts", "5,5"] + TUNE,
        ["The 'fanouts' parameter of tune", "encoder='linear'", "--encoder gcn", "drop --fanouts", "Got '5,5'"],
        "leftover", None),
    "tune: a graph too small for a validation split": (
        lambda t, tr: ["tune", _write(t, "e.txt", "".join(f"{i} {i + 1}\n" for i in range(5))), "--out",
                       str(t / "T")] + TUNE,
        ["e.txt: too small for tune's validation split: 5 edges", "holds out 0", "at least 20 edges",
         "--val-fraction 0.2"],
        "misleading", None),
    "train --directed: --weight-column without --weighted": (
        lambda t, tr: ["train", _write(t, "e.csv", WEIGHTED), "--directed", "--weight-column", "w", "--out",
                       str(t / "o")] + FAST,
        ["The 'weight_column' parameter of train must be used with weighted=True (--weighted). Got 'w' instead."],
        "silent", None),
    "train --directed: --checkpoint-activations": (
        lambda t, tr: ["train", _write(t, "e.txt", RING), "--directed", "--checkpoint-activations", "--out",
                       str(t / "o")] + FAST,
        ["The 'checkpoint_activations' parameter of train must be False with directed=True", "Got True instead."],
        "silent", None),
    "index: --out on a file system that refuses files": (
        lambda t, tr: ["index", _run(t, tr), "--out", "/proc/gaescale-x.idx"],
        ["/proc/gaescale-x.idx: cannot create the file"],
        "traceback", None),
    "topk --index: a truncated index file": (
        lambda t, tr: ["topk", _run(t, tr), "--index", _truncated_index(t, tr), "--out", str(t / "l.tsv")],
        ["i.idx: not a readable gaescale index (truncated or damaged)", "rebuild it with 'gaescale index",
         "--out {t}/i.idx'"],
        "traceback", None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_misused_command_is_one_line_and_changes_nothing(tmp_path, capsys, trained, case):
    argv, keys, verdict, then = CASES[case]
    assert verdict in VERDICTS
    args = argv(tmp_path, trained)
    before = tree(tmp_path)
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("gaescale: error: "), err
    for key in keys:
        assert key.format(t=tmp_path) in err[0], (key, err[0])
    assert tree(tmp_path) == before  # no partial output, no study.db left behind
    if then is not None:  # the corrected command works in the same --out
        assert main(then(tmp_path)) == 0
        assert (tmp_path / "T" / "best.json").is_file()


def test_a_search_whose_first_trial_fails_leaves_no_study_db(tmp_path, capsys, monkeypatch):
    """A configuration error in the first trial (here one that no dry check foresees) leaves no study.db that
    would refuse the next attempt ("holds a search with other fixed options")."""
    edges = _write(tmp_path, "e.txt", RING)
    before = tree(tmp_path)

    def refused(config, **kw):
        raise ParameterError("dim", "train", "refused by this test", config.dim)
    monkeypatch.setattr(gaescale.run.pipeline, "train", refused)
    assert main(["tune", edges, "--out", str(tmp_path / "T")] + TUNE) == 2
    assert "refused by this test" in capsys.readouterr().err
    assert tree(tmp_path) == before
    monkeypatch.undo()
    assert main(["tune", edges, "--out", str(tmp_path / "T"), "--dim", "2"] + TUNE) == 0
    assert (tmp_path / "T" / "best.json").is_file()
