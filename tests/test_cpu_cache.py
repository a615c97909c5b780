"""gaescale.cpu_cache: torch's CPU allocator with a pool of the pages freed large buffers held (compiled C++)."""
import os
import random
import shutil
import subprocess
import sys

import pytest
import torch

from gaescale import cpu_cache
from gaescale.data.synthetic import community_graph
from gaescale.errors import ParameterError

KiB, MiB = 1 << 10, 1 << 20
GRAIN = 2 * MiB  # the pool's unit: a buffer's mapping is its size rounded up to this


def _compiler() -> bool:
    return shutil.which(os.environ.get("CXX", "c++")) is not None


@pytest.fixture
def pool():
    """The pool installed with a 1 MiB threshold, keeping up to the whole peak, and emptied; afterwards the defaults
    back, uninstalled."""
    if not _compiler():
        pytest.skip("no C++ compiler on PATH: gaescale.cpu_cache cannot be built here (training runs without it)")
    reason = cpu_cache.install(threshold=MiB, keep=1.0)
    assert reason is None, reason  # with a compiler, the build must work
    cpu_cache.empty()
    yield
    cpu_cache.install(cpu_cache.THRESHOLD, cpu_cache.KEEP)
    cpu_cache.uninstall()


def _mapped(t: torch.Tensor) -> int:
    """What a pooled buffer maps for ``t``: its bytes rounded up to 2 MiB, or 0 below the 1 MiB threshold."""
    n = t.untyped_storage().nbytes()
    return 0 if n < MiB else -(-n // GRAIN) * GRAIN


def _holds(t: torch.Tensor, value: float) -> bool:
    return t.min().item() == value == t.max().item()  # reductions: no large temporary of their own


def _random_buffers(steps: int, check) -> int:
    """Random allocations and frees of 64 KiB to 12 MiB, 12 at most alive, each filled with its own value; after each
    step, every live tensor must still hold its value (however its pages were moved), the pool's account of buffers
    in use must match the tensors alive, and ``check(stats, peak)`` must hold. Returns the peak in use."""
    rng = random.Random(0)
    live: list[tuple[torch.Tensor, float]] = []
    peak = 0
    for step in range(steps):
        if not live or (rng.random() < 0.55 and len(live) < 12):
            numel = rng.choice([16 * KiB, 200 * KiB, MiB, 1536 * KiB, 3 * MiB, 3 * MiB // 2 + 5, 3 * MiB + 1])
            live.append((torch.full((numel,), float(step)), float(step)))
        else:
            live.pop(rng.randrange(len(live)))
        assert all(_holds(t, v) for t, v in live), step
        in_use = sum(_mapped(t) for t, _ in live)
        peak = max(peak, in_use)
        s = cpu_cache.stats()
        assert s["live_bytes"] == in_use and s["peak_bytes"] == peak, step
        check(s, peak)
    return peak


def test_buffers_keep_their_contents_and_the_process_holds_exactly_its_peak(pool):
    """Keeping the whole peak: buffers in use and pool are always exactly the most that was ever in use at once (the
    peak without the pool), and new memory was only taken to reach it."""
    def exactly_the_peak(s, peak):
        assert s["live_bytes"] + s["pooled_bytes"] == s["limit_bytes"] == peak

    peak = _random_buffers(300, exactly_the_peak)
    s = cpu_cache.stats()
    assert s["fresh_bytes"] == peak and s["released_bytes"] == 0
    assert s["moved_bytes"] > 0 and s["whole_bytes"] > 0


def test_the_pool_keeps_within_its_share_of_the_peak(pool):
    """keep = 0.5: whenever anything is pooled, buffers in use and pool are within half the peak; the rest went back
    to the kernel (released), and never more than the peak is held."""
    cpu_cache.install(keep=0.5)

    def within_half(s, peak):
        assert s["live_bytes"] + s["pooled_bytes"] <= peak
        assert s["pooled_bytes"] == 0 or s["live_bytes"] + s["pooled_bytes"] <= peak / 2

    _random_buffers(300, within_half)
    s = cpu_cache.stats()
    assert s["released_bytes"] > 0 and s["moved_bytes"] + s["whole_bytes"] > 0


def test_a_repeated_sequence_of_buffers_takes_no_new_memory_after_its_first_round(pool):
    """An epoch's buffers again and again (mixed sizes, so later ones are assembled from pieces of earlier ones): the
    first round takes new memory, the next ones none."""
    def round_(k: int) -> None:
        a = torch.full((5 * MiB // 4,), 1.0 + k)  # 5 MiB
        b = torch.full((3 * MiB // 4,), 2.0 + k)
        del a
        c = torch.full((7 * MiB // 8,), 3.0 + k, dtype=torch.float64)  # 7 MiB: 6 of a's MiB and new or b's
        d = torch.full((MiB,), 4.0 + k)  # 4 MiB
        assert _holds(b, 2.0 + k) and _holds(c, 3.0 + k) and _holds(d, 4.0 + k)

    round_(0)
    first = cpu_cache.stats()["fresh_bytes"]
    assert first > 0
    for k in range(1, 4):
        round_(k)
    s = cpu_cache.stats()
    assert s["fresh_bytes"] == first
    assert s["moved_bytes"] > 0


def test_small_buffers_are_left_to_torchs_allocator(pool):
    t = torch.ones(MiB // 8)  # 512 KiB, under the 1 MiB threshold
    assert cpu_cache.stats()["live_bytes"] == 0 and _holds(t, 1.0)


def test_uninstall_puts_torchs_allocator_back_and_returns_every_page(pool):
    kept = torch.full((2 * MiB,), 5.0)  # 8 MiB allocated through the pool, alive across the uninstall
    dropped = torch.ones(2 * MiB)
    del dropped
    assert cpu_cache.stats()["pooled_bytes"] == 8 * MiB
    cpu_cache.uninstall()
    assert not cpu_cache.installed()
    s = cpu_cache.stats()
    assert s["pooled_bytes"] == 0 and s["live_bytes"] == 8 * MiB
    fresh = s["fresh_bytes"]
    after = torch.ones(3 * MiB)  # torch's own allocator now
    assert _holds(after, 1.0) and _holds(kept, 5.0)
    del kept  # freed through the pool's deleter, back to the kernel, not pooled
    s = cpu_cache.stats()
    assert s["pooled_bytes"] == 0 and s["live_bytes"] == 0 and s["fresh_bytes"] == fresh


def test_bad_settings_are_refused():
    with pytest.raises(ParameterError, match="'threshold' parameter of cpu_cache.install"):
        cpu_cache.install(threshold=0)
    with pytest.raises(ParameterError, match="'keep' parameter of cpu_cache.install"):
        cpu_cache.install(keep=1.5)


@pytest.mark.skipif(not _compiler(), reason="no C++ compiler on PATH: gaescale.cpu_cache cannot be built here")
def test_training_with_the_pool_gives_the_same_losses_as_without(pool):
    """Full-batch training with its buffers (of 64 KiB and more here) from the pool matches training with torch's
    own allocator bit for bit: no kernel reads what a pooled buffer held before."""
    import gaescale
    cpu_cache.install(threshold=64 * KiB)
    data = community_graph(3000, 18000, seed=0)
    kw = dict(data=data, hidden="16,16", dim=8, epochs=4, eval_every=2, warmup=0, strategy="full", quiet=True,
              report=False, checkpoint_every=0, test=False)
    pooled = gaescale.train(**kw, buffer_cache=True).metrics
    cpu_cache.uninstall()
    plain = gaescale.train(**kw, buffer_cache=False).metrics
    assert [h["loss"] for h in pooled["history"]] == [h["loss"] for h in plain["history"]]
    assert pooled["buffer_cache"]["moved_bytes"] + pooled["buffer_cache"]["whole_bytes"] > 0
    assert plain["buffer_cache"] == "off"


TRAIN_WITHOUT_COMPILER = """
import gaescale, torch
from gaescale import cpu_cache
from gaescale.data.synthetic import community_graph
print(cpu_cache.install())
print(cpu_cache.installed(), torch.ones(4 << 20).sum().item())
m = gaescale.train(data=community_graph(300, 900, seed=0), epochs=1, report=False, checkpoint_every=0,
                   test=False).metrics
print(m["buffer_cache"])
"""


def test_without_a_compiler_the_reason_is_given_and_training_runs_without_the_pool(tmp_path):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-compiler"), XDG_CACHE_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", TRAIN_WITHOUT_COMPILER], env=env, capture_output=True, text=True,
                          check=True)
    reason, installed, recorded = done.stdout.strip().splitlines()[-3:]
    assert "no C++ compiler" in reason and "no-such-compiler" in reason
    assert installed == f"False {float(4 << 20)}"
    assert recorded == reason  # the run's metrics say why
    assert f"training's large buffers are not kept between epochs: {reason}" in done.stderr
