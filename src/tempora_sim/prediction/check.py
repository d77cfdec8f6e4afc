"""Predicted traces against full traces taken on the target (``tempora-sim validate-prediction``).

For every predicted group the measured group of the same configuration on the profiled device
(the device name without its ``(predicted)`` mark, the same threads) is found and compared:

* **times**, per method: the relative error of the mean δ, e and ℓ over the adapt rows
  (predicted / measured − 1), and of λ per group (from the two ``standard`` traces);
* **the machine's share of it**: a predicted trace carries its profile's machine-speed probes,
  the measured trace its own. Where they time the same work, their ratio says how much faster
  or slower the machine ran during the check than during the profile, something no transfer
  can know; the δ̄ error with the measured trace brought to the profile's speed
  (``(1 + error) · ratio − 1``) is what is left for the transfer. Beside λ's error stands the
  spread (σ / mean) of the predicted and the measured ``standard`` δ: λ is mean + 6σ, and a
  transfer carries the source device's spread, not the target's;
* **the machine inside a trace**: a median probe hides a machine that changed speed halfway
  through a trace. Every measured trace (and, given ``--source``, every source trace) whose own
  probes moved by more than :data:`~tempora_schema.PROBE_DRIFT_LIMIT`
  (:func:`~tempora_schema.probe_drift`) is named: its method's time errors mix two speeds;
* **decisions**, over the sweep's default grids (every protocol): both sets are swept with the
  same library calls as ``tempora-sim report`` (:func:`tempora_sim.sweeps.replay.run_sweep`, timing
  replicates, :func:`tempora_sim.analyses.intervals.utility_intervals` and
  :func:`~tempora_sim.analyses.wins.winners`), and per temporal (episode × scenario) cell: whether the
  winners agree, whether a *certain* measured winner is also the predicted one, Spearman r_s
  between the two sets' utilities of the methods, and whether the measured U lies in the
  predicted interval (coverage);
* per protocol, the mean |ΔU| and |Δα| in percentage points.

The offline cells are left out of the decision figures: offline utility is accuracy, which a
predicted trace copies from its source, so they agree by construction. The baselines are
evaluated the same way when the source traces and profiles are given.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from tempora_schema import PROBE_DRIFT_LIMIT, GroupKey, ProbeDrift, probe_drift
from tempora_schema.prediction import PREDICTED_MARK, is_predicted, measured_device
from tempora_schema.provision import lambda_provision
from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.errors import SimError
from tempora_sim.prediction.transfer import predict, probe_factor
from tempora_sim.sweeps.replay import run_sweep
from tempora_sim.sweeps.traces import STANDARD_METHOD, Trace, TraceSet, load_traces
from tempora_sim.uncertainty import bootstrap as st
from tempora_sim.uncertainty.timing_replicates import INTERVAL_MEASURES, replicates_of


class PredictionCheckError(SimError):
    """Predicted and measured traces that cannot be compared (one line, exit 2)."""


@dataclass
class MethodError:
    group: str
    method: str
    delta: float
    e: float
    l: float | None
    #: adapt rows whose accuracy differs between the source (as predicted) and the target, and the largest difference (pp)
    acc_differ: int = 0
    acc_max_pp: float = 0.0
    #: the same over the frozen rows both traces score
    frozen_max_pp: float = 0.0
    #: the machine's speed during the measured trace against its profile's (probe ratio − 1:
    #: > 0, slower during the check); None where the probes time different work or are missing
    machine: float | None = None

    @property
    def delta_at_profile_speed(self) -> float | None:
        """The δ̄ error with the measured trace brought to the profile's machine speed."""
        return None if self.machine is None else (1.0 + self.delta) * (1.0 + self.machine) - 1.0


@dataclass
class LambdaError:
    group: str
    error: float
    #: σ / mean of the predicted and the measured standard trace's δ: λ is mean + 6σ, and a
    #: transfer maps the source device's spread, which need not be the target's
    cv_predicted: float | None = None
    cv_measured: float | None = None


def machine_change(pred: Trace, meas: Trace) -> float | None:
    """Median speed probe of the measured trace over the predicted one's (its profile's) − 1;
    None when either was not probed or the probes time different work."""
    factor = probe_factor(pred, meas)
    return None if factor is None else factor - 1.0


