"""How faithful is the replay? Live runs beside the replay of their trace group (no torch).

For every live run (``tempora-trace live``) this module computes, from the live rows, the
protocol's decomposition (α, |Q|, served accuracy, utility; amortised: m and utility), and
beside it the replay of the matching trace — same group and method, the live run's episodes
and first N batches, the same λ, ρ (γ), b or B and budget rule — through
:func:`tempora_sim.sweeps.replay.run_sweep`, i.e. the simulator's own trace loading and kernels.
Runs of one setting (repeats, other files) are pooled: their mean is compared with the
replay and their range is the run-to-run spread.

The **self-consistency** check replays a discrete live run's own measured times through the
discrete kernel (:func:`tempora_sim.engine.kernels.discrete_served`): event j occupied the pipeline
from its nominal start ``max(free_{j−1}, i_j·γ)`` to the clock reading ``free_j`` on which
the next decision was made, so the kernel, fed those occupancies, must serve the same batches.
A disagreement can only come from an arrival within float rounding of a decision instant;
each is listed with that distance.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tempora_schema import PHASE_ADAPT, GroupKey, TraceSchemaError, method_label, probe_drift, probe_median_ms
from tempora_schema.live import comparable_group, decode_live_metadata, validate_live_table
from tempora_sim import protocols as P
from tempora_sim.errors import GroupError, SimError, TraceFileError
from tempora_sim.sweeps import variability
from tempora_sim.sweeps.replay import POOLED, run_sweep
from tempora_sim.sweeps.traces import Trace, TraceSet, check_out_outside, check_text_columns, load_traces
from tempora_sim.uncertainty import coverage
from tempora_sim.validation.tolerances import (
    DEFAULT_TIE_US,
    Tolerances,
)
from tempora_toolkit.atomic_files import check_output_dir, staged_dir, to_bytes, write_file

_Z975 = NormalDist().inv_cdf(0.975)


@dataclass
class LiveFile:
    path: Path
    meta: dict
    rows: pl.DataFrame

    @property
    def group(self) -> GroupKey:
        return GroupKey.from_metadata(self.meta)


def find_live_files(sources: Sequence[str | os.PathLike]) -> list[Path]:
    files: list[Path] = []
    if not sources:
        raise SimError("no live-run paths given")
    for item in sources:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.parquet") if p.is_file())
            if not found:
                raise TraceFileError(path, "no *.parquet live-run files found in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise TraceFileError(path, "no such file or directory")
    return list(dict.fromkeys(files))


def read_live(path: str | os.PathLike) -> LiveFile:
    """Read and validate one live-run file; any problem is a one-line TraceFileError."""
    path = Path(path)
    try:
        table = pq.read_table(path, use_threads=False)
        check_text_columns(table)
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceFileError(path, f"not a readable Parquet file ({first})") from None
    try:
        meta = decode_live_metadata(table.schema, path)
        validate_live_table(table, meta, path)
    except TraceSchemaError as exc:
        raise TraceFileError.from_schema_error(exc) from None
    return LiveFile(path, meta, pl.from_arrow(table))


# ------------------------------------------------------------------------ live statistics
@dataclass
class LiveRunStats:
    file: LiveFile
    run: dict
    episodes: list[str]
    num_batches: dict[str, int]
    served: int
    total: int
    served_acc: float | None
    utility: float
    m: dict[str, int] = field(default_factory=dict)
    agreement: float | None = None  # share of identical serve/skip decisions (self-consistency)
    agreement_delta_only: float | None = None  # same, replaying δ = e + ℓ only (what a trace sees)
    overhead_us: float | None = None  # mean occupancy beyond δ: scoring, bookkeeping, wake-up lag
    #: the same, split: events taken straight after the previous one (the runner's own work
    #: between events) and events taken after waiting for their arrival (plus the wake-up lag)
    overhead_back_to_back_us: float | None = None
    overhead_after_wait_us: float | None = None
    disagreements: list[dict] = field(default_factory=list)

    @property
    def alpha(self) -> float:
        return self.served / self.total

    def setting(self) -> tuple:
        r = self.run
        meta = self.file.meta
        base = (
            self.file.group,
            _label(meta),
            r["protocol"],
            round(float(meta["lambda_ms"]), 9),
            tuple(self.episodes),
            tuple(self.num_batches[e] for e in self.episodes),
        )
        return base + P.get(r["protocol"]).live_key(r)


def run_stats(live: LiveFile) -> list[LiveRunStats]:
    out = []
    rows = live.rows.with_columns((pl.col("correct").cast(pl.Float64) / pl.col("n").cast(pl.Float64)).alias("_a"))
    for run in live.meta["runs"]:
        part = rows.filter(pl.col("run") == run["run"])
        if part.height == 0:
            continue
        episodes = part["episode"].unique(maintain_order=True).to_list()
        sizes = {e: int(part.filter(pl.col("episode") == e).height) for e in episodes}
        served = part.filter(pl.col("served"))
        sum_a = float(served["_a"].sum())
        stats = LiveRunStats(
            live, run, episodes, sizes, served.height, part.height, sum_a / served.height if served.height else None, sum_a / part.height
        )
        if P.get(run["protocol"]).serves_subset:
            self_consistency(stats, part)
        else:
            stats.m = {e: int(part.filter((pl.col("episode") == e) & (pl.col("mode") == "adapt")).height) for e in episodes}
        out.append(stats)
    return out


def _walk(delta: np.ndarray, gamma: float, queue: int, n: int) -> np.ndarray:
    # lazy: the replay imports Numba on a background thread while it reads the traces (replay._start_warm_up)
    from tempora_sim.engine.kernels import discrete_served

    padded = np.full(n, float(np.mean(delta)) if delta.size else gamma)
    padded[: delta.size] = delta
    order = discrete_served(padded, float(gamma), int(queue), False)
    served = np.zeros(n, bool)
    served[order[order >= 0]] = True
    return served


def self_consistency(stats: LiveRunStats, part: pl.DataFrame, tie_us: float = DEFAULT_TIE_US) -> None:
    """Replay the run's measured occupancies through the discrete kernel; fill the agreement."""
    gamma = float(stats.run["gamma_ms"])
    queue = int(stats.run["queue"])
    same = same_delta = 0
    extra, waited = [], []
    for ep in stats.episodes:
        rows = part.filter(pl.col("episode") == ep).sort("step")
        n = rows.height
        live_served = rows["served"].to_numpy().astype(bool)
        ev = rows.filter(pl.col("served")).sort("event")
        steps = ev["step"].to_numpy()
        free = ev["free_ms"].to_numpy().astype(np.float64)
        arrival = steps * gamma
        previous_free = np.r_[0.0, free[:-1]]
        nominal = np.maximum(previous_free, arrival)
        occupancy = free - nominal
        extra.append(occupancy - ev["delta_ms"].to_numpy())
        waited.append(arrival > previous_free)
        replayed = _walk(occupancy, gamma, queue, n)
        same += int((replayed == live_served).sum())
        same_delta += int((_walk(ev["delta_ms"].to_numpy().astype(np.float64), gamma, queue, n) == live_served).sum())
        differ = np.flatnonzero(replayed != live_served)
        if differ.size:
            # distance of each live decision instant to its nearest arrival: a true tie is ~0
            k = np.floor(free / gamma)
            margin_us = np.minimum(np.abs(free - k * gamma), np.abs((k + 1) * gamma - free)) * 1e3
            before = np.flatnonzero(steps < differ[0])
            j = int(before[-1]) if before.size else 0
            for b in differ.tolist():
                stats.disagreements.append(
                    {
                        "episode": ep,
                        "step": b,
                        "live_served": bool(live_served[b]),
                        "replay_served": bool(replayed[b]),
                        "margin_us": float(margin_us[j]),
                        "near_tie": bool(margin_us[j] <= tie_us),
                    }
                )
    stats.agreement = same / stats.total
    stats.agreement_delta_only = same_delta / stats.total
    if extra:
        beyond, after_wait = np.concatenate(extra) * 1e3, np.concatenate(waited)
        stats.overhead_us = float(np.mean(beyond))
        stats.overhead_back_to_back_us = float(np.mean(beyond[~after_wait])) if (~after_wait).any() else None
        stats.overhead_after_wait_us = float(np.mean(beyond[after_wait])) if after_wait.any() else None


