"""Graph autoencoders: an encoder (any ``nn.Module`` mapping ``(x, graph) -> z``) plus the
inner-product decoder, optionally with a learned bias per node, evaluated on given pairs only.

The per-node bias ``s_ij = z_i . z_j + b_i + b_j`` lets degree (how likely a node is to link at all) live
outside ``z``. It is carried as two extra columns, ``p = (b + 1) / sqrt 2`` and ``q = (b - 1) / sqrt 2``, with
the signs ``(+1, ..., +1, +1, -1)``: ``p_i p_j - q_i q_j = b_i + b_j``. So the logits stay one symmetric
bilinear form ``s_ij = z'_i^T M z'_j`` of the rows of ``z' = [z, p, q]``, and everything that streams or
samples inner products (the exact dense tiles, the sampled pairs, the top-k scan) serves both decoders
with ``metric = M``; a subset of rows (a mini-batch) carries its own biases."""
from __future__ import annotations

import torch
from torch import nn

from .devices import index_on
from .graph import Graph
from .losses import full_precision, pair_sum, reconstruction_loss, resolve_kind
from .structure import StructuralPart


def decode(z: torch.Tensor, pairs: torch.Tensor, metric: torch.Tensor | None = None) -> torch.Tensor:
    """Logits ``s_k = z[pairs[0, k]] . z[pairs[1, k]]`` for ``z: (N, d)`` and ``pairs: (2, B)`` (with ``metric: (d,)``
    of signs, ``sum_c metric_c z[u, c] z[v, c]``); returns ``(B,)``."""
    return (query_side(z[pairs[0]], metric) * z[pairs[1]]).sum(-1)


def query_side(z: torch.Tensor, metric: torch.Tensor | None) -> torch.Tensor:
    """The query side ``z M`` of the logits ``z_u^T M z_v`` (``z`` itself without ``metric``): as long as each row
    of ``z``, so the length bounds of the ranking and top-k scans hold for every bilinear decoder."""
    return z if metric is None else z * metric.to(z.device, z.dtype)


_ROOT_HALF = 0.5 ** 0.5


