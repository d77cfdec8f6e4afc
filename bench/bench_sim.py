"""Benchmark of the simulator (``make bench``): kernels vs the plain-Python oracle.

Generates synthetic traces (trace schema v2) in a temporary directory (paper-shaped timing profiles,
see ``tempora_sim.sweeps.synthetic``) and measures, with ``time.perf_counter``:

(a) the paper grid (16 scenarios × 10 methods × 15 episodes × 781 batches) in kernel time
    after JIT, the whole warm CLI run (a fresh ``tempora-sim sweep`` process: imports, read,
    replay, write, print), and the cold Numba compile (empty cache directory);
(b) kernel speed vs the plain-Python oracle on the paper grid, and end to end on a dense
    300-scenario sweep (100 ρ + 100 T + 100 B) of the same traces;
(c) 1,000 ρ values over the same traces;
(d) one 1,000,000-batch trace × 100 values per protocol, with the scaling in N and grid size;
(e) the warm start-to-finish CLI with *exact* frozen evaluation, ten traces × 15 episodes × 781
    batches with 20 checkpoints each scored on every later batch (≈ 2.4 M rows): the paper grid
    (``tempora-sim sweep --protocol all``, target < 1 s wall) and a 300-value dense grid
    (target < 1.5 s wall), as medians of repeated runs, warm (Numba's kernel cache and the
    trace cache filled), and the paper grid again with the trace cache off. The first line
    says whether scipy is installed: Numba's import then loads scipy.linalg (≈ 0.2 s a run).

Synthetic traces are written in schema v2. Kernel timings are the best of several repetitions (noise on a shared machine only ever adds
time) with the median printed beside them. Run: ``python bench/bench_sim.py [--full]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import polars
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tempora_sim.sweeps.replay import run_sweep  # noqa: E402
from tempora_sim.sweeps.synthetic import CORRUPTIONS, PROFILES, write_trace, write_trace_set  # noqa: E402
from tempora_sim.sweeps.traces import load_traces  # noqa: E402

PAPER = dict(protocols="discrete,continuous,amortised")  # default grids: 5 ρ + 5 T + 6 B = 16 scenarios
RESULTS: list[tuple[str, str, str, bool | None]] = []


def record(name: str, measured: str, target: str, ok: bool | None) -> None:
    RESULTS.append((name, measured, target, ok))
    flag = "" if ok is None else ("PASS" if ok else "FAIL")
    print(f"  {name:<58} {measured:>26}   {target:<12} {flag}", flush=True)


def timed_sweeps(source, repeat: int, **kwargs):
    kernel, total, res = [], [], None
    for _ in range(repeat):
        res = run_sweep(source, **kwargs)
        kernel.append(res.stats.kernel_s)
        total.append(res.stats.total_s)
    return res, kernel, total


def ms(x: float) -> str:
    return f"{x * 1e3:,.1f} ms"


def cli_run(trace_dir: Path, out: Path, env: dict | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds of one ``tempora-sim sweep`` process, and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tempora_sim.commands.main", "sweep", str(trace_dir), "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})},
        check=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


#: Checkpoints of the exact-frozen set: 20 per episode, like a tracer run with --frozen-sample all.
EXACT_CHECKPOINTS = tuple(range(16)) + (16, 32, 64, 128)


def write_exact_frozen_set(directory: Path) -> int:
    """Ten paper-shaped traces with every later batch scored at every checkpoint; returns rows."""
    paths = write_trace_set(
        directory, tuple(PROFILES), num_batches=781, episodes=CORRUPTIONS, checkpoints=EXACT_CHECKPOINTS, frozen_eval="all"
    )
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def cli_wall(args: list[str], runs: int, env: dict | None = None) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``runs`` warm ``tempora-sim`` processes (after one untimed run,
    which also fills the trace cache when ``env`` turns it on)."""
    cmd = [sys.executable, "-m", "tempora_sim.commands.main", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    subprocess.run(cmd, capture_output=True, env=env, check=True)  # warm: Numba cache, page cache
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=env, check=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return walls, cpus


def machine_line() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    # Numba's import loads scipy.linalg when scipy is installed (a BLAS check), ≈ 0.2 s of every
    # CLI run; a simulator-only install (`pip install tempora-tta`) has no scipy
    scipy = "scipy installed: Numba's import loads scipy.linalg" if importlib.util.find_spec("scipy") else "no scipy"
    return (
        f"{cpu}, {os.cpu_count()} CPU cores (os.cpu_count()), load average "
        f"{os.getloadavg()[0]:.1f}; Python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"polars {polars.__version__}, Numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads); {scipy}"
    )


