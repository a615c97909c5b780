"""Graph autoencoders: an encoder (any ``nn.Module`` mapping ``(x, graph) -> z``) plus the
inner-product decoder, evaluated on given pairs only."""
from __future__ import annotations

import torch
from torch import nn

from .graph import Graph
from .losses import full_precision, reconstruction_loss


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

    @torch.no_grad()
    def embed(self, x: torch.Tensor | None, graph: Graph, *, block: int | None = None) -> torch.Tensor:
        """Evaluation-mode embeddings ``z: (N, d)`` without autograd. With ``block`` and an encoder that has
        ``layerwise(x, graph, block)`` (gaescale's GCN and SAGE), computed layer by layer over row blocks
        of the graph (see :meth:`gaescale.encoders.GCN.layerwise`); otherwise one forward pass."""
        was = self.training
        self.eval()
        try:
            if block is not None and hasattr(self.encoder, "layerwise"):
                return self._eval_output(self.encoder.layerwise(x, graph, block))
            return self(x, graph)
        finally:
            self.train(was)

    @staticmethod
    def _eval_output(out: torch.Tensor) -> torch.Tensor:
        return out

    @staticmethod
    def decode(z: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """Edge probabilities ``(B,)`` for ``pairs: (2, B)``."""
        return torch.sigmoid(decode(z, pairs))

    def loss(self, z: torch.Tensor, edge_index: torch.Tensor, **kwargs) -> torch.Tensor:
        """The reconstruction loss (:func:`gaescale.losses.reconstruction_loss`) of ``z`` on ``edge_index: (2, E)``."""
        return reconstruction_loss(z, edge_index, z.shape[0], **kwargs)


class VGAE(GAE):
    """Variational graph autoencoder (Kipf & Welling 2016).

    The encoder returns ``(N, 2d)``: the first ``d`` columns are the means ``mu``, the last ``d`` the
    log standard deviations (as if two output heads shared the hidden layers). Training samples
    ``z = mu + eps * exp(logstd)``; evaluation returns ``mu``. The loss adds the KL divergence to the
    standard normal prior, weighted per node as in the VGAE paper: ``KL / N`` with KL averaged over nodes.
    """

    MAX_LOGSTD = 10.0

    def forward(self, x: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        """``z: (N, d)``; also keeps ``self.mu`` and ``self.logstd`` for :meth:`loss`."""
        out = full_precision(self.encoder(x, graph))  # the KL term and the noise in float32 under mixed precision
        if out.shape[1] % 2:
            raise ValueError(f"a VGAE encoder must return an even number of columns (mu, logstd); got {out.shape[1]}")
        d = out.shape[1] // 2
        self.mu, self.logstd = out[:, :d], out[:, d:].clamp(max=self.MAX_LOGSTD)
        if not self.training:
            return self.mu
        return self.mu + torch.randn_like(self.mu) * self.logstd.exp()

    encode = forward

    @staticmethod
    def _eval_output(out: torch.Tensor) -> torch.Tensor:
        return out[:, :out.shape[1] // 2]  # mu

    def kl(self) -> torch.Tensor:
        """Mean over nodes of ``KL(N(mu, sigma^2) || N(0, I))``."""
        mu, logstd = self.mu, self.logstd
        return -0.5 * (1 + 2 * logstd - mu.square() - (2 * logstd).exp()).sum(1).mean()

    def loss(self, z: torch.Tensor, edge_index: torch.Tensor, **kwargs) -> torch.Tensor:
        return super().loss(z, edge_index, **kwargs) + self.kl() / z.shape[0]
