"""Benchmark of the scenario replays (``make bench``): non-periodic arrivals vs periodic.

The paper grid's discrete protocol (10 methods × 15 episodes × 781 batches × 5 ρ values),
replayed with periodic arrivals (the O(1) kernel) and with Poisson arrivals (the general
kernel over generated arrival times, generation included), on synthetic traces with the
paper's timing profiles. Target: Poisson within 2× of periodic. Also times the combined
protocols on the paper's grids (ρ × T and ρ × B). Times are the median of several warm runs
of the whole ``run_sweep`` call (trace loading excluded: traces are loaded once).
Run: ``python bench/bench_arrivals.py``.
"""

from __future__ import annotations

import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tempora_sim.sweeps.replay import run_sweep  # noqa: E402
from tempora_sim.sweeps.synthetic import CORRUPTIONS, PROFILES, write_trace_set  # noqa: E402
from tempora_sim.sweeps.traces import load_traces  # noqa: E402

METHODS = tuple(PROFILES)[:10]


def median_s(source, repeat=7, **kw) -> tuple[float, float]:
    run_sweep(source, **kw)  # JIT / cache load
    wall, kern = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = run_sweep(source, **kw)
        wall.append(time.perf_counter() - t0)
        kern.append(res.stats.kernel_s)
    return statistics.median(wall), statistics.median(kern)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        write_trace_set(tmp, METHODS, episodes=CORRUPTIONS, num_batches=781, frozen_eval=16)
        traces = load_traces(tmp)
        cpu = platform.processor() or platform.machine()
        print(f"scenario replay benchmark — {cpu}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}")
        per_w, per_k = median_s(traces, protocols="discrete")
        poi_w, poi_k = median_s(traces, protocols="discrete", arrivals="poisson:1")
        ratio = poi_w / per_w
        print(f"  discrete, paper ρ grid, periodic      wall {per_w * 1e3:8.1f} ms   kernels {per_k * 1e3:7.1f} ms")
        print(f"  discrete, paper ρ grid, poisson       wall {poi_w * 1e3:8.1f} ms   kernels {poi_k * 1e3:7.1f} ms")
        print(f"  poisson / periodic (whole sweep)      {ratio:.2f}×   target ≤ 2×   {'PASS' if ratio <= 2 else 'FAIL'}")
        dc_w, _ = median_s(traces, repeat=3, protocols="discrete-continuous")
        da_w, _ = median_s(traces, repeat=3, protocols="discrete-amortised")
        print(f"  discrete-continuous, 5 ρ × 5 T        wall {dc_w * 1e3:8.1f} ms")
        print(f"  discrete-amortised, 5 ρ × 6 B         wall {da_w * 1e3:8.1f} ms")
        return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
