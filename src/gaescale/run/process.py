"""What a library call owes the process it runs in: :func:`process_state_kept` around :func:`gaescale.train`."""
from __future__ import annotations

import contextlib
import random

import numpy as np
import torch


@contextlib.contextmanager
def process_state_kept():
    """Leave the process as :func:`train` found it: torch's threads, and every random state a run seeds or draws
    from (torch's CPU and CUDA generators, NumPy's and Python's global ones: the model's initial weights, dropout,
    VGAE noise, a resumed checkpoint's states) restored on the way out. Inside, a run seeds them as it always did,
    so its numbers are those of a run that owned the process."""
    threads, py_state, np_state = torch.get_num_threads(), random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        torch.set_num_threads(threads)
        random.setstate(py_state)
        np.random.set_state(np_state)
