"""How an epoch's cost grows with the graph: the demo's generator and model at several sizes, one run.

    .venv/bin/python bench/bench_growth.py [--nodes 770000,3080000,10000000] [--epochs 5] [--profile 2]

Each size runs in a fresh subprocess; all of them start at once and take turns: one epoch of each size in turn, round
after round, the others waiting, so that every size's epochs fall in the same minutes of this shared machine and its
drifts (measured: the same 770k epoch at 0.8 s and at 1.9 s within an hour) move all sizes alike; each size's
generation and setup run in its first turn. ``--one-after-another``: the sizes one after the other instead (the tables
of BENCHMARKS.md before 2026-12-06 21:30 UTC). Each size: the community graph of the demo at the built-in graph's
degree (``round(N * 4.6M / 770k)`` edges, average degree ~12), 8 features, GCN 8-16-16-8, full batch, sampled BCE, the
structural part off (what the epoch of issue 31's measurements computes), no validation and no test scoring (the epoch
alone). Prints a Markdown table: seconds per epoch (median), the user and system CPU seconds and page faults of an
epoch (medians from the second epoch; system: the kernel's share, mostly fresh memory's first writes), the training
phase's peak RSS, and growth relative to linear, ``(t_N / t_first) / (N / N_first)`` (1.00: linear).
``--buffer-cache off``: training's large buffers returned to the kernel when freed (``--no-buffer-cache``, as before
:mod:`gaescale.cpu_cache`); ``both``: every size twice, without and with the cache, all in the same turns, each
variant's growth from its own first size. ``--keep-freed``:
from the second epoch glibc keeps freed memory in the process, so that no buffer is fresh memory (an experiment: the
peak grows). ``--profile K``: K more epochs run under torch.profiler after the timed ones, and a second table gives
each op's seconds per epoch (self CPU time) at each size with its growth; the profiled epochs are not in the first
table. Raw results go to bench/results/growth-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
GiB = 2 ** 30


class _Turns:
    """This size's turns: ``wait()`` blocks until the parent says go (a byte on ``fds[0]``), ``done()`` hands the turn
    back (a byte on ``fds[1]``); both do nothing without ``fds`` (one size after another)."""

    def __init__(self, fds: tuple[int, int] | None):
        self.fds = fds

    def wait(self) -> None:
        if self.fds and not os.read(self.fds[0], 1):
            raise SystemExit("bench_growth: the parent stopped giving turns")

    def done(self) -> None:
        if self.fds:
            os.write(self.fds[1], b".")


def one(n: int, epochs: int, threads: int, order: str | None = None, profiled: int = 0,
        turns: tuple[int, int] | None = None, keep_freed: bool = False, buffer_cache: bool = True) -> dict:
    """One size in this process: generate, number the nodes in ``order`` (as ``gaescale prepare --order`` does;
    None: as generated), train ``epochs`` then ``profiled`` epochs under torch.profiler, report the figures (as JSON
    on stdout). ``turns``: file descriptors (go, done) of the parent's turns: each epoch runs in a turn of its own, the
    generation and setup in the first epoch's (:class:`_Turns`). ``keep_freed``: :func:`_keep_freed` after the
    first epoch."""
    turn = _Turns(turns)
    turn.wait()
    import gaescale
    from gaescale.cli import demo_edges
    from gaescale.data.synthetic import community_graph
    e = demo_edges(n)
    t = time.perf_counter()
    data = community_graph(n, e, seed=0)
    generated = time.perf_counter() - t
    t = time.perf_counter()
    if order:
        from gaescale.data.order import locality_order, renumber
        from gaescale.data.readers import EdgeList
        from gaescale.graph import Graph
        g = Graph.from_edge_index(data.edge_index, n)
        perm = locality_order(g.indptr, g.indices, n, order)
        data = EdgeList(renumber(data.edge_index, perm), n, None, data.x[perm], source=f"{data.source}, {order} order")
        del g
    ordered = time.perf_counter() - t
    total = epochs + profiled
    usage = [cpu_usage()]  # (system s, page faults, user s) at the end of each epoch, from before the first
    with _profiler(epochs, profiled) as (profile_step, ops):
        def on_epoch(record: dict) -> None:
            usage.append(cpu_usage())
            if keep_freed and record["epoch"] == 1:
                _keep_freed()
            if profile_step:
                profile_step(record)
            if record["epoch"] < total:  # the last turn ends once train() has returned (its embedding pass too)
                turn.done()
                turn.wait()

        result = gaescale.train(data=data, hidden="16,16", dim=8, epochs=total, eval_every=total + 1, warmup=0,
                                strategy="full", structure="off", quiet=True, report=False, checkpoint_every=0,
                                threads=threads, test=False, on_epoch=on_epoch, buffer_cache=buffer_cache)
    turn.done()
    m = result.metrics
    timed = [h["seconds"] for h in m["history"]][:epochs]
    cpu = [[y - x for x, y in zip(a, b)] for a, b in zip(usage[1:epochs], usage[2:epochs + 1])]  # epochs 2..
    return {"nodes": n, "edges": e, "epochs": epochs, "seconds_per_epoch": statistics.median(timed),
            "epoch_seconds": timed, "op_seconds_per_epoch": ops, "generate_seconds": generated,
            "system_seconds_per_epoch": statistics.median(k[0] for k in cpu) if cpu else None,
            "page_faults_per_epoch": statistics.median(k[1] for k in cpu) if cpu else None,
            "user_seconds_per_epoch": statistics.median(k[2] for k in cpu) if cpu else None,
            "order": order, "order_seconds": ordered, "keep_freed": keep_freed, "buffer_cache": m["buffer_cache"],
            "setup_peak_rss_bytes": m["setup_peak_rss_bytes"], "training_peak_rss_bytes": m["training_peak_rss_bytes"],
            "total_seconds": m["total_seconds"], "torch_threads": m["torch_threads"]}


def _keep_freed() -> None:
    """From now on glibc serves every buffer from its heap and returns none of it to the kernel (``M_MMAP_MAX`` 0,
    ``M_TRIM_THRESHOLD`` its largest): memory the process frees stays its own, so no buffer is fresh memory, at the
    price of the heap's free pieces counted in the peak. The experiment of BENCHMARKS.md, "Fresh memory on this
    virtual machine"; glibc only."""
    import ctypes
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(-4, 0) != 1 or mallopt(-1, 2**31 - 1) != 1:  # glibc's M_MMAP_MAX, M_TRIM_THRESHOLD
        raise SystemExit("bench_growth: mallopt refused --keep-freed's settings")


