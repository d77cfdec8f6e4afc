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

``interleave`` asks whether the live loop or the moment makes live events slower than traced
ones: in one process it alternates the tracer's own pass over an episode and ``tempora-trace
live``'s own run of it at each ρ (T L T L …), so every live run has a trace pass seconds before
and after it, then times the tracer's variability pass (idle pass included) at each
``--timing-sample`` and replays the live runs' idle times through the replay's idle rule.
``--mini-blocks PAIRS,LENGTH`` adds an idle measurement paired within a second or two (blocks of
back-to-back and of waited events side by side); ``--waited-pass`` follows each live run with the
same steps in this tool's own loop, each after the idle time it had live: is a live event slow
for its wait, or for the live loop? ``--pass-pairs ALTERNATIONS,SAMPLE`` measures the wait with
whole passes over the sample, each waited pass between back-to-back ones.

    python tools/machine_speed.py interleave [--method standard] [--lambda-ms 30] [--rounds 6] [--timing-sample 16,48] [--spin-us N]
                                             [--mini-blocks 8,4] [--waited-pass] [--pass-pairs 3,25]
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


def _config(method: str, batches: int, **extra):
    """The configuration every design times (demo-resnet, ``gaussian_noise``, one thread), with
    the steady heap applied first, as the tracer applies it before anything allocates."""
    sys.path.insert(0, str(ROOT / "src"))
    from tempora_trace.heap import apply_heap_policy

    apply_heap_policy("steady")
    from tempora_trace.config import TraceConfig

    return TraceConfig(
        method=method,
        dataset="demo",
        model="demo-resnet",
        device="cpu",
        domains=["gaussian_noise"],
        max_batches=batches,
        threads=1,
        quiet=True,
        **extra,
    ).resolved()


def _method_run(method: str):
    """The configuration every design times, built as the tracer builds it, and its first
    episode's batches staged: (run, batches)."""
    cfg = _config(method, BLOCK)
    from tempora_trace.runner import MethodRun

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


def _gap_entry(ratios: list[float], waited_ms: list[float], b2b_ms: list[float]) -> dict:
    return {
        "factor": statistics.median(ratios),
        "ratios": ratios,
        "waited_ms": statistics.median(waited_ms),
        "b2b_ms": statistics.median(b2b_ms),
    }


def mini_blocks(base, gaps_ms: list[float], pairs: int, length: int) -> dict[float, dict]:
    """An idle measurement paired at the scale of a fraction of a second: for each gap, ``pairs``
    times, ``length`` events back to back then ``length`` events each after an idle wait of the
    gap, over the episode's events in order (the episode restarted as the tracer's variability
    pass restarts it). A pair's ratio is the median of its waited events over the median of its
    back-to-back events after the first (which follows the previous pair's last wait); the gap's
    factor is the median over pairs. The machine's moment, which moves over seconds on a VM,
    is the same for both halves of a pair."""
    from tempora_trace.variability import time_sample_event

    episode = base.episodes[0]
    n = episode.num_batches
    out: dict[float, dict] = {}
    base.start_episode(0, episode)
    step = 0
    for g in gaps_ms:
        ratios, waited_ms, b2b_ms = [], [], []
        for _ in range(pairs):
            halves: dict[str, list[float]] = {"b2b": [], "waited": []}
            for half in ("b2b", "waited"):
                if step + length > n:
                    base.start_episode(0, episode)
                    step = 0
                for chunk in base._staged(episode, range(step, step + length)):
                    halves[half] += [time_sample_event(base, b, g if half == "waited" else 0.0) for b in chunk]
                step += length
            control = halves["b2b"][1:] or halves["b2b"]
            ratios.append(statistics.median(halves["waited"]) / statistics.median(control))
            waited_ms += halves["waited"]
            b2b_ms += control
        out[g] = _gap_entry(ratios, waited_ms, b2b_ms)
    return out


def pass_pairs(base, gaps_ms: list[float], alternations: int, sample: int) -> dict[float, dict]:
    """An idle measurement of whole passes: for each gap, a back-to-back pass over the first
    ``sample`` steps of the episode, then ``alternations`` times a pass over the same steps with
    every event after an idle wait of the gap followed by another back-to-back pass. A waited
    pass's ratio is its median over the geometric mean of the back-to-back passes either side;
    the gap's factor is the median over its waited passes. Passes, not blocks: the slowdown of
    waiting holds over seconds, so back-to-back events a second from waited ones carry it too."""
    import math

    from tempora_trace.variability import time_sample_event

    episode = base.episodes[0]
    steps = range(min(sample, episode.num_batches))

    def one(gap: float) -> float:
        base.start_episode(0, episode)
        return statistics.median(time_sample_event(base, b, gap) for chunk in base._staged(episode, steps) for b in chunk)

    out: dict[float, dict] = {}
    for g in gaps_ms:
        b2b = [one(0.0)]
        waited = []
        for _ in range(alternations):
            waited.append(one(g))
            b2b.append(one(0.0))
        out[g] = _gap_entry([w / math.sqrt(b2b[i] * b2b[i + 1]) for i, w in enumerate(waited)], waited, b2b)
    return out


