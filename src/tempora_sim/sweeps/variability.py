"""The traces' measured timing variability as a model: pass shifts, event residuals, drift and the idle effect (docs/design/statistics.md).

A trace holds one timed pass. When the tracer also measured how much its event times move
(the optional ``timing_variability`` metadata, :mod:`tempora_schema.variability`), the
simulator replays that variability:

**The model.** For each repeat pass ``p`` of the sample and each sample event ``i`` the log
ratio ``L[p, i] = log(δ_repeat / δ_main)`` (same computation, same device, another pass) is
split into a *pass shift* ``s_p = median_i L[p, i]`` (the whole pass ran faster or slower: the
machine's state) and *event residuals* ``L[p, i] − s_p``. The idle pass's back-to-back events
count as one more pass. A timing replicate of a trace draws one pass shift and, for every
batch, one residual, and scales that batch's ``e``, ``ℓ`` and ``δ`` by
``exp(shift + residual)``; λ (a property of the deployment, fixed by the standard trace)
stays as it is.

The traced pass is a pass of the device like the K measured ones (its shift is 0 by
definition), so a new pass's shift is drawn from a predictive normal of all K + 1 passes
(:func:`passes`): centred on their mean, with a standard deviation widened by √(1 + 1/(K + 1))
and Student's t (:func:`shift_spread`). A pass shift is the machine's state, not the method's
(the premise of the common random numbers below), so the standard deviation is pooled over the
measured traces of a comparison group — same device, same model — and t takes the pooled
degrees of freedom Σ K_t (:func:`timing_models`); one trace alone keeps its own K. The
repeat passes run seconds after the main pass, a deployment minutes or days later: the
spread of the group's speed probes, taken as its traces were taken one after another, adds
the machine's drift between tracing times to the shift's variance (:func:`probe_drift`,
Welch–Satterthwaite degrees of freedom). The residuals (tens of events) are resampled as measured.

**Common random numbers.** Replicate ``r`` draws one uniform ``u_r`` per comparison group and
one uniform ``v_{r,j}`` per (group, episode, step); every method of the group maps the same
uniforms through its own measured distribution (the predictive normal's ``u``-quantile; the
``⌊v·M⌋``-th smallest of its M residuals).
A slow pass of the machine is slow for every method, so paired differences stay sharp.

**The idle effect.** The idle blocks (B W₁ B W₂ … B: whole passes over the sample, back to
back or with every event after a wait, after an untimed run-in where the tracer was asked for
one) compare every waited
event with the same event in the back-to-back blocks either side, seconds away. A gap's effect
is *systematic* when its events lie on one side of both neighbours' by two-sided exact sign
tests at :data:`IDLE_TEST_LEVEL` (:func:`sign_test_p`); its factor is then ``exp(median d)``,
``d = L_waited − (L_before + L_after) / 2``, else 1 (:func:`_blocks_effect`). The back-to-back
blocks count as more passes. Traces from before the blocks carry one idle pass instead, every other
event after a wait; their after-wait events are tested against the repeat passes by a
two-sided rank-sum test (:func:`rank_sum_p`, exact for the default sizes) and a gap's factor is
``exp(median L_after − median L_repeat)`` when it has at least three events on the systematic
side and lies on that side of the main pass or the idle pass's own back-to-back events.
The discrete replay scales an event that starts after an idle time ``g`` by ``F(g)``,
linear between the measured gaps (F(0) = 1) and constant beyond the largest
(:func:`discrete_idle_kernel`); ``no_idle_effect`` turns it off.

A trace without the metadata has no model: its replicates repeat its traced times, and the
answers say that its timing uncertainty is unknown.

**Predicted traces.** A trace written by ``tempora-sim predict`` carries the variability its
profile measured on the target device (rescaled to its predicted times) and the transfer's
out-of-sample error of its mean δ, (σ_p, df) on the log scale (``predicted.error``,
:mod:`tempora_schema.prediction`). Every replicate scales all of the trace's batches by one
more factor ``exp(x)``, x from the normal that matches Student's t with df degrees of freedom
at 95 % (as the pass shift's), drawn per trace from its own stream: the transfer errs for each
method on its own, so the prediction error widens the intervals of differences between methods too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np
import polars as pl

from tempora_schema import VARIABILITY_KEY, idle_blocks, probe_median_ms
from tempora_schema.prediction import prediction_error
from tempora_sim.engine.idle import idle_factor as _idle_rule
from tempora_sim.engine.replay_options import ReplayOptions
from tempora_sim.protocols.base import warm_inputs

#: Default number of timing replicates behind an interval (``--timing-replicates``).
DEFAULT_REPLICATES = 20
#: Two-sided level of the test that decides whether waited events differ systematically from
#: back-to-back ones (the sign test of the idle blocks; the rank-sum test of an older idle pass).
IDLE_TEST_LEVEL = 0.05
#: Up to this many events in all the rank-sum test counts every arrangement (exact); beyond it,
#: the normal approximation with tie and continuity corrections.
RANK_SUM_EXACT_MAX = 60
#: What the answers say about their timing uncertainty.
MEASURED = "measured"
UNKNOWN = "unknown"


#: Two-sided 97.5 % quantiles of Student's t with 1 … 30 degrees of freedom: the predictive
#: spread of a pass shift estimated with df degrees of freedom is widened by t_df / z (matched at 95 %).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip
_Z975 = 1.959964


def _t975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else _Z975


def passes(shifts: np.ndarray) -> np.ndarray:
    """Every timed pass of a trace as a shift from the traced one: the traced pass itself (0)
    and the K measured ones. The traced pass is a pass of the device like the others."""
    return np.concatenate(([0.0], np.asarray(shifts, np.float64)))


def shift_spread(
    shifts: np.ndarray, pooled: tuple[float, int] | None = None, drift: tuple[float, int] | None = None
) -> tuple[float, float] | None:
    """(centre, scale) of the predictive distribution of a new pass's shift from the K + 1
    passes of a trace (:func:`passes`): centre = their mean; scale = √(a + b) ×
    t_{df, 97.5 %}/z_{97.5 %} (a normal that matches Student's t prediction interval at 95 %:
    few passes, wide spread), where a = σ² × (1 + 1/(K + 1)) is the passes' part and b = σ_d²
    the machine's drift between tracing times (:func:`probe_drift`), df their
    Welch–Satterthwaite degrees of freedom (df = the passes' own when there is no drift).
    σ and df are the passes' own (ddof 1, df = K) unless ``pooled`` = (σ, df) gives the
    comparison group's. None when neither passes (K = 0, nothing pooled) nor drift give a spread."""
    p = passes(shifts)
    if pooled is None and p.size >= 2:
        pooled = (float(np.std(p, ddof=1)), p.size - 1)
    parts = []  # (variance, degrees of freedom)
    if pooled is not None:
        parts.append((pooled[0] ** 2 * (1.0 + 1.0 / p.size), pooled[1]))
    if drift is not None:
        parts.append((drift[0] ** 2, drift[1]))
    if not parts:
        return None
    var = sum(v for v, _ in parts)
    return float(np.mean(p)), float(math.sqrt(var) * _t975(welch_df(parts)) / _Z975)


def welch_df(parts: Sequence[tuple[float, int]]) -> int:
    """Welch–Satterthwaite degrees of freedom of a sum of independent variance estimates
    ``(v, df)``, rounded down (at least 1): the sum is known no better than its weakest large part.
    One part keeps its own df."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / df for v, df in parts if v > 0)
    return max(1, int(math.floor(total * total / denom + 1e-9))) if denom > 0 else min(df for _, df in parts)


def probe_drift(traces: Sequence) -> tuple[float, int] | None:
    """(σ_d, df): how far the machine's speed moved between the times a comparison group's
    traces were taken, from their speed probes (docs/reference/trace-schema.md, "Speed probe"):
    the standard deviation (ddof 1) of each trace's log median probe time, df = traces − 1;
    with one probed trace, of its own log probe times (taken over its run), df = probes − 1.
    The repeat passes are timed seconds apart; a deployment runs minutes or days later, and
    the probes are what the traces know of the machine over that longer span. None with
    fewer than two probes, or probes of more than one kind (they time different work)."""
    probed = [t.meta for t in traces if t.meta.get("speed_probe")]
    if len({meta.get("speed_probe_kind") for meta in probed}) != 1:
        return None
    if len(probed) == 1:
        logs = np.log([float(x["ms"]) for x in probed[0]["speed_probe"]])
    else:  # a trace's machine speed, as the group's speed check reads it (tempora_sim.sweeps.traces)
        logs = np.log([probe_median_ms(meta) for meta in probed])
    if logs.size < 2:
        return None
    return float(np.std(logs, ddof=1)), int(logs.size - 1)


def pooled_shift_sd(models: Sequence["TimingModel"]) -> tuple[float, int] | None:
    """(σ, df): the passes' standard deviation pooled over ``models`` (each trace's K + 1 passes
    around their own mean), df = Σ K_t; None when no model measured a pass."""
    ss, df = 0.0, 0
    for m in models:
        p = passes(m.shifts)
        if p.size >= 2:
            ss += float(np.sum((p - np.mean(p)) ** 2))
            df += p.size - 1
    return (math.sqrt(ss / df), df) if df else None


@dataclass(frozen=True)
class TimingModel:
    """One trace's measured timing variability, as the replay uses it (sorted samples)."""

    shifts: np.ndarray  # log pass shifts, sorted
    residuals: np.ndarray  # log event residuals, sorted
    idle_gaps_ms: np.ndarray  # measured idle gaps, ascending
    idle_factors: np.ndarray  # factor per gap (1 where the effect is not systematic)
    events: int
    seconds: float
    #: (σ, df) of the pass shifts pooled over the comparison group (:func:`timing_models`);
    #: None: this trace's own shifts alone.
    pooled: tuple[float, int] | None = None
    #: (σ_d, df) of the machine's drift between the group's tracing times (:func:`probe_drift`);
    #: None: not measured (no speed probes), nothing added.
    drift: tuple[float, int] | None = None
    #: (σ_p, df) of a predicted trace's transfer error (log scale); None: a measured trace
    prediction: tuple[float, int] | None = None

    def shift(self, u: float) -> float:
        """The pass shift of uniform ``u``: the predictive normal of :func:`shift_spread` at
        ``u`` (clipped to [0.1 %, 99.9 %]); 0 (the traced pass) when nothing gives a spread."""
        spread = shift_spread(self.shifts, self.pooled, self.drift)
        if spread is None:
            return 0.0
        return spread[0] + spread[1] * NormalDist().inv_cdf(min(max(u, 1e-3), 1 - 1e-3))

    def prediction_shift(self, w: float) -> float:
        """The transfer-error shift of uniform ``w`` (log scale): 0 for a measured trace."""
        if self.prediction is None or self.prediction[0] <= 0:
            return 0.0
        sd, df = self.prediction
        return sd * _t975(df) / _Z975 * NormalDist().inv_cdf(min(max(w, 1e-3), 1 - 1e-3))

    @property
    def has_idle_effect(self) -> bool:
        return bool(np.any(self.idle_factors != 1.0))


