"""No N x N tensor: every aten op of a training step, evaluation and the exact loss is watched."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import gaescale
from gaescale.data.synthetic import community_graph
from gaescale.losses import KINDS, dense_term

N = 3000


class NoQuadratic(TorchDispatchMode):
    """Fails on any dense tensor with N^2 / 16 elements or more produced by an operator."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.numel() >= N * N // 16:
                raise AssertionError(f"{func} produced a tensor of shape {tuple(t.shape)}")
        return out


def test_the_watch_catches_a_dense_product():
    z = torch.randn(N, 4)
    with pytest.raises(AssertionError, match="shape \\(3000, 3000\\)"), NoQuadratic():
        z @ z.T  # noqa: B018


@pytest.mark.parametrize("options", [dict(), dict(encoder="sage", variational=True), dict(featureless=True)])
def test_training_and_evaluation_form_no_quadratic_tensor(options):
    data = community_graph(N, 12_000, seed=6)
    if options.pop("featureless", False):
        data.x = None
    with NoQuadratic():
        r = gaescale.train(data=data, hidden="16", dim=8, epochs=3, quiet=True, **options)
    assert r.embeddings.shape == (N, 8)


def test_exact_dense_term_stays_in_tiles():
    z = torch.randn(N, 4, requires_grad=True)
    with NoQuadratic():
        dense_term(z, KINDS["bce"], "exact", block_size=N // 8).backward()
    assert z.grad.shape == (N, 4)


def test_directed_training_and_evaluation_form_no_quadratic_tensor():
    data = community_graph(N, 12_000, seed=6)
    data.x = None
    with NoQuadratic():
        r = gaescale.train(data=data, directed=True, directed_symmetric="on", hidden="16", dim=8, epochs=3, quiet=True)
    assert r.embeddings.shape == (N, 2 * (16 + 2))  # [z_s, z_u, b_s, 1 | z_t, z_u, 1, b_t]


def test_directed_exact_dense_term_stays_in_tiles():
    from gaescale.directed.model import directed_dense_term
    z = torch.randn(N, 8, requires_grad=True)
    with NoQuadratic():
        directed_dense_term(z, KINDS["bce"], "exact", block_size=N // 8).backward()
    assert z.grad.shape == (N, 8)
