"""Benchmark of timing variability in the answers (``make bench``), on the committed demo set.

The committed demo traces carry no timing-variability measurement, so the benchmark also
writes a copy of them with one (a synthetic measurement of the tracer's default shape: 16
events × 2 repeat passes + an idle pass; its values do not change the cost) and measures,
in fresh processes, wall and CPU time (CPU time is what a loaded machine cannot inflate):

(a) the warm paper-grid ``tempora-sim sweep traces/demo`` without ``--intervals`` (target: ≤ 1 s);
(b) ``sweep --intervals`` on the demo set (no timing data) and on the measured copy (20 timing
    replicates);
(c) ``tempora-sim report`` of both (target: < 30 s);
(d) ``advise --rho 0.6`` on both (target: < 2 s).

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

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tempora_schema as schema  # noqa: E402
from bench_stats import machine  # noqa: E402
from tempora_sim.synthetic import SyntheticVariability  # noqa: E402

DEMO = ROOT / "traces" / "demo"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(args: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh ``tempora-sim`` process."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tempora_sim.cli", *args],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    return time.perf_counter() - t0, children_cpu() - cpu0


def best(args: list[str], runs: int) -> tuple[float, float, float]:
    """(best wall, median wall, CPU of the best) over ``runs`` fresh processes."""
    results = sorted(run(args) for _ in range(runs))
    return results[0][0], results[len(results) // 2][0], results[0][1]


def measured_copy(target: Path) -> None:
    """The demo traces with a synthetic measurement of the default shape added to their metadata."""
    var = SyntheticVariability(
        pass_sd=0.05, event_sd=0.03, passes=2, per_episode=4, episodes=4, gaps_ms=(20.0, 80.0), idle_factor=(1.0, 1.1)
    )
    rng = np.random.default_rng(0)
    for path in sorted(DEMO.rglob("*.parquet")):
        table = pq.read_table(path)
        meta = schema.decode_metadata(table.schema, path)
        d = table.to_pydict()
        main: dict[str, list[float]] = {}
        for ep, phase, delta in zip(d["episode"], d["phase"], d["delta_ms"]):
            if phase == "adapt":
                main.setdefault(ep, []).append(delta)
        meta[schema.VARIABILITY_KEY] = var.measurement({k: np.asarray(v) for k, v in main.items()}, list(main), rng)
        out = target / path.relative_to(DEMO)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.replace_schema_metadata(schema.encode_metadata(meta)), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per measurement (best and median reported)")
    args = parser.parse_args()
    print(machine())
    print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    tmp = Path(tempfile.mkdtemp(prefix="tempora-bench-timing-"))
    try:
        measured = tmp / "measured"
        measured_copy(measured)
        for src in (DEMO, measured):
            run(["sweep", str(src), "--out", str(tmp / "warm")])  # the trace cache and the kernels' JIT cache
            run(["sweep", str(src), "--intervals", "--out", str(tmp / "warm")])
        rows = [
            ("(a) sweep traces/demo (paper grid, warm)", ["sweep", str(DEMO), "--out", str(tmp / "s0")]),
            ("(b) sweep traces/demo --intervals (no timing data)", ["sweep", str(DEMO), "--intervals", "--out", str(tmp / "s1")]),
            ("(b) sweep measured copy (paper grid, warm)", ["sweep", str(measured), "--out", str(tmp / "s2")]),
            (
                "(b) sweep measured copy --intervals (20 timing replicates)",
                ["sweep", str(measured), "--intervals", "--out", str(tmp / "s3")],
            ),
            ("(c) report traces/demo", ["report", str(DEMO), "--out", str(tmp / "r0")]),
            ("(c) report measured copy (20 timing replicates)", ["report", str(measured), "--out", str(tmp / "r1")]),
            ("(d) advise traces/demo --rho 0.6", ["advise", str(DEMO), "--rho", "0.6"]),
            ("(d) advise measured copy --rho 0.6", ["advise", str(measured), "--rho", "0.6"]),
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
