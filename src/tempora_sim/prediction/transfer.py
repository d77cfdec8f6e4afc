"""Predicted traces: a device that was only profiled, from traces taken on another (docs/design/design.md §12).

Most of a trace does not depend on the device: per-batch accuracy and the frozen checkpoints
are the method's arithmetic on the stream. What the device changes is time, and not by one
factor: the forward pass and the adaptation step scale differently from one device to the
next. A *profile* (``tempora-trace profile``) times the first batches of every episode of the
same stream on the target device; it shares those events — the same batches in the same
order, paired by (episode, step) — with the full *source* trace taken elsewhere.

**The transfer model**, fitted per method on the shared events, maps each phase on its own:
``e`` (until the prediction) and ``ℓ`` (after it) each by one of

* ``scale``: t_target = a · t_source, a = Σ t_target / Σ t_source (unbiased for the mean);
* ``affine``: t_target = a · t_source + b (least squares, a ≥ 0; clipped at 0);
* ``zero``: the phase is 0 on every source event (``standard``'s ℓ);

and an event whose source phase is 0 stays 0 on the target (a batch a policy did not adapt).
Because the map is per event, a method whose adaptation cost depends on the batch (ETA, SAR
and DeYO filter samples by entropy) keeps its per-batch structure. The kind of each phase is
chosen out of sample: the shared events, in step order, are cut into K contiguous folds (4,
or 2 below 16 events); each candidate is fitted on K − 1 folds and scored on the held-out
one, and the smaller held-out squared error wins (``scale`` on a tie) among the kinds that can
also be fitted on every shared event. The chosen model is then fitted on every shared event.
Frozen rows' ``e`` is mapped with the ``e`` model.

**Its error.** The held-out fold's bias of the mean δ, b_k = log(Σ δ̂ / Σ δ), is what the
prediction gets wrong about a method's level of time; σ_p = √(mean b_k²) with K degrees of
freedom is written to the trace (``predicted.error``) and the simulator scales every timing
replicate of the trace by one more draw from it (:mod:`tempora_sim.sweeps.variability`): every
interval, certainty and answer drawn from a predicted trace includes the prediction error.

**Baselines** (what one would do by hand), computed beside it and written as the same kind of
trace with ``transfer``: ``speed-probe`` scales every time by the ratio of the profile's and
the source trace's median machine-speed probes (one factor for every method); ``method-median``
by the ratio of the median δ of the shared events (one factor per method).

Predicted and measured traces of one device never share a comparison group: a predicted
trace's device is the profiled one marked ``(predicted)`` (:mod:`tempora_schema.prediction`).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import polars as pl

from tempora_schema import (
    COLUMN_TYPES,
    HEAP_FAULTS_KEY,
    HEAP_KEY,
    METHOD_SOURCE_KEY,
    PHASE_ADAPT,
    PROFILE_BATCHES_KEY,
    VARIABILITY_KEY,
    GroupKey,
    TraceIdentity,
    arrow_schema,
    map_sample_events,
    probe_median_ms,
)
from tempora_schema.prediction import PREDICTED_KEY, is_predicted, measured_device, predicted_device
from tempora_schema.vocabulary import BASELINE_METHOD
from tempora_sim.errors import GroupError, SimError, SimWarning
from tempora_sim.sweeps.traces import Trace, TraceSet, check_out_outside, load_traces, trace_from_frame
from tempora_toolkit.atomic_files import staged_dir, to_bytes, write_file

#: The transfers ``--transfer`` may name: the fitted model, then the two baselines.
TRANSFERS = ("fit", "speed-probe", "method-median")
#: Fewest shared events a transfer is fitted on.
MIN_EVENTS = 4
#: Metadata keys that must agree between a profile and its source trace (besides the method):
#: the same data, model, weights, batch size, seed, stream, severity, domains and batch limit.
MATCH_KEYS = ("dataset", "model", "weights", "batch_size", "seed", "stream", "severity", "domains", "max_batches")


class PredictionError(SimError):
    """Profiles and source traces that do not make a prediction (one line, exit 2)."""


# ------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class PhaseModel:
    """One phase's map from the source device's times to the target's."""

    kind: str
    a: float
    b: float = 0.0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        if self.kind == "zero":
            return np.zeros_like(x)
        return np.where(x > 0, np.maximum(self.a * x + self.b, 0.0), 0.0)

    def as_metadata(self) -> dict:
        return {"kind": self.kind, "a": float(self.a), "b": float(self.b)}