def with_bias(z: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``z: (N, d)`` and biases ``b: (N,)`` as ``z': (N, d + 2) = [z, (b + 1) / sqrt 2, (b - 1) / sqrt 2]``, whose
    logits under :func:`bias_metric` are ``z_i . z_j + b_i + b_j``."""
    b = b.to(z.dtype)[:, None]
    return torch.cat([z, (b + 1) * _ROOT_HALF, (b - 1) * _ROOT_HALF], dim=1)


def split_bias(zb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of :func:`with_bias`: ``(z: (N, d), b: (N,))`` of ``zb: (N, d + 2)``."""
    return zb[:, :-2], (zb[:, -2] + zb[:, -1]) * _ROOT_HALF


class HadamardMLP(nn.Module):
    """The Hadamard-product MLP decoder ``s_uv = w_2 . relu(W_1 (z_u * z_v) + c_1) + c_2`` (symmetric in u, v), as in
    the tuned graph-autoencoder results at the top of OGB's link tables. Not a bilinear form: the losses support it
    with ``dense='sampled'`` only, and rankings score every candidate (no length bound prunes them)."""

    def __init__(self, dim: int, hidden: int = 64):
        super().__init__()
        self.hidden = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        """``zu, zv: (B, d)`` -> logits ``(B,)``."""
        return self.out(torch.relu(self.hidden(zu * zv))).squeeze(-1)


def bias_metric(width: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """The signs ``(width,)`` of a :func:`with_bias` embedding: +1, and -1 on the last column."""
    m = torch.ones(width, device=device, dtype=dtype)
    m[-1] = -1.0
    return m


class GAE(nn.Module):
    """Graph autoencoder (Kipf & Welling 2016) around any encoder.

    ``model = GAE(GCN(8, [16, 16, 8]))``; ``z = model(x, graph)``; ``model.loss(z, edge_index)``.
    The decoder is ``sigmoid(z_i . z_j)``, applied to the pairs it is given: no method returns N x N.
    ``node_bias=N``: ``sigmoid(z_i . z_j + b_i + b_j)`` with a learned bias for each of the graph's ``N``
    nodes (initially 0); the model then returns ``z': (N, d + 2)`` (:func:`with_bias`) and
    :meth:`metric` its signs, which every logit of ``z'`` is computed with.
    """

    def __init__(self, encoder: nn.Module, *, node_bias: int | None = None, pair_decoder: nn.Module | None = None,
                 structure: StructuralPart | None = None):
        super().__init__()
        self.encoder = encoder
        if structure is not None and pair_decoder is not None:
            raise ValueError("The 'structure' parameter of GAE must be None with a pair_decoder (the structural part "
                             "is added to a bilinear logit). Got a StructuralPart instead.")
        self.structure = structure  # w . phi(u, v) added to the logit (gaescale.structure); None: no structural part
        if node_bias is not None and pair_decoder is not None:
            raise ValueError("The 'pair_decoder' parameter of GAE must be None with node_bias (one decoder). "
                             f"Got {type(pair_decoder).__name__} instead.")
        self.pair_decoder = pair_decoder  # (zu, zv) -> logits, e.g. HadamardMLP; None: the inner product
        if node_bias is not None and (not isinstance(node_bias, int) or isinstance(node_bias, bool) or node_bias < 1):
            raise ValueError(f"The 'node_bias' parameter of GAE must be None or an int >= 1 (the number of nodes). "
                             f"Got {node_bias!r} instead.")
        self.node_bias = None if node_bias is None else nn.Parameter(torch.zeros(node_bias))

    def forward(self, x: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        """``z: (N, d)``, or ``z': (N, d + 2)`` with ``node_bias``."""
        return self.add_bias(self.encoder(x, graph), graph.node_ids)

    def add_bias(self, z: torch.Tensor, node_ids=None) -> torch.Tensor:
        """``z: (n, d)`` with the biases of nodes ``node_ids: (n,)`` (None: all N) as :func:`with_bias`; ``z`` itself
        without ``node_bias``."""
        if self.node_bias is None:
            return z
        b = self.node_bias if node_ids is None else self.node_bias[index_on(node_ids, self.node_bias)]
        return with_bias(z, b.to(z.device))

    def metric(self, z: torch.Tensor) -> torch.Tensor | None:
        """The signs ``(d,)`` of the logits of ``z: (N, d)`` this model returned; None for the plain inner product."""
        return None if self.node_bias is None else bias_metric(z.shape[1], z.device)

    encode = forward

    @torch.no_grad()
    def embed(self, x: torch.Tensor | None, graph: Graph, *, block: int | None = None, buffers=None) -> torch.Tensor:
        """Evaluation-mode embeddings ``z: (N, d)`` without autograd. With ``block`` and an encoder that has
        ``layerwise(x, graph, block)`` (gaescale's GCN and SAGE), computed layer by layer over row blocks
        of the graph (see :meth:`gaescale.encoders.GCN.layerwise`, where ``buffers`` go); otherwise one forward
        pass."""
        was = self.training
        self.eval()
        try:
            if block is not None and hasattr(self.encoder, "layerwise"):
                kwargs = {} if buffers is None else {"buffers": buffers}  # a PyG encoder's layerwise takes none
                z = self.eval_output(self.encoder.layerwise(x, graph, block, **kwargs))
                if buffers is not None and self.node_bias is not None and graph.node_ids is None:
                    return self._with_bias_into(z, buffers((z.shape[0], z.shape[1] + 2)), block)
                return self.add_bias(z, graph.node_ids)
            return self(x, graph)
        finally:
            self.train(was)

    def _with_bias_into(self, z: torch.Tensor, out: torch.Tensor, block: int) -> torch.Tensor:
        """:meth:`add_bias` of every node's ``z: (N, d)``, written ``block`` rows at a time into ``out: (N, d + 2)``
        (a mapped buffer: no (N, d + 2) anonymous copy)."""
        for start in range(0, z.shape[0], block):
            stop = min(z.shape[0], start + block)
            out[start:stop] = with_bias(z[start:stop], self.node_bias[start:stop].to(z.device))
        return out

    @staticmethod
    def eval_output(out: torch.Tensor) -> torch.Tensor:
        return out

    def logits(self, z: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """Logits ``(B,)`` of ``pairs: (2, B)`` (indices into ``z``'s rows) under this model's decoder."""
        if self.pair_decoder is not None:
            return self.pair_decoder(z[pairs[0]], z[pairs[1]])
        return decode(z, pairs, self.metric(z))

    def decode(self, z: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """Edge probabilities ``(B,)`` for ``pairs: (2, B)``."""
        return torch.sigmoid(self.logits(z, pairs))

    def param_groups(self, lr: float) -> list[dict]:
        """Adam's parameter groups: the structural part's weights at ``StructuralPart.lr_scale`` times ``lr``."""
        if self.structure is None:
            return [{"params": list(self.parameters())}]
        own = {id(p) for p in self.structure.parameters()}
        return [{"params": [p for p in self.parameters() if id(p) not in own]},
                {"params": list(self.structure.parameters()), "lr": lr * self.structure.lr_scale}]

    def loss(self, z: torch.Tensor, edge_index: torch.Tensor, *, two_hop=None, **kwargs) -> torch.Tensor:
        """The reconstruction loss (:func:`gaescale.losses.reconstruction_loss`) of ``z`` on ``edge_index: (2, E)``.

        With the structural part, ``two_hop`` (:class:`gaescale.structure.TwoHop` of the training graph): the same
        identity of the whole logits ``s + w . phi``, the edges' through ``edge_offset`` and the all-pairs term's
        through its two-hop pairs (``dense_offset``, where ``phi`` is not 0), plus ``two_hop.weight`` times the mean
        ``l0`` of the whole logits of the pool's two-hop non-edges (the hard negatives)."""
        if self.structure is None or two_hop is None:
            if self.structure is not None:
                raise ValueError("a GAE with a structural part needs two_hop= (gaescale.structure.TwoHop) in its loss")
            return reconstruction_loss(z, edge_index, z.shape[0], metric=self.metric(z), decoder=self.pair_decoder,
                                       **kwargs)
        offset = self.structure(two_hop.phi_of(edge_index).to(z.device))
        pool = (two_hop.pool, self.structure(two_hop.pool_phi.to(z.device)), two_hop.pool_weight)
        value = reconstruction_loss(z, edge_index, z.shape[0], metric=self.metric(z), edge_offset=offset,
                                    dense_offset=pool, **kwargs)
        if two_hop.negatives is not None and two_hop.negatives.num_pairs:
            neg = two_hop.negatives.to(z.device)
            s = neg.logits(full_precision(z), self.metric(z)) + self.structure(two_hop.negatives_phi.to(z.device))
            pair_loss = resolve_kind(kwargs.get("kind", "bce"), kwargs.get("weighting"))[0]
            value = value + two_hop.weight * pair_sum(pair_loss.l0, s, overwrite=True) / s.numel()  # s: its own sum
        return value


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
            return self.add_bias(self.mu, graph.node_ids)
        return self.add_bias(self.mu + torch.randn_like(self.mu) * self.logstd.exp(), graph.node_ids)

    encode = forward

    @staticmethod
    def eval_output(out: torch.Tensor) -> torch.Tensor:
        return out[:, :out.shape[1] // 2]  # mu

    def kl(self) -> torch.Tensor:
        """Mean over nodes of ``KL(N(mu, sigma^2) || N(0, I))``."""
        mu, logstd = self.mu, self.logstd
        return -0.5 * (1 + 2 * logstd - mu.square() - (2 * logstd).exp()).sum(1).mean()

    def loss(self, z: torch.Tensor, edge_index: torch.Tensor, *, kl_nodes: int | None = None,
             **kwargs) -> torch.Tensor:
        """The reconstruction loss plus ``kl() / kl_nodes``: ``N``, the graph's nodes (default: ``z``'s rows, the
        whole graph in full batch; a strategy whose loss sees a subgraph passes the whole graph's ``N``)."""
        return super().loss(z, edge_index, **kwargs) + self.kl() / (z.shape[0] if kl_nodes is None else kl_nodes)
