"""Benchmark of timing variability in the answers (``make bench``), on the committed demo set.

``traces/demo`` carries the tracer's timing-variability measurement; the demo set as the first
tracer wrote it (``tests/golden/demo-traces``, no measurement, whole corruptions) is the
comparison. Wall and CPU time of fresh processes (CPU time is what a loaded machine cannot
inflate):

(a) the warm paper-grid ``tempora-sim sweep traces/demo`` without ``--intervals`` (target: ≤ 1 s wall);
(b) ``sweep --intervals`` (the bounds of every term, plus the timing replicates where measured);
(c) ``tempora-sim report`` (target: < 30 s);
(d) ``advise --rho 0.6`` (target: < 2 s).

Run: ``python bench/bench_timing.py [--runs N]``. Prints the machine (CPU, cores, versions).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import machine  # noqa: E402  (bench/ is not a package)

DEMO = ROOT / "traces" / "demo"
LEGACY = ROOT / "tests" / "golden" / "demo-traces"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


#: The children's environment: the project on the path, and bytecode cached as Python does by
#: default (an environment that sets PYTHONDONTWRITEBYTECODE recompiles the project's modules
#: in every process: about 0.1 s of a warm sweep that no installed copy pays).
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(ROOT / "src")}


def run(args: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh ``tempora-sim`` process."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "tempora_sim.commands.main", *args], check=True, capture_output=True, env=ENV)
    return time.perf_counter() - t0, children_cpu() - cpu0


def best(args: list[str], runs: int) -> tuple[float, float, float]:
    """(best wall, median wall, CPU of the best) over ``runs`` fresh processes."""
    results = sorted(run(args) for _ in range(runs))
    return results[0][0], results[len(results) // 2][0], results[0][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per measurement (best and median reported)")
    args = parser.parse_args()
    print(machine())
    print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    tmp = Path(tempfile.mkdtemp(prefix="tempora-bench-timing-"))
    try:
        for src in (DEMO, LEGACY):
            run(["sweep", str(src), "--out", str(tmp / "warm")])  # the trace cache and the kernels' JIT cache
            run(["sweep", str(src), "--intervals", "--out", str(tmp / "warm")])
        rows = [
            ("(a) sweep traces/demo (paper grid, warm)", ["sweep", str(DEMO), "--out", str(tmp / "s0")]),
            ("(b) sweep traces/demo --intervals (20 timing replicates)", ["sweep", str(DEMO), "--intervals", "--out", str(tmp / "s1")]),
            ("(a) sweep first-tracer set (paper grid, warm; no timing data)", ["sweep", str(LEGACY), "--out", str(tmp / "s2")]),
            ("(b) sweep first-tracer set --intervals", ["sweep", str(LEGACY), "--intervals", "--out", str(tmp / "s3")]),
            ("(c) report traces/demo (20 timing replicates)", ["report", str(DEMO), "--out", str(tmp / "r0")]),
            ("(c) report first-tracer set", ["report", str(LEGACY), "--out", str(tmp / "r1")]),
            ("(d) advise traces/demo --rho 0.6", ["advise", str(DEMO), "--rho", "0.6"]),
            ("(d) advise first-tracer set --rho 0.6", ["advise", str(LEGACY), "--rho", "0.6"]),
        ]
        print(f"{'measurement':<62} {'best wall':>10} {'median wall':>12} {'CPU (best)':>11}")
        for name, cmd in rows:
            runs = 1 if cmd[0] == "report" else args.runs
            b, m, c = best(cmd, runs)
            print(f"{name:<62} {b:>9.2f}s {m:>11.2f}s {c:>10.2f}s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
