"""The rules of the configuration schema's fields (:mod:`gaescale.config`): each value checked and converted, a bad
one a :class:`gaescale.errors.ParameterError` of one form; sizes of memory as people type them (``22GiB``); the
defaults that depend on another field (the warm-up); and the options that refuse one another (``--weight-column``
without ``--weighted``, what ``--directed`` does not support yet)."""
from __future__ import annotations

import dataclasses
import math
import re

from .errors import ParameterError

# A size's unit (case-insensitive): the IEC binary units and their one-letter forms (as free, Java and Docker read
# them) are powers of 1024, the SI units with a B (KB, MB, GB, TB) powers of 1000; a bare number is GiB.
SIZE_UNITS = {"": 2**30, "b": 1, "k": 2**10, "kib": 2**10, "kb": 10**3, "m": 2**20, "mib": 2**20, "mb": 10**6,
              "g": 2**30, "gib": 2**30, "gb": 10**9, "t": 2**40, "tib": 2**40, "tb": 10**12}
SIZE_EXPECTED = "a size > 0: GiB, or a number with a unit (e.g. 22GiB, 22G, 20GB, 512MiB)"
_SIZE = re.compile(r"(\+?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)")


def gib(value, name: str, owner: str) -> float:
    """A memory size in GiB: a number (GiB) or a string with a unit of :data:`SIZE_UNITS` (``'22GiB'``, ``'22G'``,
    ``'20GB'``, ``'512MiB'``, ``'2.5 GiB'``; a bare ``'22'`` is GiB too); finite and > 0, else a
    :class:`ParameterError` of ``owner`` naming ``name``."""
    if isinstance(value, str):
        m = _SIZE.fullmatch(value.strip())
        unit = m and SIZE_UNITS.get(m.group(2).lower())
        size = float(m.group(1)) * unit / 2**30 if unit else None
    else:
        try:
            size = float(value)
        except (TypeError, ValueError, OverflowError):
            size = None
    if size is None or not (size > 0 and math.isfinite(size)):
        raise ParameterError(name, owner, SIZE_EXPECTED, value)
    return size


