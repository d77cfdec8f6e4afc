"""Tracer benchmark (``make bench``): is the harness invisible, and what do checkpoints cost?

1. Instrumentation overhead: the tracer's ``standard`` δ versus a bare ``model(x)`` loop
   (same model, batches, device and warm-up; both synchronise around the forward).
   a. paired per batch inside one process on in-memory batches (robust to machine load);
   b. whole runs on a JPEG folder in the ImageNet-C layout, generated on the fly: complete
      ``standard`` trace runs (staging, decode workers, checkpoints off) versus a bare loop
      that decodes each batch serially between forwards. Targets: tracer δ̄ within 2 % of
      the bare loop's, tracer λ = mean + 6σ within 5 % of the bare loop's mean + 6σ. This is
      the comparison that exposes any loading that overlaps a timed event.
2. Warm device: is the first event after a pause slower than steady state? Pauses of
   0.05–5 s, idle (sleeping) or busy (decoding into fresh memory, as staging does), each
   followed by two events, with and without the tracer's untimed warm-up forward, in
   shuffled order; ratios to the median of the events just before the pause.
3. Frozen-checkpoint cost with the default schedule and ``--frozen-sample 32``: extra
   forward passes as a multiple of the adapt pass's (target ≤ 1.5× at the paper's N = 781),
   plus the measured time of the frozen evaluations relative to the adapt pass for ``tent``.

Runs on the CPU, and on CUDA too when it is present (``--devices`` overrides). Timing does
not depend on image content or weights, so the data are synthetic and the JPEG model is
randomly initialised. On a shared machine every figure is an upper bound: other processes
only ever add time.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tempora_trace.checkpoints import default_schedule, sample_steps  # noqa: E402
from tempora_trace.config import TraceConfig  # noqa: E402
from tempora_trace.data import get_dataset  # noqa: E402
from tempora_trace.data.streams import batch_order  # noqa: E402
from tempora_trace.data.synthetic import write_imagenet_c_folder  # noqa: E402
from tempora_trace.errors import WeightsError  # noqa: E402
from tempora_trace.methods import MethodContext, TTAMethod, get_method  # noqa: E402
from tempora_trace.models import get_model  # noqa: E402
from tempora_trace.runner import trace_run  # noqa: E402
from tempora_trace.timing import DeviceClock, describe_device, resolve_device, timed_event  # noqa: E402


def make_data(root: Path, batches: int, batch_size: int) -> None:
    rng = np.random.default_rng(0)
    per = batches * batch_size
    np.save(root / "labels.npy", np.tile(rng.integers(0, 10, per), 5).astype(np.int64))
    np.save(root / "fog.npy", rng.integers(0, 256, (5 * per, 32, 32, 3), dtype=np.uint8))


def pick_weights(model: str) -> str | None:
    try:
        get_model(model)
        return None
    except WeightsError:
        return "random"


def _model_and_batches(model_name: str, weights, root: Path, batch_size: int, device: torch.device, count: int):
    torch.manual_seed(2025)
    model, _ = get_model(model_name, weights, num_classes=10)
    model.to(device).eval()
    source = get_dataset("cifar10-c").open("fog", 5, root).source
    order = batch_order(len(source), batch_size, 2025, "fog", max_batches=count)
    return model, [source.get_batch(idx)[0].to(device) for idx in order]


def paired_overhead(model_name: str, weights, root: Path, batch_size: int, device: torch.device, count: int):
    """Per batch: bare ``model(x)`` and the tracer's ``timed_event`` on ``standard``, in
    alternating order; returns the two lists of ms."""
    model, batches = _model_and_batches(model_name, weights, root, batch_size, device, count)
    method = get_method("standard")(model, MethodContext(num_classes=10, dataset_family="cifar", device=str(device)))
    clock = DeviceClock(device)
    bare, traced = [], []
    with torch.no_grad():
        for _ in range(5):
            model(batches[0])
            timed_event(method, batches[0], clock)
    for k in range(count):
        x = batches[k % len(batches)]
        for which in (0, 1) if k % 2 == 0 else (1, 0):
            if which == 0:
                with torch.no_grad():
                    clock.sync()
                    t0 = time.perf_counter_ns()
                    model(x)
                    clock.sync()
                    bare.append((time.perf_counter_ns() - t0) / 1e6)
            else:
                ev = timed_event(method, x, clock)
                traced.append(ev.e_ms + ev.l_ms)
    return bare, traced


class _NoOp(TTAMethod):
    """A method that does nothing: timing it measures the harness alone."""

    name = "noop"

    def __init__(self):
        super().__init__(torch.nn.Identity(), MethodContext(num_classes=10))
        self._finish_setup()

    def predict(self, x):
        return x


def harness_cost_us(device: torch.device, events: int = 2000) -> float:
    """Median µs of one timed event (reset_peak, 3 syncs, 3 clock reads, two method calls)
    around a method that does nothing."""
    clock, method, x = DeviceClock(device), _NoOp(), torch.zeros(1, device=device)
    costs = [timed_event(method, x, clock) for _ in range(events)]
    return statistics.median(1e3 * (ev.e_ms + ev.l_ms) for ev in costs)


def bare_jpeg_loop(model_name: str, root: Path, batch_size: int, device: torch.device, warmup: int, count: int) -> list[float]:
    """Per-batch ms of ``model(x)`` alone (eval, no_grad, a sync on each side) over the same
    batches the tracer sees, each decoded serially right before its forward (nothing else
    runs while it is timed)."""
    torch.manual_seed(2025)
    model, _ = get_model(model_name, "random", num_classes=1000)
    model.to(device).eval()
    source = get_dataset("imagenet-c").open("fog", 5, root).source
    order = batch_order(len(source), batch_size, 2025, "fog", max_batches=count)
    clock = DeviceClock(device)
    times = []
    with torch.no_grad():
        first = source.get_batch(order[0])[0].to(device)
        for _ in range(warmup):
            model(first + 0.25 * torch.randn_like(first))
        for idx in order:
            x = source.get_batch(idx)[0].to(device)
            clock.sync()
            t0 = time.perf_counter_ns()
            model(x)
            clock.sync()
            times.append((time.perf_counter_ns() - t0) / 1e6)
    return times


def lam(values) -> float:
    """mean + 6σ (population σ), the paper's λ."""
    return statistics.fmean(values) + 6 * statistics.pstdev(values)