def cpu_usage() -> tuple[float, int, float]:
    """This process's system CPU seconds, page faults and user CPU seconds so far."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_stime, u.ru_minflt, u.ru_utime


@contextlib.contextmanager
def _profiler(skip: int, active: int):
    """``(on_epoch, ops)``: an epoch callback for gaescale.train that profiles the ``active`` epochs after the first
    ``skip``, and the dict it fills on exit: op name -> self CPU seconds per profiled epoch."""
    ops: dict[str, float] = {}
    if not active:
        yield None, ops
        return
    from torch.profiler import ProfilerActivity, profile, schedule

    def collect(prof) -> None:
        for event in prof.key_averages():
            if event.key.startswith("ProfilerStep"):  # the step's span: its self time is the wait for the other
                continue                              # sizes' turns, not an op
            ops[event.key] = ops.get(event.key, 0.0) + event.self_cpu_time_total / 1e6 / active

    # steps end at each epoch's callback: step 0 is the setup and epoch 1, step k epoch k + 1
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=skip, warmup=0, active=active, repeat=1),
                 on_trace_ready=collect) as prof:
        yield (lambda record: prof.step()), ops


def _op_table(rows: list[dict], top: int = 15) -> None:
    """Each op's seconds per epoch at every size (the ops costliest at the largest size first) and its growth from
    the first size, relative to linear."""
    first, last = rows[0], rows[-1]
    names = sorted(last["op_seconds_per_epoch"], key=lambda k: -last["op_seconds_per_epoch"][k])[:top]
    print("\n| op (self CPU s/epoch) | " + " | ".join(f"{r['nodes']:,}" for r in rows) + " | growth, last vs first |")
    print("|---|" + "---:|" * (len(rows) + 1))
    for name in names + ["(all ops)"]:
        ops = [r["op_seconds_per_epoch"] for r in rows]
        per = [sum(o.values()) if name == "(all ops)" else o.get(name, 0.0) for o in ops]
        growth = per[-1] / per[0] / (last["nodes"] / first["nodes"]) if per[0] else float("nan")
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in per) + f" | {growth:.2f}x |")


def _label(job: tuple[int, bool]) -> str:
    return f"{job[0]:,} nodes{'' if job[1] else ', no buffer cache'}"


def _result(job: tuple[int, bool], proc: subprocess.CompletedProcess | subprocess.Popen, out: str,
            err: str) -> dict | None:
    if proc.returncode:
        print(f"{_label(job)} failed:\n{err[-2000:]}", file=sys.stderr)
        return None
    row = json.loads(out.strip().splitlines()[-1])
    print(f"{_label(job)}: {row['seconds_per_epoch']:.3f} s/epoch", file=sys.stderr, flush=True)
    return row


def _one_after_another(jobs: list[tuple[int, bool]], cmd) -> list[dict] | None:
    rows = []
    for job in jobs:
        done = subprocess.run(cmd(job), capture_output=True, text=True)
        rows.append(_result(job, done, done.stdout, done.stderr))
        if rows[-1] is None:
            return None
    return rows


def _rounds(pipes: list[tuple[int, int]], turns: int) -> bool:
    """Give each process of ``pipes`` (go, done) its ``turns``, round after round; False as soon as one ends without
    handing its turn back (it failed)."""
    for _ in range(turns):
        for go, done in pipes:
            os.write(go, b".")
            if not os.read(done, 1):
                return False
    return True


def _in_turns(jobs: list[tuple[int, bool]], cmd, turns: int) -> list[dict] | None:
    """Every size's process at once, each epoch in its own turn: size 1, size 2, ..., then the next round."""
    procs, pipes = [], []
    for job in jobs:
        go, done = os.pipe(), os.pipe()  # (read, write) each: the child reads go[0] and writes done[1]
        files = [tempfile.TemporaryFile("w+") for _ in range(2)]  # its stdout and stderr
        procs.append((job, subprocess.Popen([*cmd(job), "--turn-fds", f"{go[0]},{done[1]}"], stdout=files[0],
                                          stderr=files[1], pass_fds=(go[0], done[1])), files))
        os.close(go[0])
        os.close(done[1])
        pipes.append((go[1], done[0]))
    try:
        failed = not _rounds(pipes, turns)
        rows = []
        for job, proc, files in procs:
            if failed and proc.poll() is None:
                proc.kill()
            proc.wait()
            out, err = (f.seek(0) or f.read() for f in files)
            rows.append(_result(job, proc, out, err))
        return None if None in rows else rows
    finally:
        for _n, proc, files in procs:
            if proc.poll() is None:
                proc.kill()
            for f in files:
                f.close()
        for fd in (fd for pair in pipes for fd in pair):
            os.close(fd)


