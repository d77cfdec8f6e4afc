"""Benchmark of the heavy answers (``make bench``): ``tempora-sim explore``, ``advise`` and
``report`` on the committed demo set, each in a fresh process of this checkout, as a user runs
them. Every one replays the traces' measured timing variability (20 timing replicates).

Targets (docs/results/performance.md, an idle 2-core machine): the explore page built in
≤ 10 s, ``advise traces/demo --rho 0.5`` in ≤ 2 s of CPU warm, the report in ≤ 30 s.

Warm: one untimed run of each command first (bytecode and Numba caches), then the median of
``--runs`` runs, wall and CPU seconds (user + system of the child: what a loaded machine
inflates least). The load average is printed before and after; above 1.5 the figures are said
to be measured under load. ``--baseline SRC`` times another checkout's ``src`` folder in turn
with this one (before, after, before, …), so a change is compared within one window.

Run: ``python bench/bench_answers.py [--runs 3] [--only explore,advise] [--baseline ../other/src]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_stats import machine  # noqa: E402

DEMO = ROOT / "traces" / "demo"
#: A load average (one minute) above this on a 2-core machine: the figures are under load.
LOADED = 1.5


def commands(out: Path) -> dict[str, list[str]]:
    """Each answer's arguments (after ``tempora-sim``), writing under ``out``."""
    return {
        "explore": ["explore", str(DEMO), "--out", str(out / "explore.html"), "--quiet"],
        "advise": ["advise", str(DEMO), "--rho", "0.5"],
        "report": ["report", str(DEMO), "--out", str(out / "report")],
    }


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(src: Path, args: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh ``tempora-sim`` process importing from ``src``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])]))
    c0, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tempora_sim.commands.main", *args], env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if done.returncode:
        raise SystemExit(f"{args[0]} failed ({src}): {done.stderr.strip()}")
    return wall, cpu


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs per command after the warm-up (median reported)")
    ap.add_argument("--only", default="explore,advise,report", help="comma-separated: explore, advise, report")
    ap.add_argument("--baseline", type=Path, help="another checkout's src folder, timed in turn with this one")
    a = ap.parse_args()
    if not DEMO.is_dir():
        print(f"no demo traces at {DEMO}", file=sys.stderr)
        return 2
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in commands(Path())]
    if unknown:
        print(f"--only: unknown command(s) {', '.join(unknown)} (choose from {', '.join(commands(Path()))})", file=sys.stderr)
        return 2
    sources = {"this checkout": ROOT / "src"}
    if a.baseline is not None:
        if not (a.baseline / "tempora_sim").is_dir():
            print(f"--baseline: no tempora_sim package in {a.baseline}", file=sys.stderr)
            return 2
        sources = {"baseline": a.baseline.resolve(), **sources}
    import numba

    print(f"machine: {machine()}, numba {numba.__version__}")
    before = load()
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cmds = commands(out)
        for name in names:
            for src in sources.values():
                run_once(src, cmds[name])  # warm-up: bytecode, Numba's cache, the page's assets
            for _ in range(a.runs):
                for label, src in sources.items():  # alternating: both see the same window of load
                    if name == "report":
                        shutil.rmtree(out / "report", ignore_errors=True)
                    times.setdefault((name, label), []).append(run_once(src, cmds[name]))
    after = load()
    state = "under load" if max(before, after) > LOADED else "idle"
    print(f"load average {before:.2f} before, {after:.2f} after: {state}")
    print(f"{'answer':<9} {'code':<14} {'runs':>4} {'median wall s':>14} {'median CPU s':>13} {'CPU range s':>14}")
    for (name, label), runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(
            f"{name:<9} {label:<14} {len(runs):>4} {statistics.median(walls):>14.2f} {statistics.median(cpus):>13.2f}"
            f" {min(cpus):>6.2f}–{max(cpus):<6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