def jpeg_runs(args, device: torch.device, tmp: Path) -> None:
    """1b: whole tracer runs versus bare loops on a JPEG folder, alternating, ``repeats`` each."""
    model = args.jpeg_model or ("resnet50" if device.type == "cuda" else "resnet18")
    bs = args.jpeg_batch_size or (64 if device.type == "cuda" else 16)
    count = args.jpeg_batches or (50 if device.type == "cuda" else 20)
    root = tmp / "jpeg"
    if not root.exists():
        t0 = time.perf_counter()
        write_imagenet_c_folder(root, ["fog"], max(count, 2) * max(bs, 64))
        print(f"[jpeg] generated {max(count, 2) * max(bs, 64)} JPEGs (224 px, ImageNet-C layout) in {time.perf_counter() - t0:.1f} s")
    bare_runs, traced_runs, walls = [], [], []
    for r in range(args.repeats):
        bare_runs.append(bare_jpeg_loop(model, root, bs, device, 5, count))
        cfg = TraceConfig(
            method="standard",
            dataset="imagenet-c",
            model=model,
            weights="random",
            data_root=str(root),
            domains=["fog"],
            batch_size=bs,
            max_batches=count,
            device=str(device),
            workers=args.workers,
            out=str(tmp / f"jpeg-std-{device.type}-{r}"),
            default_checkpoints=False,
            quiet=True,
        )
        t0 = time.perf_counter()
        d, adapt, _ = adapt_rows(trace_run(cfg))
        walls.append(time.perf_counter() - t0)
        traced_runs.append([d["delta_ms"][i] for i in adapt])
    # The least-disturbed run of each kind (other processes only ever add time).
    bare = min(bare_runs, key=statistics.fmean)
    traced = min(traced_runs, key=statistics.fmean)
    bare_l, traced_l = min(lam(b) for b in bare_runs), min(lam(t) for t in traced_runs)
    d_mean = 100 * (statistics.fmean(traced) / statistics.fmean(bare) - 1)
    d_lam = 100 * (traced_l / bare_l - 1)
    print(
        f"[overhead, JPEG runs] {model}, batch {bs}, {count} batches, {args.repeats} alternating runs each "
        f"(tracer decode workers: {'default' if args.workers is None else args.workers}):"
    )
    print(
        f"    bare model(x) loop: δ̄ {statistics.fmean(bare):.3f} ms, median {statistics.median(bare):.3f}, σ {statistics.pstdev(bare):.3f}, "
        f"mean+6σ {bare_l:.3f} ms"
    )
    print(
        f"    tracer standard:    δ̄ {statistics.fmean(traced):.3f} ms, median {statistics.median(traced):.3f}, σ {statistics.pstdev(traced):.3f}, "
        f"λ {traced_l:.3f} ms"
    )
    print(
        f"    δ̄ difference {d_mean:+.2f} % (target within ±2 %: {'met' if abs(d_mean) <= 2 else 'NOT met'}); "
        f"λ difference {d_lam:+.2f} % (target within ±5 %: {'met' if abs(d_lam) <= 5 else 'NOT met'})"
    )
    print(
        f"    per-run δ̄ bare {', '.join(f'{statistics.fmean(b):.2f}' for b in bare_runs)}; "
        f"traced {', '.join(f'{statistics.fmean(t):.2f}' for t in traced_runs)}; "
        f"tracer wall per run {', '.join(f'{w:.1f}' for w in walls)} s"
    )


