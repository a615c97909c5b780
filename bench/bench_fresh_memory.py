"""What fresh memory costs on this machine: a buffer's first write after the process freed the memory a while ago.

    .venv/bin/python bench/bench_fresh_memory.py [--mib 1024] [--pauses 0,0.25,0.5,1,2,4] [--repeats 3]

An epoch allocates its large buffers afresh: torch maps each one (huge pages, gaescale._allocator) and unmaps it when
freed, and the kernel zeroes its pages at their first write. On a virtual machine whose balloon driver reports free
pages to the host ("free page reporting"), memory freed for long enough is handed back to the host, and its next first
write also waits for the host to back it again. For each pause, this allocates and writes ``--mib`` MiB, frees it,
waits the pause, then times the write of a new buffer of the same size (one torch thread, the median of
``--repeats``); the last row writes a buffer that stays allocated (memory already the process's own). Prints a
Markdown table (GB/s, the system CPU seconds and page faults of the timed write) and whether the kernel reports free
pages (``/sys/module/page_reporting``). Raw results go to bench/results/fresh-memory-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import gaescale  # noqa: F401  (torch is imported after it, in the functions: its huge pages, as in every run)
from bench_growth import cpu_usage  # bench/ is on the path when run as a script

BENCH = Path(__file__).resolve().parent
REPORTING = Path("/sys/module/page_reporting/parameters")


def _timed_write(buf) -> dict:
    (s0, f0, _), t = cpu_usage(), time.perf_counter()
    buf.fill_(1.0)
    wall = time.perf_counter() - t
    s1, f1, _ = cpu_usage()
    return {"seconds": wall, "system_seconds": s1 - s0, "faults": f1 - f0}


def fresh_after(pause: float, numel: int) -> dict:
    """Write a new ``(numel,)`` float32 buffer ``pause`` seconds after freeing one of the same size."""
    import torch
    old = torch.empty(numel)
    old.fill_(1.0)
    del old
    time.sleep(pause)
    return _timed_write(torch.empty(numel))


def reporting() -> str:
    """The kernel's free page reporting, as its module's parameters say (or that there is none)."""
    if not REPORTING.is_dir():
        return "no /sys/module/page_reporting (the kernel does not report free pages, or cannot say)"
    params = {p.name: p.read_text().strip() for p in sorted(REPORTING.iterdir()) if p.is_file()}
    return "free page reporting: " + ", ".join(f"{k}={v}" for k, v in params.items())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=1024, help="buffer size in MiB")
    p.add_argument("--pauses", default="0,0.25,0.5,1,2,4", help="comma-separated seconds between free and reuse")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    numel = args.mib << 18
    gb = numel * 4 / 1e9
    rows = []
    for pause in [float(x) for x in args.pauses.split(",")]:
        runs = [fresh_after(pause, numel) for _ in range(args.repeats)]
        rows.append({"case": f"fresh, {pause:g} s after the free", "pause": pause, "runs": runs})
    kept = torch.empty(numel)
    kept.fill_(0.0)
    rows.append({"case": "kept (written before)", "pause": None, "runs": [_timed_write(kept) for _ in
                                                                            range(args.repeats)]})
    print(f"{args.mib} MiB float32 buffers, one torch thread, median of {args.repeats}; {reporting()}\n")
    print("| write | GB/s | system s | page faults |")
    print("|---|---:|---:|---:|")
    for r in rows:
        med = {k: statistics.median(x[k] for x in r["runs"]) for k in ("seconds", "system_seconds", "faults")}
        r["median"] = med
        print(f"| {r['case']} | {gb / med['seconds']:.2f} | {med['system_seconds']:.3f} | {med['faults']:.0f} |")
    out = BENCH / "results" / f"fresh-memory-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"mib": args.mib, "reporting": reporting(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
