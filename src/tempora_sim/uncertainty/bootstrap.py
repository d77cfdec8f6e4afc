"""Bootstrap confidence intervals: utilities, winners' leads and rank correlations.

Why a bootstrap: a utility is a mean of per-batch scores (or of per-episode utilities), the
paper reports one run, and its headline is about *ranks*, which small differences flip. The
percentile bootstrap needs no distributional assumption and pairs naturally: resampling the
same batches (or episodes) for every method of a cell turns "is A better than B?" into an
interval for the mean of A − B on common data, which is much tighter than two overlapping
marginal intervals.

What is resampled (docs/design/statistics.md has the reading guide):

* **per-episode rows** (one cell of the winners grid): the episode's batches. Each utility is
  the mean of a per-batch score vector s (see :func:`batch_scores`); with several seeds the
  seeds' batches are concatenated, as the simulator pools episodes.
* **pooled rows** (``episode == "__all__"``): the (seed, episode) units, each weighted by its
  number of batches, exactly as the pooled utility weights them.

Both use the draws ``scipy.stats.bootstrap`` makes (``rng.integers(0, n, (R, n))`` from
``numpy.random.default_rng(seed)``) and its percentile interval (linear interpolation), so
for one sample the intervals equal the library's; computing them as one matrix product of
scores and resample counts is what keeps thousands of cells × 1000 resamples well under a
second (the test suite checks the equality against scipy).

Without timing variability, intervals are conditional on the replayed schedule: which batches
a method served, its per-batch delay and its cut-off m come from the one timed run of each
seed. Where the traces measured how much their times move (tempora_sim.sweeps.variability), each
draw also takes one timing replicate (:func:`with_timing`), so the intervals cover both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import click
import numpy as np
import polars as pl

from tempora_sim import protocols as P
from tempora_sim.errors import SimError

DEFAULT_LEVEL = 0.95
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
#: Timing replicates combined with the resamples (tempora_sim.sweeps.variability.DEFAULT_REPLICATES).
DEFAULT_TIMING_REPLICATES = 20


class StatsError(SimError, ValueError):
    """Bad bootstrap settings (message is the whole story, shown as one line)."""


@dataclass(frozen=True)
class BootstrapOptions:
    """Confidence level, number of resamples and the seed of the resampling generator."""

    level: float = DEFAULT_LEVEL
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    #: timing replicates replayed where the traces measured their timing variability (0: none)
    timing_replicates: int = DEFAULT_TIMING_REPLICATES

    def __post_init__(self) -> None:
        if not (isinstance(self.level, (int, float)) and 0.5 <= float(self.level) < 1.0):
            raise StatsError(f"--ci-level: confidence level must be in [0.5, 1) (got {self.level!r})")
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, (int, np.integer)) or not (100 <= self.resamples <= 100_000):
            raise StatsError(f"--resamples: must be an integer in [100, 100000] (got {self.resamples!r})")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**63:
            raise StatsError(f"--ci-seed: must be an integer in 0..2^63-1, as every seed (got {self.seed!r})")
        tr = self.timing_replicates
        if isinstance(tr, bool) or not isinstance(tr, (int, np.integer)) or not (0 <= tr <= 10_000):
            raise StatsError(f"--timing-replicates: must be an integer in [0, 10000] (got {tr!r})")


def bootstrap_options(fn=None, *, timing: bool = True):
    """The CLI options of every command that prints intervals (declared once, here).
    ``@bootstrap_options(timing=False)``: without ``--timing-replicates`` (a command whose
    intervals do not replay timing variability)."""
    if fn is None:
        return lambda f: bootstrap_options(f, timing=timing)

    options = [
        click.option(
            "--ci-level",
            "ci_level",
            default=DEFAULT_LEVEL,
            show_default=True,
            type=float,
            help="Confidence level of every bootstrap interval.",
        ),
        click.option("--resamples", default=DEFAULT_RESAMPLES, show_default=True, type=int, help="Bootstrap resamples."),
        click.option(
            "--ci-seed",
            "ci_seed",
            default=DEFAULT_SEED,
            show_default=True,
            type=int,
            help="Seed of the bootstrap resampling (same seed, same intervals).",
        ),
        click.option(
            "--timing-replicates",
            "timing_replicates",
            default=DEFAULT_TIMING_REPLICATES,
            show_default=True,
            type=int,
            help="Timing replicates replayed from the traces' measured timing variability and combined with the "
            "resamples (0: intervals conditional on the traced times).",
        ),
    ]
    for opt in reversed(options if timing else options[:-1]):
        fn = opt(fn)
    return fn


def make_bootstrap(ci_level, resamples, ci_seed, timing_replicates=DEFAULT_TIMING_REPLICATES) -> "BootstrapOptions":
    """BootstrapOptions from the CLI values (bad values raise StatsError: one line, exit 2)."""
    return BootstrapOptions(level=ci_level, resamples=resamples, seed=ci_seed, timing_replicates=timing_replicates)


# ----------------------------------------------------------------------------- core
def resample_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """[R, n] counts: how often each of n observations appears in each bootstrap resample.

    The indices are the ones ``scipy.stats.bootstrap`` draws from ``default_rng(seed)`` with
    ``batch=None``; a count matrix turns every resampled mean into one matrix product."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, (resamples, n))
    flat = (idx + n * np.arange(resamples)[:, None]).ravel()
    return np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(np.float64)