def bench_exact_frozen(tmp: Path, runs: int) -> None:
    """(e): the warm CLI over the exact-frozen set, paper grid and 300-value dense grid."""
    exact = tmp / "exact"
    t0 = time.perf_counter()
    rows = write_exact_frozen_set(exact)
    print(
        f"\n  exact-frozen set: 10 traces × 15 episodes × 781 batches, {len(EXACT_CHECKPOINTS)} checkpoints "
        f"on every later batch: {rows / 1e6:.2f} M rows (written in {time.perf_counter() - t0:.1f} s)"
    )
    dense = {"--rho": np.linspace(0.05, 1.5, 100), "--T": np.linspace(45, 2000, 100), "--B": np.linspace(0, 40000, 100)}
    dense_args = [a for flag, vals in dense.items() for a in (flag, ",".join(f"{v:.6g}" for v in vals))]
    # warm = Numba's kernel cache and the trace cache (tempora_sim.sweeps.trace_cache, in a folder of
    # this run) filled by the untimed first run; the uncached row reads every file each time
    cached = {"TEMPORA_TRACE_CACHE": str(tmp / "trace-cache")}
    uncached = {"TEMPORA_TRACE_CACHE": "off"}
    for label, extra, env, target in (
        ("paper grid", [], cached, 1.0),
        ("300-value dense grid", dense_args, cached, 1.5),
        ("paper grid, trace cache off", [], uncached, None),
    ):
        walls, cpus = cli_wall(["sweep", str(exact), "--protocol", "all", *extra], runs, env)
        med = statistics.median(walls)
        record(
            f"(e) warm CLI, exact frozen, {label} (median of {runs})",
            f"{med:.2f} s (min {min(walls):.2f}, CPU {statistics.median(cpus):.2f} s)",
            f"< {target:g} s" if target else "reported",
            med < target if target else None,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="run the Python reference over all 300 dense scenarios instead of 1 in 5")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--cli-runs", type=int, default=7, help="warm CLI runs per measurement in (e)")
    parser.add_argument("--only-exact", action="store_true", help="run only (e), the exact-frozen CLI benchmarks")
    args = parser.parse_args()

    print(f"tempora-sim benchmark — {machine_line()}")
    with tempfile.TemporaryDirectory(prefix="tempora-bench-") as tmp:
        tmp = Path(tmp)
        if args.only_exact:
            bench_exact_frozen(tmp, args.cli_runs)
            summary()
            return
        paper_dir = tmp / "paper"
        t0 = time.perf_counter()
        write_trace_set(paper_dir, tuple(PROFILES), num_batches=781, episodes=CORRUPTIONS)
        traces = load_traces(paper_dir)
        print(
            f"  synthetic paper set: {len(traces)} traces × 15 episodes × 781 batches "
            f"(written and loaded in {time.perf_counter() - t0:.1f} s)\n"
        )
        print(f"  {'measurement':<58} {'measured':>26}   {'target':<12}")

        # ---- (a) -------------------------------------------------------------------------
        cold_cache = tmp / "numba-cold-cache"
        wall, cpu, out = cli_run(paper_dir, tmp / "out-cold", {"NUMBA_CACHE_DIR": str(cold_cache)})
        jit = re.search(r"\+(\d+) ms JIT", out)
        record("(a) cold Numba compile (empty cache), first CLI run", f"{int(jit.group(1)):,} ms JIT" if jit else "n/a", "reported", None)
        run_sweep(traces, **PAPER)  # JIT / cache load in this process
        res, kernel, total = timed_sweeps(traces, args.repeat, **PAPER)
        events = res.stats.batch_events
        record(
            f"(a) paper grid kernels: {res.stats.evaluations:,} evals, {events / 1e6:.2f} M batch events",
            f"{ms(min(kernel))} (median {ms(statistics.median(kernel))})",
            "≤ 5 ms",
            min(kernel) <= 5e-3,
        )
        cli_run(paper_dir, tmp / "out-warm")  # make sure this process's cache is warm
        runs = [cli_run(paper_dir, tmp / f"out-warm{i}") for i in range(3)]
        best_wall = min(r[0] for r in runs)
        best_cpu = min(r[1] for r in runs)
        record(
            "(a) warm CLI run: imports+read+replay+write+print (wall)",
            f"{best_wall:.2f} s (CPU {best_cpu:.2f} s)",
            "≤ 2 s",
            best_wall <= 2.0,
        )

        # ---- (b) -------------------------------------------------------------------------
        ref = run_sweep(traces, engine="python", **PAPER)
        speedup = ref.stats.kernel_s / min(kernel)
        record("(b) plain-Python reference, paper grid (replay only)", ms(ref.stats.kernel_s), "", None)
        record("(b) kernel speed-up vs reference, paper grid", f"{speedup:,.0f}×", "≥ 100×", speedup >= 100)

        dense = dict(rho=np.linspace(0.05, 1.5, 100), T_ms=np.linspace(45, 2000, 100), B_ms=np.linspace(0, 40000, 100))
        as_str = {k: ",".join(f"{v:.6g}" for v in vals) for k, vals in dense.items()}
        fast_e2e = []
        for _ in range(3):
            t0 = time.perf_counter()
            fast = run_sweep(paper_dir, protocols="all", **as_str)  # from the files: load + replay + assemble
            fast_e2e.append(time.perf_counter() - t0)
        step = 1 if args.full else 5
        sub = {k: ",".join(f"{v:.6g}" for v in vals[::step]) for k, vals in dense.items()}
        t0 = time.perf_counter()
        slow = run_sweep(paper_dir, protocols="all", engine="python", **sub)
        slow_e2e = time.perf_counter() - t0
        load_and_rest = slow_e2e - slow.stats.kernel_s
        slow_full = load_and_rest + slow.stats.kernel_s * step
        note = "" if step == 1 else f" (replay ×{step} from 1 in {step} values)"
        record(f"(b) dense 300-scenario sweep end to end, kernels ({fast.stats.evaluations:,} evals)", f"{min(fast_e2e):.2f} s", "", None)
        record(f"(b) same with the Python reference{note}", f"{slow_full:.1f} s", "", None)
        record("(b) end-to-end speed-up, dense sweep", f"{slow_full / min(fast_e2e):,.0f}×", "≥ 5×", slow_full / min(fast_e2e) >= 5)

        # ---- (c) -------------------------------------------------------------------------
        rho1000 = ",".join(f"{v:.6g}" for v in np.linspace(0.02, 2.0, 1000))
        run_sweep(traces, protocols="discrete", rho=rho1000)
        _, k1000, t1000 = timed_sweeps(traces, 5, protocols="discrete", rho=rho1000)
        record(
            "(c) 1,000 ρ values × 150 episodes (sweep incl. 151k-row frame)",
            f"{min(t1000):.3f} s (kernel {ms(min(k1000))})",
            "≤ 0.5 s",
            min(t1000) <= 0.5,
        )

        # ---- (d) -------------------------------------------------------------------------
        print()
        big_dir = tmp / "big"
        lam = 39.9
        ck = (0, 10, 100, 1000, 10_000, 100_000)
        grid100 = dict(rho=np.linspace(0.05, 1.5, 100), T_ms=np.linspace(45, 2000, 100), B_ms=np.linspace(0, 4e6, 100))
        scaling = []
        for n in (10_000, 100_000, 1_000_000):
            path = write_trace(
                big_dir / f"n{n}" / "tent.parquet", "tent", num_batches=n, episodes=("stream",), checkpoints=ck, frozen_eval=64
            )
            big = load_traces(path)
            for size in (10, 100):
                g = {k: ",".join(f"{v:.6g}" for v in vals[:: 100 // size]) for k, vals in grid100.items()}
                row = {"N": n, "values": size}
                for proto, key in (("discrete", "rho"), ("continuous", "T_ms"), ("amortised", "B_ms")):
                    run_sweep(big, protocols=proto, lambda_ms=lam, **{key: g[key]})
                    _, kern, tot = timed_sweeps(big, 3, protocols=proto, lambda_ms=lam, **{key: g[key]})
                    row[proto] = (min(kern), min(tot))
                scaling.append(row)
        last = scaling[-1]
        worst = max(v[1] for k, v in last.items() if k not in ("N", "values"))
        record("(d) 1 M-batch trace × 100 values, slowest protocol (sweep)", f"{worst:.3f} s", "≤ 2 s", worst <= 2.0)
        print("\n  (d) scaling — kernel time per protocol call (best of 3)")
        print(f"  {'N batches':>10} {'values':>7} {'discrete':>12} {'continuous':>12} {'amortised':>12} {'batch events/s (discrete)':>26}")
        for row in scaling:
            rate = row["N"] * row["values"] / row["discrete"][0]
            print(
                f"  {row['N']:>10,} {row['values']:>7} {ms(row['discrete'][0]):>12} {ms(row['continuous'][0]):>12}"
                f" {ms(row['amortised'][0]):>12} {rate / 1e6:>23,.0f} M"
            )

        # ---- (e) -------------------------------------------------------------------------
        bench_exact_frozen(tmp, args.cli_runs)
    summary()


def summary() -> None:
    failed = [r for r in RESULTS if r[3] is False]
    print(
        f"\n  {sum(r[3] is True for r in RESULTS)} targets met, {len(failed)} missed"
        + ("" if not failed else ": " + "; ".join(r[0] for r in failed))
    )


if __name__ == "__main__":
    main()