def accuracy_difference(pred: Trace, meas: Trace) -> tuple[int, float, float]:
    """(adapt rows whose accuracy differs, largest |Δ| of an adapt row, of a frozen row) in pp:
    accuracy is the method's arithmetic on the stream, the same on every device up to
    floating-point rounding, and this is where it is not."""
    acc = (pl.col("correct") / pl.col("n")).alias("acc")
    a = pred.adapt.select("episode", "step", acc).join(meas.adapt.select("episode", "step", acc), on=["episode", "step"], suffix="_m")
    d = (a["acc"] - a["acc_m"]).abs().to_numpy() if a.height else np.zeros(0)
    keys = ["episode", "checkpoint", "step"]
    f = pred.frozen.select(*keys, acc).join(meas.frozen.select(*keys, acc), on=keys, suffix="_m")
    fd = (f["acc"] - f["acc_m"]).abs().to_numpy() if f.height else np.zeros(0)
    return int((d > 0).sum()), 100 * float(d.max()) if d.size else 0.0, 100 * float(fd.max()) if fd.size else 0.0


@dataclass
class DecisionCheck:
    cells: int
    agree: float | None
    certain_cells: int
    certain_agree: float | None
    spearman: float | None
    coverage: float | None
    covered_cells: int
    per_protocol: list[dict] = field(default_factory=list)


@dataclass
class TransferCheck:
    """One transfer (the fitted model or a baseline) against the measured traces."""

    name: str
    methods: list[MethodError]
    lambdas: list[LambdaError]
    #: None where the transfer could not be evaluated (``unavailable`` says why)
    decisions: DecisionCheck | None
    unavailable: str | None = None
    #: (trace, the machine's speed change inside it) of the measured traces and, where given, the sources
    measured_drifts: list[tuple[str, ProbeDrift | None]] = field(default_factory=list)
    source_drifts: list[tuple[str, ProbeDrift | None]] = field(default_factory=list)


def trace_drifts(traces: Sequence[Trace]) -> list[tuple[str, ProbeDrift | None]]:
    """(name, :func:`~tempora_schema.probe_drift`) per trace; the name is the method's, with the
    model's where the traces hold several models."""
    several = len({t.group.model for t in traces}) > 1
    return [(f"{t.group.model} · {t.method}" if several else t.method, probe_drift(t.meta)) for t in traces]


def _target_key(key: GroupKey) -> GroupKey:
    meta = key.as_metadata()
    meta["device"] = measured_device(key.device)
    return GroupKey.from_metadata(meta)


def pair_groups(predicted: TraceSet, measured: TraceSet) -> list[tuple[list[Trace], list[Trace]]]:
    """(predicted traces, measured traces of the same methods) per predicted group; one line
    for a measured trace among the predicted, a group with no measured counterpart, or a
    method predicted but not measured."""
    for t in predicted.traces:
        if not is_predicted(t.meta):
            raise PredictionCheckError(
                f"{t.path}: a measured trace among the predicted ones (PREDICTED holds `tempora-sim predict` output)"
            )
    for t in measured.traces:
        if is_predicted(t.meta):
            raise PredictionCheckError(f"{t.path}: a predicted trace given as measured (--against holds traces taken on the target)")
    mgroups = measured.groups()
    out = []
    for key, members in predicted.groups().items():
        want = _target_key(key)
        got = mgroups.get(want)
        if got is None:
            have = "; ".join(k.label() for k in mgroups) or "none"
            raise PredictionCheckError(
                f"predicted group {key.label()} has no measured group on {want.device} to compare with (measured: {have})"
            )
        by_method = {t.method: t for t in got}
        missing = [t.method for t in members if t.method not in by_method]
        if missing:
            raise PredictionCheckError(f"method(s) {', '.join(missing)} predicted for {want.label()} but not measured there")
        out.append((members, [by_method[t.method] for t in members]))
    return out


def _rel(a: float, b: float) -> float | None:
    return a / b - 1.0 if b > 0 else None


def time_errors(pairs: list[tuple[list[Trace], list[Trace]]]) -> tuple[list[MethodError], list[LambdaError]]:
    """Per method the relative error of δ̄, ē, ℓ̄ and the machine's speed change; per group
    that of λ, with the spread of both standard traces."""
    methods, lambdas = [], []
    for pred, meas in pairs:
        label = meas[0].group.label(seed=False)
        for p, m in zip(pred, meas):
            pa_, ma_ = p.adapt, m.adapt
            methods.append(
                MethodError(
                    label,
                    p.method,
                    _rel(float(pa_["delta_ms"].mean()), float(ma_["delta_ms"].mean())) or 0.0,
                    _rel(float(pa_["e_ms"].mean()), float(ma_["e_ms"].mean())) or 0.0,
                    _rel(float(pa_["l_ms"].mean()), float(ma_["l_ms"].mean())),
                    *accuracy_difference(p, m),
                    machine=machine_change(p, m),
                )
            )
        ps = next((t for t in pred if t.method == STANDARD_METHOD), None)
        ms = next((t for t in meas if t.method == STANDARD_METHOD), None)
        if ps is not None and ms is not None:
            (lam_p, mean_p, sd_p), (lam_m, mean_m, sd_m) = lambda_provision(ps.adapt_delta), lambda_provision(ms.adapt_delta)
            lambdas.append(
                LambdaError(label, lam_p / lam_m - 1.0, sd_p / mean_p if mean_p > 0 else None, sd_m / mean_m if mean_m > 0 else None)
            )
    return methods, lambdas