def fit_phase(kind: str, x: np.ndarray, y: np.ndarray) -> PhaseModel | None:
    """``kind`` fitted on the events whose source phase is positive; None when it cannot be."""
    if kind == "zero":
        return PhaseModel("zero", 0.0)
    pos = x > 0
    xs, ys = x[pos], y[pos]
    if xs.size == 0 or xs.sum() <= 0:
        return None
    if kind == "scale":
        return PhaseModel("scale", float(ys.sum() / xs.sum()))
    if xs.size < 3 or float(np.ptp(xs)) <= 0:
        return None
    a, b = np.polyfit(xs, ys, 1)
    if not (math.isfinite(a) and math.isfinite(b)) or a < 0:
        return None
    return PhaseModel("affine", float(a), float(b))


def fold_ids(steps: np.ndarray, episodes: np.ndarray) -> tuple[np.ndarray, int]:
    """Fold of every shared event: in (step, episode) order, K contiguous folds (4, or 2 below
    16 events), so a fold is held out as later batches are held out from the profile."""
    n = steps.size
    k = 4 if n >= 16 else 2
    order = np.lexsort((episodes, steps))
    folds = np.empty(n, np.int64)
    folds[order] = np.arange(n) * k // n
    return folds, k


#: A transfer fitter: (indices of the events to fit on) → (e model, ℓ model).
Fitter = Callable[[np.ndarray], "tuple[PhaseModel, PhaseModel] | None"]


@dataclass
class Transfer:
    """A fitted transfer of one method: its phase models and their out-of-sample error."""

    name: str
    e: PhaseModel
    l: PhaseModel
    events: int
    folds: int
    fold_bias: list[float]
    event_rms: float

    @property
    def sd_log(self) -> float:
        return float(math.sqrt(np.mean(np.square(self.fold_bias)))) if self.fold_bias else 0.0

    def metadata(self) -> tuple[dict, dict]:
        model = {"e": self.e.as_metadata(), "l": self.l.as_metadata(), "events": self.events, "folds": self.folds}
        error = {
            "sd_log": self.sd_log,
            "df": self.folds,
            "fold_bias_log": [float(b) for b in self.fold_bias],
            "event_rms_log": float(self.event_rms),
        }
        return model, error


@dataclass
class Pairs:
    """The events a source trace and its profile share, paired by (episode, step)."""

    episode: np.ndarray
    step: np.ndarray
    xe: np.ndarray
    xl: np.ndarray
    ye: np.ndarray
    yl: np.ndarray
    correct_differ: int = 0
    max_correct_diff: int = 0

    @property
    def xd(self) -> np.ndarray:
        return self.xe + self.xl

    @property
    def yd(self) -> np.ndarray:
        return self.ye + self.yl


def shared_events(source: Trace, profile: Trace) -> Pairs:
    """The adapt events of ``profile`` found in ``source`` (same episode and step)."""
    cols = ["episode", "step", "correct", "e_ms", "l_ms"]
    a = source.adapt.select(cols)
    b = profile.adapt.select(cols)
    j = b.join(a, on=["episode", "step"], how="inner", suffix="_src").sort(["step", "episode"])
    diff = (j["correct"] - j["correct_src"]).abs().to_numpy() if j.height else np.zeros(0, np.int64)
    return Pairs(
        episode=j["episode"].to_numpy().astype(str),
        step=j["step"].to_numpy().astype(np.int64),
        xe=j["e_ms_src"].to_numpy().astype(np.float64),
        xl=j["l_ms_src"].to_numpy().astype(np.float64),
        ye=j["e_ms"].to_numpy().astype(np.float64),
        yl=j["l_ms"].to_numpy().astype(np.float64),
        correct_differ=int((diff > 0).sum()),
        max_correct_diff=int(diff.max()) if diff.size else 0,
    )