def check_value(f: dataclasses.Field, value):
    """``value`` checked against the rule of the field ``f`` and converted (``'16,16'`` to ``(16, 16)``, ``'22GiB'``
    to ``22.0``); a :class:`ParameterError` of ``train`` names the field otherwise."""
    rule, name = f.metadata["rule"], f.name
    if value is None and f.metadata.get("optional"):
        return None
    bad = lambda expected: ParameterError(name, "train", expected, value)  # noqa: E731
    if rule == "bool":
        if isinstance(value, bool):
            return value
        raise bad("a bool")
    if rule == "opt-str":
        if isinstance(value, str) and value:
            return value
        raise bad("a non-empty string or None")
    if rule in ("path", "opt-path"):
        if value is None and rule == "opt-path":
            return None
        if isinstance(value, str) and value:
            return value
        if hasattr(value, "__fspath__"):
            return str(value)
        raise bad("a non-empty path")
    if rule == "choice":
        if value in f.metadata["choices"]:
            return value
        raise bad(f"one of {[c for c in f.metadata['choices'] if c is not None]}")
    if rule == "ints":
        if value is None:
            return None
        try:
            items = ([int(p) for p in value.split(",")] if value.strip() else []) if isinstance(value, str) \
                else [int(p) for p in value]
            if all(i >= 1 for i in items) and (isinstance(value, str) or all(float(p) == int(p) for p in value)):
                return tuple(items)
        except (TypeError, ValueError):
            pass
        raise bad("a comma-separated list of ints >= 1 (e.g. '16,16')")
    if rule.startswith("int"):
        low = int(rule.split(">=")[1])
        try:
            if not isinstance(value, bool) and float(value) == int(value) and int(value) >= low:
                return int(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400 (inf) has no int
            pass
        raise bad(f"an int >= {low}")
    if rule == "gib>0":
        return gib(value, name, "train")
    if rule.startswith("float"):
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise bad("a float") from None
        ok = v > 0 if rule == "float>0" else v >= 0 if rule == "float>=0" else 0.0 <= v < 1.0
        if ok and v == v and v != float("inf"):
            return v
        raise bad({"float>0": "a float > 0", "float>=0": "a float >= 0"}.get(rule, "a float in [0, 1)"))
    raise AssertionError(f"unknown rule {rule}")  # a bug in this module, not user input


def default_warmup(epochs: int) -> int:
    """The warm-up of a run of ``epochs`` epochs when none is given: a quarter of them, at most 50."""
    return min(epochs // 4, 50)


def refuse_weight_column(config) -> None:
    """Refuse ``--weight-column`` without ``--weighted`` (it would be ignored); the undirected run checks it before
    reading (:func:`gaescale.data.weights.refuse_unsupported`), the directed one when its configuration is built."""
    if config.weight_column is not None and not config.weighted:
        raise ParameterError("weight_column", "train", "used with weighted=True (--weighted)", config.weight_column)


def partitioned_refusals(config) -> list[tuple[str, str, object]]:
    """``(name, what it must be, what it is)`` of each option of ``config`` that ``strategy='partitioned'``'s table on
    disk cannot train with yet (a graph with features is refused once it is read)."""
    refusals = [("features", config.features is not None, "None (--strategy partitioned learns a featureless "
                 "graph's input table; with features, use another strategy)", config.features),
                ("encoder", config.encoder == "sage", "'auto', 'gcn' or 'linear' with strategy='partitioned' (the "
                 "table is a GCN's first layer)", config.encoder),
                ("dense", config.dense != "sampled", "'sampled' with strategy='partitioned' (a bucket sees only its "
                 "partitions' rows)", config.dense),
                ("precision", config.precision == "fp16", "'fp32' or 'bf16' with strategy='partitioned' (the table's "
                 "row-wise Adagrad reads unscaled gradients)", config.precision),
                ("resume", config.resume, "False with strategy='partitioned' (its table trains in place on disk, so a "
                 "checkpoint's model and the table's rows would not match; not yet)", config.resume)]
    return [(name, expected, got) for name, refused, expected, got in refusals if refused]


def check_partitioned(config) -> None:
    """Refuse, with ``strategy='partitioned'``, the first of :func:`partitioned_refusals`."""
    for name, expected, got in partitioned_refusals(config)[:1]:
        raise ParameterError(name, "train", expected, got)


def check_directed(config) -> None:
    """Refuse, with ``directed=True``, the options the directed model (:mod:`gaescale.directed`) does not support
    yet, when the configuration is built (before anything is read)."""
    if config.strategy != "full":
        raise ParameterError("strategy", "train", "'full' with directed=True (the other strategies do not support "
                                                  "directed graphs yet)", config.strategy)
    if config.variational:
        raise ParameterError("variational", "train", "False with directed=True (a directed VGAE is not supported "
                                                     "yet)", True)
    if config.encoder == "sage":
        raise ParameterError("encoder", "train", "'auto', 'gcn' or 'linear' with directed=True (the source/target "
                                                 "encoder; GraphSAGE does not support directed graphs yet)", "sage")
    if config.decoder == "hadamard":
        raise ParameterError("decoder", "train", "'bias' or 'inner' with directed=True (the source/target decoder; "
                                                 "the Hadamard MLP does not support directed graphs yet)", "hadamard")
    if config.checkpoint_activations:
        raise ParameterError("checkpoint_activations", "train", "False with directed=True (the source/target encoder "
                                                                "does not recompute its layers in backward yet)", True)
    if config.select == "mrr":
        raise ParameterError("select", "train", "'auto' or 'auc' with directed=True (the validation ranking is an "
                                                "undirected graph's yet)", "mrr")
    refuse_weight_column(config)  # --weight-column without --weighted: refused, not ignored, as undirected
