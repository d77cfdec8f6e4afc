"""Is a difference between two traces of one configuration the process or the moment?
The experiment behind "The machine's speed" in docs/results/validation-runs.md.

    python tools/machine_speed.py sequential [--processes 18]   # one process after another
    python tools/machine_speed.py pairs      [--pairs 4]        # two processes at once, one per core

Every process runs the same configuration (``--method``, default ``standard``; demo-resnet,
``gaussian_noise``, 40 batches, one thread, the steady heap) back to back in blocks of 40
events, with the tracer's speed probe before each block, and prints one JSON line: the median δ
of each block, the probes, the CPU it ran on. ``sequential`` alternates the CPU a process is
pinned to (0, 1, or left to the scheduler) and address-space randomisation (on, off), in a
fixed shuffled order, so a process-level cause (placement, memory layout) would show as a
difference between those conditions. ``pairs`` starts two processes at the same moment, pinned
to cores 0 and 1: if they agree while pairs taken a minute apart do not, the difference is the
machine's speed at the time. ``waits`` stays in one process and rotates, block by block, through
back-to-back events, every event after an idle wait, and waited and back-to-back events
alternating (the tracer's idle pass), for each wait of ``--waits``: the cost of a wait itself,
with the machine's moment taken out. A timing measurement: run it alone on an idle machine.

    python tools/machine_speed.py waits [--waits 2,15,60] [--rounds 4]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 40


def _method_run(method: str):
    """The configuration every design times, built as the tracer builds it (the steady heap
    first), and its first episode's batches staged: (run, batches)."""
    sys.path.insert(0, str(ROOT / "src"))
    from tempora_trace.heap import apply_heap_policy

    apply_heap_policy("steady")
    from tempora_trace.config import TraceConfig
    from tempora_trace.runner import MethodRun

    cfg = TraceConfig(
        method=method,
        dataset="demo",
        model="demo-resnet",
        device="cpu",
        domains=["gaussian_noise"],
        max_batches=BLOCK,
        threads=1,
        quiet=True,
    ).resolved()
    run = MethodRun(cfg, lambda _: None)
    episode = run.episodes[0]
    return run, [b.x for b in run.stager.stage(episode, range(episode.num_batches))]


def worker(method: str, blocks: int) -> None:
    """One process: the events of ``method`` in ``blocks`` blocks, one JSON line on stdout."""
    run, xs = _method_run(method)
    import torch

    from tempora_trace.timing import SpeedProbe, collect_between_events, collector_paused, timed_event

    probe = SpeedProbe(torch.device("cpu"))
    out: dict = {"method": method, "delta_ms": [], "probe_ms": [], "cpu": []}
    with collector_paused():
        run.warm_up()
        for _ in range(blocks):
            out["probe_ms"].append(probe.measure())
            run.method.reset()
            deltas = []
            for x in xs:
                ev = timed_event(run.method, x, run.clock, adapt=True, peak=False)
                deltas.append(ev.e_ms + ev.l_ms)
                del ev
                collect_between_events()
            out["delta_ms"].append(statistics.median(deltas))
            with open("/proc/self/stat") as f:  # field 39: the CPU it last ran on
                out["cpu"].append(int(f.read().rsplit(")", 1)[1].split()[36]))
    out["condition"] = os.environ.get("MACHINE_SPEED_CONDITION", "")
    print(json.dumps(out), flush=True)


def waits(method: str, wait_ms: list[float], rounds: int) -> dict:
    """One process, blocks of 40 events: back to back, every event after a wait (``all``), and
    waits before every other event (``alt``), for each wait; the block order reverses every
    other round so a drifting machine weighs on no condition. Per condition and part (``waited``
    events, ``b2b`` events), the median over rounds of each block's median δ, and its ratio to
    the back-to-back blocks'; for the alternating blocks also the paired ratio (the median over
    rounds of waited over back-to-back in the same block)."""
    run, xs = _method_run(method)
    from tempora_trace.timing import collect_between_events, collector_paused, now_ns, timed_event, wait_until

    def block(kind: str, wait: float) -> dict[str, list[float]]:
        run.method.reset()
        out: dict[str, list[float]] = {"waited": [], "b2b": []}
        for i, x in enumerate(xs):
            waited = kind == "all" or (kind == "alt" and i % 2 == 1)
            if waited:
                wait_until(now_ns() + int(wait * 1e6))
            ev = timed_event(run.method, x, run.clock, adapt=True, peak=False)
            out["waited" if waited else "b2b"].append(ev.e_ms + ev.l_ms)
            del ev
            collect_between_events()
        return out

    medians: dict[str, list[float]] = {}
    with collector_paused():
        run.warm_up()
        for r in range(rounds):
            conditions = [("b2b", 0.0)] + [(kind, w) for w in wait_ms for kind in ("all", "alt")]
            for kind, w in conditions[::-1] if r % 2 else conditions:
                for part, deltas in block(kind, w).items():
                    if deltas:
                        medians.setdefault(f"{kind} {w:g} ms: {part}", []).append(statistics.median(deltas))
    base = statistics.median(medians["b2b 0 ms: b2b"])
    summary = {
        k: {"median_delta_ms": statistics.median(v), "ratio": statistics.median(v) / base, "rounds_ms": v} for k, v in medians.items()
    }
    for w in wait_ms:
        # the alternating block's waited events over its own back-to-back ones, round by round:
        # paired within a block, so the machine's speed at that moment cancels
        waited, b2b = medians[f"alt {w:g} ms: waited"], medians[f"alt {w:g} ms: b2b"]
        summary[f"alt {w:g} ms: waited"]["paired_ratio"] = statistics.median(x / y for x, y in zip(waited, b2b))
    for k, v in summary.items():
        paired = f"  paired × {v['paired_ratio']:.3f}" if "paired_ratio" in v else ""
        print(f"{method} {k:22s} median δ {v['median_delta_ms']:6.2f} ms  × {v['ratio']:.3f}{paired}", file=sys.stderr, flush=True)
    return summary


