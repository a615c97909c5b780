"""The configuration schema: unknown options are named, and options merged into a resolved config."""
import json

import pytest

import gaescale
from gaescale.config import TrainConfig
from gaescale.data.synthetic import community_graph
from gaescale.errors import InputFileError, ParameterError


def test_an_unknown_option_of_train_is_a_parameter_error_naming_it_and_the_nearest_option():
    with pytest.raises(ParameterError, match=r"^The 'lrr' parameter of train must be a known option "
                                             r"\(did you mean 'lr'\?\)\. Got 0\.1 instead\.$") as err:
        gaescale.train(edges="never-read.csv", lrr=0.1)
    assert err.value.name == "lrr"
    with pytest.raises(ParameterError, match=r"The 'hiden' parameter of train .*did you mean 'hidden'\?"):
        TrainConfig(hiden="16")
    with pytest.raises(ParameterError, match=r"The 'zzzzq' parameter of train must be a known option \(the fields "
                                             r"of gaescale.TrainConfig\)\. Got 1 instead\."):
        TrainConfig(zzzzq=1)  # nothing close: no suggestion


def test_an_unknown_option_merged_into_a_config_and_from_dict_is_named_too():
    with pytest.raises(ParameterError, match=r"The 'epoch' parameter of train .*did you mean 'epochs'\?"):
        gaescale.train(TrainConfig(), epoch=3)
    with pytest.raises(ParameterError, match=r"The 'epoch' parameter of TrainConfig .*did you mean 'epochs'\?"):
        TrainConfig.from_dict({"epoch": 3})


def test_with_options_refills_the_resolved_encoder_defaults_for_another_encoder():
    gcn = TrainConfig(encoder="gcn")  # resolved: hidden (32,), dim 16, lr 0.01 filled in
    assert (gcn.hidden, gcn.dim, gcn.lr) == ((32,), 16, 0.01)
    linear = gcn.with_options(encoder="linear")
    assert (linear.encoder, linear.hidden, linear.dim, linear.lr) == ("linear", (), 64, 0.02)
    back = linear.with_options(encoder="sage")
    assert (back.encoder, back.hidden, back.dim, back.lr) == ("sage", (32,), 16, 0.01)
    # values that are not the old encoder's defaults were chosen: kept
    chosen = TrainConfig(encoder="gcn", dim=8, lr=0.05).with_options(encoder="linear")
    assert (chosen.hidden, chosen.dim, chosen.lr) == ((), 8, 0.05)
    # options that are given win, and a chosen hidden layer still conflicts with linear
    assert gcn.with_options(encoder="linear", dim=4).dim == 4
    with pytest.raises(ParameterError, match="The 'hidden' parameter of train must be empty with encoder='linear'"):
        TrainConfig(encoder="gcn", hidden="16").with_options(encoder="linear")
    # without an encoder change nothing is refilled, and the original is unchanged
    assert gcn.with_options(epochs=3).hidden == (32,) and gcn.encoder == "gcn" and gcn.hidden == (32,)
    assert TrainConfig().with_options(encoder="linear").hidden == ()  # auto: nothing was filled in


def test_train_merges_an_encoder_option_into_a_resolved_config():
    data = community_graph(300, 1200, seed=0)
    r = gaescale.train(TrainConfig(encoder="gcn", epochs=2, quiet=True), data=data, encoder="linear")
    assert r.embeddings.shape == (300, 64)  # the linear encoder's default dimension, not the GCN's 16
    r = gaescale.train(TrainConfig(epochs=2, quiet=True), data=data, encoder="linear", dim=4)
    assert r.embeddings.shape == (300, 4)


def test_from_file_merges_overrides_like_with_options(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TrainConfig(edges="e.csv", encoder="gcn").to_dict()))  # as a run writes it
    config = TrainConfig.from_file(path, encoder="linear")
    assert (config.encoder, config.hidden, config.dim) == ("linear", (), 64)
    assert TrainConfig.from_file(path, dim=8).hidden == (32,)
    path.write_text(json.dumps({"edges": "e.csv", "lrr": 1}))
    with pytest.raises(InputFileError, match="field 'lrr': unknown config field"):
        TrainConfig.from_file(path)


@pytest.mark.parametrize("given, gib", [("22GiB", 22.0), ("22G", 22.0), ("22 gib", 22.0), ("22GB", 22e9 / 2**30),
                                        ("512MiB", 0.5), ("512M", 0.5), ("2.5 GiB", 2.5), ("1TiB", 1024.0),
                                        ("22", 22.0), ("0.5", 0.5), (22, 22.0), (1.5, 1.5)])
def test_the_memory_budget_takes_the_units_people_type_and_a_bare_number_is_gib(given, gib):
    config = TrainConfig(strategy="auto", memory_budget=given)
    assert config.memory_budget == pytest.approx(gib, rel=1e-12) and isinstance(config.memory_budget, float)


@pytest.mark.parametrize("bad", ["22XB", "GiB", "-1GiB", "0", "0MiB", "22 GiB 3", "1e400", "nan", -2.0, [1]])
def test_a_bad_memory_budget_is_a_parameter_error_that_says_what_a_size_is(bad):
    with pytest.raises(ParameterError, match=r"^The 'memory_budget' parameter of train must be a size > 0: GiB, or "
                                             r"a number with a unit \(e\.g\. 22GiB, 22G, 20GB, 512MiB\)\. Got .* "
                                             r"instead"):
        TrainConfig(strategy="auto", memory_budget=bad)


def test_the_cli_reads_a_memory_budget_with_a_unit(tmp_path, capsys):
    from gaescale.cli import main
    (tmp_path / "e.txt").write_text("".join(f"{i} {(i + 1) % 50}\n" for i in range(50)))
    assert main(["plan", str(tmp_path / "e.txt"), "--memory-budget", "512MiB"]) == 0
    assert "budget 0.50 GiB" in capsys.readouterr().out
    assert main(["plan", str(tmp_path / "e.txt"), "--memory-budget", "22XB"]) == 2
    assert capsys.readouterr().err.strip() == ("gaescale: error: The 'memory_budget' parameter of train must be a "
                                               "size > 0: GiB, or a number with a unit (e.g. 22GiB, 22G, 20GB, "
                                               "512MiB). Got '22XB' instead.")
