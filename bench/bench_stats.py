"""Benchmark of the uncertainty machinery (``make bench``) on the committed demo set.

Measures, with wall and CPU time (CPU time is what a loaded machine cannot inflate):

(a) ``analyses.intervals.utility_intervals`` for every row of the demo sweep (per-batch resampling of
    every cell, unit resampling of every pooled row, 1000 resamples);
(b) the whole ``tempora-sim report traces/demo`` in a fresh process (target: < 30 s);
(c) ``advise`` warm, in-process, once per constraint kind (target: < 2 s each).

Run: ``python bench/bench_stats.py``. Prints the machine (CPU, cores, library versions).
"""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy
import polars
import scipy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tempora_sim import analyses as an  # noqa: E402
from tempora_sim import sweep  # noqa: E402
from tempora_sim.analyses.advice import advise, parse_constraint  # noqa: E402
from tempora_sim.sweeps.traces import load_traces  # noqa: E402

DEMO = ROOT / "traces" / "demo"


def cpu_s(who=resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def machine() -> str:
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{model}, {os.cpu_count()} cores, load average {load:.1f}; python {platform.python_version()}, "
        f"numpy {numpy.__version__}, scipy {scipy.__version__}, polars {polars.__version__}"
    )


def main() -> int:
    if not DEMO.is_dir():
        print(f"no demo traces at {DEMO}", file=sys.stderr)
        return 2
    print(machine())
    ts = load_traces(DEMO)
    u = sweep(ts)
    rows = an.align_group_dtypes(an.trace_rows(ts.traces), u)
    an.utility_intervals(u, rows)  # warm
    t0, c0 = time.perf_counter(), cpu_s()
    iv = an.utility_intervals(u, rows)
    print(
        f"(a) intervals of {iv.index.height:,} rows × {iv.boot.shape[1]} resamples: "
        f"{time.perf_counter() - t0:.2f} s wall, {cpu_s() - c0:.2f} s CPU"
    )
    with tempfile.TemporaryDirectory() as out:
        t0, c0 = time.perf_counter(), cpu_s(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [sys.executable, "-m", "tempora_sim.commands.main", "report", str(DEMO), "--out", out],
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        wall, cpu = time.perf_counter() - t0, cpu_s(resource.RUSAGE_CHILDREN) - c0
    print(
        f"(b) tempora-sim report traces/demo: {wall:.1f} s wall, {cpu:.1f} s CPU   target < 30 s "
        f"{'PASS' if wall < 30 else 'FAIL (wall; compare the CPU time on a loaded machine)'}"
    )
    advise(ts, parse_constraint("0.6", None, None, None))  # warm
    for args in (("0.6", None, None, None), (None, "80", None, None), (None, None, "300ms", None), (None, None, None, "5s")):
        c = parse_constraint(*args)
        t0, c0 = time.perf_counter(), cpu_s()
        advise(ts, c)
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        print(f"(c) advise {c.label():<14} warm: {wall:.2f} s wall, {cpu:.2f} s CPU   target < 2 s {'PASS' if wall < 2 else 'FAIL (wall)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
