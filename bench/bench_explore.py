"""Benchmark of the interactive page (``make bench``): ``tempora-sim explore`` on the committed
demo set, then the page in headless Chromium (the distribution's package).

Measures, against the targets of docs/results/performance.md:

(a) build: ``tempora-sim explore traces/demo`` in a fresh process, wall and CPU (target ≤ 10 s
    on two cores);
(b) page size (target ≤ 5 MB);
(c) open: navigation until the page is drawn and ready, median of 3 (target ≤ 2 s);
(d) slider redraw: from the input event to the second painted frame, every slider of every
    protocol view of every group, 15 positions each, median (target ≤ 100 ms);
(e) with ``--paper``: what a paper-sized study weighs, computed on a synthetic one (3 groups
    × 11 methods × 15 corruptions, tempora_sim.sweeps.synthetic), page size and build time.

Run: ``python bench/bench_explore.py [--paper]``. Prints the machine (CPU, cores, load, versions).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_stats import machine as base  # noqa: E402
from helpers.headless import Browser, chromium_version, find_chromium  # noqa: E402
from tempora_sim.sweeps.synthetic import CORRUPTIONS, PROFILES, write_trace  # noqa: E402

DEMO = ROOT / "traces" / "demo"
SIM = [sys.executable, "-m", "tempora_sim.commands.main"]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine() -> str:
    exe = find_chromium()
    return base() + (f"; {chromium_version(exe)}" if exe else "; no Chromium")


def build(traces: Path, out: Path, *extra: str) -> tuple[float, float]:
    c0, t0 = children_cpu(), time.perf_counter()
    run = subprocess.run([*SIM, "explore", str(traces), "--out", str(out), "--quiet", *extra], capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if run.returncode:
        raise SystemExit(f"explore failed: {run.stderr.strip()}")
    return wall, cpu


def browse(page_path: Path, positions: int = 15) -> dict:
    opens, in_page = [], []
    with Browser() as b:
        for _ in range(3):
            p = b.page()
            opens.append(p.open(page_path.as_uri()))
            in_page.append(p.evaluate("tempora.openMs") / 1000)
            p.close()
        p = b.page()
        p.open(page_path.as_uri())
        groups = p.evaluate("tempora.data.groups.length")
        for g in range(groups):
            p.evaluate(
                f"(() => {{ const s = document.getElementById('group'); s.value = '{g}'; s.dispatchEvent(new Event('change')); }})()"
            )
            for proto in p.evaluate("[...document.querySelectorAll('#protocols button')].map(b => b.dataset.p)"):
                p.evaluate(f"document.querySelector('#protocols button[data-p=\"{proto}\"]').click()")
                for which in (1, 2):
                    if p.evaluate(f"document.getElementById('s{which}').style.display") == "none":
                        continue
                    n = int(p.evaluate(f"document.getElementById('slider{which}').max"))
                    for k in range(positions):
                        i = round(k * n / max(positions - 1, 1))
                        p.evaluate(
                            f"(() => {{ const s = document.getElementById('slider{which}'); s.value = '{i}'; "
                            "s.dispatchEvent(new Event('input')); })()"
                        )
                        p.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 0))))")
        redraws = p.evaluate("tempora.redraws")
        errors = p.errors()
    return {"open": opens, "in_page": in_page, "redraws": redraws, "errors": errors}


#: ImageNet-C at batch 64: 50 000 images per corruption.
PAPER_BATCHES = 782


def tracer_schedule(num_batches: int, dense: int = 16) -> list[int]:
    """The tracer's default frozen checkpoints (tempora_trace.checkpoints.default_schedule:
    {0..16} ∪ {⌈16·√2^k⌉} below N), restated here: the simulator side never imports the tracer."""
    steps = set(range(min(dense + 1, num_batches)))
    k = 0
    while (m := math.ceil(dense * math.sqrt(2) ** k - 1e-9)) < num_batches:
        steps.add(m)
        k += 1
    return sorted(steps)


def paper_study(root: Path) -> Path:
    """3 groups × 11 methods × 15 corruptions of synthetic traces (tempora_sim.sweeps.synthetic), with
    ImageNet-C's 782 batches per corruption and the tracer's default checkpoints."""
    methods = dict(PROFILES)
    # an eleventh method: a slower variant of the slowest profile
    methods["sar-slow"] = dataclasses.replace(PROFILES["sar"], l_ms=PROFILES["sar"].l_ms * 1.5)
    for model in ("resnet50", "vit_base_patch16_224", "cifar-resnet18"):
        for name, prof in methods.items():
            write_trace(
                root / model / f"{name}.parquet", name, profile=prof, model=model, episodes=CORRUPTIONS, num_batches=100, frozen_eval=8
            )
    return root


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paper", action="store_true", help="also build a synthetic paper-sized study (3 × 11 × 15)")
    ap.add_argument("--paper-only", action="store_true", help="only the paper-sized estimate")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        page = tmp / "explore.html"
        if args.paper_only:
            study = paper_study(tmp / "paper")
            w, c = build(study, tmp / "paper.html")
            print(
                f"(e) paper-sized synthetic study (3 groups × 11 methods × 15 corruptions × {PAPER_BATCHES} batches): {(tmp / 'paper.html').stat().st_size / 1e6:.2f} MB, built in {w:.1f} s wall, {c:.1f} s CPU"
            )
            return 0
        build(DEMO, page)  # warm: Numba's cache and the trace cache, as a user's second run
        walls, cpus = [], []
        for _ in range(3):
            w, c = build(DEMO, page)
            walls.append(w)
            cpus.append(c)
        size = page.stat().st_size
        print(
            f"(a) build, traces/demo (2 groups): median {statistics.median(walls):.1f} s wall, {statistics.median(cpus):.1f} s CPU (target ≤ 10 s)"
        )
        print(f"(b) page size: {size / 1e6:.2f} MB (target ≤ 5 MB)")
        res = browse(page)
        print(
            f"(c) open: median {statistics.median(res['open']):.2f} s to ready (in the page: {statistics.median(res['in_page']):.2f} s) (target ≤ 2 s)"
        )
        r = sorted(res["redraws"])
        print(
            f"(d) slider redraw: median {statistics.median(r):.1f} ms, p90 {r[int(0.9 * (len(r) - 1))]:.1f} ms, max {r[-1]:.1f} ms "
            f"over {len(r)} moves (target ≤ 100 ms median)"
        )
        if res["errors"]:
            print(f"    console errors: {res['errors']}")
        if args.paper:
            study = paper_study(tmp / "paper")
            w, c = build(study, tmp / "paper.html")
            print(
                f"(e) paper-sized synthetic study (3 groups × 11 methods × 15 corruptions): {(tmp / 'paper.html').stat().st_size / 1e6:.2f} MB, built in {w:.1f} s wall, {c:.1f} s CPU"
            )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TEMPORA_OFFLINE", "1")
    sys.exit(main())
