import copy
import subprocess
import sys

import pytest
import torch

from gaescale.training.optim import Adam


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, 3, generator=g).requires_grad_(), torch.randn(7, generator=g).requires_grad_(),
            torch.randn(2, 2, generator=g).requires_grad_()]


def _groups(params):  # two groups at different rates, as GAE.param_groups gives them
    return [{"params": params[:2]}, {"params": params[2:], "lr": 0.003}]


def _steps(opt, params, steps, seed, skip=None):
    g = torch.Generator().manual_seed(seed)
    for k in range(steps):
        opt.zero_grad(set_to_none=True)
        for i, p in enumerate(params):
            if (k, i) != skip:  # a parameter without a gradient at a step is not updated
                p.grad = torch.randn(p.shape, generator=g)
        opt.step()


def test_the_updates_are_torchs_adam_to_the_bit():
    ours, theirs = _params(), _params()
    a, b = Adam(_groups(ours), lr=0.01), torch.optim.Adam(_groups(theirs), lr=0.01)
    _steps(a, ours, 6, seed=1, skip=(2, 1))
    _steps(b, theirs, 6, seed=1, skip=(2, 1))
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)
        assert torch.equal(a.state[p]["exp_avg_sq"], b.state[q]["exp_avg_sq"])
        assert a.state[p]["step"] == b.state[q]["step"]
    assert a.state[ours[1]]["step"] == 5  # the step it had no gradient at


@pytest.mark.parametrize("first", [Adam, torch.optim.Adam])
def test_state_dicts_pass_between_the_two_and_training_goes_on_alike(first):
    then = _params()
    opt = first(_groups(then), lr=0.01)
    _steps(opt, then, 3, seed=2)
    saved = opt.state_dict()
    results = []
    for cls in (Adam, torch.optim.Adam):
        params = [p.detach().clone().requires_grad_() for p in then]
        other = cls(_groups(params), lr=0.5)  # the saved groups' options replace these
        other.load_state_dict(copy.deepcopy(saved))  # a checkpoint's own tensors: both share what they load
        assert [g["lr"] for g in other.param_groups] == [0.01, 0.003]
        _steps(other, params, 3, seed=3)
        results.append(params)
    for p, q in zip(*results):
        assert torch.equal(p, q)


def test_an_option_it_does_not_implement_is_refused_by_name():
    with pytest.raises(ValueError, match="'amsgrad' option"):
        Adam([{"params": _params(), "amsgrad": True}])
    saved = torch.optim.Adam(_params(), weight_decay=0.1).state_dict()
    with pytest.raises(ValueError, match="'weight_decay' option"):
        Adam(_params()).load_state_dict(saved)
    with pytest.raises(ValueError, match="as many groups and parameters"):
        Adam(_params()[:2]).load_state_dict(saved)


TRAIN = """
import sys, numpy as np, torch
from gaescale import GAE, GCN, Graph
from gaescale.training.trainer import fit
g = Graph.from_edge_index(np.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), 5)
fit(GAE(GCN(3, [4])), torch.randn(5, 3), g, torch.from_numpy(g.edge_index()), epochs=3)
print("torch._dynamo imported:", "torch._dynamo" in sys.modules)
"""


def test_training_does_not_import_torch_dynamo():
    # torch.optim's optimizers import it on their first call: 1.4 s and 140 MiB of every training process
    r = subprocess.run([sys.executable, "-c", TRAIN], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "torch._dynamo imported: False" in r.stdout