def machine_line(device: torch.device) -> str:
    return (
        f"machine: {describe_device(device)}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, Python {platform.python_version()}"
    )


def adapt_rows(path: Path):
    d = pq.read_table(path).to_pydict()
    adapt = [i for i, p in enumerate(d["phase"]) if p == "adapt"]
    frozen = [i for i, p in enumerate(d["phase"]) if p == "frozen"]
    return d, adapt, frozen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default=None, help="comma-separated (default: cpu, plus cuda when present)")
    p.add_argument("--model", default="demo-resnet", help="model of the paired and checkpoint parts")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--batches", type=int, default=40, help="batches per run for the paired comparison")
    p.add_argument("--episode", type=int, default=156, help="episode length N for the checkpoint-cost run (demo: 156)")
    p.add_argument("--jpeg-model", default=None, help="JPEG runs: model (default resnet18 on CPU, resnet50 on CUDA)")
    p.add_argument("--jpeg-batch-size", type=int, default=None, help="JPEG runs: batch size (default 16 on CPU, 64 on CUDA)")
    p.add_argument("--jpeg-batches", type=int, default=None, help="JPEG runs: batches per run (default 20 on CPU, 50 on CUDA)")
    p.add_argument("--workers", type=int, default=None, help="tracer decode workers in the JPEG runs (default: the tracer's)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warm-repeats", type=int, default=8, help="repeats of each pause in the warm-device part")
    p.add_argument("--warm-long", action="store_true", help="warm-device part: add 5 s pauses")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: paired, jpeg, warm, checkpoints")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    names = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    skip = set(filter(None, args.skip.split(",")))
    weights = pick_weights(args.model)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "data"
        data.mkdir()
        make_data(data, max(args.batches, args.episode), args.batch_size)
        for name in names:
            device = resolve_device(name)
            print(f"tracer benchmark on {device}, {args.threads} thread(s); {machine_line(device)}")
            if "paired" not in skip:
                print(f"  model {args.model} ({'random init' if weights else 'trained weights'}), batch {args.batch_size}")
                harness = harness_cost_us(device)
                bare_p, traced_p = paired_overhead(args.model, weights, data, args.batch_size, device, args.batches * args.repeats)
                ratios = [t / b for b, t in zip(bare_p, traced_p)]
                print(
                    f"[overhead, paired] {len(ratios)} batches: bare model(x) median {statistics.median(bare_p):.3f} ms, "
                    f"tracer event (sync, predict, sync, adapt, sync) median {statistics.median(traced_p):.3f} ms; "
                    f"median per-batch ratio {100 * (statistics.median(ratios) - 1):+.2f} %, "
                    f"mean {100 * (statistics.fmean(traced_p) / statistics.fmean(bare_p) - 1):+.2f} %  (target ≤ 2 %)"
                )
                print(
                    f"[overhead, harness] one timed event around a no-op method: {harness:.1f} µs median = "
                    f"{100 * harness / 1e3 / statistics.median(bare_p):.4f} % of a bare forward"
                )
            if "jpeg" not in skip:
                jpeg_runs(args, device, tmp)
            if "warm" not in skip:
                warm_device(args, weights, data, device)
            if "checkpoints" not in skip:
                checkpoint_cost(args, weights, data, tmp, device)


