"""bench/bench_gpu.py, the one script to run where a GPU is lent, runs end to end on the CPU (--smoke: every
section at small sizes, the Triton kernel in its interpreter), so that it has not rotted when it is needed."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[test]' brings it)")

pytestmark = pytest.mark.slow  # 20 s: every section, 2-process data parallel included

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_gpu.py"


def test_the_gpu_script_runs_every_section_on_the_cpu():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    for kind in ("bce", "mse", "linear-mse"):
        assert f"check {kind}" in out and "kernel in 3 shards" in out
    assert out.count(" ok\n") == 3 and "FAIL" not in out
    assert "time N=2,000" in out and "core job 3,000 nodes" in out
    assert "strategy=neighbor precision=fp16" in out  # the last training path
    assert "strategy=neighbor batch_size=4096" in out  # the last data-parallel case
    aucs = [float(a) for pair in re.findall(r"^ +test AUC (0\.\d+) / (0\.\d+)$", out, re.M) for a in pair]
    assert len(aucs) == 4 and min(aucs) > 0.6, out  # an evaluation of the ranks' embeddings, not of noise (0.5)
    # full batch: one process steps on the 2 processes' global batch, and gives their losses and test AUC
    one = re.search(r"^one process, the same global batch +loss diff (\S+) +test AUC (0\.\d+) / 2 processes (0\.\d+)$",
                    out, re.M)
    assert one, out
    assert float(one[1]) < 1e-4 and abs(float(one[2]) - float(one[3])) < 1e-3, one[0]
