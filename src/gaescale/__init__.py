"""gaescale: graph autoencoders on graphs with millions of nodes, without N x N tensors."""
__version__ = "0.1.0"

from .config import TrainConfig  # noqa: E402
from .encoders import GCN, SAGE, linear_encoder  # noqa: E402
from .errors import GaescaleError, GraphError, InputFileError, OutputError, ParameterError  # noqa: E402
from .features import attach_features  # noqa: E402
from .graph import Graph  # noqa: E402
from .io import EdgeList, read_edges  # noqa: E402
from .losses import reconstruction_loss  # noqa: E402
from .models import GAE, VGAE  # noqa: E402
from .pipeline import RunResult, train  # noqa: E402
from .split import EdgeSplit, split_edges  # noqa: E402
from .synthetic import community_graph  # noqa: E402

__all__ = ["TrainConfig", "GCN", "SAGE", "linear_encoder", "GAE", "VGAE", "Graph", "EdgeList", "EdgeSplit", "RunResult", "GaescaleError", "GraphError",
           "InputFileError", "OutputError", "ParameterError", "attach_features", "community_graph", "read_edges",
           "reconstruction_loss", "split_edges", "train"]