def cross_validate(name: str, pairs: Pairs, fitter: Fitter) -> Transfer | None:
    """Fit ``fitter`` on every event and measure its held-out error over the folds."""
    folds, k = fold_ids(pairs.step, pairs.episode)
    full = fitter(np.arange(pairs.step.size))
    if full is None:
        return None
    bias, logs = [], []
    yd = pairs.yd
    for f in range(k):
        test, train = np.flatnonzero(folds == f), np.flatnonzero(folds != f)
        models = fitter(train)
        if models is None or test.size == 0:
            return None
        pred = models[0](pairs.xe[test]) + models[1](pairs.xl[test])
        if pred.sum() <= 0 or yd[test].sum() <= 0:
            return None
        bias.append(math.log(pred.sum() / yd[test].sum()))
        ok = (pred > 0) & (yd[test] > 0)
        logs.append(np.log(pred[ok] / yd[test][ok]))
    rms = float(np.sqrt(np.mean(np.square(np.concatenate(logs))))) if logs else 0.0
    return Transfer(name, full[0], full[1], int(pairs.step.size), k, bias, rms)


def _held_out_sse(kind: str, x: np.ndarray, y: np.ndarray, folds: np.ndarray, k: int) -> float | None:
    sse = 0.0
    for f in range(k):
        m = fit_phase(kind, x[folds != f], y[folds != f])
        if m is None:
            return None
        sse += float(np.sum((m(x[folds == f]) - y[folds == f]) ** 2))
    return sse


def choose_kind(x: np.ndarray, y: np.ndarray, folds: np.ndarray, k: int) -> str:
    """The phase's model kind with the smaller held-out squared error (``scale`` on a tie),
    among the kinds that also fit every event: a line whose slope is positive on each part of
    a short profile can come out negative on the whole, and the chosen kind is then fitted on
    the whole."""
    if not (x > 0).any():
        return "zero"
    scores = {kind: _held_out_sse(kind, x, y, folds, k) for kind in ("scale", "affine")}
    valid = {kind: v for kind, v in scores.items() if v is not None and fit_phase(kind, x, y) is not None}
    if not valid:
        return "scale"
    return min(valid, key=lambda kind: (valid[kind], kind != "scale"))


def fit_transfer(pairs: Pairs) -> Transfer | None:
    """The transfer model (``fit``): each phase's kind chosen out of sample, then fitted."""
    folds, k = fold_ids(pairs.step, pairs.episode)
    ke = choose_kind(pairs.xe, pairs.ye, folds, k)
    kl = choose_kind(pairs.xl, pairs.yl, folds, k)

    def fitter(idx: np.ndarray):
        me, ml = fit_phase(ke, pairs.xe[idx], pairs.ye[idx]), fit_phase(kl, pairs.xl[idx], pairs.yl[idx])
        return None if me is None or ml is None else (me, ml)

    return cross_validate("fit", pairs, fitter)


def factor_transfer(name: str, pairs: Pairs, factor: Callable[[np.ndarray], float | None]) -> Transfer | None:
    """A baseline: one factor for both phases (``factor(idx)``; None: not available)."""

    def fitter(idx: np.ndarray):
        f = factor(idx)
        if f is None or not (math.isfinite(f) and f > 0):
            return None
        return PhaseModel("scale", f), PhaseModel("scale", f)

    return cross_validate(name, pairs, fitter)


def probe_factor(source: Trace, profile: Trace) -> float | None:
    """Ratio of the median machine-speed probes (target / source); None when either was not
    probed or the probes time different work."""
    a, b = probe_median_ms(source.meta), probe_median_ms(profile.meta)
    if a is None or b is None or source.meta.get("speed_probe_kind") != profile.meta.get("speed_probe_kind"):
        return None
    return b / a


