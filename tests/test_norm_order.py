import numpy as np
import pytest
import torch

from gaescale.norm_order import NormOrder


@pytest.mark.parametrize("n, block", [(0, 4), (1, 4), (37, 5), (64, 8), (100, 128)])
def test_blocks_walk_the_rows_by_decreasing_norm_without_a_copy(n, block):
    """Against a dense reference: the rows of every block in turn are z sorted by decreasing norm (ties by index);
    each block's bound is its largest norm; positions invert the order; z is the caller's, not a copy."""
    g = torch.Generator().manual_seed(n)
    z = torch.randn(n, 3, generator=g)
    if n > 4:
        z[3] = z[1]  # a tie: the smaller index comes first
    by_norm = NormOrder(z, block)
    norms = np.linalg.norm(z.numpy().astype(np.float64), axis=1)
    expected = np.array(sorted(range(n), key=lambda i: (-np.float32(norms[i]), i)), dtype=np.int64)
    assert np.array_equal(by_norm.order.numpy(), expected)
    walked = torch.cat([by_norm.rows(j) for j in range(len(by_norm))]) if n else torch.zeros(0, 3)
    assert torch.equal(walked, z[torch.from_numpy(expected)])
    maxima = [np.float32(norms[expected[s:s + block]]).max() for s in range(0, n, block)]
    np.testing.assert_allclose(by_norm.bucket_max.numpy(), maxima, rtol=1e-6)
    assert by_norm.max_norm == pytest.approx(max(maxima, default=0.0), rel=1e-6)
    assert np.array_equal(by_norm.positions().numpy()[expected], np.arange(n))
    assert by_norm.z is z


def test_float64_norms_order_rows_that_float32_would_tie():
    """``dtype=float64`` (the filtered ranking's) orders by the exact norms."""
    z = torch.tensor([[1.0, 0.0], [1.0, 1e-4]], dtype=torch.float64)
    assert NormOrder(z, 2, dtype=torch.float64).order.tolist() == [1, 0]
