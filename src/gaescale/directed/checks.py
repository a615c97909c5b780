"""What ``directed=True`` supports so far, checked when the configuration is built (before anything is read)."""
from __future__ import annotations

from ..data.weights import refuse_weight_column
from ..errors import ParameterError


def check_directed(config) -> None:
    """Refuse, with ``directed=True``, the options the directed model does not support yet."""
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
