"""Benchmark of start-up (``make bench``): ``--help`` of both commands, in fresh processes.

What a user waits for before the first line of either tool: interpreter start, imports, click.
Each run is a new ``python -m tempora_trace.cli --help`` / ``python -m tempora_sim.commands.main --help``
process; the table gives the median and the minimum wall time over ``--runs`` runs (noise on a
shared machine only adds time). ``--against SRC`` times a second source tree (another
checkout's ``src/``) in the same loop, interleaved run by run, for a before/after comparison
on equal terms. Run: ``python bench/bench_help.py [--runs 15] [--against /path/to/old/src]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "tempora-trace --help": ["-m", "tempora_trace.cli", "--help"],
    "tempora-sim --help": ["-m", "tempora_sim.commands.main", "--help"],
}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_once(args: list[str], src: Path, cwd: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(src))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="processes per command and tree (default 15)")
    parser.add_argument("--against", type=Path, default=None, help="another source tree to time in the same loop")
    args = parser.parse_args()
    trees = {"this tree": ROOT / "src"}
    if args.against is not None:
        trees["--against"] = args.against.resolve()
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}; load average {os.getloadavg()[0]:.1f}")
    times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in COMMANDS for t in trees}
    with tempfile.TemporaryDirectory() as cwd:  # outside the repository: nothing on the path by accident
        for argv in COMMANDS.values():  # one untimed run each: bytecode caches written
            for src in trees.values():
                time_once(argv, src, cwd)
        for _ in range(args.runs):
            for name, argv in COMMANDS.items():
                for tree, src in trees.items():
                    times[(name, tree)].append(time_once(argv, src, cwd))
    print("| command | tree | median | min | runs |\n|---|---|---|---|---|")
    for (name, tree), ts in times.items():
        print(f"| `{name}` | {tree} | {statistics.median(ts) * 1000:.0f} ms | {min(ts) * 1000:.0f} ms | {len(ts)} |")


if __name__ == "__main__":
    main()
