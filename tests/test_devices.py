"""--device: cpu, cuda or auto. Without a GPU (CI) the CUDA paths skip and the choice of device is
checked; with one, every strategy trains on it as on the CPU (the same draws, float rounding apart)."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import gaescale
from gaescale.data.synthetic import community_graph
from gaescale.devices import resolve_device

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: auto means cuda here")
def test_auto_is_the_cpu_without_a_gpu_and_cuda_is_refused_before_anything_is_written(tmp_path):
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(gaescale.ParameterError, match="The 'device' parameter of train must be 'cpu' or 'auto'"):
        resolve_device("cuda")
    data = community_graph(300, 1200, seed=0)
    edges = tmp_path / "e.npz"
    np.savez(edges, edge_index=data.edge_index)
    r = subprocess.run([sys.executable, "-m", "gaescale", "train", str(edges), "--out", str(tmp_path / "run"),
                        "--device", "cuda"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "'device'" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


def test_the_device_is_recorded_and_does_not_stop_a_resume(tmp_path):
    data = community_graph(400, 1600, seed=1)
    kw = dict(data=data, out=str(tmp_path / "run"), hidden="8", dim=4, quiet=True, report=False, checkpoint_every=1)
    first = gaescale.train(epochs=2, device="cpu", **kw)
    r = gaescale.train(epochs=3, device="auto", resume=True, **kw)  # a run may move to another device
    assert r.metrics["epochs"] == 3 and r.metrics["device"] == str(resolve_device("auto"))
    # independently of resolve_device: auto is the first GPU where torch sees one (no torchrun here), else the CPU
    assert first.metrics["device"] == "cpu"
    assert r.metrics["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["device"] == r.metrics["device"]


def test_auto_records_the_cpu_when_torch_sees_no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU machine behaves as one without
    r = gaescale.train(data=community_graph(300, 1200, seed=2), hidden="8", dim=4, epochs=1, quiet=True,
                       device="auto")
    assert r.metrics["device"] == "cpu"


CASES = [dict(strategy="full"), dict(strategy="full", loss="weighted-bce", dense="exact"),
         dict(strategy="cluster", cluster_parts=8, clusters_per_batch=3), dict(strategy="fastgae", fastgae_nodes=500),
         dict(strategy="neighbor", batch_size=1024, fanouts="5,5"), dict(strategy="full", encoder="sage"),
         dict(strategy="neighbor", encoder="sage", featureless=True, batch_size=1024, fanouts="5,5"),
         dict(strategy="full", variational=True), dict(strategy="full", precision="bf16"),
         dict(strategy="cluster", precision="fp16", featureless=True)]


@cuda
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_every_strategy_trains_on_cuda_as_on_the_cpu(case):
    case = dict(case)
    data = community_graph(2000, 9000, seed=3)
    if case.pop("featureless", False):
        data.x = None
    kw = dict(data=data, hidden="16", dim=8, epochs=5, quiet=True, seed=1, **case)
    cpu, gpu = gaescale.train(device="cpu", **kw), gaescale.train(device="cuda", **kw)
    assert gpu.metrics["device"].startswith("cuda")
    gpu_loss, cpu_loss = ([h["loss"] for h in r.metrics["history"]] for r in (gpu, cpu))
    if case.get("variational"):  # the noise comes from each device's own generator: other draws, the same model
        np.testing.assert_allclose(gpu_loss[-1], cpu_loss[-1], rtol=0.05)
    else:
        np.testing.assert_allclose(gpu_loss, cpu_loss, rtol=2e-2 if case.get("precision") else 1e-3)
    assert abs(gpu.metrics["test_auc"] - cpu.metrics["test_auc"]) < 0.02


@cuda
def test_a_prepared_graph_trains_and_embeds_layer_by_layer_on_cuda(tmp_path):
    from gaescale.data.prepare import prepare
    data = community_graph(3000, 15000, seed=5)
    np.savez(tmp_path / "e.npz", edge_index=data.edge_index, x=data.x)
    prepare(tmp_path / "e.npz", tmp_path / "g")
    kw = dict(edges=str(tmp_path / "g"), hidden="16", dim=8, epochs=3, quiet=True, report=False,
              strategy="neighbor", batch_size=2048, fanouts="5,5")
    cpu = gaescale.train(device="cpu", out=str(tmp_path / "cpu"), **kw)
    gpu = gaescale.train(device="cuda", out=str(tmp_path / "gpu"), **kw)
    np.testing.assert_allclose(gpu.embeddings, cpu.embeddings, rtol=1e-3, atol=1e-4)
    saved = torch.load(tmp_path / "gpu" / "model.pt", weights_only=True)  # loads on a machine without a GPU
    assert all(v.device.type == "cpu" for v in saved["state_dict"].values())
    assert json.loads((tmp_path / "gpu" / "metrics.json").read_text())["device"].startswith("cuda")