def _swept(traces: list[Trace], relabel: dict[str, str], bootstrap: st.BootstrapOptions):
    """The sweep of ``traces`` over the default grids, its per-episode intervals (timing
    replicates included) and its winners, with predicted groups named as their measured ones."""
    result = run_sweep(TraceSet(traces))

    def rename(frame: pl.DataFrame) -> pl.DataFrame:
        if not relabel or "group" not in frame.columns:
            return frame
        named = [pl.col("group").replace(relabel)]
        if "device" in frame.columns:  # the profiled device, without its mark
            named.append(pl.col("device").str.replace(PREDICTED_MARK, "", literal=True))
        return frame.with_columns(named)

    timing = replicates_of(result, bootstrap.timing_replicates, bootstrap.seed, measures=INTERVAL_MEASURES)
    if timing is not None and relabel:
        timing = timing.map(rename)
    frame = rename(result.frame)
    rows = rename(an.trace_rows(traces))
    intervals = an.utility_intervals(frame, an.align_group_dtypes(rows, frame), bootstrap, pooled=False, timing=timing)
    return frame, intervals, an.winners(frame, intervals=intervals)


def _spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.size < 2:
        return None
    ra, rb = pl.Series(a).rank("average").to_numpy(), pl.Series(b).rank("average").to_numpy()
    da, db = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((da * da).sum() * (db * db).sum()))
    return float((da * db).sum() / den) if den > 0 else None


def decision_check(pairs: list[tuple[list[Trace], list[Trace]]], bootstrap: st.BootstrapOptions, memo: dict | None = None) -> DecisionCheck:
    """Winner agreement, certain-winner agreement, Spearman r_s, coverage, per-protocol |ΔU|, |Δα|.
    ``memo`` keeps the measured sweep between the transfers compared with the same traces."""
    pred = [t for p, _ in pairs for t in p]
    meas = [t for _, m in pairs for t in m]
    relabel = {}
    for p, m in pairs:
        relabel[p[0].group.label(seed=False)] = m[0].group.label(seed=False)
    fp, ip, wp = _swept(pred, relabel, bootstrap)
    key = tuple(id(t) for t in meas)
    memo = {} if memo is None else memo
    if key not in memo:
        memo[key] = _swept(meas, {}, bootstrap)
    fm, _, wm = memo[key]
    keys = an.cell_keys(wm)
    temporal = pl.col("protocol") != P.reference()
    w = (
        wm.filter(temporal)
        .select(keys + ["winner", "certain"])
        .join(wp.filter(temporal).select(keys + [pl.col("winner").alias("winner_p")]), on=keys, how="inner", nulls_equal=True)
    )
    same = (w["winner"] == w["winner_p"]).to_numpy() if w.height else np.zeros(0, bool)
    certain = w["certain"].fill_null(False).to_numpy() if w.height else np.zeros(0, bool)
    cm, cp = an.cells(fm, temporal_only=True), an.cells(fp, temporal_only=True)
    ck = an.cell_keys(cm)
    joined = cm.select(ck + ["method", "protocol", "value", "utility", *(["alpha"] if "alpha" in cm.columns else [])]).join(
        cp.select(
            ck + ["method", pl.col("utility").alias("utility_p"), *([pl.col("alpha").alias("alpha_p")] if "alpha" in cp.columns else [])]
        ),
        on=ck + ["method"],
        how="inner",
        nulls_equal=True,
    )
    rs = []
    for _, cell in joined.partition_by(ck, as_dict=True).items():
        r = _spearman(cell["utility"].to_numpy(), cell["utility_p"].to_numpy())
        if r is not None:
            rs.append(r)
    covered = an.attach_intervals(joined, ip).filter(pl.col("lo").is_not_null())
    inside = (
        ((covered["utility"] >= covered["lo"] - 1e-12) & (covered["utility"] <= covered["hi"] + 1e-12)).to_numpy() if covered.height else []
    )
    per_protocol = []
    for (protocol,), part in joined.partition_by("protocol", as_dict=True).items():
        row = {
            "protocol": protocol,
            "cells": part.height,
            "mean_abs_dU_pp": 100 * float((part["utility"] - part["utility_p"]).abs().mean()),
        }
        if "alpha_p" in part.columns and part["alpha"].null_count() < part.height:
            row["mean_abs_dalpha_pp"] = 100 * float((part["alpha"] - part["alpha_p"]).abs().mean())
        per_protocol.append(row)
    return DecisionCheck(
        cells=int(w.height),
        agree=float(same.mean()) if same.size else None,
        certain_cells=int(certain.sum()),
        certain_agree=float(same[certain].mean()) if certain.any() else None,
        spearman=float(np.mean(rs)) if rs else None,
        coverage=float(np.mean(inside)) if len(inside) else None,
        covered_cells=int(len(inside)),
        per_protocol=sorted(per_protocol, key=lambda r: r["protocol"]),
    )