def _main_delta(trace, sample: list[dict]) -> np.ndarray:
    """δ of the main pass at the sample's (episode, step), in sample order; NaN for an event
    the trace's rows no longer hold (a trace cut to fewer episodes or batches)."""
    ra = trace.replay_arrays
    offsets = np.concatenate(([0], np.cumsum(ra.lengths))).tolist()
    where = {ep: (offsets[i], int(ra.lengths[i])) for i, ep in enumerate(ra.episodes)}
    delta = np.asarray(ra.delta, np.float64)
    out = []
    for item in sample:
        start, n = where.get(item["episode"], (0, 0))
        out.extend(float(delta[start + s]) if s < n else math.nan for s in item["steps"])
    return np.asarray(out, np.float64)


def rank_sum_p(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """One-sided p-values of the Wilcoxon–Mann–Whitney rank-sum test: that ``a`` ranks above
    ``b``, and that it ranks below. Up to :data:`RANK_SUM_EXACT_MAX` values in all, exact over
    every way of choosing which ranks are ``a``'s (ties as midranks, so ties are exact too);
    beyond, the normal approximation with the tie and continuity corrections."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    m, n = a.size, b.size
    if m == 0 or n == 0:
        return 1.0, 1.0
    # average ranks, as the rest of the simulator ranks (polars); doubled, they are integers
    doubled = np.rint(2 * pl.Series(np.concatenate((a, b))).rank("average").to_numpy()).astype(np.int64)
    observed = int(doubled[:m].sum())
    if m + n <= RANK_SUM_EXACT_MAX:
        total = int(doubled.sum())
        ways = np.zeros((m + 1, total + 1), np.float64)  # ways[k, s]: subsets of k ranks summing to s
        ways[0, 0] = 1.0
        for v in doubled.tolist():
            ways[1:, v:] += ways[:-1, : total + 1 - v].copy()
        dist = ways[m] / ways[m].sum()
        return float(min(1.0, dist[observed:].sum())), float(min(1.0, dist[: observed + 1].sum()))
    big = m + n
    _, counts = np.unique(np.concatenate((a, b)), return_counts=True)
    var = m * n / 12.0 * ((big + 1) - float((counts**3 - counts).sum()) / (big * (big - 1)))
    if var <= 0:
        return 1.0, 1.0
    u = observed / 2.0 - m * (m + 1) / 2.0
    sd, mean = math.sqrt(var), m * n / 2.0
    return 1.0 - NormalDist().cdf((u - mean - 0.5) / sd), NormalDist().cdf((u - mean + 0.5) / sd)


def model_from_measurement(tv: dict, main: np.ndarray) -> TimingModel | None:
    """The :class:`TimingModel` of a ``timing_variability`` value and the main-pass δ of its
    sample events (a sample event whose main δ is 0 carries no ratio and is left out)."""
    ok = np.isfinite(main) & (main > 0)
    if not ok.any():
        return None
    log_main = np.log(np.where(ok, main, 1.0))
    if ok.sum() < 2:
        return None
    shifts, residuals, repeats = [], [], []
    for times in tv["passes_ms"]:
        L = (np.log(np.asarray(times, np.float64)) - log_main)[ok]
        s = float(np.median(L))
        shifts.append(s)
        residuals.append(L - s)
        repeats.append(L)
    gaps_ms, factors = [], []
    blocks = idle_blocks(tv)
    if blocks:
        gaps_ms, factors = _blocks_effect(blocks, log_main, ok, shifts, residuals)
    elif tv["idle_ms"]:
        gaps = np.asarray(tv["idle_gaps_ms"], np.float64)
        L = np.log(np.asarray(tv["idle_ms"], np.float64)) - log_main
        control = ok & (gaps == 0)
        if control.sum() >= 2:
            Lc = L[control]
            control_level = float(np.median(Lc))  # the idle pass's own back-to-back events
            shifts.append(control_level)
            residuals.append(Lc - control_level)
            # back to back as the main pass: the repeat passes (the idle pass's own controls
            # run between waits, and waiting slows them too)
            reference = np.concatenate(repeats)  # the schema asks for at least one repeat pass
            r = float(np.median(reference))
            after = L[ok & (gaps > 0)]
            slower, faster = rank_sum_p(after, reference) if after.size else (1.0, 1.0)
            side = 1.0 if 2 * slower < IDLE_TEST_LEVEL else -1.0 if 2 * faster < IDLE_TEST_LEVEL else 0.0
            for g in np.unique(gaps[gaps > 0]):
                La = L[ok & (gaps == g)]
                level = float(np.median(La)) if La.size else 0.0
                shift = level - r
                gaps_ms.append(float(g))
                # an effect seen against the repeat passes alone is their moment, not the wait:
                # the after-wait events must also lie on its side of the main pass's times (log
                # ratio 0, the times a factor scales) or of the idle pass's own back-to-back
                # events, run between them
                beside = level * side > 0 or (level - control_level) * side > 0
                applies = side != 0.0 and La.size >= 3 and shift * side > 0 and beside
                factors.append(math.exp(shift) if applies else 1.0)
    return TimingModel(
        shifts=np.sort(np.asarray(shifts, np.float64)),
        residuals=np.sort(np.concatenate(residuals)),
        idle_gaps_ms=np.asarray(gaps_ms, np.float64),
        idle_factors=np.asarray(factors, np.float64),
        events=int(ok.sum()),
        seconds=float(tv["seconds"]),
    )


def sign_test_p(d: np.ndarray) -> tuple[float, float]:
    """One-sided p-values of the exact sign test: that the values lie above 0, and that they
    lie below (zeros left out)."""
    d = np.asarray(d, np.float64)
    above, below = int(np.sum(d > 0)), int(np.sum(d < 0))
    n = above + below
    if n == 0:
        return 1.0, 1.0
    tail = lambda k: sum(math.comb(n, j) for j in range(k, n + 1)) / 2.0**n  # noqa: E731  P(X ≥ k)
    return float(min(1.0, tail(above))), float(min(1.0, tail(below)))


def _blocks_effect(
    blocks: list[dict], log_main: np.ndarray, ok: np.ndarray, shifts: list, residuals: list
) -> tuple[list[float], list[float]]:
    """Idle gaps and factors of the idle blocks (B W B W … B); the back-to-back blocks count as
    more passes (appended to ``shifts`` and ``residuals``).

    Every waited event is compared with the same event in the back-to-back blocks either side,
    on the log scale (log ratios to the main pass). A gap's effect is systematic when its
    events lie on the same side of both neighbours' by two-sided exact sign tests at
    :data:`IDLE_TEST_LEVEL` (:func:`sign_test_p`): a machine that changed speed between the
    blocks leaves the waited block between them, and no factor. The factor is then
    ``exp(median d)``, ``d = L_waited − (L_before + L_after) / 2``: against the neighbours'
    geometric mean, so a steady drift of the machine over those seconds cancels."""
    L = [(np.log(np.asarray(b["ms"], np.float64)) - log_main)[ok] for b in blocks]
    for b, Lb in zip(blocks, L):
        if b["gap_ms"] == 0 and Lb.size:
            level = float(np.median(Lb))
            shifts.append(level)
            residuals.append(Lb - level)
    by_gap: dict[float, list[tuple[np.ndarray, np.ndarray]]] = {}
    for j, b in enumerate(blocks):
        if b["gap_ms"] > 0:  # the schema puts a back-to-back block on each side
            by_gap.setdefault(float(b["gap_ms"]), []).append((L[j] - L[j - 1], L[j] - L[j + 1]))
    gaps_ms, factors = [], []
    for g in sorted(by_gap):
        before = np.concatenate([x for x, _ in by_gap[g]])
        after = np.concatenate([y for _, y in by_gap[g]])
        sides = [_side(sign_test_p(x)) for x in (before, after)]
        d = (before + after) / 2.0  # L_waited − (L_before + L_after) / 2
        level = float(np.median(d)) if d.size else 0.0
        gaps_ms.append(g)
        factors.append(math.exp(level) if sides[0] == sides[1] != 0.0 and d.size >= 3 and level * sides[0] > 0 else 1.0)
    return gaps_ms, factors


def _side(p: tuple[float, float]) -> float:
    """+1 (slower) or −1 (faster) when the two-sided test at :data:`IDLE_TEST_LEVEL` rejects, else 0."""
    return 1.0 if 2 * p[0] < IDLE_TEST_LEVEL else -1.0 if 2 * p[1] < IDLE_TEST_LEVEL else 0.0


def timing_model(trace) -> TimingModel | None:
    """The trace's :class:`TimingModel`, or None when it carries no timing-variability data
    (and is not predicted: a predicted trace always has a model, for its transfer error)."""
    tv = trace.meta.get(VARIABILITY_KEY)
    model = model_from_measurement(tv, _main_delta(trace, tv["sample"])) if tv else None
    error = prediction_error(trace.meta)
    if error is None:
        return model
    if model is None:  # nothing measured about the target's variability: the transfer error alone
        empty = np.zeros(0, np.float64)
        model = TimingModel(shifts=empty, residuals=np.zeros(1, np.float64), idle_gaps_ms=empty, idle_factors=empty, events=0, seconds=0.0)
    return dataclasses.replace(model, prediction=error)


def timing_models(traces: Sequence) -> list[TimingModel | None]:
    """One :class:`TimingModel` per trace (None: not measured), each with its pass-shift
    spread pooled over the measured traces of its comparison group (:func:`pooled_shift_sd`)
    and the machine's drift between the group's tracing times (:func:`probe_drift`)."""
    models = [timing_model(t) for t in traces]
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(traces):
        groups.setdefault(t.group.label(), []).append(i)
    for members in groups.values():
        measured = [i for i in members if models[i] is not None]
        if not measured:
            continue
        pooled = pooled_shift_sd([models[i] for i in measured])
        drift = probe_drift([traces[i] for i in members])  # every trace's probes, measured or not
        for i in measured:
            models[i] = dataclasses.replace(models[i], pooled=pooled, drift=drift)
    return models


def timing_status(traces: Sequence) -> str:
    """``measured`` when every trace carries timing-variability data, else ``unknown``."""
    return MEASURED if traces and all(t.meta.get(VARIABILITY_KEY) for t in traces) else UNKNOWN


# ----------------------------------------------------------------------------- idle effect
def idle_curves(series, models: list[TimingModel | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per series, the idle curve of its trace: (offsets [S+1], gaps, factors); None when no
    trace shows a systematic idle effect."""
    if not any(m is not None and m.has_idle_effect for m in models):
        return None
    gaps, factors, counts = [], [], []
    for s_idx in range(len(series.episode)):
        m = models[int(series.trace_of[s_idx])]
        if m is not None and m.has_idle_effect:
            gaps.append(m.idle_gaps_ms)
            factors.append(m.idle_factors)
            counts.append(m.idle_gaps_ms.size)
        else:
            counts.append(0)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    cat = lambda xs: np.concatenate(xs).astype(np.float64) if xs else np.zeros(0)  # noqa: E731
    return offsets, cat(gaps), cat(factors)


def idle_factor(gap: float, gaps: np.ndarray, factors: np.ndarray) -> float:
    """F(gap) on any sequences (:func:`tempora_sim.engine.idle.idle_factor`, the replay's own rule)."""
    return float(_idle_rule(float(gap), np.asarray(gaps, np.float64), np.asarray(factors, np.float64)))


def discrete_idle_kernel(series, curves, rho, replay: ReplayOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Discrete replay with the idle effect, for the series whose trace shows one.

    Returns (series indices, served, served_sum, score_sum) for those series × ``rho``."""
    # lazy: the replay imports Numba on a background thread while it reads the traces (replay._start_warm_up)
    from tempora_sim.engine import kernels as K

    c_off, c_gaps, c_factors = curves
    which = np.flatnonzero(np.diff(c_off) > 0).astype(np.int64)
    served, ssum, score = K.discrete_idle_kernel(
        series.a,
        series.delta,
        series.offsets,
        series.lam,
        np.asarray(rho, np.float64),
        replay.queue,
        replay.strict_sync,
        replay.skip_mode(K),
        series.skip_value,
        c_off,
        c_gaps,
        c_factors,
        which,
    )
    return which, served, ssum, score


def warm_idle_kernel() -> None:
    """Compile (or load from Numba's cache) the discrete kernel with the idle effect, on a
    two-batch series with one gap in its curve (:mod:`tempora_sim.sweeps.kernel_cache`)."""
    from tempora_sim.engine import kernels as K

    a, off, lam, rho = warm_inputs()
    one = np.array([1.0])
    K.discrete_idle_kernel(
        a, a + 1, off, lam, rho, 1, False, K.SKIP_NULL, lam, np.array([0, 1], np.int64), one, one, np.array([0], np.int64)
    )


def apply_idle_effect(series, d: dict, rho, replay: ReplayOptions, curves) -> None:
    """Replace, in the discrete per-series sums ``d`` (served, served_sum, score_sum over
    ``rho``), those of the series that show an idle effect (in place)."""
    if curves is None or not np.any(np.diff(curves[0]) > 0):
        return
    which, served, ssum, score = discrete_idle_kernel(series, curves, rho, replay)
    d["served"], d["served_sum"], d["score_sum"] = (np.array(d[k]) for k in ("served", "served_sum", "score_sum"))
    d["served"][which], d["served_sum"][which], d["score_sum"][which] = served, ssum, score
