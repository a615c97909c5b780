"""``gaescale`` command line: a thin layer over :func:`gaescale.train`; flags come from the config schema."""
from __future__ import annotations

import argparse
import dataclasses
import sys

from . import __version__
from .config import TrainConfig, fields_by_group
from .errors import GaescaleError

DEMO_DEFAULTS = dict(hidden="16,16", dim=8, epochs=100, eval_every=5, out="runs/demo")
GROUP_TITLES = {"input": "input", "output": "output", "model": "model", "training": "training and loss",
                "evaluation": "evaluation", "runtime": "runtime"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_config_flags(parser: argparse.ArgumentParser, skip: set[str], defaults: dict) -> None:
    for group, fields in fields_by_group().items():
        g = parser.add_argument_group(GROUP_TITLES[group])
        for f in fields:
            if f.name in skip:
                continue
            default = defaults.get(f.name, f.default)
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            if f.name == "hidden" and default is None:
                shown = "32 for gcn/sage, none for linear"
            help_ = f.metadata["help"] + ("" if f.metadata["rule"] == "bool" else f" (default: {shown})")
            if f.metadata["rule"] == "bool":
                negated = f.metadata.get("flag", "").startswith("--no-")
                g.add_argument(f.metadata.get("flag", _flag(f.name)), dest=f.name,
                               action="store_false" if negated else "store_true", default=argparse.SUPPRESS,
                               help=help_)
                continue
            kw = dict(dest=f.name, default=argparse.SUPPRESS, help=help_, metavar=f.name.upper().split("_")[0])
            if f.metadata["rule"] == "choice":
                kw["metavar"] = "{" + ",".join(c for c in f.metadata["choices"] if c) + "}"
            g.add_argument(_flag(f.name), **kw)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gaescale",
        description="Train graph autoencoders (GCN encoder, inner-product decoder) on large graphs without "
                    "N x N tensors, and write embeddings keyed by your node ids, the model and link-prediction metrics.")
    parser.add_argument("--version", action="version", version=f"gaescale {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser("train", help="train on an edge list", description=(
        "Train on an edge list and write embeddings.npy, nodes.tsv, model.pt, config.json and metrics.json to --out."))
    train.add_argument("edges", help=TrainConfig.__dataclass_fields__["edges"].metadata["help"])
    _add_config_flags(train, {"edges"}, {})

    demo = sub.add_parser("demo", help="train on the built-in 770,000-node community graph", description=(
        "Generate the deterministic default graph (communities, heavy-tailed degrees, 8 features per node) and "
        "train the user's model on it (GCN 8 -> 16 -> 16 -> 8) end to end."))
    demo.add_argument("--nodes", type=int, default=770_000, help="nodes of the generated graph (default: 770000)")
    demo.add_argument("--num-edges", type=int, default=4_600_000, help="undirected edges (default: 4600000)")
    demo.add_argument("--graph-seed", type=int, default=0, help="seed of the generated graph (default: 0)")
    _add_config_flags(demo, {"edges", "features", "ids", "header"}, DEMO_DEFAULTS)
    return parser


def _config(args: argparse.Namespace, defaults: dict) -> TrainConfig:
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {**defaults, **{k: v for k, v in vars(args).items() if k in names}}
    return TrainConfig(**values)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .pipeline import train
    try:
        if args.command == "demo":
            from .synthetic import community_graph
            config = _config(args, DEMO_DEFAULTS)
            if not config.quiet:
                print(f"generating the default graph: {args.nodes:,} nodes, {args.num_edges:,} edges ...",
                      file=sys.stderr, flush=True)
            data = community_graph(args.nodes, args.num_edges, seed=args.graph_seed)
            train(config, data=data)
        else:
            if getattr(args, "out", None) is None:
                parser.error("the following arguments are required: --out")
            train(_config(args, {}))
    except GaescaleError as exc:
        print(f"gaescale: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gaescale: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
