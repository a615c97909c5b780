"""Where training runs: ``--device cpu``, ``cuda`` or ``auto`` (CUDA when torch sees a GPU).

The graph stays in host memory (a memory-mapped CSR, subgraphs cut by NumPy); what a step multiplies
goes to the device: the model, the features, each sparse operator (kept there once moved) and each
batch's pairs. Random draws come from the trainer's CPU generator, so a run draws the same batches on
any device.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import torch

from .errors import ParameterError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str, environ: Mapping[str, str] | None = None) -> torch.device:
    """The device ``name`` names on this machine: ``cuda`` (or ``auto`` with a GPU) is ``cuda:LOCAL_RANK``
    for a process of torchrun (one GPU per process), else ``cuda:0``; ``auto`` without a GPU is the CPU.
    Raises :class:`ParameterError` for ``cuda`` where torch sees no GPU."""
    if name not in DEVICES:
        raise ParameterError("device", "train", f"one of {list(DEVICES)}", name)
    has_cuda = torch.cuda.is_available()
    if name == "cpu" or (name == "auto" and not has_cuda):
        return torch.device("cpu")
    if not has_cuda:
        raise ParameterError("device", "train", "'cpu' or 'auto' on a machine where torch sees no GPU "
                             f"(torch {torch.__version__}, built {'with' if torch.version.cuda else 'without'} "
                             "CUDA)", name)
    environ = os.environ if environ is None else environ
    index = int(environ.get("LOCAL_RANK", "0"))
    if index >= torch.cuda.device_count():
        raise ParameterError("device", "train", f"one GPU per process: local rank {index} needs at least "
                             f"{index + 1} GPUs, torch sees {torch.cuda.device_count()}; lower --nproc-per-node",
                             name)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def index_on(indices: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """Node ``indices`` (drawn or cut on the host) as an index tensor on the device of the tensor ``like``
    whose rows they select."""
    return torch.from_numpy(np.ascontiguousarray(indices)).to(like.device)