def transfers_of(source: Trace, profile: Trace, pairs: Pairs) -> dict[str, Transfer | None]:
    """The fitted transfer and the two baselines of one method."""
    probe = probe_factor(source, profile)
    xd, yd = pairs.xd, pairs.yd

    def median_ratio(idx: np.ndarray) -> float | None:
        x, y = np.median(xd[idx]), np.median(yd[idx])
        return float(y / x) if x > 0 else None

    return {
        "fit": fit_transfer(pairs),
        "speed-probe": factor_transfer("speed-probe", pairs, lambda idx: probe),
        "method-median": factor_transfer("method-median", pairs, median_ratio),
    }


# ------------------------------------------------------------------------------ pairing
def _matchable(meta: dict) -> dict:
    return {k: meta.get(k) for k in MATCH_KEYS} | {
        "method_params": meta.get("method_params"),
        "policy": meta.get("policy"),
        METHOD_SOURCE_KEY: meta.get(METHOD_SOURCE_KEY),
    }


def _differences(a: dict, b: dict) -> list[str]:
    ma, mb = _matchable(a), _matchable(b)
    return [f"{k} {mb[k]!r} ≠ {ma[k]!r}" for k in ma if ma[k] != mb[k]]


@dataclass
class Pairing:
    """One predicted trace to write: its source trace, its profile and the target group."""

    source: Trace
    profile: Trace
    target: GroupKey
    pairs: Pairs = field(repr=False, default=None)  # type: ignore[assignment]
    transfers: dict = field(default_factory=dict, repr=False)


def target_group(source: Trace, profile: Trace) -> GroupKey:
    """The source trace's group on the profiled device (its name marked predicted, its threads)."""
    meta = dict(source.meta)
    meta["device"] = predicted_device(str(profile.meta["device"]))
    meta["threads"] = profile.meta["threads"]
    return GroupKey.from_metadata(meta)


def pair_profiles(sources: TraceSet, profiles: TraceSet) -> list[Pairing]:
    """Every profile with its one source trace; every source method of a target group profiled.

    One line (:class:`PredictionError`) for: a source trace that is itself predicted, a profile
    whose method has no source trace, a profile of another model, batch size, stream … than
    its source (the keys that differ are named), a profile that matches source traces of
    several devices, two profiles of one identity, a source method without a profile on a
    target device, and a target group without ``standard`` (λ comes from its predicted trace)."""
    for t in sources.traces:
        if is_predicted(t.meta):
            raise PredictionError(f"{t.path}: a predicted trace cannot be the source of another prediction; give measured traces")
    out: list[Pairing] = []
    for prof in profiles.traces:
        same_method = [s for s in sources.traces if s.method == prof.method]
        if not same_method:
            have = ", ".join(sorted({s.method for s in sources.traces}))
            raise PredictionError(f"{prof.path}: profile of method '{prof.method}', which has no source trace (source methods: {have})")
        matches = [s for s in same_method if not _differences(s.meta, prof.meta)]
        if not matches:
            closest = min(same_method, key=lambda s: len(_differences(s.meta, prof.meta)))
            raise PredictionError(
                f"{prof.path}: profile does not match the source trace {closest.path} of method '{prof.method}' "
                f"({'; '.join(_differences(closest.meta, prof.meta))}): profile the configuration the source trace was taken with"
            )
        if len(matches) > 1:
            where = ", ".join(str(s.path) for s in matches[:3])
            raise PredictionError(f"{prof.path}: profile matches {len(matches)} source traces ({where}): give the traces of one device")
        out.append(Pairing(matches[0], prof, target_group(matches[0], prof)))
    seen: dict[tuple, Pairing] = {}
    for p in out:
        key = (p.target, p.profile.method)
        if key in seen:
            raise PredictionError(
                f"{p.profile.path}: same identity as the profile {seen[key].profile.path} (method '{p.profile.method}', "
                f"device {p.profile.meta['device']}, {p.profile.meta['threads']} threads): keep one"
            )
        seen[key] = p
    by_target: dict[GroupKey, list[Pairing]] = {}
    for p in out:
        by_target.setdefault(p.target, []).append(p)
    source_groups = sources.groups()
    for target, members in by_target.items():
        group = source_groups[members[0].source.group]
        profiled = {p.source.method for p in members}
        missing = [t.method for t in group if t.method not in profiled]
        if missing:
            raise PredictionError(
                f"method(s) {', '.join(missing)} of {members[0].source.path.parent} have no profile on "
                f"{measured_device(target.device)} ({target.threads} threads): profile them too, or leave their traces out"
            )
        if BASELINE_METHOD not in profiled:
            raise PredictionError(
                f"no '{BASELINE_METHOD}' trace and profile for {target.label()}: λ of a predicted group comes from its predicted "
                f"{BASELINE_METHOD} trace"
            )
    return out