def _command(method: str, blocks: int, cpu: str | None, aslr: bool) -> list[str]:
    cmd = [sys.executable, __file__, "worker", "--method", method, "--blocks", str(blocks)]
    if not aslr:
        cmd = ["setarch", "-R", *cmd]
    return ["taskset", "-c", cpu, *cmd] if cpu is not None else cmd


def _launch(cmd: list[str], condition: str) -> subprocess.Popen:
    env = dict(os.environ, MACHINE_SPEED_CONDITION=condition)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)


def _finish(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"a worker failed (exit {proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def _median_delta(row: dict) -> float:
    """A process's figure: the median δ over its blocks, the first (still warming) dropped."""
    return statistics.median(row["delta_ms"][1:])


def _summary(rows: list[dict]) -> dict:
    """Per process: the median δ over its blocks (the first dropped) and the median probe."""
    for r in rows:
        r["median_delta_ms"] = _median_delta(r)
        r["median_probe_ms"] = statistics.median(r["probe_ms"][1:])
    d = [r["median_delta_ms"] for r in rows]
    ratio = [r["median_delta_ms"] / r["median_probe_ms"] for r in rows]

    def cv(xs):
        return statistics.pstdev(xs) / statistics.mean(xs)

    corr = statistics.correlation(d, [r["median_probe_ms"] for r in rows]) if len(rows) > 2 else None
    return {
        "processes": len(rows),
        "delta_ms_min": min(d),
        "delta_ms_max": max(d),
        "cv_delta": cv(d),
        "cv_delta_per_probe": cv(ratio),
        "corr_delta_probe": corr,
    }


def sequential(method: str, processes: int, blocks: int) -> list[dict]:
    conditions = list(itertools.islice(itertools.cycle(itertools.product(("0", "1", None), (True, False))), processes))
    random.Random(7).shuffle(conditions)
    rows = []
    for cpu, aslr in conditions:
        label = f"cpu {cpu or 'free'}, aslr {'on' if aslr else 'off'}"
        rows.append(_finish(_launch(_command(method, blocks, cpu, aslr), label)))
        print(f"{label:22s} median δ {_median_delta(rows[-1]):6.2f} ms", file=sys.stderr, flush=True)
    return rows


def pairs(method: str, count: int, blocks: int) -> list[dict]:
    rows = []
    for k in range(count):
        procs = [_launch(_command(method, blocks, cpu, True), f"pair {k}, cpu {cpu}") for cpu in ("0", "1")]
        a, b = (_finish(p) for p in procs)
        rows += [a, b]
        ma, mb = _median_delta(a), _median_delta(b)
        print(f"pair {k}: {ma:6.2f} and {mb:6.2f} ms ({100 * (ma / mb - 1):+.1f} %)", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("design", choices=("sequential", "pairs", "waits", "worker"))
    ap.add_argument("--method", default="standard")
    ap.add_argument("--processes", type=int, default=18, help="sequential: processes, cycling through the six conditions")
    ap.add_argument("--pairs", type=int, default=4, help="pairs: how many pairs")
    ap.add_argument("--blocks", type=int, default=None, help="blocks of 40 events per process (default 6 sequential, 30 pairs)")
    ap.add_argument("--waits", default="2,15,60", help="waits: idle waits before an event, ms, comma-separated")
    ap.add_argument("--rounds", type=int, default=4, help="waits: rounds through every condition")
    ap.add_argument("--out", type=Path, default=None, help="write every process's line and the summary here (JSON)")
    args = ap.parse_args()
    if args.design == "worker":
        worker(args.method, args.blocks or 6)
        return
    if args.design == "waits":
        result = waits(args.method, [float(w) for w in args.waits.split(",")], args.rounds)
        if args.out is not None:
            args.out.write_text(json.dumps({"design": "waits", "method": args.method, "conditions": result}, indent=1))
        return
    if args.design == "sequential":
        rows = sequential(args.method, args.processes, args.blocks or 6)
    else:
        rows = pairs(args.method, args.pairs, args.blocks or 30)
    summary = _summary(rows)
    if args.design == "pairs":
        # the two processes of a pair ran at the same moment; consecutive pairs a minute apart
        med = [r["median_delta_ms"] for r in rows]
        summary["pair_gap_pct"] = [100 * (a / b - 1) for a, b in zip(med[::2], med[1::2])]
        summary["pair_means_ms"] = [(a + b) / 2 for a, b in zip(med[::2], med[1::2])]
    print(json.dumps(summary, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps({"design": args.design, "summary": summary, "processes": rows}, indent=1))


if __name__ == "__main__":
    main()
