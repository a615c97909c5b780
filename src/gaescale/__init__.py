"""gaescale: graph autoencoders on graphs with millions of nodes, without N x N tensors."""
from ._allocator import large_buffers_mapped as _large_buffers_mapped
from ._allocator import one_arena as _one_arena
from ._allocator import prefer_huge_pages as _prefer_huge_pages

_prefer_huge_pages()  # before torch is imported: it reads the setting once (gaescale._allocator)
_one_arena()  # every thread's allocations from glibc's main heap (gaescale._allocator)
_large_buffers_mapped()  # buffers of 4 MiB and more mapped on their own, returned whole when freed (the same)

from ._moved import install as _install_moved  # noqa: E402
from ._version import __version__  # noqa: E402, F401  (re-exported: gaescale.__version__)

_install_moved()  # the old import paths of the modules now in sub-packages (see gaescale._moved)

from .config import TrainConfig  # noqa: E402
from .data.features import attach_features  # noqa: E402
from .data.readers import EdgeList, read_edges  # noqa: E402
from .data.split import EdgeSplit, split_edges  # noqa: E402
from .data.synthetic import community_graph  # noqa: E402
from .encoders import GCN, SAGE, linear_encoder  # noqa: E402
from .errors import GaescaleError, GraphError, InputFileError, OutputError, ParameterError  # noqa: E402
from .graph import Graph  # noqa: E402
from .losses import reconstruction_loss  # noqa: E402
from .models import GAE, VGAE  # noqa: E402
from .pyg import from_pyg  # noqa: E402
from .run.finished import Run, to_pyg  # noqa: E402
from .run.pipeline import train  # noqa: E402
from .run.result import RunResult  # noqa: E402

__all__ = ["TrainConfig", "GCN", "SAGE", "linear_encoder", "GAE", "VGAE", "Graph", "EdgeList", "EdgeSplit", "RunResult",
           "Run", "GaescaleError", "GraphError", "InputFileError", "OutputError", "ParameterError", "attach_features",
           "community_graph", "from_pyg", "read_edges", "reconstruction_loss", "split_edges", "to_pyg", "train"]
