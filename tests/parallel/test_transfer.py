"""What rank 0 sends the other ranks (gloo on 127.0.0.1, processes of torch.multiprocessing). The directories
sent to hosts that lack them are tested end to end in test_distributed (two torchrun launchers)."""

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import free_port
from gaescale.errors import DistributedError
from gaescale.parallel import transfer
from gaescale.parallel.runtime import Torchrun


def _arrays(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        rt = Torchrun(rank, 2, "gloo")
        transfer._CHUNK = 100  # bytes: every array but the empty one goes in several pieces
        rng = np.random.default_rng(0)
        sent = {"indptr": np.arange(0, 3001, 3, dtype=np.int64), "x": rng.standard_normal((37, 5)).astype(np.float32),
                "mapped": np.arange(90, dtype=np.int32)[::3], "none": np.zeros((0, 4), np.float64)}
        got = transfer.arrays_from_main(rt, lambda: sent if rank == 0 else pytest.fail("not rank 0's to make"), "a")
        assert list(got) == list(sent)
        for k, a in sent.items():
            assert got[k].dtype == a.dtype and np.array_equal(got[k], a), k

        def fail():
            raise ValueError("rank 0's own error")
        try:
            transfer.arrays_from_main(rt, fail, "the test's arrays")
        except ValueError as exc:
            assert rank == 0 and "own error" in str(exc)
        except DistributedError as exc:
            assert rank == 1 and str(exc) == "rank 0 failed to make the test's arrays (its error says more).", exc
        else:
            pytest.fail("no rank may go on after rank 0 failed")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_arrays_from_rank_0_arrive_whole_in_pieces_and_its_error_stops_the_others():
    mp.spawn(_arrays, args=(free_port(),), nprocs=2, join=True)

