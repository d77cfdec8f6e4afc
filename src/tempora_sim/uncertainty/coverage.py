"""Do the replay's intervals cover what live runs see? (``tempora-sim validate``)

A live run serves the same stream as the trace (same seed, same episodes) on the real clock.
Two things separate it from the replay. Its times: for each validated setting this module
replays the trace's measured timing variability (:mod:`tempora_sim.sweeps.variability`,
``replicates`` timing replicates of the trace cut to the live run's episodes and batches, the
model measured on the whole trace and pooled over its group as a sweep pools it). And, in the
discrete protocol, *which* batches it serves: the replay is step-indexed (its j-th event
scores the trace's j-th batch), a live pass scores the batches it picked up, so each replicate's
U also moves by a draw of that difference (:func:`served_set_sd`). The percentile interval of
α and U over the replicates is the replay's *interval for a live pass* (α's is timing alone).
The coverage of a setting is the share of its live runs whose α (and U) lie inside it; its width
says how wide the interval had to be. A trace without the timing measurement has no interval
(``timing_uncertainty = unknown``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl

from tempora_sim import protocols as P
from tempora_sim.sweeps import variability
from tempora_sim.sweeps.replay import POOLED, run_sweep
from tempora_sim.sweeps.traces import TraceSet
from tempora_sim.uncertainty.timing_replicates import replicates_of

#: Timing replicates behind a validation interval (one replay of one cut trace each: cheap).
DEFAULT_REPLICATES = 200
DEFAULT_LEVEL = 0.95
#: What :func:`timing_interval` reads of each timing replicate.
LIVE_INTERVAL_MEASURES = ("utility", "alpha", "served")
#: Live runs a setting needs for its coverage to be a rate (with two it is 0, 50 or 100 %): the
#: lowest setting is taken over these when there are any (the baseline and the policy are
#: played twice, the four methods of the coverage test ten times).
RATE_RUNS = 10
#: Columns added to each validated setting.
COLUMNS = (
    "timing_uncertainty",
    "alpha_timing_lo",
    "alpha_timing_hi",
    "utility_timing_lo",
    "utility_timing_hi",
    "covered_alpha",
    "covered_utility",
    "coverage_alpha_pct",
    "coverage_utility_pct",
    "width_alpha_pp",
    "width_utility_pp",
    "utility_outside_alpha_inside",
)


def timing_interval(
    model, restricted, run: dict, lam: float, replicates: int = DEFAULT_REPLICATES, level: float = DEFAULT_LEVEL, seed: int = 0
):
    """(α lo, α hi, U lo, U hi) of ``restricted`` (a trace cut to a live run's batches) under
    the live run's setting ``run``, over ``replicates`` timing replicates drawn from ``model``
    (:func:`tempora_sim.sweeps.variability.timing_models`: measured on the whole trace, its spread
    pooled over its group), a discrete U also over the served set (:func:`served_set_sd`);
    None when the trace measured no variability (``model`` None). α is None for an amortised
    setting (it serves every batch in order, the batches the replay scores)."""
    if model is None:
        return None
    protocol = P.get(run["protocol"])
    res = run_sweep(TraceSet([restricted]), lambda_ms=lam, **protocol.live_replay(run, lam))
    # light replicates (the measures read here, in the base's row order): the base names the rows
    reps = replicates_of(res, replicates, seed, models=[model], measures=LIVE_INTERVAL_MEASURES)
    episode = reps.base["episode"].to_numpy()
    pooled = np.flatnonzero(episode == POOLED)[0]
    per_episode = np.flatnonzero(episode != POOLED)

    def stacked(column: str) -> np.ndarray:  # [replicates, rows]
        return np.stack([r[column].to_numpy().astype(np.float64) for r in reps.reps])

    q = [(1 - level) / 2, 1 - (1 - level) / 2]
    utilities = stacked("utility")[:, pooled]
    if not protocol.serves_subset:
        u_lo, u_hi = np.quantile(utilities, q)
        return None, None, float(u_lo), float(u_hi)
    variance = batch_variance(restricted)
    s2 = np.array([variance.get(ep, 0.0) for ep in episode[per_episode]])
    num_batches = reps.base["num_batches"].to_numpy()[per_episode].astype(np.float64)
    sd = _served_set_sd(s2, stacked("served")[:, per_episode], num_batches)
    u_lo, u_hi = np.quantile(utilities + sd * np.random.default_rng(seed).standard_normal(len(utilities)), q)
    a_lo, a_hi = np.quantile(stacked("alpha")[:, pooled], q)
    return float(a_lo), float(a_hi), float(u_lo), float(u_hi)


def batch_variance(trace) -> dict[str, float]:
    """Per episode, the variance of one batch's accuracy about the adaptation trend: half the
    mean squared difference of successive batches (von Neumann), which a slow trend of the
    accuracy over the steps does not inflate. 0 for an episode of one batch."""
    a = trace.adapt.select("episode", (pl.col("correct") / pl.col("n")).alias("a"))
    out = {}
    for (ep,), g in a.group_by("episode", maintain_order=True):
        x = g["a"].to_numpy()
        out[ep] = float(np.mean(np.diff(x) ** 2) / 2) if len(x) > 1 else 0.0
    return out


def served_set_sd(variance: dict[str, float], reps: Sequence[pl.DataFrame]) -> np.ndarray:
    """Per timing replicate (its per-episode rows: ``served``, ``num_batches``), the standard
    deviation of the pooled discrete U that comes from *which* batches a live pass serves.
    The replay is step-indexed: its j-th event scores the trace's j-th batch, so it scores the
    first |Q| batches of an episode, while a live pass scores the |Q| batches it picked up,
    spread over the episode, about α·|Q| of them among the first |Q|. Under the i.i.d. batches
    the replay assumes, the two sums then differ by |Q|(1 − α) batches on each side: variance
    2σ²|Q|(1 − α) per episode (σ² per episode in ``variance``, :func:`batch_variance`), over
    (Σ N)² for the pooled U. Zero when every batch is served."""
    out = np.empty(len(reps))
    for i, r in enumerate(reps):
        e = r.filter(pl.col("episode") != POOLED)
        s2 = np.array([variance.get(ep, 0.0) for ep in e["episode"].to_list()])
        out[i] = _served_set_sd(s2, e["served"].to_numpy().astype(float)[None, :], e["num_batches"].to_numpy().astype(float))[0]
    return out


def _served_set_sd(s2: np.ndarray, served: np.ndarray, n: np.ndarray) -> np.ndarray:
    """:func:`served_set_sd` on arrays: ``s2`` and ``n`` per episode, ``served`` [replicates, episodes]."""
    return np.sqrt(np.sum(2.0 * s2 * served * (1.0 - served / n), axis=1)) / n.sum()


def coverage_row(interval, alphas: Sequence[float | None], utilities: Sequence[float]) -> dict:
    """The coverage columns of one setting from its interval for a live pass and its live runs' α and U."""
    if interval is None:
        return {c: (variability.UNKNOWN if c == "timing_uncertainty" else None) for c in COLUMNS}
    a_lo, a_hi, u_lo, u_hi = interval
    eps = 1e-12
    inside_u = [u_lo - eps <= u <= u_hi + eps for u in utilities]
    cov_u = sum(inside_u)
    out = {
        "timing_uncertainty": variability.MEASURED,
        "alpha_timing_lo": a_lo,
        "alpha_timing_hi": a_hi,
        "utility_timing_lo": u_lo,
        "utility_timing_hi": u_hi,
        "covered_alpha": None,
        "covered_utility": int(cov_u),
        "coverage_alpha_pct": None,
        "coverage_utility_pct": 100.0 * cov_u / len(utilities),
        "width_alpha_pp": None,
        "width_utility_pp": 100.0 * (u_hi - u_lo),
        "utility_outside_alpha_inside": None,
    }
    if a_lo is not None:
        inside_a = [a is not None and a_lo - eps <= a <= a_hi + eps for a in alphas]
        cov_a = sum(inside_a)
        # served as many batches as the replay allows, yet U outside: their accuracy differs, not their timing
        u_only = sum(a_ok and not u_ok for a_ok, u_ok in zip(inside_a, inside_u))
        out.update(
            covered_alpha=int(cov_a),
            coverage_alpha_pct=100.0 * cov_a / len(alphas),
            width_alpha_pp=100.0 * (a_hi - a_lo),
            utility_outside_alpha_inside=int(u_only),
        )
    return out


def _summary(s: pl.DataFrame) -> dict:
    """Live runs inside / live runs, the lowest setting (of those with :data:`RATE_RUNS` runs
    or more, when there are any: ``lowest_over_all`` says whether all counted) and the median
    width (pp) over ``s``."""
    d = s.filter(pl.col("covered_alpha").is_not_null())
    rated = s.filter(pl.col("runs") >= RATE_RUNS)
    low = rated if rated.height else s
    low_d = low.filter(pl.col("covered_alpha").is_not_null())
    out = {
        "settings": s.height,
        "runs": int(s["runs"].sum()),
        "covered_utility": int(s["covered_utility"].sum()),
        "median_width_utility_pp": float(s["width_utility_pp"].median()),
        "lowest_setting_utility_pct": float(low["coverage_utility_pct"].min()),
        "lowest_over_all": low.height == s.height,
    }
    out["coverage_utility_pct"] = 100.0 * out["covered_utility"] / out["runs"]
    if d.height:
        out.update(
            alpha_runs=int(d["runs"].sum()),
            covered_alpha=int(d["covered_alpha"].sum()),
            median_width_alpha_pp=float(d["width_alpha_pp"].median()),
            lowest_setting_alpha_pct=float((low_d if low_d.height else d)["coverage_alpha_pct"].min()),
        )
        out["coverage_alpha_pct"] = 100.0 * out["covered_alpha"] / out["alpha_runs"]
        if "utility_outside_alpha_inside" in d.columns and d["utility_outside_alpha_inside"].null_count() < d.height:
            out["utility_misses_discrete"] = int((d["runs"] - d["covered_utility"]).sum())
            out["utility_outside_alpha_inside"] = int(d["utility_outside_alpha_inside"].fill_null(0).sum())
    return out


def overall(settings: pl.DataFrame) -> dict | None:
    """Coverage over every setting with an interval: live runs inside / live runs, and
    the median interval width (pp); None when no setting has one. A setting whose interval has
    no width (every replicate serves the same batches: a light load, say) covers its runs
    trivially, so the same figures over the settings with a width are under ``"informative"``
    (None when there are none): a coverage rate padded with certain settings would claim more
    than the intervals earned."""
    if "timing_uncertainty" not in settings.columns:
        return None
    s = settings.filter(pl.col("timing_uncertainty") == variability.MEASURED)
    if not s.height:
        return None
    out = _summary(s)
    width = pl.col("width_utility_pp").fill_null(0.0) + pl.col("width_alpha_pp").fill_null(0.0)
    informative = s.filter(width > 0)
    out["zero_width_settings"] = s.height - informative.height
    out["informative"] = _summary(informative) if informative.height else None
    return out


def figures(summary: dict, digits: int = 0) -> str:
    """The figures of an :func:`overall` summary (or its ``informative`` part) in one line:
    α and U inside / runs, the lowest setting and the median width, percentages to ``digits``
    decimals (``validate`` prints 0; the pooled tables of ``tools/coverage_runs.py`` 1)."""
    lowest = "lowest setting" if summary.get("lowest_over_all", True) else f"lowest setting of ≥ {RATE_RUNS} runs"
    parts = []
    if "coverage_alpha_pct" in summary:
        parts.append(
            f"α {summary['covered_alpha']}/{summary['alpha_runs']} = {summary['coverage_alpha_pct']:.{digits}f} % "
            f"({lowest} {summary['lowest_setting_alpha_pct']:.{digits}f} %, median width {summary['median_width_alpha_pp']:.1f} pp)"
        )
    parts.append(
        f"U {summary['covered_utility']}/{summary['runs']} = {summary['coverage_utility_pct']:.{digits}f} % "
        f"({lowest} {summary['lowest_setting_utility_pct']:.{digits}f} %, median width {summary['median_width_utility_pp']:.1f} pp)"
    )
    if summary.get("utility_misses_discrete"):
        parts.append(
            f"{summary['utility_outside_alpha_inside']} of the {summary['utility_misses_discrete']} discrete runs with U outside "
            "had α inside (as many batches served, of another accuracy: not timing)"
        )
    return "; ".join(parts)


def describe(summary: dict | None, level: float = DEFAULT_LEVEL) -> str:
    """``validate``'s coverage lines: every setting, then those whose interval has a width."""
    if summary is None:
        return "timing coverage: unknown (no trace measured its timing variability)"
    text = (
        f"timing coverage ({summary['settings']} settings, {summary['runs']} live runs inside the replay's {level:.0%} interval for a live pass): "
        + figures(summary)
    )
    zero = summary.get("zero_width_settings", 0)
    if zero:
        inf = summary.get("informative")
        text += (
            f"\n  {zero} of {summary['settings']} settings have an interval of zero width (every replicate serves the same batches), "
            + (
                f"covered trivially; over the other {inf['settings']} ({inf['runs']} live runs): {figures(inf)}"
                if inf
                else "covered trivially; no setting tests the interval"
            )
        )
    return text