def check_transfer(
    name: str, predicted: TraceSet, measured: TraceSet, bootstrap: st.BootstrapOptions, memo: dict | None = None
) -> TransferCheck:
    pairs = pair_groups(predicted, measured)
    methods, lambdas = time_errors(pairs)
    drifts = trace_drifts([m for _, meas in pairs for m in meas])
    return TransferCheck(name, methods, lambdas, decision_check(pairs, bootstrap, memo), measured_drifts=drifts)


def validate_prediction(
    predicted: str | os.PathLike | Sequence[str | os.PathLike],
    measured: str | os.PathLike | Sequence[str | os.PathLike],
    bootstrap: st.BootstrapOptions | None = None,
    sources=None,
    profiles=None,
) -> list[TransferCheck]:
    """The fitted transfer's check, then (with ``sources`` and ``profiles``) the baselines'."""
    bootstrap = bootstrap or st.BootstrapOptions()
    if (sources is None) != (profiles is None):
        raise PredictionCheckError("--source and --profiles go together: the baselines are predicted from both")
    measured_set = load_traces(measured)
    memo: dict = {}
    checks = [check_transfer("fit", load_traces(predicted), measured_set, bootstrap, memo)]
    if sources is not None:
        baselines = predict(sources, profiles, transfers=("speed-probe", "method-median"), skip_unavailable=True)
        # the source traces predict already read and paired (one per path, however many targets)
        checks[0].source_drifts = trace_drifts(list({p.source.path: p.source for p in baselines.pairings}.values()))
        for name, items in baselines.traces.items():
            checks.append(check_transfer(name, TraceSet([t for _, t in items]), measured_set, bootstrap, memo))
        checks += [TransferCheck(name, [], [], None, unavailable=why) for name, why in baselines.unavailable.items()]
    return checks


