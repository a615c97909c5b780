"""``gaescale`` command line: a thin layer over :func:`gaescale.train`; flags come from the config schema."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from . import logs
from ._version import __version__
from .config import TrainConfig, fields_by_section
from .data.order import METHODS
from .errors import GaescaleError, ParameterError

DEMO_DEFAULTS = dict(hidden="16,16", dim=8, epochs=100, eval_every=5, out="runs/demo")
SECTION_TITLES = {"input": "input", "output": "output", "model": "model", "training": "training and loss",
                "scaling": "scaling: mini-batch strategies and memory", "evaluation": "evaluation",
                "runtime": "runtime"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _metavar(f) -> str:
    """A config field's metavar: its own (``--memory-budget SIZE``), else a whole word for its value: the name of a
    one-word field (``--epochs EPOCHS``), N for a count (``--checkpoint-every N``), else the name's last word
    (``--val-fraction FRACTION``)."""
    if "metavar" in f.metadata:
        return f.metadata["metavar"]
    words = f.name.upper().split("_")
    return words[0] if len(words) == 1 else "N" if f.metadata["rule"].startswith("int") else words[-1]


def _alias(parser, old: str, dest: str, **kw) -> None:
    """``old``, a former spelling of the option ``dest``, still read but left out of ``--help``."""
    parser.add_argument(old, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kw)


def _add_config_flags(parser: argparse.ArgumentParser, skip: set[str], defaults: dict) -> None:
    for section, fields in fields_by_section().items():
        g = parser.add_argument_group(SECTION_TITLES[section])
        for f in fields:
            if f.name in skip:
                continue
            default = defaults.get(f.name, f.default)
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            if f.name == "hidden" and default is None:
                shown = "32 for gcn/sage, none for linear"
            quiet_default = f.metadata["rule"] == "bool" or (default is None and f.metadata.get("optional"))
            help_ = f.metadata["help"] + ("" if quiet_default else f" (default: {shown})")
            if f.metadata["rule"] == "bool":
                negated = f.metadata.get("flag", "").startswith("--no-")
                g.add_argument(f.metadata.get("flag", _flag(f.name)), dest=f.name,
                               action="store_false" if negated else "store_true", default=argparse.SUPPRESS,
                               help=help_)
                continue
            kw = dict(dest=f.name, default=argparse.SUPPRESS, help=help_, metavar=_metavar(f))
            if f.metadata["rule"] == "choice":
                kw["metavar"] = "{" + ",".join(c for c in f.metadata["choices"] if c) + "}"
            g.add_argument(_flag(f.name), **kw)


def _add_tune(sub) -> None:
    tune = sub.add_parser("tune", help="search the training options on the validation split (Optuna)", description=(
        "Train many configurations on one split of EDGES (Optuna's TPE sampler, median pruning on validation AUC) "
        "and write the best as --out/best.json (for 'gaescale train --config'), with study.db (an interrupted "
        "search resumes), trials.csv and report.html. Options given here are fixed, not searched; the test split "
        "is never scored. Searched: encoder, hidden, dim, lr, decoder, loss, self-loops, neg-ratio."))
    tune.add_argument("edges", help=TrainConfig.__dataclass_fields__["edges"].metadata["help"])
    tune.add_argument("--trials", default="20", help="finished trials in all, earlier sessions' included (default: 20)")
    tune.add_argument("--time-budget", default=None, help="stop starting trials after this many seconds")
    _add_config_flags(tune, {"edges", "resume", "report", "checkpoint_every", "time_limit", "tensorboard"}, {})


def _add_run_commands(sub) -> None:
    """The commands that use a finished run's model or embeddings: topk, index, score, embed."""
    topk = sub.add_parser("topk", help="the k most likely new links of each node", description=(
        "The k nodes of largest score with each node (or with each of --node-ids): the run's logit (z_u . z_v, plus "
        "the biases and the structural part where the run has them; z_s_u . z_t_v, u's out-links, for a directed "
        "run), exactly and never forming N x N; the table is keyed by the original ids: node, rank, candidate, "
        "score (the logit), probability."))
    topk.add_argument("run", help="a run directory (the --out of 'gaescale train')")
    topk.add_argument("--k", default=10, help="links per node (default: 10)")
    topk.add_argument("--node-ids", nargs="+", metavar="ID", help="only these nodes (original ids)")
    _alias(topk, "--nodes", "node_ids", nargs="+", metavar="ID")
    topk.add_argument("--exclude-existing", action="store_true", help="leave out the graph's existing edges")
    topk.add_argument("--out", required=True, help="output table: .tsv, .csv or .parquet")
    topk.add_argument("--index", help="search this file of 'gaescale index' instead of the exact scan (approximate)")
    index = sub.add_parser("index", help="an approximate-nearest-neighbour index for 'topk --index'", description=(
        "Build a FAISS index of the run's embeddings (inner-product HNSW, or IVF; the parameters are chosen from "
        "N and d) for 'gaescale topk RUN --index FILE', and write it atomically to --out with the run's "
        "fingerprint: a retrained run or another run's index is refused."))
    index.add_argument("run", help="a run directory (the --out of 'gaescale train')")
    index.add_argument("--out", required=True, help="the index file to write")
    index.add_argument("--kind", default="auto", help="ivf, hnsw or auto (= ivf: built in seconds, the better recall "
                                                      "measured; default: auto)")

    score = sub.add_parser("score", help="probabilities of given node pairs", description=(
        "Score id pairs (two columns; comma, tab or whitespace separated; optional header) with the run's own "
        "decoder: the logit s_uv is z_u . z_v (--decoder inner), z_u . z_v + b_u + b_v (bias), the trained MLP of "
        "z_u * z_v (hadamard), or for a directed run z_s_u . z_t_v (u the source; with the biases and the symmetric "
        "part where the run has them), plus the structural part where the run has it; the probability is "
        "sigmoid(s_uv). Writes source, target, score (the logit), probability as TSV to --out or to stdout."))
    score.add_argument("run", help="a run directory (the --out of 'gaescale train')")
    score.add_argument("pairs", help="a file of id pairs, or - for stdin")
    score.add_argument("--out", help="output table: .tsv, .csv or .parquet (default: TSV on stdout)")

    emb = sub.add_parser("embed", help="embeddings of a new graph's nodes with a run's trained encoder", description=(
        "Embed every node of EDGES (old and new ids) with the trained encoder of RUN, without retraining (layer "
        "by layer for a prepared directory); the run must have been trained with --features. Writes FILE.npy "
        "(+ FILE.nodes.tsv, the ids, and FILE.bias.npy with the bias decoder), or a .tsv/.csv/.parquet table: id, "
        "z0 ... z{d-1} [, bias]."))
    emb.add_argument("run", help="a run directory (the --out of 'gaescale train')")
    emb.add_argument("edges", help=TrainConfig.__dataclass_fields__["edges"].metadata["help"] +
                     ", or a directory of 'gaescale prepare'")
    emb.add_argument("--features", help="node features of EDGES, as 'train --features' reads them (as many per "
                                        "node as the run was trained with)")
    emb.add_argument("--out", required=True, help="output file: .npy, .tsv, .csv or .parquet")
    emb.add_argument("--block", default="auto", help="rows per block of layer-wise inference, or 0 for one forward "
                                                     "pass (default: auto: layer by layer, 65536 rows; one pass for a "
                                                     "directed run)")
    for name in ("ids", "header"):
        f = TrainConfig.__dataclass_fields__[name]
        emb.add_argument(_flag(name), default=None, choices=f.metadata["choices"],
                         help=f.metadata["help"] + " (default: the run's own setting)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gaescale",
        description="Train graph autoencoders (GCN encoder, inner-product decoder) on large graphs without "
                    "N x N tensors, and write embeddings keyed by your node ids, the model and link-prediction "
                    "metrics.")
    parser.add_argument("--version", action="version", version=f"gaescale {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser("train", help="train on an edge list", description=(
        "Train on an edge list (or a directory of 'gaescale prepare') and write embeddings.npy, nodes.tsv, "
        "model.pt, config.json and metrics.json to --out. Started by torchrun (e.g. 'torchrun --nproc-per-node 2 "
        "-m gaescale train ...'), it trains on every process with DistributedDataParallel."))
    train.add_argument("edges", nargs="?", help=TrainConfig.__dataclass_fields__["edges"].metadata["help"] +
                       " (may come from --config instead)")
    train.add_argument("--config", help="a JSON file of config fields, e.g. a run's config.json; flags given "
                                        "on the command line take precedence")
    _add_config_flags(train, {"edges"}, {})

    _add_tune(sub)

    demo = sub.add_parser("demo", help="train on the built-in 770,000-node community graph", description=(
        "Generate the deterministic default graph (communities, heavy-tailed degrees, 8 features per node) and "
        "train the user's model on it (GCN 8 -> 16 -> 16 -> 8) end to end."))
    demo.add_argument("--num-nodes", type=int, default=770_000, help="nodes of the generated graph (default: 770000)")
    _alias(demo, "--nodes", "num_nodes", type=int)
    demo.add_argument("--num-edges", type=int, default=None,
                      help="undirected edges (default: as many per node as the built-in graph's 4,600,000 for 770,000 "
                           "nodes, about 6)")
    demo.add_argument("--graph-seed", type=int, default=0, help="seed of the generated graph (default: 0)")
    _add_config_flags(demo, {"edges", "features", "ids", "header", "weighted", "weight_column"}, DEMO_DEFAULTS)
    _add_run_commands(sub)

    report = sub.add_parser("report", help="plots and an HTML report of a run", description=(
        "Write PNG plots and one self-contained report.html (loss and validation curves, score histograms, "
        "AUC by degree, a PCA of the embeddings) to RUN/report/ or --out."))
    report.add_argument("run", help="a run directory (the --out of 'gaescale train')")
    report.add_argument("--out", help="output directory (default: RUN/report)")

    prep = sub.add_parser("prepare", help="convert an edge list into a memory-mapped graph directory", description=(
        "Convert an edge list, chunk by chunk (memory bounded by --chunk, not by the file), into DIR: the "
        "undirected graph as a CSR (indptr.npy, indices.npy), its ids (nodes.tsv) and features (x.npy). "
        "'gaescale train DIR' then trains from it memory-mapped."))
    prep.add_argument("edges", help=TrainConfig.__dataclass_fields__["edges"].metadata["help"])
    prep.add_argument("--out", required=True, help="the directory to create (must not exist)")
    for name in ("ids", "header", "features"):
        f = TrainConfig.__dataclass_fields__[name]
        prep.add_argument(_flag(name), default=f.default, help=f.metadata["help"],
                          **({"choices": f.metadata["choices"]} if f.metadata["rule"] == "choice" else {}))
    prep.add_argument("--chunk", default=str(1 << 24), help="edge rows per chunk and entries per bucket; memory "
                                                            "is about 40 bytes per entry plus O(N) (default: 16777216)")
    prep.add_argument("--order", choices=METHODS, default=None, help="number the nodes so that neighbours lie close "
                      "in memory (faster sparse products; nodes.tsv lists the ids in that order): community (label "
                      "propagation, 16 bytes per edge entry while it runs), metis, bfs, rcm or degree (default: by id)")

    plan = sub.add_parser("plan", help="predicted peak memory and work per epoch of each strategy", description=(
        "For a graph (an edge list, or --num-nodes and --num-edges) and the model flags of 'train', print each "
        "strategy's predicted peak memory of training and its work per epoch, the dense N x N matrix for "
        "reference, and what --strategy auto would choose under --memory-budget (default: available memory, on a "
        "GPU --device at most its free memory, as 'train' plans)."))
    plan.add_argument("graph", nargs="?", help="an edge list to size (read and cleaned once) or a prepared directory, "
                                               "instead of --num-nodes and --num-edges")
    plan.add_argument("--num-nodes", help="number of nodes")
    plan.add_argument("--num-edges", help="number of undirected edges")
    _alias(plan, "--nodes", "num_nodes")
    _alias(plan, "--edges", "num_edges")
    plan.add_argument("--num-features", default="0", help="features per node (default: 0, featureless)")
    _add_config_flags(plan, {f.name for g in ("input", "output", "runtime") for f in fields_by_section()[g]},
                      {"strategy": "auto"})
    device = TrainConfig.__dataclass_fields__["device"]
    plan.add_argument("--device", dest="device", default=argparse.SUPPRESS, choices=device.metadata["choices"],
                      metavar="{" + ",".join(device.metadata["choices"]) + "}",
                      help="where training would run: a GPU's free memory caps the budget as in 'train' (cpu, cuda, "
                           "or auto: cuda when torch sees a GPU; default: auto)")
    return parser