def bootstrap_means(values: np.ndarray, counts: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Resampled (weighted) means of each row of ``values`` [k, n] → [k, R]."""
    values = np.atleast_2d(np.asarray(values, np.float64))
    if weights is None:
        return values @ counts.T / counts.shape[1]
    w = np.broadcast_to(np.asarray(weights, np.float64), values.shape)
    return (values * w) @ counts.T / (w @ counts.T)


def percentile_interval(boot: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided percentile interval along the last axis (linear interpolation, as scipy)."""
    alpha = (1.0 - level) / 2.0
    q = np.quantile(boot, [alpha, 1.0 - alpha], axis=-1)
    return q[0], q[1]


def mean_interval(values, bootstrap: BootstrapOptions = BootstrapOptions(), weights=None) -> tuple[float, float]:
    """Percentile bootstrap interval of the (weighted) mean of a 1-D sample."""
    x = np.asarray(values, np.float64).ravel()
    if x.size == 0:
        return (math.nan, math.nan)
    if x.size == 1:
        return (float(x[0]), float(x[0]))
    boot = bootstrap_means(
        x[None, :],
        resample_counts(x.size, bootstrap.resamples, bootstrap.seed),
        None if weights is None else np.asarray(weights, np.float64)[None, :],
    )
    lo, hi = percentile_interval(boot[0], bootstrap.level)
    return float(lo), float(hi)


# ----------------------------------------------------------------------------- per-batch scores
#: Trace columns :func:`batch_scores` needs (beside the group columns and ``method``).
SCORE_COLUMNS = ("episode", "step", "correct", "n", "e_ms", "l_ms", "delta_ms")


def _response_delays(e: np.ndarray, l: np.ndarray, lam: float) -> np.ndarray:
    """d_i = max(0, ℓ_{i−1} + e_i − λ) with ℓ_{−1} = 0 (the continuous protocol's delay)."""
    prev = np.concatenate(([0.0], l[:-1]))
    return np.maximum(0.0, prev + e - lam)


def batch_scores(rows: pl.DataFrame, utility_rows: pl.DataFrame) -> list[np.ndarray]:
    """Per-batch score vector of every per-episode utility row, whose mean is its utility.

    ``rows``: one trace episode's adapt rows in step order; ``utility_rows``: that episode's
    per-episode utility rows (any protocols). The scores are:

    * offline: a_j = correct_j / n_j;
    * discrete: a_j for the first |Q| events (the replay is step-indexed: event j scores
      trace row j), 0 after; skipped-batch scores (``--skipped random``, ``--fallback``) are
      added evenly, which keeps the mean and shifts no resample;
    * continuous: a_j · κ_j with κ_j = (T − λ) / (T − λ + d_j);
    * amortised: a_j for the first m batches, then the frozen accuracy ā_frozen for the rest
      (the frozen part is one estimate from the frozen rows, held fixed).

    Any residual between the vector's mean and the table's utility (float rounding) is
    spread evenly, so every interval is centred on the number the tables print."""
    a = (rows.get_column("correct").to_numpy() / rows.get_column("n").to_numpy()).astype(np.float64)
    e = rows.get_column("e_ms").to_numpy().astype(np.float64)
    l_ = rows.get_column("l_ms").to_numpy().astype(np.float64)
    n = a.size
    j = np.arange(n)
    out = []
    d_cache: dict[float, np.ndarray] = {}

    def delays(lam: float) -> np.ndarray:
        if lam not in d_cache:
            d_cache[lam] = _response_delays(e, l_, lam)
        return d_cache[lam]

    for r in utility_rows.iter_rows(named=True):
        proto, u = r["protocol"], r["utility"]
        if proto not in P.single():  # pragma: no cover - check_utility_table rejects unknown protocols
            raise StatsError(f"unknown protocol {proto}")
        s = P.get(proto).batch_scores(r, a, j, delays)
        if u is not None and n:
            s = s + (u - s.mean())
        out.append(s)
    return out


def batch_score_matrix(rows: pl.DataFrame, utility_rows: pl.DataFrame) -> np.ndarray:
    """:func:`batch_scores` as one [utility rows, batches] matrix, row for row the same numbers:
    each protocol's rows are scored at once (:meth:`~tempora_sim.protocols.base.Protocol.batch_score_rows`)."""
    a = (rows.get_column("correct").to_numpy() / rows.get_column("n").to_numpy()).astype(np.float64)
    e = rows.get_column("e_ms").to_numpy().astype(np.float64)
    l_ = rows.get_column("l_ms").to_numpy().astype(np.float64)
    n = a.size
    j = np.arange(n)
    d_cache: dict[float, np.ndarray] = {}

    def delays(lam: float) -> np.ndarray:
        if lam not in d_cache:
            d_cache[lam] = _response_delays(e, l_, lam)
        return d_cache[lam]

    out = np.empty((utility_rows.height, n))
    protos = utility_rows.get_column("protocol")
    kinds = protos.unique(maintain_order=True).to_list()
    for proto in kinds:
        if proto not in P.single():  # pragma: no cover - check_utility_table rejects unknown protocols
            raise StatsError(f"unknown protocol {proto}")
        if len(kinds) == 1:  # one protocol (a view's rows): all of them, as they are
            out[:] = P.get(proto).batch_score_rows(utility_rows, a, j, delays)
            break
        at = np.flatnonzero((protos == proto).to_numpy())
        out[at] = P.get(proto).batch_score_rows(utility_rows[at], a, j, delays)
    if n:
        u = utility_rows.get_column("utility").cast(pl.Float64)
        known = ~u.is_null().to_numpy()
        out[known] += (u.to_numpy()[known] - out[known].mean(axis=1))[:, None]
    return out


# ----------------------------------------------------------------------------- tables of intervals
@dataclass
class Intervals:
    """Bootstrap distributions of utilities, with an index to find a row's distribution.

    ``index`` has the key columns (group columns, ``method``, ``episode``, ``protocol``,
    ``value``), ``row`` (into ``boot``), ``pair`` (rows with the same ``pair`` value were
    resampled together, so their differences are paired), ``lo`` and ``hi``."""

    index: pl.DataFrame
    boot: np.ndarray
    bootstrap: BootstrapOptions

    def difference(self, rows_a: np.ndarray, rows_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Percentile interval of utility(a) − utility(b) for each pair of rows.

        Rows resampled together give a paired interval; for rows that were not (different
        batch counts), the two distributions are independent resamples and their difference
        is the unpaired bootstrap."""
        if len(rows_a) == 0:
            return np.zeros(0), np.zeros(0)
        diff = self.boot[np.asarray(rows_a, np.int64)] - self.boot[np.asarray(rows_b, np.int64)]
        return percentile_interval(diff, self.bootstrap.level)


def episode_intervals(cell_scores: list[tuple[dict, np.ndarray]], bootstrap: BootstrapOptions, bounds: bool = True) -> Intervals:
    """Intervals of per-episode utilities from their per-batch score vectors.

    ``cell_scores``: (key dict, scores) pairs; vectors of one length share one set of
    resamples (so the methods of a cell, which saw the same batches, are paired).
    ``bounds=False`` leaves ``lo``/``hi`` NaN, for a caller that adds timing variability
    (:func:`with_timing` takes the percentiles of the draws it makes)."""
    by_len: dict[int, list[int]] = {}
    for i, (_, s) in enumerate(cell_scores):
        by_len.setdefault(int(s.size), []).append(i)
    groups = [
        (members, np.stack([cell_scores[i][1] for i in members]) if n else np.zeros((len(members), 0))) for n, members in by_len.items()
    ]
    return episode_intervals_grouped([k for k, _ in cell_scores], groups, bootstrap, bounds)


def episode_intervals_grouped(
    keys: list[dict], groups: list[tuple[list[int], np.ndarray]], bootstrap: BootstrapOptions, bounds: bool = True
) -> Intervals:
    """:func:`episode_intervals` from score vectors already stacked by length: ``groups`` holds,
    for each length in order of first appearance, the rows (into ``keys``) of that length and
    their [rows, length] score matrix, in row order."""
    boot = np.empty((len(keys), bootstrap.resamples))
    pair = np.empty(len(keys), np.int64)
    for members, values in groups:
        n = values.shape[1]
        boot[members] = bootstrap_means(values, resample_counts(n, bootstrap.resamples, bootstrap.seed)) if n else np.nan
        pair[members] = n
    return _make([(k, None) for k in keys], boot, pair, bootstrap, bounds)


def unit_intervals(units: list[tuple[dict, np.ndarray, np.ndarray, tuple]], bootstrap: BootstrapOptions, bounds: bool = True) -> Intervals:
    """Intervals of pooled utilities from per-unit values and weights.

    ``units``: (key dict, values, weights, unit ids) with the units (seed, episode) in one
    canonical order; rows with identical unit ids share resamples (paired). ``bounds`` as
    :func:`episode_intervals`."""
    by_ids: dict[tuple, list[int]] = {}
    for i, (_, _, _, ids) in enumerate(units):
        by_ids.setdefault(ids, []).append(i)
    groups = [(members, np.stack([units[i][1] for i in members]), np.stack([units[i][2] for i in members])) for members in by_ids.values()]
    return unit_intervals_grouped([k for k, *_ in units], groups, bootstrap, bounds)


def unit_intervals_grouped(
    keys: list[dict], groups: list[tuple[list[int], np.ndarray, np.ndarray]], bootstrap: BootstrapOptions, bounds: bool = True
) -> Intervals:
    """:func:`unit_intervals` from rows already stacked by their units: ``groups`` holds, for
    each set of units in order of first appearance, its rows (into ``keys``) and their
    [rows, units] values and weights, in row order."""
    boot = np.empty((len(keys), bootstrap.resamples))
    pair = np.empty(len(keys), np.int64)
    for p, (members, values, weights) in enumerate(groups):
        n = values.shape[1]
        if n == 1:
            boot[members] = values[:, :1]
        else:
            boot[members] = bootstrap_means(values, resample_counts(n, bootstrap.resamples, bootstrap.seed), weights)
        pair[members] = p
    return _make([(k, None) for k in keys], boot, pair, bootstrap, bounds)


def _make(
    keys: list[tuple[dict, object]], boot: np.ndarray, pair: np.ndarray, bootstrap: BootstrapOptions, bounds: bool = True
) -> Intervals:
    if bounds:
        lo, hi = percentile_interval(boot, bootstrap.level) if boot.size else (np.zeros(0), np.zeros(0))
    else:
        lo = hi = np.full(len(keys), np.nan)
    index = pl.DataFrame([k for k, _ in keys]) if keys else pl.DataFrame()
    index = index.with_columns(
        pl.Series("row", np.arange(len(keys), dtype=np.int64)),
        pl.Series("pair", pair),
        pl.Series("lo", np.asarray(lo, np.float64)),
        pl.Series("hi", np.asarray(hi, np.float64)),
    )
    return Intervals(index, boot, bootstrap)


def with_timing(intervals: Intervals, shifts: np.ndarray) -> Intervals:
    """``intervals`` with timing variability: bootstrap draw ``b`` of a row plus the change
    that timing replicate ``b mod R`` makes to the same row (``shifts`` [rows, R], replicate
    minus the traced replay; tempora_sim.sweeps.variability). Rows resampled together stay paired,
    and every method of a group takes the same replicate in the same draw, so paired
    differences carry both sources. With ``R = 0`` or all-zero shifts the intervals are
    exactly those without timing variability."""
    shifts = np.asarray(shifts, np.float64)
    if shifts.ndim != 2 or shifts.shape[1] == 0 or not intervals.index.height:
        return intervals
    if shifts.shape[0] != intervals.boot.shape[0]:
        raise StatsError(f"timing shifts have {shifts.shape[0]} rows for {intervals.boot.shape[0]} intervals")
    rows, draws = intervals.boot.shape
    if draws % shifts.shape[1] == 0:  # draw b = k·R + r takes replicate r: a broadcast, no [rows, draws] gather
        boot = (intervals.boot.reshape(rows, -1, shifts.shape[1]) + shifts[:, None, :]).reshape(rows, draws)
    else:
        boot = intervals.boot + shifts[:, np.arange(draws) % shifts.shape[1]]
    lo, hi = percentile_interval(boot, intervals.bootstrap.level)
    index = intervals.index.with_columns(pl.Series("lo", np.asarray(lo, np.float64)), pl.Series("hi", np.asarray(hi, np.float64)))
    return Intervals(index, boot, intervals.bootstrap)


def concat(parts: list[Intervals]) -> Intervals:
    """One Intervals from several (rows renumbered; ``pair`` ids kept apart)."""
    parts = [p for p in parts if p.index.height]
    if not parts:
        return Intervals(pl.DataFrame(), np.zeros((0, 0)), BootstrapOptions())
    frames, offset, pair_offset = [], 0, 0
    for p in parts:
        frames.append(p.index.with_columns(pl.col("row") + offset, pl.col("pair") + pair_offset))
        offset += p.index.height
        pair_offset += int(p.index.get_column("pair").max()) + 1
    return Intervals(pl.concat(frames, how="diagonal_relaxed"), np.concatenate([p.boot for p in parts]), parts[0].bootstrap)