# ------------------------------------------------------------------------ replay of the traces
def _restricted(trace: Trace, episodes: Sequence[str], sizes: dict[str, int]) -> Trace:
    """The trace cut to the live run's episodes and their first N batches (the batch order of
    an episode depends only on (seed, episode), so these are the batches the live run saw)."""
    have = dict(zip(*np.unique(trace.adapt["episode"].to_numpy(), return_counts=True)))
    for ep in episodes:
        if ep not in have:
            raise GroupError(f"{trace.path}: no episode '{ep}' (the live run has it); trace that domain too")
        if have[ep] < sizes[ep]:
            raise GroupError(f"{trace.path}: episode '{ep}' has {have[ep]} batches, the live run {sizes[ep]}")
    keep = pl.any_horizontal(
        [(pl.col("episode") == ep) & (pl.col("step") < sizes[ep]) & (pl.col("checkpoint") < sizes[ep]) for ep in episodes]
    )
    rows = trace.rows.filter(keep)
    order = {ep: i for i, ep in enumerate(episodes)}
    rows = (
        rows.with_columns(pl.col("episode").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
        .sort(["_o", "phase", "checkpoint", "step"])
        .drop("_o")
    )
    return Trace(trace.path, trace.meta, rows)


def _label(meta: dict) -> str:
    """The live run's method as the simulator names its trace (``tent``, ``tent-paper``,
    ``tent@every:2``), so the runs of a method and of its policies never share a setting."""
    return method_label(str(meta["method"]), meta.get("method_params"), meta.get("policy"))


def _find_trace(traces: TraceSet, live: LiveFile, option: str = "--traces") -> Trace:
    """The trace of the live run's method and group (a trace of exactly its group first, else
    one of the same comparable group, which is then cut to the live run's episodes)."""
    want = comparable_group(live.group)
    wanted = _label(live.meta)
    found = [t for t in traces.traces if t.method == wanted and comparable_group(t.group) == want]
    if not found:
        raise GroupError(f"{live.path}: no trace of method '{wanted}' in group {live.group.label()} under {option}")
    return min(found, key=lambda t: (t.group != live.group, str(t.path)))


def clock_comparison(
    trace: Trace, runs: Sequence[LiveRunStats], model: "variability.TimingModel | None" = None, tol_pct: float = 0.0
) -> dict:
    """Mean δ of the live runs' adapting events beside the trace's δ of the same batches.

    This is what the replay cannot repair: the difference is the machine (and the method's own
    run-to-run variation), not the replay. Positive ``clock_gap_pct``: the trace was slower.

    ``clock_gap_idle_pct`` compares the live events with the times the replay gives them: the
    traced δ of each batch × the trace's measured idle factor at the idle time that event
    waited live (:func:`tempora_sim.sweeps.variability.idle_factor`, the replay's rule; 1 where the trace measured no idle
    effect). That is the check of the instrument (``clock_pass``): within ``clock_tolerance_pct``
    = the larger of ``tol_pct`` and the trace's own 95 % spread of a pass's mean time (its
    timing model's pass shift, drift included), the traced clock is the live one.
    ``clock_pass_on_spread``: it passes only because that spread widened the tolerance (the gap
    is beyond ``tol_pct``): the trace is too noisy to tell the clocks apart at that size, an
    inconclusive check rather than an agreement.

    ``speed_gap_pct`` is the machine's own speed during the trace against the live runs (the
    median speed probe of each; + = the machine was slower while tracing) and
    ``clock_gap_speed_pct`` the idle-applied gap with the trace's times moved to the live runs'
    machine speed: a gap that the probe explains is the machine's, not the tracer's. Both are
    None where either side has no probe or the two timed different computations."""
    parts = []
    for r in runs:
        rows = r.file.rows.filter((pl.col("run") == r.run["run"]) & pl.col("served")).sort("episode", "step")
        # idle time before each served event: its pickup minus the previous served event's end
        rows = rows.with_columns(
            (pl.col("pickup_ms") - pl.col("free_ms").shift(1).over("episode")).fill_null(0.0).clip(lower_bound=0.0).alias("idle_ms")
        )
        parts.append(
            rows.filter(pl.col("mode") == "adapt").select(
                pl.col("episode").cast(pl.String), pl.col("step").cast(pl.Int64), "delta_ms", pl.col("idle_ms").cast(pl.Float64)
            )
        )
    live = pl.concat(parts)
    traced = trace.adapt.select(pl.col("episode").cast(pl.String), pl.col("step").cast(pl.Int64), pl.col("delta_ms").alias("traced"))
    both = live.join(traced, on=["episode", "step"], how="inner")
    speed = dict.fromkeys(("probe_trace_ms", "probe_live_ms", "speed_gap_pct", "clock_gap_speed_pct"))
    empty = dict.fromkeys(("delta_live_ms", "delta_trace_ms", "clock_gap_pct", "delta_trace_idle_ms", "clock_gap_idle_pct"))
    if both.height == 0:
        return {**empty, **speed, "clock_tolerance_pct": None, "clock_pass": True, "clock_pass_on_spread": False}
    live_ms, trace_ms = float(both["delta_ms"].mean()), float(both["traced"].mean())
    factors = np.ones(both.height)
    if model is not None and model.has_idle_effect:
        gaps, fs = model.idle_gaps_ms, model.idle_factors
        factors = np.array([variability.idle_factor(float(g), gaps, fs) for g in both["idle_ms"].to_numpy()])
    idle_ms = float(np.mean(both["traced"].to_numpy() * factors))
    tolerance = max(float(tol_pct), _noise_pct(_pass_sd(model)))
    gap_idle = 100.0 * (idle_ms / live_ms - 1.0)
    within = abs(gap_idle) <= tolerance + 1e-9
    trace_probe, live_probe = probe_median_ms(trace.meta), live_probe_ms(runs)
    # a probed trace names a measured kind (the schema), so equal kinds mean the same computation
    if trace_probe and live_probe and trace.meta.get("speed_probe_kind") == runs[0].file.meta.get("speed_probe_kind"):
        speed = {
            "probe_trace_ms": trace_probe,
            "probe_live_ms": live_probe,
            "speed_gap_pct": 100.0 * (trace_probe / live_probe - 1.0),
            "clock_gap_speed_pct": 100.0 * (idle_ms * (live_probe / trace_probe) / live_ms - 1.0),
        }
    return {
        **speed,
        "delta_live_ms": live_ms,
        "delta_trace_ms": trace_ms,
        "clock_gap_pct": 100.0 * (trace_ms / live_ms - 1.0),
        "delta_trace_idle_ms": idle_ms,
        "clock_gap_idle_pct": gap_idle,
        "clock_tolerance_pct": tolerance,
        "clock_pass": within,
        "clock_pass_on_spread": within and abs(gap_idle) > float(tol_pct) + 1e-9,
    }


def _pass_sd(model: "variability.TimingModel | None") -> float:
    """The standard deviation (log scale) of a new pass's shift by the trace's timing model; 0
    without a model."""
    spread = variability.shift_spread(model.shifts, model.pooled, model.drift) if model is not None else None
    return float(spread[1]) if spread is not None else 0.0


def _noise_pct(sd: float) -> float:
    """A pass's 95 % spread of its mean time, in %, from its log-scale standard deviation."""
    return 100.0 * (math.exp(_Z975 * sd) - 1.0)


def sandwich_clock(own: dict, other: dict, sd_own: float, sd_other: float, tol_pct: float) -> dict:
    """The clock check against the traces on both sides of the live runs (the sandwich: trace,
    play, trace again). A machine that drifts steadily moves the two traces in opposite
    directions from the live runs' moment, so their geometric mean is the traced clock at that
    moment, and a gap left in it is the clocks', not the drift's.

    ``own`` and ``other`` are :func:`clock_comparison` of each side (``own``: the trace the
    replay uses). Adds the other side's ``delta_trace_idle_other_ms`` and
    ``clock_gap_idle_other_pct``, and ``clock_gap_sandwich_pct``: the live δ against the
    geometric mean of the two idle-applied traced δ. The check (``clock_pass``,
    ``clock_pass_on_spread``, ``clock_tolerance_pct``) is then the sandwich's, its tolerance
    the larger of ``tol_pct`` and the 95 % spread of the mean of two independent passes
    (log-scale standard deviation √(sd_own² + sd_other²) / 2)."""
    out = dict(own)
    out["delta_trace_idle_other_ms"] = other["delta_trace_idle_ms"]
    out["clock_gap_idle_other_pct"] = other["clock_gap_idle_pct"]
    live_ms, a_ms, b_ms = own["delta_live_ms"], own["delta_trace_idle_ms"], other["delta_trace_idle_ms"]
    if not (live_ms and a_ms and b_ms):
        out["clock_gap_sandwich_pct"] = None
        return out
    gap = 100.0 * (math.sqrt(a_ms * b_ms) / live_ms - 1.0)
    tolerance = max(float(tol_pct), _noise_pct(math.hypot(sd_own, sd_other) / 2.0))
    within = abs(gap) <= tolerance + 1e-9
    out.update(
        clock_gap_sandwich_pct=gap,
        clock_tolerance_pct=tolerance,
        clock_pass=within,
        clock_pass_on_spread=within and abs(gap) > float(tol_pct) + 1e-9,
    )
    return out


def speed_moved_pct(probes_ms: Sequence[float]) -> float | None:
    """How far the machine's speed moved while these probes ran, in the order they ran
    (:func:`tempora_schema.probe_drift`: the medians of three successive probes, slowest over
    fastest − 1, in %); None below three probes."""
    drift = probe_drift({"speed_probe": [{"ms": float(x)} for x in probes_ms]})
    return None if drift is None else 100.0 * drift.change


def trace_speed_moved_pct(trace: Trace) -> float | None:
    """:func:`speed_moved_pct` of a trace's own probes."""
    return speed_moved_pct([p["ms"] for p in trace.meta.get("speed_probe") or ()])


def live_speed_moved_pct(live: LiveFile) -> float | None:
    """:func:`speed_moved_pct` over a live file's runs, each run's probes in run order: the
    machine over all the file's live runs, every setting of the file."""
    runs = sorted(live.meta.get("runs") or (), key=lambda r: int(r["run"]))
    return speed_moved_pct([x for r in runs for x in r.get("speed_probe_ms") or ()])


def live_probe_ms(runs: Sequence[LiveRunStats]) -> float | None:
    """Median machine-speed probe (ms) over the runs of one setting, or None where the live
    file has none (files written before live runs were probed)."""
    probes = [float(x) for r in runs for x in r.run.get("speed_probe_ms") or ()]
    return float(np.median(probes)) if probes else None


def at_speed(trace: Trace, factor: float) -> Trace:
    """The trace with every adapting event's times (e, ℓ, δ) multiplied by ``factor``: the
    same per-batch pattern at another mean speed."""
    timed = pl.col("phase") == PHASE_ADAPT
    rows = trace.rows.with_columns(
        [pl.when(timed).then(pl.col(c) * factor).otherwise(pl.col(c)).alias(c) for c in ("e_ms", "l_ms", "delta_ms")]
    )
    return Trace(trace.path, trace.meta, rows)


def replay_setting(trace: Trace, first: LiveRunStats, speed: float = 1.0) -> dict:
    """The replay of ``trace`` under ``first``'s setting (cut to its episodes and batches);
    ``speed`` ≠ 1 multiplies the trace's event times first (:func:`at_speed`)."""
    restricted = _restricted(trace, first.episodes, first.num_batches)
    if speed != 1.0:
        restricted = at_speed(restricted, speed)
    lam = float(first.file.meta["lambda_ms"])
    run = first.run
    frame = run_sweep(TraceSet([restricted]), lambda_ms=lam, **P.get(run["protocol"]).live_replay(run, lam)).frame
    pooled = frame.filter(pl.col("episode") == POOLED).row(0, named=True)
    per_ep = {r["episode"]: r for r in frame.filter(pl.col("episode") != POOLED).iter_rows(named=True)}
    return {"pooled": pooled, "episodes": per_ep}


# ------------------------------------------------------------------------ the comparison
@dataclass
class Validation:
    settings: pl.DataFrame
    runs: pl.DataFrame
    disagreements: pl.DataFrame

    @property
    def passed(self) -> bool:
        """Every check within its tolerance and no clock check inconclusive."""
        return self.checks_beyond_tolerance == 0 and self.clock_inconclusive == 0

    @property
    def clock_inconclusive(self) -> int:
        """Settings whose clock check passes only on its trace's own spread: the trace is too
        noisy to tell the clocks apart, so they are not an agreement (exit status 1 too)."""
        s = self.settings
        return s.filter(s["clock_pass_on_spread"]).height if "clock_pass_on_spread" in s.columns else 0

    @property
    def checks_beyond_tolerance(self) -> int:
        """Settings and runs that fail their tolerance, and settings whose traced clock stands
        beyond its tolerance from the live one (what the command's exit status 1 counts)."""
        s = self.settings
        clock = s.filter(~s["clock_pass"]).height if "clock_pass" in s.columns else 0
        return s.filter(~s["pass"]).height + self.runs.filter(~self.runs["pass"]).height + clock

    def frames(self) -> dict[str, pl.DataFrame]:
        """The written tables by file name: settings, runs and self-consistency disagreements."""
        return {"validation": self.settings, "validation-runs": self.runs, "validation-disagreements": self.disagreements}


def _pp(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else 100.0 * x


def validate(live_sources: Sequence[str | os.PathLike], trace_source, tol: Tolerances | None = None, sandwich_source=None) -> Validation:
    """Compare every live run under ``live_sources`` with the replay of ``trace_source``.
    ``sandwich_source``: the same configurations traced on the other side of the live runs
    (after them, when ``trace_source`` was traced before); the clock check is then the
    sandwich's (:func:`sandwich_clock`), while the replay stays that of ``trace_source``."""
    tol = tol or Tolerances()
    lives = [read_live(p) for p in find_live_files(live_sources)]
    traces = trace_source if isinstance(trace_source, TraceSet) else load_traces(trace_source)
    all_runs: list[LiveRunStats] = []
    for live in lives:
        for st in run_stats(live):
            # recompute with the requested tie tolerance (only a served subset has disagreements)
            st.disagreements = [dict(d, near_tie=d["margin_us"] <= tol.tie_us) for d in st.disagreements]
            all_runs.append(st)
    settings: dict[tuple, list[LiveRunStats]] = {}
    for st in all_runs:
        settings.setdefault(st.setting(), []).append(st)

    setting_rows, run_rows, dis_rows = [], [], []
    models = dict(zip(map(id, traces.traces), variability.timing_models(traces.traces)))
    other_side = None
    if sandwich_source is not None:
        other_side = sandwich_source if isinstance(sandwich_source, TraceSet) else load_traces(sandwich_source)
        models.update(zip(map(id, other_side.traces), variability.timing_models(other_side.traces)))
    for runs in settings.values():
        first = runs[0]
        meta = first.file.meta
        trace = _find_trace(traces, first.file)
        replay = replay_setting(trace, first)["pooled"]
        clocks = clock_comparison(trace, runs, models[id(trace)], tol.clock_pct)
        if other_side is not None:
            other = _find_trace(other_side, first.file, "--sandwich")
            clocks = sandwich_clock(
                clocks,
                clock_comparison(other, runs, models[id(other)], tol.clock_pct),
                _pass_sd(models[id(trace)]),
                _pass_sd(models[id(other)]),
                tol.clock_pct,
            )
            clocks["trace_other"] = str(other.path)
            clocks["trace_other_speed_moved_pct"] = trace_speed_moved_pct(other)
        # the attribution check: the trace's own pattern, moved to the live events' mean speed
        speed = clocks["delta_live_ms"] / clocks["delta_trace_ms"] if clocks["delta_live_ms"] else 1.0
        at_live = replay if speed == 1.0 else replay_setting(trace, first, speed)["pooled"]
        proto = first.run["protocol"]
        protocol = P.get(proto)
        u = np.array([r.utility for r in runs])
        a = np.array([r.alpha for r in runs])
        row = {
            "dataset": meta["dataset"],
            "model": meta["model"],
            "device": meta["device"],
            "method": _label(meta),
            "protocol": proto,
            "lambda_ms": float(meta["lambda_ms"]),
            "runs": len(runs),
            # every live protocol's setting columns, this one's filled
            **dict.fromkeys(P.live_setting_columns()),
            **protocol.live_setting_values(first.run),
            "num_batches": first.total,
            "trace": str(trace.path),
            # the trace was taken in the live runs' own process, episode by episode beside them
            "trace_alongside": meta.get("run_id") is not None and trace.meta.get("taken_alongside") == meta.get("run_id"),
            **clocks,
            # the machine's speed change inside the trace, and over the live file's runs (probes)
            "trace_speed_moved_pct": trace_speed_moved_pct(trace),
            "live_speed_moved_pct": live_speed_moved_pct(first.file),
            "utility_live": float(u.mean()),
            "utility_replay": float(replay["utility"]),
            "utility_replay_live_speed": float(at_live["utility"]),
            "spread_utility_pp": float(100 * (u.max() - u.min())) if len(runs) > 1 else None,
        }
        # does the replay's interval for a live pass (measured timing variability, served set) cover the live runs?
        row.update(
            coverage.coverage_row(
                coverage.timing_interval(
                    models[id(trace)], _restricted(trace, first.episodes, first.num_batches), first.run, float(meta["lambda_ms"])
                ),
                [r.alpha for r in runs] if protocol.serves_subset else [None] * len(runs),
                [r.utility for r in runs],
            )
        )
        row["delta_utility_pp"] = 100 * (row["utility_replay"] - row["utility_live"])
        row["delta_utility_live_speed_pp"] = 100 * (row["utility_replay_live_speed"] - row["utility_live"])
        if protocol.serves_subset:
            sacc = [r.served_acc for r in runs if r.served_acc is not None]
            row.update(
                alpha_live=float(a.mean()),
                alpha_replay=float(replay["alpha"]),
                served_live=float(np.mean([r.served for r in runs])),
                served_replay=int(replay["served"]),
                served_acc_live=float(np.mean(sacc)) if sacc else None,
                served_acc_replay=replay["served_acc"],
                spread_alpha_pp=float(100 * (a.max() - a.min())) if len(runs) > 1 else None,
            )
            row["delta_alpha_pp"] = 100 * (row["alpha_replay"] - row["alpha_live"])
            row["alpha_replay_live_speed"] = float(at_live["alpha"])
            row["delta_alpha_live_speed_pp"] = 100 * (row["alpha_replay_live_speed"] - row["alpha_live"])
            row["delta_served_acc_pp"] = (
                100 * (row["served_acc_replay"] - row["served_acc_live"])
                if row["served_acc_live"] is not None and row["served_acc_replay"] is not None
                else None
            )
            limit_u = tol.abs_pp if len(runs) < 2 else min(tol.abs_pp, row["spread_utility_pp"] + tol.spread_slack_pp)
            limit_a = tol.abs_pp if len(runs) < 2 else min(tol.abs_pp, row["spread_alpha_pp"] + tol.spread_slack_pp)
            row["tolerance_pp"] = limit_u
            row["tolerance_alpha_pp"] = limit_a
            row["pass"] = abs(row["delta_utility_pp"]) <= limit_u + 1e-9 and abs(row["delta_alpha_pp"]) <= limit_a + 1e-9
        else:
            m_live = float(np.mean([np.mean(list(r.m.values())) for r in runs]))
            row.update(
                m_live=m_live, m_replay=float(replay["m"]), m_replay_live_speed=float(at_live["m"]), frozen_gap_replay=replay["frozen_gap"]
            )
            row["tolerance_pp"] = tol.amortised_pp
            row["pass"] = abs(row["delta_utility_pp"]) <= tol.amortised_pp + 1e-9
        setting_rows.append(row)
        for r in runs:
            ok = True
            if protocol.serves_subset:
                ok = (100 * r.agreement >= tol.min_agreement_pct - 1e-9) and all(d["near_tie"] for d in r.disagreements)
            run_rows.append(
                {
                    "file": str(r.file.path),
                    "run": int(r.run["run"]),
                    "repeat": int(r.run["repeat"]),
                    "method": _label(meta),
                    "protocol": proto,
                    "lambda_ms": row["lambda_ms"],
                    "rho": row["rho"],
                    "queue": row["queue"],
                    "budget_ms": row["budget_ms"],
                    "budget_rule": row["budget_rule"],
                    "num_batches": r.total,
                    "served": r.served,
                    "alpha": r.alpha,
                    "served_acc": r.served_acc,
                    "utility": r.utility,
                    "m": float(np.mean(list(r.m.values()))) if r.m else None,
                    "agreement_pct": _pp(r.agreement),
                    "agreement_delta_only_pct": _pp(r.agreement_delta_only),
                    "overhead_us": r.overhead_us,
                    "overhead_back_to_back_us": r.overhead_back_to_back_us,
                    "overhead_after_wait_us": r.overhead_after_wait_us,
                    "disagreements": len(r.disagreements),
                    "pass": ok,
                }
            )
            for d in r.disagreements:
                dis_rows.append({"file": str(r.file.path), "run": int(r.run["run"]), **d})
    settings_frame = pl.DataFrame(setting_rows, infer_schema_length=None)
    runs_frame = pl.DataFrame(run_rows, infer_schema_length=None)
    dis_schema = {
        "file": pl.Utf8,
        "run": pl.Int64,
        "episode": pl.Utf8,
        "step": pl.Int64,
        "live_served": pl.Boolean,
        "replay_served": pl.Boolean,
        "margin_us": pl.Float64,
        "near_tie": pl.Boolean,
    }
    dis_frame = pl.DataFrame(dis_rows, schema=dis_schema)
    return Validation(settings_frame, runs_frame, dis_frame)


# ------------------------------------------------------------------------ the command's outputs
def write_frames(frames: dict[str, pl.DataFrame], out: str | os.PathLike) -> list[Path]:
    """Write each frame as NAME.parquet and NAME.csv into ``out``, published together (the
    shared staged, locked, atomic output of every Tempora command)."""
    with staged_dir(out, what="validation output") as stage:
        for name, frame in frames.items():
            write_file(stage / f"{name}.parquet", to_bytes(frame.write_parquet))
            write_file(stage / f"{name}.csv", frame.write_csv().encode("utf-8"))
    return [Path(out) / f"{name}.{ext}" for name in frames for ext in ("parquet", "csv")]


def validate_into(
    live_sources: Sequence[str | os.PathLike],
    trace_source: str | os.PathLike,
    tol: Tolerances,
    out: str | os.PathLike | None = None,
    sandwich_source: str | os.PathLike | None = None,
) -> tuple[Validation, list[Path]]:
    """:func:`validate`, and with ``out`` its frames written there (``out`` checked before any
    work); returns the validation and the files written."""
    if out is not None:
        # written inside a trace or live folder, validation*.parquet would be read as traces or
        # live runs by the next run
        check_out_outside([trace_source] + ([sandwich_source] if sandwich_source is not None else []), out)
        check_out_outside(live_sources, out, "live-run folder", "live runs")
        check_output_dir(out)
    result = validate(
        [str(p) for p in live_sources], [str(trace_source)], tol, [str(sandwich_source)] if sandwich_source is not None else None
    )
    return result, (write_frames(result.frames(), out) if out is not None else [])
