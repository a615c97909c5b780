"""Graph autoencoders: an encoder (any ``nn.Module`` mapping ``(x, graph) -> z``) plus the
inner-product decoder, evaluated on given pairs only."""
from __future__ import annotations

import torch
from torch import nn

from .graph import Graph
from .losses import reconstruction_loss


def decode(z: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Logits ``s_k = z[pairs[0, k]] . z[pairs[1, k]]`` for ``z: (N, d)`` and ``pairs: (2, B)``; returns ``(B,)``."""
    return (z[pairs[0]] * z[pairs[1]]).sum(-1)


class GAE(nn.Module):
    """Graph autoencoder (Kipf & Welling 2016) around any encoder.

    ``model = GAE(GCN(8, [16, 16, 8]))``; ``z = model(x, graph)``; ``model.loss(z, edge_index)``.
    The decoder is ``sigmoid(z_i . z_j)``, applied to the pairs it is given: no method returns N x N.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, x: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        """``z: (N, d)``."""
        return self.encoder(x, graph)

    encode = forward

    @staticmethod
    def decode(z: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """Edge probabilities ``(B,)`` for ``pairs: (2, B)``."""
        return torch.sigmoid(decode(z, pairs))

    def loss(self, z: torch.Tensor, edge_index: torch.Tensor, **kwargs) -> torch.Tensor:
        """The reconstruction loss (:func:`gaescale.losses.reconstruction_loss`) of ``z`` on ``edge_index: (2, E)``."""
        return reconstruction_loss(z, edge_index, z.shape[0], **kwargs)