# ------------------------------------------------------------------------------ the traces
def _identity(meta: dict) -> dict:
    return {**TraceIdentity.from_metadata(meta).as_metadata(), "created_at": meta.get("created_at")}


def _rescaled_variability(tv: dict, profile: Trace, predicted_delta: dict[tuple[str, int], float]) -> dict:
    """The profile's timing-variability measurement on the predicted trace's times: every
    repeat time scaled by (predicted δ / profiled δ) of its event, so the log ratios the
    simulator reads (:mod:`tempora_sim.sweeps.variability`) are the target's own."""
    main = {(str(e), int(s)): float(d) for e, s, d in profile.adapt.select("episode", "step", "delta_ms").iter_rows()}
    factors = []
    for item in tv["sample"]:
        for s in item["steps"]:
            m, p = main.get((item["episode"], int(s)), 0.0), predicted_delta.get((item["episode"], int(s)), 0.0)
            factors.append(p / m if m > 0 and p > 0 else 1.0)
    return map_sample_events(tv, lambda times: [float(t * f) for t, f in zip(times, factors)])


def predicted_frame(source: Trace, transfer: Transfer) -> pl.DataFrame:
    """The source trace's rows with times from ``transfer`` (frozen rows' e by the e model) and
    no peak memory (a device it was not measured on)."""
    rows = source.rows
    adapt = (rows["phase"] == PHASE_ADAPT).to_numpy()
    e = rows["e_ms"].to_numpy().astype(np.float64)
    l = rows["l_ms"].to_numpy().astype(np.float64)
    new_e = transfer.e(e)
    new_l = np.where(adapt, transfer.l(l), 0.0)
    return rows.with_columns(
        pl.Series("e_ms", new_e, pl.Float64),
        pl.Series("l_ms", new_l, pl.Float64),
        pl.Series("delta_ms", new_e + new_l, pl.Float64),
        pl.lit(None, pl.Int64).alias("peak_mem_bytes"),
    )