def warm_device(args, weights, data: Path, device: torch.device) -> None:
    """Part 2: the first forward after a pause, relative to the steady forwards just before it."""
    model, batches = _model_and_batches(args.model, weights, data, args.batch_size, device, 4)
    clock = DeviceClock(device)

    def event(x) -> tuple[float, float]:
        """(wall ms, this thread's CPU ms): on a shared machine the CPU time is immune to
        preemption by other processes, yet still shows cache misses and clock slow-downs."""
        clock.sync()
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        with torch.no_grad():
            model(x)
        clock.sync()
        return (time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6

    def busy(seconds: float) -> None:  # decode-like work into fresh host memory
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            a = np.random.randint(0, 255, (16 * 2**20,), dtype=np.uint8)
            torch.from_numpy(a).float().div_(255.0)

    pauses = [0.0, 0.05, 0.5, 2.0, 5.0] if args.warm_long else [0.0, 0.05, 0.5, 2.0]
    cases = [
        (p, kind, rewarm)
        for p in pauses
        for kind in ("idle", "busy")
        for rewarm in (False, True)
        if not (p == 0.0 and (kind == "busy" or rewarm))
    ]
    cases = cases * args.warm_repeats
    random.Random(0).shuffle(cases)
    results: dict[tuple, list[tuple[float, ...]]] = {}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(20):
            event(batches[0])
        for p, kind, rewarm in cases:
            steady = [event(batches[k % 4]) for k in range(8)][-5:]
            (time.sleep if kind == "idle" else busy)(p)
            if rewarm:
                event(batches[3])  # untimed in the tracer: one frozen forward
            first, second = event(batches[0]), event(batches[1])
            wall = statistics.median(w for w, _ in steady)
            cpu = statistics.median(c for _, c in steady)
            results.setdefault((p, kind, rewarm), []).append((first[0] / wall, second[0] / wall, first[1] / cpu, second[1] / cpu))
    finally:
        if gc_was:
            gc.enable()
    print(
        f"[warm device] {args.model}, batch {args.batch_size}: the 1st and 2nd forward after a pause relative to the median of "
        f"the 5 forwards before it, median over {args.warm_repeats} shuffled repeats; wall clock and this thread's CPU time"
    )
    for key in sorted(results):
        p, kind, rewarm = key
        r = results[key]
        med = [100 * (statistics.median(v[i] for v in r) - 1) for i in range(4)]
        label = "none (control)" if p == 0 else f"{p:g} s {kind}" + (" + warm-up forward" if rewarm else "")
        cpu = f"   CPU time: 1st {med[2]:+6.1f} %  2nd {med[3]:+6.1f} %" if device.type == "cpu" else ""
        print(f"    {label:<32} wall: 1st {med[0]:+6.1f} %  2nd {med[1]:+6.1f} %{cpu}")


def checkpoint_cost(args, weights, data: Path, tmp: Path, device: torch.device) -> None:
    for n in (781, args.episode):
        sched = default_schedule(n)
        extra = sum(len(sample_steps(m, n, 32)) for m in sched)
        print(
            f"[checkpoints] defaults at N = {n}: {len(sched)} checkpoints, {extra} frozen forwards = "
            f"{extra / n:.2f}× the adapt pass's {n} forwards (target ≤ 1.5× at N = 781)"
        )
    timings = {}
    for label, default in (("with", True), ("without", False)):
        cfg = TraceConfig(
            method="tent",
            dataset="cifar10-c",
            model=args.model,
            weights=weights,
            data_root=str(data),
            domains=["fog"],
            batch_size=args.batch_size,
            max_batches=args.episode,
            device=str(device),
            out=str(tmp / f"tent-{label}-{device.type}"),
            default_checkpoints=default,
            quiet=True,
        )
        t0 = time.perf_counter()
        d, adapt, frozen = adapt_rows(trace_run(cfg))
        timings[label] = (time.perf_counter() - t0, d, adapt, frozen)
    wall_with, d, adapt, frozen = timings["with"]
    wall_without = timings["without"][0]
    adapt_ms = sum(d["delta_ms"][i] for i in adapt)
    frozen_ms = sum(d["e_ms"][i] for i in frozen)
    print(
        f"[checkpoints] tent, N = {len(adapt)}: {len(frozen)} frozen forwards ({len(frozen) / len(adapt):.2f}× adapt forwards); "
        f"timed frozen evaluation {frozen_ms / 1e3:.2f} s = {frozen_ms / adapt_ms:.2f}× the timed adapt pass ({adapt_ms / 1e3:.2f} s); "
        f"run wall time {wall_with:.1f} s with checkpoints vs {wall_without:.1f} s without ({wall_with / wall_without:.2f}×)"
    )


if __name__ == "__main__":
    main()