def interleave(
    method: str,
    lambda_ms: float,
    rhos: list[float],
    rounds: int,
    batches: int,
    samples: list[int],
    spin_us: float | None = None,
    mini: tuple[int, int] | None = None,
    waited: bool = False,
    passes_plan: tuple[int, int] | None = None,
    idle_settle: float | None = None,
) -> dict:
    """One process and the product's own loops: the tracer's pass over the episode
    (``TraceRun.run_episode``, checkpoints and probes included) and ``tempora-trace live``'s run
    of it at each ρ (``LiveRun.play_episode``), alternating T L T L …, so every live run lies
    between two trace passes seconds away, and the ρ order reverses every round. A live run
    slower than the trace passes either side of it is the live loop's; one that moves with
    them is the machine's moment. Per live run: its mean δ over the served events against the
    geometric mean of the two passes' δ over the same steps, and the speed probe before each."""
    import dataclasses
    import math
    import shutil
    import tempfile

    import numpy as np

    tmp = Path(tempfile.mkdtemp(prefix="interleave-"))
    cfg = _config(method, batches, probe_every=25, force=True, out=str(tmp / "live"))
    import tempora_schema as schema
    from tempora_trace.live_clock import last_arrival
    from tempora_trace.live_runner import LiveRun, RunTally
    from tempora_trace.live_settings import LiveSettings
    from tempora_trace.progress import ProgressView
    from tempora_trace.timing import collector_paused
    from tempora_trace.variability import time_sample_event

    settings = LiveSettings(rho=rhos, lambda_ms=lambda_ms, queue=1, trace_alongside=str(tmp / "along"))
    if spin_us is not None:  # the live runs' waits spun instead of slept (live --spin-us): does sleeping cost?
        settings.spin_us = spin_us
    settings = settings.checked()
    live = LiveRun(cfg, settings, lambda _: None)
    base, episode = live.base, live.base.episodes[0]
    blocks: list[dict] = []

    def trace_pass() -> None:
        c = base.run_episode(0, episode, ProgressView(enabled=False)).columns
        by_step = {s: d for s, d, ph in zip(c["step"], c["delta_ms"], c["phase"]) if ph == schema.PHASE_ADAPT}
        # the tracer's own probe before the pass's first event (step 0 is always probed)
        blocks.append({"kind": "trace", "probe_ms": base.probes[0][0]["ms"], "delta_ms": by_step})

    def live_run(plan) -> None:
        probe = base.probe.measure()
        c = live.columns[plan.run]
        start = len(c["step"])
        live.play_episode(plan, 0, episode, RunTally())
        served = [k for k in range(start, len(c["step"])) if c["served"][k]]
        by_step = {c["step"][k]: c["delta_ms"][k] for k in served}
        # the idle time before each served event: its pickup minus the previous served event's end
        idle = {
            c["step"][k]: max(0.0, c["pickup_ms"][k] - c["free_ms"][j]) if j is not None else 0.0
            for j, k in zip([None, *served[:-1]], served)
        }
        blocks.append({"kind": "live", "rho": plan.rho, "probe_ms": probe, "delta_ms": by_step, "idle_ms": idle})

    def waited_pass(live_block: dict) -> None:
        """The tracer's events of the steps the live run served, each after the idle time it had
        there, in this tool's own loop (staged and timed as the tracer's variability pass): is a
        live event slower for its wait alone, or for something else the live loop does?"""
        probe = base.probe.measure()
        steps = sorted(live_block["delta_ms"])
        by_step: dict[int, float] = {}
        base.start_episode(0, episode)
        for chunk in base._staged(episode, range(episode.num_batches)):
            for b in chunk:
                delta = time_sample_event(base, b, live_block["idle_ms"].get(b.step) or 0.0)
                if b.step in live_block["delta_ms"]:
                    by_step[b.step] = delta
        assert set(by_step) == set(steps), "the waited pass must time every step the live run served"
        blocks.append(
            {"kind": "waited", "rho": live_block["rho"], "probe_ms": probe, "delta_ms": by_step, "idle_ms": live_block["idle_ms"]}
        )

    try:
        last_arrival(1.0, 1.0)
        with collector_paused():
            base.warm_up()
            trace_pass()
            for r in range(rounds):
                for plan in live.plans if r % 2 == 0 else live.plans[::-1]:
                    live_run(plan)
                    trace_pass()
                    if waited:
                        waited_pass(blocks[-2])
                        trace_pass()
            passes = {}
            for i, n in enumerate(samples):  # the tracer's own timing-variability pass (idle blocks included), per sample size
                settle = base.cfg.idle_settle if idle_settle is None else idle_settle
                base.cfg = dataclasses.replace(base.cfg, timing_sample=n, idle_settle=settle)
                base.measure_variability()
                passes[str(n) if samples.count(n) == 1 else f"{n}/{i + 1}"] = base.timing_variability
            # the other idle measurements: at the live runs' own idle times (median per ρ) and the tracer's 1× and 4× median δ
            per_rho: dict[float, list[float]] = {}
            for b in blocks:
                if b["kind"] == "live":
                    per_rho.setdefault(b["rho"], []).append(statistics.median(b["idle_ms"].values()))
            waits_seen = sorted({round(statistics.median(v), 1) for v in per_rho.values()})
            typical = statistics.median(blocks[-1]["delta_ms"].values())
            gaps = sorted({g for g in waits_seen if g > 0.5} | {round(typical, 1), round(4 * typical, 1)})
            mini_result = mini_blocks(base, gaps, *mini) if mini is not None else None
            pass_result = pass_pairs(base, gaps, *passes_plan) if passes_plan is not None else None
    finally:
        base.stager.close()
        base.writer.discard()
        base.writer.close()
        shutil.rmtree(tmp, ignore_errors=True)

    from tempora_schema import idle_blocks
    from tempora_sim.engine.idle import idle_factor
    from tempora_sim.sweeps.variability import model_from_measurement

    def mean_over(block: dict, steps) -> float:
        return statistics.fmean(block["delta_ms"][s] for s in steps)

    # the replay's idle rule from each variability pass (the last trace pass as the main pass's times)
    curves = {}
    for n, tv in passes.items():
        main = np.array([blocks[-1]["delta_ms"][st] for item in tv["sample"] for st in item["steps"]])
        model = model_from_measurement(tv, main)
        curves[n] = (model.idle_gaps_ms, model.idle_factors)
        pass_medians = [round(float(np.median(p)), 2) for p in tv["passes_ms"]]
        by_block = [(round(b["gap_ms"], 1), round(float(np.median(b["ms"])), 2)) for b in idle_blocks(tv)]
        print(
            f"{method} sample {n}: main {np.median(main):.2f} ms, repeat passes {pass_medians} ms, idle blocks (gap, median) {by_block} ms; "
            f"replay's factors {np.round(model.idle_factors, 3).tolist()}",
            file=sys.stderr,
        )
    for name, label, result in (("mini", "mini-blocks", mini_result), ("passes", "pass pairs", pass_result)):
        if result is None:
            continue
        gaps_sorted = sorted(result)
        curves[name] = (np.array(gaps_sorted, np.float64), np.array([result[x]["factor"] for x in gaps_sorted], np.float64))
        for x in gaps_sorted:
            m = result[x]
            print(
                f"{method} {label} gap {x:g} ms: waited {m['waited_ms']:.2f} / back to back {m['b2b_ms']:.2f} ms, "
                f"factor × {m['factor']:.3f} (each {min(m['ratios']):.3f}–{max(m['ratios']):.3f})",
                file=sys.stderr,
            )
    rows = []
    for k in range(1, len(blocks), 2):
        before, run, after = blocks[k - 1], blocks[k], blocks[k + 1]
        steps = sorted(run["delta_ms"])
        t_before, t_after, l = mean_over(before, steps), mean_over(after, steps), mean_over(run, steps)
        sandwich = math.sqrt(t_before * t_after)
        replayed = {
            n: l
            / statistics.fmean(
                math.sqrt(before["delta_ms"][st] * after["delta_ms"][st]) * idle_factor(run["idle_ms"][st], g, f) for st in steps
            )
            for n, (g, f) in curves.items()
        }
        rows.append(
            {
                "rho": run["rho"],
                "kind": run["kind"],
                "served": len(steps),
                "live_ms": l,
                "trace_before_ms": t_before,
                "trace_after_ms": t_after,
                "live_over_sandwich": l / sandwich,
                "live_over_replayed": replayed,
                "median_idle_ms": statistics.median(run["idle_ms"].values()),
                "after_over_before": t_after / t_before,
                "probe_live_over_sandwich": run["probe_ms"] / math.sqrt(before["probe_ms"] * after["probe_ms"]),
            }
        )
        shown = "  ".join(f"replayed({n}) × {v:.3f}" for n, v in replayed.items())
        print(
            f"{method} {run['kind']:6s} ρ {run['rho']:<4g} {l:6.2f} ms  traces {t_before:6.2f} / {t_after:6.2f} ms  live/sandwich × {l / sandwich:.3f}  "
            f"live/{shown}",
            file=sys.stderr,
            flush=True,
        )
    summary = {}
    for kind, rho in [(k, r) for k in ("live", "waited") for r in rhos]:
        mine = [r for r in rows if r["rho"] == float(rho) and r["kind"] == kind]
        if not mine:
            continue
        ratios = [r["live_over_sandwich"] for r in mine]
        item = summary[f"{float(rho):g}" if kind == "live" else f"waited {float(rho):g}"] = {
            "median_live_over_sandwich": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "median_live_over_replayed": {n: statistics.median(r["live_over_replayed"][n] for r in mine) for n in curves},
            "median_idle_ms": statistics.median(r["median_idle_ms"] for r in mine),
            "live_slower_than_both": sum(r["live_ms"] > max(r["trace_before_ms"], r["trace_after_ms"]) for r in mine),
            "live_faster_than_both": sum(r["live_ms"] < min(r["trace_before_ms"], r["trace_after_ms"]) for r in mine),
            "runs": len(mine),
        }
        shown = ", ".join(f"sample {n} × {v:.3f}" for n, v in item["median_live_over_replayed"].items())
        print(
            f"{method} {kind} ρ {float(rho):g} (idle {item['median_idle_ms']:.1f} ms): {kind}/sandwich median × {item['median_live_over_sandwich']:.3f} "
            f"({min(ratios):.3f}–{max(ratios):.3f}); live/replayed {shown}; slower than both {item['live_slower_than_both']}, "
            f"faster than both {item['live_faster_than_both']} of {len(mine)}",
            file=sys.stderr,
            flush=True,
        )
    return {
        "summary": summary,
        "runs": rows,
        "idle_curves": {n: [g.tolist(), f.tolist()] for n, (g, f) in curves.items()},
        "timing_variability": passes,
        "mini_blocks": {str(k): v for k, v in (mini_result or {}).items()},
        "pass_pairs": {str(k): v for k, v in (pass_result or {}).items()},
    }


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
    ap.add_argument("design", choices=("sequential", "pairs", "waits", "interleave", "worker"))
    ap.add_argument("--method", default="standard")
    ap.add_argument("--processes", type=int, default=18, help="sequential: processes, cycling through the six conditions")
    ap.add_argument("--pairs", type=int, default=4, help="pairs: how many pairs")
    ap.add_argument("--blocks", type=int, default=None, help="blocks of 40 events per process (default 6 sequential, 30 pairs)")
    ap.add_argument("--waits", default="2,15,60", help="waits: idle waits before an event, ms, comma-separated")
    ap.add_argument("--rounds", type=int, default=4, help="waits: rounds through every condition; interleave: rounds through every ρ")
    ap.add_argument("--lambda-ms", type=float, default=30.0, help="interleave: λ of the live runs (ms)")
    ap.add_argument("--rho", default="1,0.5,0.25", help="interleave: utilisations of the live runs")
    ap.add_argument(
        "--timing-sample",
        default="16",
        help="interleave: the variability pass's sample sizes, comma-separated, each timed after the runs (a size given twice, twice)",
    )
    ap.add_argument(
        "--idle-settle", type=float, default=None, help="interleave: the variability pass's --idle-settle (default the tracer's)"
    )
    ap.add_argument("--spin-us", type=float, default=None, help="interleave: the live runs' --spin-us (default the live runner's)")
    ap.add_argument("--batches", type=int, default=100, help="interleave: batches in the episode")
    ap.add_argument(
        "--mini-blocks",
        default=None,
        help="interleave: PAIRS,LENGTH: after the runs, an idle measurement of back-to-back and waited blocks of LENGTH events, PAIRS per gap",
    )
    ap.add_argument(
        "--pass-pairs",
        default=None,
        help="interleave: ALTERNATIONS,SAMPLE: after the runs, waited passes over the first SAMPLE steps between back-to-back passes, per gap",
    )
    ap.add_argument(
        "--waited-pass",
        action="store_true",
        help="interleave: after each live run (and the trace pass after it), the same steps in this tool's loop, each after its live idle time",
    )
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
    if args.design == "interleave":
        samples = [int(n) for n in args.timing_sample.split(",")]
        rhos = [float(r) for r in args.rho.split(",")]
        mini = tuple(int(v) for v in args.mini_blocks.split(",")) if args.mini_blocks else None
        plan = tuple(int(v) for v in args.pass_pairs.split(",")) if args.pass_pairs else None
        result = interleave(
            args.method,
            args.lambda_ms,
            rhos,
            args.rounds,
            args.batches,
            samples,
            args.spin_us,
            mini,
            args.waited_pass,
            plan,
            args.idle_settle,
        )
        if args.out is not None:
            args.out.write_text(
                json.dumps(
                    {"design": "interleave", "method": args.method, "lambda_ms": args.lambda_ms, "spin_us": args.spin_us, **result},
                    indent=1,
                )
            )
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