def predicted_trace(pairing: Pairing, transfer: Transfer, path: Path) -> Trace:
    """The predicted trace of one pairing under ``transfer`` (validated in memory)."""
    src, prof = pairing.source, pairing.profile
    frame = predicted_frame(src, transfer)
    # the source's page faults measured its own device's heap; the target's heap is the profile's
    meta = {k: v for k, v in src.meta.items() if k not in ("taken_alongside", VARIABILITY_KEY, HEAP_KEY, HEAP_FAULTS_KEY)}
    meta.update({k: prof.meta[k] for k in (HEAP_KEY, HEAP_FAULTS_KEY) if k in prof.meta})
    meta.update(
        device=pairing.target.device,
        threads=prof.meta["threads"],
        speed_probe=prof.meta["speed_probe"],
        speed_probe_kind=prof.meta["speed_probe_kind"],
        torch_version=prof.meta["torch_version"],
        warmup_batches=prof.meta["warmup_batches"],
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    tv = prof.meta.get(VARIABILITY_KEY)
    if tv:
        adapt = frame.filter(pl.col("phase") == PHASE_ADAPT)
        delta = {(str(e), int(s)): float(d) for e, s, d in adapt.select("episode", "step", "delta_ms").iter_rows()}
        meta[VARIABILITY_KEY] = _rescaled_variability(tv, prof, delta)
    model, error = transfer.metadata()
    pairs = pairing.pairs
    baselines = {name: (None if t is None else t.e.a) for name, t in pairing.transfers.items() if name != "fit"}
    meta[PREDICTED_KEY] = {
        "transfer": transfer.name,
        "source": _identity(src.meta) | {"file": src.path.name},
        "profile": _identity(prof.meta) | {PROFILE_BATCHES_KEY: prof.meta[PROFILE_BATCHES_KEY], "file": prof.path.name},
        "model": model,
        "error": error,
        "baselines": baselines,
        "accuracy": {"events": int(pairs.step.size), "differ": pairs.correct_differ, "max_abs_diff": pairs.max_correct_diff},
    }
    return trace_from_frame(path, meta, frame)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-") or "device"


def target_folder(target: GroupKey, transfer: str) -> str:
    """The folder of one target group under ``--out``: device and threads, marked predicted
    (and the baseline's name for a baseline's traces)."""
    device = measured_device(target.device)
    suffix = "" if transfer == "fit" else f"-{transfer}"
    return f"{_slug(device)}-{target.threads}thr-predicted{suffix}"


def _relative(path: Path, roots: Sequence[Path]) -> Path:
    for root in roots:
        try:
            return path.resolve().relative_to(root.resolve())
        except ValueError:
            continue
    return Path(path.name)


@dataclass
class Prediction:
    """What ``tempora-sim predict`` computed: the pairings, the traces, where they go."""

    pairings: list[Pairing]
    traces: dict[str, list[tuple[Path, Trace]]]
    #: baselines asked for that these inputs cannot give, with the reason (``skip_unavailable``)
    unavailable: dict[str, str] = field(default_factory=dict)

    def table(self) -> list[dict]:
        """One row per predicted method: the model, its held-out error, δ̄ of source, prediction and baselines."""
        rows = []
        for p in self.pairings:
            fit = p.transfers["fit"]
            src_delta = float(p.source.adapt_delta.mean())
            row = {
                "device": p.target.device,
                "model": p.target.model,
                "method": p.source.method,
                "events": fit.events,
                "e": _describe(fit.e),
                "l": _describe(fit.l),
                "sd_log": fit.sd_log,
                "source_delta_ms": src_delta,
                "profile_delta_ms": float(p.pairs.yd.mean()) if p.pairs.yd.size else math.nan,
                "predicted_delta_ms": float(
                    fit.l(p.source.adapt["l_ms"].to_numpy()).mean() + fit.e(p.source.adapt["e_ms"].to_numpy()).mean()
                ),
            }
            for name in ("speed-probe", "method-median"):
                t = p.transfers.get(name)
                row[f"{name}_delta_ms"] = None if t is None else src_delta * t.e.a
            rows.append(row)
        return rows


def _describe(m: PhaseModel) -> str:
    if m.kind == "zero":
        return "0"
    if m.kind == "scale":
        return f"×{m.a:.3g}"
    return f"×{m.a:.3g} {'+' if m.b >= 0 else '−'} {abs(m.b):.3g} ms"


def domain_coverage_lines(pairings: Sequence[Pairing]) -> list[str]:
    """One line per target group whose profiles time fewer of the stream's domains than the
    source traces hold: a continual or gradual stream's profile is its first batches, one
    corruption, and the transfer fitted there is applied to every other (docs/guide/predict.md)."""
    lines, seen = [], set()
    for p in pairings:
        if p.target in seen:
            continue
        seen.add(p.target)
        src = p.source.adapt["domain"].cast(pl.String).unique(maintain_order=True).to_list()
        prof = set(p.profile.adapt["domain"].cast(pl.String).unique().to_list())
        timed = [d for d in src if d in prof]
        if len(timed) < len(src):
            lines.append(
                f"{p.target.label()}: the profiles time {len(timed)} of the stream's {len(src)} domains "
                f"({', '.join(timed[:3])}{', …' if len(timed) > 3 else ''}) and the transfer fitted there is applied to all of "
                "them; check one method against a full trace on the device before trusting it (docs/guide/predict.md, "
                "'A continual stream')"
            )
    return lines


def predict(
    sources: str | os.PathLike | Sequence[str | os.PathLike],
    profiles: str | os.PathLike | Sequence[str | os.PathLike],
    transfers: Sequence[str] = ("fit",),
    cache=None,
    skip_unavailable: bool = False,
) -> Prediction:
    """Predicted traces (in memory, validated) of every profiled device, under each of
    ``transfers`` (``fit`` and/or the baselines ``speed-probe``, ``method-median``). A baseline
    the inputs cannot give (a CPU's and a GPU's speed probes time different work) is an error,
    or with ``skip_unavailable`` left out and named in :attr:`Prediction.unavailable`."""
    bad = [t for t in transfers if t not in TRANSFERS]
    if bad:
        raise PredictionError(f"--transfer: '{bad[0]}' is not one of {', '.join(TRANSFERS)}")
    source_items = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    source_set = load_traces(source_items, cache=cache)
    profile_set = load_traces(profiles, cache=cache, profiles=True)
    pairings = pair_profiles(source_set, profile_set)
    roots = [Path(s) for s in source_items if Path(s).is_dir()]
    for p in pairings:
        p.pairs = shared_events(p.source, p.profile)
        if p.pairs.step.size < MIN_EVENTS:
            raise PredictionError(
                f"{p.profile.path}: shares {p.pairs.step.size} event(s) with its source trace {p.source.path}; "
                f"a transfer needs at least {MIN_EVENTS} (a longer --profile-batches)"
            )
        p.transfers = transfers_of(p.source, p.profile, p.pairs)
        if p.transfers["fit"] is None:
            raise PredictionError(f"{p.profile.path}: no transfer model fits its events (are its times all 0?)")
    for line in domain_coverage_lines(pairings):
        warnings.warn(line, SimWarning, stacklevel=2)
    out: dict[str, list[tuple[Path, Trace]]] = {}
    unavailable: dict[str, str] = {}
    for name in transfers:
        missing = [p for p in pairings if p.transfers[name] is None]
        if missing:
            why = (
                "the source trace and the profile have no machine-speed probes of the same kind"
                if name == "speed-probe"
                else "its events give no factor"
            )
            if not skip_unavailable:  # a missing fit was refused above
                raise PredictionError(f"{missing[0].profile.path}: no '{name}' baseline ({why})")
            unavailable[name] = f"{missing[0].profile.path}: {why}"
            continue
        for p in pairings:
            t = p.transfers[name]
            rel = Path(target_folder(p.target, name)) / _relative(p.source.path, roots)
            out.setdefault(name, []).append((rel, predicted_trace(p, t, rel)))
    for items in out.values():  # two predicted traces of one identity: refused before anything is written
        TraceSet([t for _, t in items]).groups()
        paths = [str(rel) for rel, _ in items]
        if len(set(paths)) != len(paths):
            raise GroupError(f"two predicted traces would be written to one file ({next(p for p in paths if paths.count(p) > 1)})")
    return Prediction(pairings, out, unavailable)


def trace_bytes(trace: Trace) -> bytes:
    """A predicted trace as a schema-v2 Parquet file."""
    import pyarrow as pa  # lazy: the simulator's trace reader never loads pyarrow; writing a trace does
    import pyarrow.parquet as pq

    schema = arrow_schema(trace.meta)
    frame = trace.rows.select(list(COLUMN_TYPES))
    table = pa.Table.from_pydict({name: frame[name].to_arrow() for name in COLUMN_TYPES})
    table = table.cast(pa.schema([schema.field(n) for n in COLUMN_TYPES])).replace_schema_metadata(schema.metadata)
    return to_bytes(lambda f: pq.write_table(table, f))


def write_prediction(prediction: Prediction, out: str | os.PathLike, sources=(), profiles=()) -> list[Path]:
    """Write every predicted trace under ``out`` (one folder per target device, replaced whole),
    atomically: all of them or, on an error, none."""
    check_out_outside([*_items(sources), *_items(profiles)], out, "trace or profile folder", "traces")
    written = []
    folders = sorted({rel.parts[0] for items in prediction.traces.values() for rel, _ in items})
    with staged_dir(out, what="predicted traces", folders=tuple(folders)) as stage:
        for items in prediction.traces.values():
            for rel, trace in items:
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                write_file(stage / rel, trace_bytes(trace))
                written.append(Path(out) / rel)
    return written


def _items(x) -> list:
    return [x] if isinstance(x, (str, os.PathLike)) else list(x)