def _f(v, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _cache(r: dict) -> str:
    """The buffer cache's column: the new memory its large buffers took over the whole run (the first epoch's
    included), or why it was off."""
    c = r.get("buffer_cache")
    if not isinstance(c, dict):
        return "off" if c is None else str(c).split(" (")[0]
    total = c["whole_bytes"] + c["moved_bytes"] + c["fresh_bytes"]
    return f"on: {c['fresh_bytes'] / GiB:.2f} of {total / GiB:.1f} GiB new"


def _table(rows: list[dict]) -> None:
    """The Markdown table; each row's growth is from the first row of the same buffer-cache setting."""
    print("| nodes | buffer cache | s/epoch (median) | fastest epoch | user CPU s/epoch | system CPU s/epoch "
          "| page faults/epoch | training peak RSS | growth (median) | growth (fastest) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    pooled = lambda r: isinstance(r.get("buffer_cache"), dict)  # noqa: E731 - its figures, where the pool was on
    for r in rows:
        first = next(f for f in rows if pooled(f) == pooled(r))
        scale = r["nodes"] / first["nodes"]
        growth = r["seconds_per_epoch"] / first["seconds_per_epoch"] / scale
        fastest = min(r["epoch_seconds"]) / min(first["epoch_seconds"]) / scale
        print(f"| {r['nodes']:,} | {_cache(r)} | {r['seconds_per_epoch']:.3f} | "
              f"{min(r['epoch_seconds']):.3f} | {_f(r.get('user_seconds_per_epoch'), '.3f')} | "
              f"{_f(r['system_seconds_per_epoch'], '.3f')} | "
              f"{_f(r['page_faults_per_epoch'], ',.0f')} | {r['training_peak_rss_bytes'] / GiB:.2f} GiB | "
              f"{growth:.2f}x | {fastest:.2f}x |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="770000,3080000,10000000", help="comma-separated node counts")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--order", default=None, help="number the nodes in this order first, as 'gaescale prepare "
                                                 "--order' does (community, metis, bfs, rcm, degree)")
    p.add_argument("--profile", type=int, default=0, metavar="K",
                   help="K more epochs per size under torch.profiler: a table of each op's time (0: none)")
    p.add_argument("--one-after-another", action="store_true",
                   help="run the sizes one after the other instead of in turns (the earlier tables' way)")
    p.add_argument("--keep-freed", action="store_true",
                   help="from the second epoch keep freed memory in the process (glibc's heap): no fresh memory, a "
                        "higher peak (the experiment of BENCHMARKS.md, 'Fresh memory on this virtual machine')")
    p.add_argument("--buffer-cache", choices=("on", "off", "both"), default="on",
                   help="gaescale's cache of large buffers between epochs (gaescale.cpu_cache): on (the default), "
                        "off (--no-buffer-cache), or both: each size without and with it, in the same turns")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the subprocess of one size
    p.add_argument("--turn-fds", help=argparse.SUPPRESS)  # its turns' file descriptors: "go,done"
    args = p.parse_args(argv)
    if args.one:
        fds = tuple(int(f) for f in args.turn_fds.split(",")) if args.turn_fds else None
        print(json.dumps(one(args.one, args.epochs, args.threads, args.order, args.profile, fds, args.keep_freed,
                             args.buffer_cache == "on")))
        return 0
    variants = {"on": (True,), "off": (False,), "both": (False, True)}[args.buffer_cache]
    jobs = [(int(s), v) for s in args.nodes.split(",") for v in variants]
    cmd = lambda job: [sys.executable, __file__, "--one", str(job[0]), "--epochs", str(args.epochs),  # noqa: E731
                       "--threads", str(args.threads), "--profile", str(args.profile),
                       "--buffer-cache", "on" if job[1] else "off",
                       *(["--order", args.order] if args.order else []),
                       *(["--keep-freed"] if args.keep_freed else [])]
    turns = args.epochs + args.profile
    rows = _one_after_another(jobs, cmd) if args.one_after_another else _in_turns(jobs, cmd, turns)
    if rows is None:
        return 1
    print(f"node order: {args.order or 'as generated'}; freed memory "
          f"{'kept in the process from the second epoch' if args.keep_freed else 'returned to the kernel'}\n")
    _table(rows)
    if args.profile:
        _op_table(rows)
    out = BENCH / "results" / f"growth-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