def _pct(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{100 * x:+.1f} %"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _machine_lines(methods: list[MethodError]) -> list[str]:
    """What the machine's speed change between the profiles and the measured traces explains."""
    probed = [m for m in methods if m.machine is not None]
    if not probed:
        return [
            "machine: the profiles' and the measured traces' speed probes time different work (or are missing); "
            "the machine's speed change between them is not known"
        ]
    lo, hi = min(m.machine for m in probed), max(m.machine for m in probed)
    same = [m.delta_at_profile_speed for m in probed]
    worst = max(abs(x) for x in same)
    return [
        f"machine: during the measured traces it ran {_pct(lo)} to {_pct(hi)} against their profiles (speed probes; > 0 slower); "
        f"with each measured trace brought to its profile's speed the fit's largest |δ̄ error| is {100 * worst:.1f} % "
        f"({_within(same)}); the rest is the machine's speed change, which no profile foresees"
    ]


def _drift_lines(measured: list[tuple[str, ProbeDrift | None]], sources: list[tuple[str, ProbeDrift | None]]) -> list[str]:
    """Which traces saw the machine change speed inside them (their own probes)."""
    parts, unchecked, any_moved = [], 0, False
    for what, drifts in (("measured", measured), ("source", sources)):
        if not drifts:
            continue
        unchecked += sum(d is None for _, d in drifts)
        moved = [(name, d) for name, d in drifts if d is not None and d.moved]
        any_moved = any_moved or bool(moved)
        named = ", ".join(f"{name} {100 * d.change:.0f} % ({d.fast_ms:.2f}–{d.slow_ms:.2f} ms)" for name, d in moved)
        parts.append(f"{len(moved)} of {len(drifts)} {what} traces" + (f" ({named})" if moved else ""))
    if not parts:
        return []
    line = (
        f"inside a trace: the machine's speed moved by more than {100 * PROBE_DRIFT_LIMIT:.0f} % (medians of three successive "
        f"speed probes) within {' and '.join(parts)}"
    )
    if any_moved:
        line += "; a median probe hides such a change, and those methods' time errors mix machine speeds"
    if unchecked:
        line += f"; {unchecked} trace(s) with fewer than three probes not checked"
    return [line]


def _within(errors: list[float], limit: float = 0.10) -> str:
    return f"{sum(abs(x) <= limit + 1e-12 for x in errors)} of {len(errors)} within {100 * limit:.0f} %"


def check_lines(checks: list[TransferCheck]) -> list[str]:
    """The terminal report: per method the time errors of every transfer side by side and the
    machine's speed change, λ, then the decision figures of every transfer; a baseline the
    inputs cannot give is named, with why."""
    skipped = [c for c in checks if c.unavailable is not None]
    checks = [c for c in checks if c.unavailable is None]
    names = [c.name for c in checks]
    lines = ["Time errors (predicted / measured − 1; 'fit' is the transfer model, the others its baselines)"]
    header = (
        f"{'group · method':<58}"
        + "".join(f"{'δ̄ ' + n:>22}" for n in names)
        + f"{'ē fit':>12}{'ℓ̄ fit':>12}{'machine':>10}{'δ̄ fit, same speed':>20}"
    )
    lines.append(header)
    base = {(m.group, m.method): m for m in checks[0].methods}
    for key, m in base.items():
        cells = "".join(f"{_pct(next((x.delta for x in c.methods if (x.group, x.method) == key), None)):>22}" for c in checks)
        lines.append(
            f"{(m.group[:40] + ' · ' + m.method):<58}{cells}{_pct(m.e):>12}{_pct(m.l):>12}{_pct(m.machine):>10}{_pct(m.delta_at_profile_speed):>20}"
        )
    lines.append(
        "largest |δ̄ error|: "
        + ", ".join(
            f"{n} {100 * max((abs(m.delta) for m in c.methods), default=0.0):.1f} % ({_within([m.delta for m in c.methods])})"
            for n, c in zip(names, checks)
        )
    )
    lines += _machine_lines(checks[0].methods)
    lines += _drift_lines(checks[0].measured_drifts, checks[0].source_drifts)
    lines += [f"baseline {c.name}: not evaluated ({c.unavailable})" for c in skipped]
    differ = [m for m in checks[0].methods if m.acc_max_pp > 0 or m.frozen_max_pp > 0]
    if differ:
        for m in differ:
            lines.append(
                f"accuracy differs between the devices for {m.method} ({m.group}): {m.acc_differ} batch(es), up to "
                f"{m.acc_max_pp:.2f} pp; frozen rows up to {m.frozen_max_pp:.2f} pp (the prediction keeps the source's accuracy)"
            )
    else:
        lines.append("accuracy: every shared batch and frozen row is the same on both devices")
    for c in checks:
        for lam in c.lambdas:
            cv = f" (σ / mean of standard's δ: predicted {_share(lam.cv_predicted)}, measured {_share(lam.cv_measured)})"
            lines.append(f"λ error ({c.name}) {lam.group}: {_pct(lam.error)}{cv}")
    lines.append("")
    lines.append("Decisions over the default grids (temporal episode × scenario cells; offline agrees by construction)")
    lines.append(
        f"{'transfer':<16}{'cells':>7}{'same winner':>13}{'certain':>9}{'same, certain':>15}{'Spearman r_s':>14}{'U coverage':>12}"
    )
    for c in checks:
        d = c.decisions
        rs = "—" if d.spearman is None else f"{d.spearman:.3f}"
        lines.append(
            f"{c.name:<16}{d.cells:>7}{_share(d.agree):>13}{d.certain_cells:>9}{_share(d.certain_agree):>15}{rs:>14}{_share(d.coverage):>12}"
        )
    lines.append("")
    lines.append("Per protocol: mean |ΔU| and |Δα| (pp)")
    for c in checks:
        for r in c.decisions.per_protocol:
            alpha = f", |Δα| {r['mean_abs_dalpha_pp']:.2f}" if "mean_abs_dalpha_pp" in r else ""
            lines.append(f"  {c.name:<14} {r['protocol']:<22} |ΔU| {r['mean_abs_dU_pp']:.2f}{alpha}  ({r['cells']} method cells)")
    return lines
