"""PyTorch Geometric's GAE recipe (examples/autoencoder.py: GCNConv 2 * 16 -> 16, ``GAE.recon_loss`` with one
sampled negative per positive, Adam lr 0.01) on gaescale's own split of a graph, for side-by-side quality
tables. Needs torch_geometric: run with ``.venv-bench/bin/python`` (``bash bench/setup_env.sh``).

A graph without features gets a learnable input table ``nn.Embedding(N, 32)`` (PyG's recipe has no input of
its own for a featureless graph; the table is what gaescale's featureless first layer is too). The weights of
the best validation AUC over ``epochs`` epochs are scored on test, as a careful user of the example would.
"""
from __future__ import annotations

import random
import time

import numpy as np


def pyg_recipe(data, split, seed: int, epochs: int = 200) -> dict:
    """``{"val_auc", "test_auc", "test_ap", "mrr", "best_epoch", "epochs", "seconds"}`` of PyG's recipe on ``split``
    (a :class:`gaescale.EdgeSplit` of ``data``, an :class:`gaescale.EdgeList`); ``mrr`` is the filtered MRR that
    gaescale's runs report (:func:`gaescale.training.heldout.test_metrics`, the same test edges for the same seed), and
    ``seconds`` covers training and the per-epoch validation, as a gaescale run's does."""
    import torch
    from torch_geometric.nn import GAE, GCNConv
    from torch_geometric.utils import to_undirected

    from gaescale.training.evaluate import link_scores
    from gaescale.training.heldout import test_metrics

    t0 = time.perf_counter()
    random.seed(seed)  # negative_sampling draws with Python's random and numpy as well as torch
    np.random.seed(seed)
    torch.manual_seed(seed)
    n = data.num_nodes
    train_pos = torch.from_numpy(split.train)
    edge_index = to_undirected(train_pos, num_nodes=n)
    x = None if data.x is None else torch.from_numpy(np.asarray(data.x, dtype=np.float32))

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(n, 32) if x is None else None
            self.conv1 = GCNConv(32 if x is None else x.shape[1], 32, cached=True)
            self.conv2 = GCNConv(32, 16, cached=True)

        def forward(self, x, edge_index):
            h = self.table.weight if x is None else x
            return self.conv2(self.conv1(h, edge_index).relu(), edge_index)

    model = GAE(Encoder())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    best, best_z, best_epoch = -1.0, None, 0
    for epoch in range(1, epochs + 1):
        model.train()
        opt.zero_grad()
        loss = model.recon_loss(model.encode(x, edge_index), train_pos)
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            z = model.encode(x, edge_index)
        auc = link_scores(z, split.val_pos, split.val_neg)[0]
        if auc > best:
            best, best_z, best_epoch = auc, z, epoch
    seconds = time.perf_counter() - t0
    m = test_metrics(best_z, split, seed=seed, train_graph=split.train_graph())
    return dict(val_auc=best, test_auc=m["test_auc"], test_ap=m["test_ap"], mrr=m.get("filtered_mrr"),
                best_epoch=best_epoch, epochs=epochs, seconds=seconds)
