"""One configuration schema: it validates the Python API's arguments and builds the CLI's ``--help``.

Each field carries its help text and its rule; :class:`TrainConfig` checks every value on
construction and raises :class:`gaescale.errors.ParameterError` with one message form.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from .devices import DEVICES
from .errors import ParameterError
from .losses import DENSE_STRATEGIES, LOSS_NAMES, WEIGHTINGS
from .rules import check_directed, check_partitioned, check_value, default_warmup
from .sparse import PRECISIONS

LINEAR_MIN_FEATURES = 64  # encoder auto: the linear encoder from this many features per node on
TABLE_PART_NODES = 1 << 21  # --strategy partitioned: nodes per partition of the learnt table by default
POOL_RATIO = 0.25  # the structural part's two-hop pool per training edge by default (BENCHMARKS.md, issue 31 item 5)


def _model_defaults(encoder: str) -> dict[str, Any]:
    """The model fields a resolved ``encoder`` fills in when they are unset."""
    linear = encoder == "linear"
    return {"hidden": () if linear else (32,), "dim": 64 if linear else 16, "lr": 0.02 if linear else 0.01}


def _opt(default, help: str, rule: str, *, section: str = "training", per_host: bool = False, resumable: bool = False,
         run: bool = False, **extra):
    """A config field. ``rule`` is one of: int>=K, float>0, float[0,1), gib>0 (a size, :func:`gaescale.rules.gib`),
    ints, choice, path, opt-path, bool, int-or-none;
    ``section``: its section of ``--help`` (and of the CLI's subcommands); ``per_host``: it may differ between the
    hosts of a data-parallel run (paths, and what only this process sees); ``resumable``: a run may resume with
    another value (it changes neither the data nor the trajectory of training; the input paths too: the graph's
    fingerprint checks their content); ``run``: where and how this process runs, not what the model is (kept out of
    a run's config.json and never taken from a ``--config`` file)."""
    return field(default=default, metadata=dict(help=help, rule=rule, section=section, per_host=per_host,
                                                resumable=resumable, run=run, **extra))


@dataclass
class TrainConfig:
    """Everything that defines a training run. Field order is the order of ``--help``."""

    edges: str | None = _opt(None, "edge list: CSV/TSV/whitespace text (optionally .gz), .npy (2 x E or E x 2), "
                                   ".npz (edge_index[, x, num_nodes]) or Parquet", "opt-path", section="input",
                             per_host=True, resumable=True)
    features: str | None = _opt(None, "node features: .npy/.npz (row i = node i), or CSV/Parquet whose first column "
                                      "is the node id", "opt-path", section="input", per_host=True, resumable=True)
    out: str | None = _opt(None, "output directory (created; must not be an existing file; one that holds another "
                                 "run is refused unless --overwrite or --resume). 'train' and 'demo' without it: "
                                 "runs/NAME (the edge list's name; 'demo'), or NAME-2, NAME-3, ... where that holds "
                                 "a run", "opt-path", section="output", per_host=True, resumable=True, run=True)
    ids: str = _opt("auto", "node ids in a text/Parquet edge list: integers, strings, or detect", "choice",
                    section="input", choices=("auto", "int", "str"))
    header: str = _opt("auto", "whether a text edge list starts with a header line", "choice", section="input",
                       choices=("auto", "yes", "no"))
    weighted: bool = _opt(False, "a weighted graph: read each edge's weight (the third column of a text or Parquet "
                                 "edge list, 'edge_weight' of an .npz) into the GCN/SAGE normalisation and the loss's "
                                 "edge term (docs/inputs.md)", "bool", section="input")
    weight_column: str | None = _opt(None, "with --weighted, the header name of the weight column of a text or "
                                           "Parquet edge list (default: the third column)", "opt-str",
                                     section="input", optional=True)
    directed: bool = _opt(False, "keep edge direction: (u, v) and (v, u) are two edges; source/target embeddings "
                                 "with the asymmetric decoder z_s_u . z_t_v (--strategy full, one process; see "
                                 "docs/directed.md)", "bool", section="input")
    directed_symmetric: str = _opt("auto", "with --directed, a symmetric part z_u . z_v in the decoder (z_u from the "
                                           "undirected neighbourhood, so that a link also predicts its reversal): on, "
                                           "off (the plain source/target model, best where direction is a strict "
                                           "order, as in a DAG) or auto (on where reciprocated links are at least "
                                           "1 in 10 training edges; docs/directed.md)", "choice", section="model",
                                   choices=("auto", "on", "off"))
    encoder: str = _opt("auto", "encoder: gcn (Kipf & Welling), sage (GraphSAGE, mean aggregator), linear "
                                "(one-hop A_hat X W, no hidden layers), auto (linear for a graph without features or "
                                f"with at least {LINEAR_MIN_FEATURES} per node, unless --hidden is given; else gcn)",
                        "choice", section="model", choices=("auto", "gcn", "sage", "linear"))
    variational: bool = _opt(False, "train a VGAE (Gaussian embeddings, KL term) instead of a GAE", "bool",
                             section="model")
    decoder: str = _opt("bias", "decoder: bias (sigmoid(z_i . z_j + b_i + b_j) with a learned bias per node, so that "
                                "degree need not live in z), inner (sigmoid(z_i . z_j)) or hadamard (an MLP of "
                                "z_i * z_j, 64 hidden units; --dense sampled only; topk cannot rank with it)", "choice",
                        section="model", choices=("bias", "inner", "hadamard"))
    structure: str = _opt("auto", "a learnt structural part w . log(1 + [common neighbours, Adamic-Adar, resource "
                                  "allocation]) of the pair on the training graph, added to the logit (w >= 0; "
                                  "docs/losses.md): on, off, or auto (on for an undirected graph trained full batch, "
                                  "by neighbour sampling or in partitions by one process with the bias or inner "
                                  "decoder)", "choice",
                          section="model", choices=("auto", "on", "off"))
    hard_negatives: float = _opt(0.0, "with the structural part, the weight of a hard-negative term: the mean l0 of "
                                      "the two-hop non-edges among the two-hop pool of full batch (--pool-ratio) "
                                      "(measured to lose: BENCHMARKS.md; 0: none)", "float>=0", section="model",
                                 metavar="W")
    pool_ratio: float | None = _opt(None, "with the structural part trained full batch, the two-hop pairs of the pool "
                                          "that corrects its all-pairs term, per training edge (drawn once; fewer: a "
                                          f"faster epoch, a noisier correction; default: {POOL_RATIO})", "float>0",
                                    section="model", optional=True, metavar="R")
    hidden: tuple | None = _opt(None, "hidden layer widths, comma separated, e.g. 16,16; '' for none (default: none "
                                      "for linear, 32 for gcn and sage)", "ints", section="model")
    dim: int | None = _opt(None, "embedding dimension d, the last layer's width (default: 64 for linear, 16 for gcn "
                                 "and sage)", "int>=1", section="model", optional=True)
    dropout: float = _opt(0.0, "dropout between encoder layers", "float[0,1)", section="model")
    loss: str = _opt("bce", "reconstruction loss kind", "choice", choices=LOSS_NAMES)
    dense: str = _opt("sampled", "how the all-pairs term is computed: sampled (unbiased estimate), exact "
                                 "(streamed blocks, O(N^2 d) time), closed (linear-mse only)", "choice",
                      choices=DENSE_STRATEGIES)
    weighting: str | None = _opt(None, "pair weights: balanced (edges and non-edges weigh the same; default), "
                                       "gae (the GAE paper's pos_weight/norm), none (plain mean over all pairs)",
                                 "choice", choices=WEIGHTINGS + (None,))
    self_loops: bool = _opt(False, "reconstruct A + I: every node counts as linked to itself, as in the GAE "
                                   "paper's target (measured: +1.0 to +1.2 AUC points for GAE on Cora)", "bool")
    strategy: str = _opt("full", "what each step trains on: full (the whole graph), cluster (Cluster-GCN: batches of "
                                 "METIS parts, encoder and loss on the batch's subgraph), fastgae (encoder on "
                                 "the whole graph, loss on a degree-sampled subgraph), neighbor (link mini-batches, "
                                 "encoder on the sampled neighbourhoods of their endpoints), partitioned (a "
                                 "featureless graph: its learnt table on disk, trained two node partitions at a time, "
                                 "PyTorch-BigGraph's buckets), auto (the first of full, fastgae, cluster, neighbor, "
                                 "partitioned whose predicted peak fits --memory-budget; see 'gaescale plan')",
                         "choice", section="scaling",
                         choices=("full", "cluster", "fastgae", "neighbor", "partitioned", "auto"))
    memory_budget: float | None = _opt(None, "memory that --strategy auto, and partitioned's partitions, may plan "
                                             "for, in GiB or with a unit: 22GiB, 22G, 512MiB, 20GB (10^9 bytes) "
                                             "(default: the memory available when training starts)", "gib>0",
                                       section="scaling", optional=True,
                                       metavar="SIZE")
    cluster_parts: int | None = _opt(None, "METIS parts for --strategy cluster (default: one per 1,000 nodes)",
                                     "int>=1", section="scaling", optional=True)
    clusters_per_batch: int | None = _opt(None, "parts per Cluster-GCN step (default: 20)", "int>=1",
                                          section="scaling", optional=True)
    fastgae_nodes: int | None = _opt(None, "nodes of each FastGAE subgraph (default: N/10, at least 1,000)", "int>=2",
                                     section="scaling", optional=True)
    fastgae_alpha: float | None = _opt(None, "FastGAE draws nodes with probability proportional to degree^alpha "
                                             "(default: 1; 0: uniform)", "float>=0", section="scaling", optional=True)
    fanouts: tuple | None = _opt(None, "neighbours sampled per node at each hop for --strategy neighbor, one per "
                                       "encoder layer, e.g. 10,10 (default: 10 per layer)", "ints", section="scaling",
                                 optional=True)
    batch_size: int | None = _opt(None, "training edges per --strategy neighbor step (default: 65,536)", "int>=1",
                                  section="scaling", optional=True)
    table_parts: int | None = _opt(None, "node partitions of the learnt table for --strategy partitioned (two in "
                                         "memory per step; default: the fewest whose step fits --memory-budget, "
                                         "planned from a sample of the graph's edges, else one per 2,097,152 nodes)",
                                   "int>=1",
                                   section="scaling", optional=True)
    table_lr: float | None = _opt(None, "the learnt table's row-wise Adagrad learning rate for --strategy partitioned "
                                        "(default: 0.1)", "float>0", section="scaling", optional=True)
    checkpoint_activations: bool = _opt(False, "keep only each layer's input for backward and recompute the rest "
                                               "(torch.utils.checkpoint): less memory, about one more forward",
                                        "bool", section="scaling")
    precision: str = _opt("fp32", "fp32, or mixed precision: the forward pass under autocast in bf16, or fp16 with "
                                  "a gradient scaler; losses and sparse products accumulate in fp32", "choice",
                          section="scaling", choices=tuple(PRECISIONS))
    neg_ratio: float = _opt(1.0, "sampled node pairs per training edge (dense=sampled)", "float>0")
    epochs: int = _opt(200, "maximum training epochs", "int>=1", resumable=True)
    lr: float | None = _opt(None, "Adam learning rate (default: 0.02 for linear, 0.01 for gcn and sage)", "float>0",
                            optional=True)
    seed: int = _opt(0, "random seed (split, initialisation, sampling)", "int>=0")
    val_fraction: float = _opt(0.05, "fraction of edges held out for validation", "float[0,1)", section="evaluation")
    test_fraction: float = _opt(0.10, "fraction of edges held out for testing", "float[0,1)", section="evaluation")
    eval_every: int = _opt(1, "evaluate validation AUC/AP every this many epochs", "int>=1", section="evaluation")
    patience: int = _opt(20, "stop after this many evaluations without a better validation score (--select; 0: "
                             "never)", "int>=0", section="evaluation")
    select: str = _opt("auto", "what selects the kept weights and counts --patience: auc (validation AUC), mrr "
                               "(the filtered MRR of up to 500 validation edges, each ranked against every node), "
                               "or auto (mrr with the structural part, else auc)", "choice", section="evaluation",
                       choices=("auto", "auc", "mrr"))
    warmup: int | None = _opt(None, "epochs trained before validation may select the kept weights or count against "
                                    "--patience (default: a quarter of --epochs, at most 50): an untrained model's "
                                    "validation AUC is often high, dips, then climbs back", "int>=0",
                              section="evaluation", optional=True)
    checkpoint_every: int = _opt(10, "write a checkpoint (model, optimizer, random states) to OUT/checkpoints every "
                                     "this many epochs and at the end, keeping the last two (0: never)", "int>=0",
                                 section="output", resumable=True)
    resume: bool = _opt(False, "continue from the last checkpoint in OUT/checkpoints (an unreadable one is reported "
                               "and the one before used); refused if the configuration or the graph differ "
                               "(--epochs may grow)", "bool", section="output", resumable=True, run=True)
    overwrite: bool = _opt(False, "replace the run that OUT holds (without it, an OUT that holds another run, "
                                  "finished or with checkpoints, is refused); the old run stays whole until the new "
                                  "one is complete", "bool", section="output", per_host=True, resumable=True, run=True)
    report: bool = _opt(True, "skip the HTML report and plots (OUT/report/) at the end of training", "bool",
                        section="output", flag="--no-report", per_host=True, resumable=True)
    tensorboard: str | None = _opt(None, "write the loss, validation AUC/AP and seconds of every epoch (and the test "
                                         "AUC/AP at the end) as TensorBoard event files to this directory, one run's "
                                         "curves (view them with: tensorboard --logdir DIR); needs pip install "
                                         "'gaescale[tensorboard]'", "opt-path", section="output", per_host=True,
                                   resumable=True, optional=True, metavar="DIR", run=True)
    time_limit: float | None = _opt(None, "stop training after the optimizer step that brings the training time "
                                          "past this many seconds (evaluation excluded)", "float>0", section="runtime",
                                    optional=True, resumable=True, metavar="SECONDS")
    device: str = _opt("auto", "where training runs: cpu, cuda (one GPU per process; under torchrun, the local "
                               "rank's), or auto (cuda when torch sees a GPU)", "choice", section="runtime",
                       choices=DEVICES, per_host=True, resumable=True, run=True)
    threads: int = _opt(0, "CPU threads for torch (0: torch's default)", "int>=0", section="runtime", per_host=True,
                        resumable=True, run=True)
    buffer_cache: bool = _opt(True, "return training's large CPU buffers to the kernel when freed instead of keeping "
                                    "them for the next epoch (gaescale.cpu_cache: a compiled allocator that keeps "
                                    "at most 0.9 of their peak)", "bool", section="runtime",
                              flag="--no-buffer-cache", per_host=True, resumable=True, run=True)
    quiet: bool = _opt(False, "no progress bar or log lines", "bool", section="runtime", per_host=True, resumable=True,
                       run=True)

    def __new__(cls, *args, **kwargs):
        # an unknown option is named, with the nearest known one (the dataclass's __init__: a bare TypeError)
        _refuse_unknown(kwargs, "train")
        return super().__new__(cls)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            setattr(self, f.name, check_value(f, getattr(self, f.name)))
        if self.encoder == "linear" and self.hidden:
            raise ParameterError("hidden", "train", "empty with encoder='linear' (it has no hidden layers)",
                                 ",".join(map(str, self.hidden)))
        if self.resolved:  # encoder auto: the model's defaults wait until the graph is known (for_graph)
            for name, default in _model_defaults(self.encoder).items():
                if getattr(self, name) is None:
                    setattr(self, name, default)
        if self.dense == "closed" and self.loss != "linear-mse":
            raise ParameterError("dense", "train", "'sampled' or 'exact' unless loss='linear-mse'", self.dense)
        owners = {"cluster_parts": "cluster", "clusters_per_batch": "cluster", "fastgae_nodes": "fastgae",
                  "fastgae_alpha": "fastgae", "fanouts": "neighbor", "batch_size": "neighbor",
                  "memory_budget": "partitioned",  # auto's choice, and the partitions of the table (plan.py)
                  "table_parts": "partitioned", "table_lr": "partitioned"}
        for name, strategy in owners.items():  # a flag of another strategy would be silently ignored
            if getattr(self, name) is not None and self.strategy not in (strategy, "auto"):
                raise ParameterError(name, "train", f"left unset unless strategy is '{strategy}' or 'auto'",
                                     getattr(self, name))
        if self.decoder == "hadamard" and self.dense != "sampled":
            raise ParameterError("dense", "train", "'sampled' with decoder='hadamard' (an MLP of z_i * z_j has no "
                                                   "streamed all-pairs form)", self.dense)
        if self.structure == "on" and (self.decoder == "hadamard" or self.directed
                                       or self.strategy not in ("full", "neighbor", "partitioned", "auto")):
            why = ("decoder='hadamard'" if self.decoder == "hadamard" else "directed=True" if self.directed
                   else f"strategy='{self.strategy}'")
            raise ParameterError("structure", "train", "'off' or 'auto' with " + why + " (the structural part needs "
                                 "an undirected graph, a bilinear decoder and full-batch, neighbour-sampled or "
                                 "partitioned training)", self.structure)
        if self.hard_negatives and self.structure == "off":
            raise ParameterError("hard_negatives", "train", "0 with structure='off' (the two-hop negatives train the "
                                                            "structural part)", self.hard_negatives)
        if self.pool_ratio is not None and self.structure == "off":
            raise ParameterError("pool_ratio", "train", "None (unset) with structure='off' (the two-hop pool trains "
                                                        "the structural part)", self.pool_ratio)
        if self.strategy == "neighbor" and self.dense != "sampled":
            raise ParameterError("dense", "train", "'sampled' with strategy='neighbor' (a link mini-batch sees "
                                                   "only its own nodes' embeddings)", self.dense)
        # encoder auto with hidden layers given is a gcn (for_graph), so its depth is known before the graph is
        layers = len(self.layer_dims) if self.resolved else (len(self.hidden) + 1 if self.hidden else None)
        if self.fanouts is not None and layers is not None and len(self.fanouts) != layers:
            raise ParameterError("fanouts", "train", f"one fan-out per encoder layer ({layers} here)",
                                 ",".join(map(str, self.fanouts)))
        if self.loss == "weighted-bce" and self.weighting not in (None, "gae"):
            raise ParameterError("weighting", "train", "'gae' or unset with loss='weighted-bce'", self.weighting)
        if self.strategy == "partitioned":
            check_partitioned(self)
        if self.directed:
            check_directed(self)
        elif self.directed_symmetric != "auto":
            raise ParameterError("directed_symmetric", "train", "'auto' (unset) without directed=True (it shapes the "
                                                                "directed model only)", self.directed_symmetric)

    def for_graph(self, num_features: int | None) -> TrainConfig:
        """This configuration with ``encoder='auto'`` resolved for a graph with ``num_features`` features per node
        (None: featureless), and so with every default filled in. Chosen on validation scores of 6 graphs, checked on 8
        (BENCHMARKS.md, "Default recipe"): the one-hop linear encoder with d = 64 beats the two-layer GCN on
        every featureless graph and on Cora (1,433 features), the GCN wins on the community graph's 8."""
        if self.encoder != "auto":
            return self
        wide = num_features is None or num_features >= LINEAR_MIN_FEATURES
        encoder = "linear" if wide and not self.hidden else "gcn"
        return dataclasses.replace(self, encoder=encoder)

    @property
    def resolved(self) -> bool:
        return self.encoder != "auto"

    @property
    def warmup_epochs(self) -> int:
        """``warmup``, or its default for ``epochs`` (:func:`gaescale.rules.default_warmup`)."""
        return default_warmup(self.epochs) if self.warmup is None else self.warmup

    @property
    def layer_dims(self) -> list[int]:
        if not self.resolved:
            raise ValueError("encoder='auto' is resolved by for_graph(num_features) before the layers are known")
        return list(self.hidden) + [self.dim]

    @property
    def encoder_dims(self) -> list[int]:
        """The encoder's output widths per layer: :attr:`layer_dims`, but a VGAE's last layer outputs ``2 * dim``
        columns (mean and log std)."""
        dims = self.layer_dims
        return dims[:-1] + [2 * dims[-1]] if self.variational else dims

    def strategy_options(self, num_nodes: int) -> dict[str, Any]:
        """The strategy options with their defaults filled in for a graph of ``num_nodes`` nodes: the one
        place those defaults live, read by training and by the planner alike."""
        return dict(cluster_parts=self.cluster_parts or max(1, num_nodes // 1000),
                    clusters_per_batch=self.clusters_per_batch or 20,
                    fastgae_nodes=self.fastgae_nodes or min(num_nodes, max(1000, num_nodes // 10)),
                    fastgae_alpha=1.0 if self.fastgae_alpha is None else self.fastgae_alpha,
                    fanouts=list(self.fanouts or [10] * len(self.layer_dims)) if self.resolved else None,
                    batch_size=self.batch_size or 65_536,
                    table_parts=self.table_parts or max(2, -(-num_nodes // TABLE_PART_NODES)),
                    table_lr=self.table_lr or 0.1)

    def pool_size(self, num_train_edges: int | float) -> int:
        """Pairs of the structural part's two-hop pool in full batch (:class:`gaescale.structure.TwoHop`) for
        ``num_train_edges`` training edges: ``pool_ratio`` (default :data:`POOL_RATIO`) a training edge, at least 1;
        read by training and by the planner alike."""
        return max(1, round((POOL_RATIO if self.pool_ratio is None else self.pool_ratio) * num_train_edges))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden"] = None if self.hidden is None else list(self.hidden)
        return d

    def model_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` less where and how this process runs (``out``, ``resume``, ``overwrite``, ``tensorboard``,
        ``device``, ``threads``, ``quiet``): what a run's config.json holds, reusable with ``--config``."""
        return {k: v for k, v in self.to_dict().items() if k not in RUN_SETTINGS}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def with_options(self, **options) -> TrainConfig:
        """This configuration with ``options`` changed (``train(config, lr=0.05)``). A resolved configuration
        (e.g. a run's ``config.json``) holds the model defaults its encoder filled in (``hidden``, ``dim``,
        ``lr``); when ``options`` change the encoder, those still equal to the old encoder's defaults are filled
        in anew for the new one unless ``options`` give them (a GCN's 32 hidden units do not carry over to
        ``encoder='linear'``, which has none); other values were chosen, and are kept."""
        _refuse_unknown(options, "train")
        return TrainConfig(**_merged(self.to_dict(), options))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        _refuse_unknown(d, "TrainConfig")
        return cls(**d)

    @classmethod
    def from_file(cls, path, log=None, **overrides) -> TrainConfig:
        """A config from a JSON file (e.g. a run's ``config.json``); ``overrides`` take precedence. JSON only:
        a config file is data, never code. Where and how to run (``out``, ``resume``, ...: :data:`RUN_SETTINGS`)
        is never taken from the file (an older run's config.json holds them): ``log`` is told which were left."""
        from pathlib import Path

        from .errors import InputFileError
        p = Path(path)
        if not p.is_file():
            raise InputFileError(p, "no such file." if not p.exists() else "is a directory, expected a file.")
        try:
            d = json.loads(p.read_text())
        except json.JSONDecodeError as exc:
            raise InputFileError(p, f"not valid JSON: {exc.msg} (column {exc.colno}).", line=exc.lineno) from None
        except UnicodeDecodeError:
            raise InputFileError(p, "not valid JSON: the file is not UTF-8 text.") from None
        if not isinstance(d, dict):
            raise InputFileError(p, f"expected a JSON object of config fields. Got {type(d).__name__}.")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InputFileError(p, "unknown config field; 'gaescale train --help' lists the fields (as flags).",
                                 field=unknown[0])
        # where and how a run runs is this command's own (an old config.json holds 'out': never retrain into it)
        left = sorted(k for k in d if k in RUN_SETTINGS and d[k] != cls.__dataclass_fields__[k].default)
        if left and log is not None:
            log(f"{p}: not taken from the file: {', '.join(left)} (where and how to run are this command's own flags)")
        d = {k: v for k, v in d.items() if k not in RUN_SETTINGS}
        return cls(**_merged(d, overrides))


def _refuse_unknown(options: dict[str, Any], owner: str) -> None:
    """A :class:`ParameterError` naming the first option that is not a :class:`TrainConfig` field, with the
    nearest field's name when one is close."""
    known = [f.name for f in dataclasses.fields(TrainConfig)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else "the fields of gaescale.TrainConfig"
        raise ParameterError(name, owner, f"a known option ({hint})", options[name])


def _merged(base: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """``{**base, **options}`` for :meth:`TrainConfig.with_options` (see there), with the model defaults of
    ``base``'s resolved encoder unset when ``options`` change the encoder and do not give them."""
    merged = {**base, **options}
    old, new = base.get("encoder", "auto"), options.get("encoder", base.get("encoder", "auto"))
    if old != new and old != "auto":
        fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
        for name, default in _model_defaults(old).items():
            if name in options or base.get(name) is None:
                continue
            try:
                value = check_value(fields[name], base[name])
            except ParameterError:  # an invalid value: refused by the constructor as given
                continue
            if value == default:
                merged[name] = None
    return merged


def fields_by_section() -> dict[str, list[dataclasses.Field]]:
    sections: dict[str, list[dataclasses.Field]] = {}
    for f in dataclasses.fields(TrainConfig):
        sections.setdefault(f.metadata["section"], []).append(f)
    return sections


def tagged(tag: str) -> frozenset[str]:
    """The names of the fields whose metadata sets ``tag`` (``per_host``, ``resumable``: see :func:`_opt`)."""
    return frozenset(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get(tag))


RUN_SETTINGS = tagged("run")  # where and how a process runs: never in config.json, never from --config