def _int_arg(value: str, name: str, owner: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ParameterError(name, owner, "an int >= 1", value) from None


def _float_arg(value: str, name: str, owner: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ParameterError(name, owner, "a number > 0", value) from None


def _config(args: argparse.Namespace, defaults: dict) -> TrainConfig:
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if getattr(args, "config", None):
        return TrainConfig.from_file(args.config, log=_log, **given)
    return TrainConfig(**{**defaults, **given})


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .parallel.runtime import Local
    runtime = Local()
    config = None  # the run's, once built: an interrupted run was checkpointed only with checkpoint_every > 0
    try:
        if args.command in ("train", "demo"):  # started by torchrun: join its process group, once
            from .parallel.runtime import resolve
            from .run.pipeline import train
            runtime = resolve()
            config, data = _training(args, parser, runtime)
            train(config, data=data, runtime=runtime)
        else:
            _command(args, parser)
    except GaescaleError as exc:
        where = "" if runtime.world_size == 1 else f" (rank {runtime.rank})"
        print(f"gaescale: error{where}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`gaescale plan ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        hint = ""
        if args.command in ("train", "demo") and config is not None and config.checkpoint_every:
            hint = "; run the same command with --resume to continue from the last checkpoint"
        if args.command == "tune":
            hint = "; run the same command again to resume the search (OUT/study.db)"
        print(f"gaescale: interrupted{hint}", file=sys.stderr)
        return 130
    finally:
        runtime.shutdown()
    return 0


def demo_edges(num_nodes) -> int | None:
    """The demo's default edge count for ``num_nodes``: the built-in graph's degree (4,600,000 edges for 770,000
    nodes), so that a smaller demo is a smaller graph of the same kind, not a denser one."""
    return round(num_nodes * 4_600_000 / 770_000) if isinstance(num_nodes, int) else None


def _training(args: argparse.Namespace, parser: argparse.ArgumentParser, runtime):
    """``(config, data)`` of ``train`` or ``demo`` (data: a function that generates ``demo``'s graph when the run
    reads it, so that only the run holds its edges; else None)."""
    if args.command == "demo":
        from .data.synthetic import community_graph
        config = _config(args, DEMO_DEFAULTS)
        config = config.with_options(out=_default_out(args, config, Path(DEMO_DEFAULTS["out"])))
        num_edges = args.num_edges if args.num_edges is not None else demo_edges(args.num_nodes)

        def generate():
            if not config.quiet and runtime.is_main:
                _log(f"generating the default graph: {args.num_nodes:,} nodes, {num_edges:,} edges ...")
            return community_graph(args.num_nodes, num_edges, seed=args.graph_seed)
        return config, generate
    config = _config(args, {})
    if config.edges is None:
        parser.error("the following arguments are required: EDGES")
    return config.with_options(out=_default_out(args, config, Path("runs") / Path(config.edges).stem)), None


def _command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Every command but ``train`` and ``demo``: a search, or what reads a run, a graph or an edge list."""
    if args.command == "tune":
        from .run.tune import tune
        try:
            config = _config(args, {})
        except ParameterError as exc:  # the options are train's, the command tune
            raise exc.of("tune") from None
        if config.out is None:
            parser.error("the following arguments are required: --out")
        names = {f.name for f in dataclasses.fields(TrainConfig)}
        given = {k for k, v in vars(args).items() if k in names and v is not None}
        tune(config, trials=_int_arg(args.trials, "trials", "tune"),
             time_budget=None if args.time_budget is None else _float_arg(args.time_budget, "time_budget", "tune"),
             given=given, log=_log)
    elif args.command == "topk":
        from .run.predict import topk_links
        topk_links(args.run, _int_arg(args.k, "k", "topk"), nodes=args.node_ids,
                   exclude_existing=args.exclude_existing, out=args.out, log=_log, index=args.index)
    elif args.command == "index":
        from .run.index import build_index
        build_index(args.run, args.out, kind=args.kind, log=_log)
    elif args.command == "score":
        from .run.predict import score_pairs
        table = score_pairs(args.run, args.pairs, out=args.out)
        if args.out is None:
            _print_table(table)
    elif args.command == "prepare":
        from .data.prepare import prepare
        prepare(args.edges, args.out, ids=args.ids, header=args.header, features=args.features,
                chunk=_int_arg(args.chunk, "chunk", "prepare"), order=args.order, log=_log)
        _log(f"wrote {args.out}/; train with: gaescale train {args.out} --out RUN")
    elif args.command == "plan":
        from .run.plan import plan_command
        config = _config(args, {"strategy": "auto"})
        print(plan_command(config, args.graph, args.num_nodes, args.num_edges, args.num_features, log=_log))
    elif args.command == "embed":
        from .run.embed import embed
        block = args.block if args.block == "auto" else _int_arg(args.block, "block", "embed") or None
        embed(args.run, args.edges, args.features, out=args.out, ids=args.ids, header=args.header, block=block,
              log=_log)
    elif args.command == "report":
        from .run.report import write_report
        _log(f"wrote {write_report(args.run, args.out, log=_log)}")


def _default_out(args: argparse.Namespace, config: TrainConfig, base: Path) -> str:
    """``--out`` as given (never from a ``--config`` file: see TrainConfig.from_file); without it ``base``, or where
    ``base`` holds a run already the first of ``base-2``, ``base-3``, ... that does not (with ``--resume`` or
    ``--overwrite``: ``base`` itself), so that the same command run twice keeps both runs."""
    if "out" in vars(args):
        return config.out
    if config.resume or config.overwrite:
        return str(base)
    k, out = 1, base
    while out.exists() and (not out.is_dir() or any(out.iterdir())):
        k += 1
        out = base.with_name(f"{base.name}-{k}")
    return str(out)


def _log(msg: str) -> None:
    logs.info(msg)


def _print_table(table: dict) -> None:
    cols = list(table)
    out = sys.stdout
    out.write("\t".join(cols) + "\n")
    for row in zip(*(table[c] for c in cols)):
        out.write("\t".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row) + "\n")


if __name__ == "__main__":
    sys.exit(main())
