"""The training loop's mixed precision: bf16 autocast, fp16 with a gradient scaler, one code path."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

import gaescale
from conftest import random_edges
from gaescale.data.synthetic import community_graph
from gaescale.errors import ParameterError
from gaescale.graph import Graph
from gaescale.sparse import SparseOperator, spmm
from gaescale.training.trainer import fit


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sparse_products_of_half_inputs_accumulate_in_float32(dtype):
    n = 300
    g = Graph.from_edge_index(random_edges(n, 1500, seed=1), n)
    x = torch.randn(n, 16, generator=torch.Generator().manual_seed(0)).to(dtype).requires_grad_()
    y = spmm(g.gcn_operator, x)
    assert y.dtype == dtype
    reference = torch.from_numpy(g.gcn_operator.scipy() @ x.detach().float().numpy())
    torch.testing.assert_close(y.float(), reference, rtol=1e-2, atol=1e-2)  # one rounding of the fp32 result
    y.float().square().sum().backward()
    assert x.grad.dtype == dtype


def _half_sum(values: torch.Tensor) -> torch.Tensor:
    """``values`` summed one by one in their own (half) dtype, as a kernel accumulating in half would."""
    acc = torch.zeros((), dtype=values.dtype)
    for v in values:
        acc = acc + v
    return acc


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_sum_that_half_precision_accumulation_gets_wrong_is_exact(dtype):
    """Row 0 of the operator sums 1 and 2 / ulp(1) values of ulp(1) / 4: exactly 2 in float32; a half
    accumulator stays at 1 (each small value is a quarter of its spacing at 1, so rounds away)."""
    ulp = torch.finfo(dtype).eps  # the spacing of the half type at 1
    k = int(round(4 / ulp))  # k values of ulp / 4 add up to 1
    op = SparseOperator(sp.csr_matrix(np.ones((1, k + 1), np.float32)))  # one row of k + 1 ones
    x = torch.full((k + 1, 1), ulp / 4, dtype=dtype)
    x[0] = 1.0
    assert _half_sum(x[:, 0]) == 1.0  # what accumulating in half would give
    y = spmm(op, x)
    assert y.dtype == dtype
    # one rounding of the float32 sum, 2: within half of the half type's spacing at 2, far below the error of 1
    assert abs(float(y) - 2.0) <= ulp, float(y)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("strategy", ["full", "cluster", "neighbor"])
def test_mixed_precision_runs_the_encoder_in_half_and_learns_like_fp32(precision, strategy):
    data = community_graph(2000, 10000, seed=2)
    kw = dict(data=data, hidden="16,16", dim=8, epochs=30, quiet=True, report=False, eval_every=5, patience=0,
              strategy=strategy, **{"neighbor": {"batch_size": 4096, "fanouts": "5,5,5"},
                                    "cluster": {"cluster_parts": 8, "clusters_per_batch": 2}}.get(strategy, {}))
    seen = set()
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: (seen.add(out.dtype)
                                   if isinstance(module, torch.nn.Linear) and module.training else None))
    try:
        half = gaescale.train(precision=precision, **kw)
    finally:
        handle.remove()
    assert seen == {torch.bfloat16 if precision == "bf16" else torch.float16}  # autocast was in effect
    full = gaescale.train(precision="fp32", **kw)
    assert np.isfinite([h["loss"] for h in half.metrics["history"]]).all()
    assert half.metrics["test_auc"] > full.metrics["test_auc"] - 0.02


def test_fp16_resumes_bit_for_bit_with_the_scaler_state(tmp_path):
    data = community_graph(1500, 7000, seed=3)
    # warmup fixed: its default is a quarter of --epochs, so a 4-epoch run resumed to 8 would select from another
    # epoch than the 8-epoch run it is compared with
    kw = dict(data=data, hidden="16", dim=8, quiet=True, report=False, precision="fp16", seed=1, warmup=2)
    ref = gaescale.train(epochs=8, **kw)
    gaescale.train(out=str(tmp_path), epochs=4, checkpoint_every=4, **kw)
    state = torch.load(sorted((tmp_path / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    assert state["scaler"]["scale"] > 0  # the scaler's state is in the checkpoint
    resumed = gaescale.train(out=str(tmp_path), epochs=8, resume=True, **kw)
    assert np.array_equal(ref.embeddings, resumed.embeddings)


def test_unknown_precision_is_refused():
    g = Graph.from_edge_index(random_edges(20, 40), 20)
    model = gaescale.GAE(gaescale.GCN(None, [4], num_nodes=20))
    with pytest.raises(ParameterError,
                       match=r"The 'precision' parameter of fit must be one of \['fp32', 'bf16', 'fp16'\]"):
        fit(model, None, g, torch.from_numpy(g.edge_index()), epochs=1, progress=False, precision="fp8")
    with pytest.raises(ParameterError, match=r"The 'precision' parameter of train must be one of"):
        gaescale.TrainConfig(precision="half")


@pytest.mark.parametrize("warmup, epochs, best", [(9, 9, 9), (0, 9, 9), (0, 12, 10)])
def test_the_last_validation_s_embeddings_are_returned_only_for_the_weights_kept(warmup, epochs, best):
    """fit hands back the last validation's z when the weights it returns are those z was made with (the caller then
    need not embed again): no epoch selected (a warm-up of every epoch), or the best being the last; after restoring
    an earlier epoch's best weights (epoch 10 of 12 here), none."""
    data = community_graph(600, 3000, seed=4)
    graph = Graph.from_edge_index(data.edge_index, 600)
    x = torch.from_numpy(data.x)
    torch.manual_seed(0)
    model = gaescale.GAE(gaescale.GCN(8, [16, 8]))
    pos, neg = data.edge_index[:, :200], np.random.default_rng(0).integers(0, 600, (2, 200))
    calls = []

    def embed():
        calls.append(1)
        return model.embed(x, graph)

    result = fit(model, x, graph, torch.from_numpy(data.edge_index), val=(pos, neg), epochs=epochs, lr=0.05,
                 patience=1000, warmup=warmup, embed=embed, progress=False)
    assert len(calls) == len(result.history) == epochs  # every epoch validated, each through embed
    assert result.best_epoch == best
    if best == epochs:
        assert result.z is not None and torch.equal(result.z, model.embed(x, graph))
    else:
        assert result.z is None
    no_embed = fit(model, x, graph, torch.from_numpy(data.edge_index), val=(pos, neg), epochs=2, progress=False)
    assert no_embed.z is None
    assert all(p.grad is None for p in model.parameters())  # the last step's gradients are not kept past training
