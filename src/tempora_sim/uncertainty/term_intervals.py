"""``sweep --intervals``: bounds of U and of every decomposition term, per output row.

Columns ``<term>_lo`` / ``<term>_hi`` for ``utility`` and the terms of each protocol
(docs/design/design.md §6) — ``alpha``, ``served_acc`` (discrete); ``acc``, ``kappa``, ``cov``
(continuous); ``m``, ``beta``, ``acc_adapt``, ``acc_frozen`` (amortised) — and
``timing_uncertainty`` (``measured`` or ``unknown``: did the trace measure its timing
variability?). What is resampled (docs/design/statistics.md):

* **pooled rows** (``episode = "__all__"``): the trace's episodes. Every term is a ratio of
  sums over episodes, as the sweep pools it (α = Σ|Q| / ΣN, ā_served = Σ served accuracy /
  Σ|Q|, β = Σm / ΣN, m = Σm / episodes, …); a resample takes the ratio of the resampled sums;
  Cov = U − ā·κ̄ of the same resample.
* **per-episode rows** of the four paper protocols: the episode's batches, for the terms that
  average per-batch values (U as the report's cells, ā, κ̄, ā_served, ā_adapt, Cov).
  The schedule terms (α, m, β) and the frozen accuracy (one estimate, held fixed) do not move
  with another draw of batches: their bounds come from timing variability alone.
  Scenario rows (other arrival processes, combined protocols) get bounds on their pooled rows.

Timing variability is added to every draw as in :func:`tempora_sim.uncertainty.bootstrap.with_timing`: draw
``b`` plus the change that timing replicate ``b mod R`` makes to the same row. The draws use
:func:`tempora_sim.uncertainty.bootstrap.resample_counts`, so ``utility_lo``/``utility_hi`` of a single-seed
sweep equal the report's intervals of the same rows.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import polars as pl

from tempora_sim import protocols as P
from tempora_sim.sweeps import utility_table as ut
from tempora_sim.sweeps.variability import MEASURED, UNKNOWN, timing_model
from tempora_sim.uncertainty import bootstrap as st

ALL_TERMS = ("utility", "alpha", "served_acc", "acc", "kappa", "cov", "m", "beta", "acc_adapt", "acc_frozen")
#: Terms that are fractions in [0, 1] (a draw with a timing shift is clipped to that range).
FRACTIONS = frozenset({"utility", "alpha", "served_acc", "acc", "kappa", "beta", "acc_adapt", "acc_frozen"})
#: Per-episode terms that another draw of batches does not move (timing variability only).
SCHEDULE_TERMS = frozenset({"alpha", "m", "beta", "acc_frozen"})


def interval_columns(result, bootstrap: st.BootstrapOptions | None = None, timing=None) -> pl.DataFrame:
    """``result.frame`` (a :class:`~tempora_sim.sweeps.replay.SweepResult`) with the bound columns.

    ``timing``: :class:`tempora_sim.uncertainty.timing_replicates.TimingReplicates` of the same sweep (its
    ``base`` is ``result.frame``), or None for intervals conditional on the traced times."""
    bootstrap = bootstrap or st.BootstrapOptions()
    frame = result.frame
    n_rows, R = frame.height, bootstrap.resamples
    boot = {t: np.full((n_rows, R), np.nan) for t in ALL_TERMS}
    has = {t: np.zeros(n_rows, bool) for t in ALL_TERMS}
    f = frame.with_row_index("_row")
    _pooled(f, boot, has, bootstrap)
    _episodes(result, f, boot, has, bootstrap)
    if timing is not None and timing.count:
        for term in ALL_TERMS:
            rows = np.flatnonzero(has[term])
            if not rows.size:
                continue
            base = frame.get_column(term).cast(pl.Float64).fill_null(np.nan).to_numpy()[rows]
            reps = np.stack([r.get_column(term).cast(pl.Float64).fill_null(np.nan).to_numpy()[rows] for r in timing.reps], axis=1)
            shift = np.where(np.isfinite(reps - base[:, None]), reps - base[:, None], 0.0)
            b = boot[term][rows] + shift[:, np.arange(R) % shift.shape[1]]
            boot[term][rows] = np.clip(b, 0.0, 1.0) if term in FRACTIONS else (np.maximum(b, 0.0) if term == "m" else b)
    columns = []
    for term in ALL_TERMS:
        lo = np.full(n_rows, np.nan)
        hi = np.full(n_rows, np.nan)
        rows = np.flatnonzero(has[term])
        if rows.size:
            with np.errstate(all="ignore"), _quiet():
                q = np.nanquantile(boot[term][rows], [(1 - bootstrap.level) / 2, 1 - (1 - bootstrap.level) / 2], axis=1)
            lo[rows], hi[rows] = q[0], q[1]
        columns += [pl.Series(f"{term}_lo", lo, nan_to_null=True), pl.Series(f"{term}_hi", hi, nan_to_null=True)]
    status = _status(result, timing)
    return frame.with_columns(columns + [pl.Series("timing_uncertainty", status, pl.Utf8)])


class _quiet:
    """All-NaN rows (a term undefined in every draw) give NaN bounds without a warning."""

    def __enter__(self):
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def _status(result, timing) -> list[str]:
    by = {}
    for t in result.series.traces:
        by[(t.group.label(seed=False), int(t.meta["seed"]), t.method)] = (
            MEASURED if timing is not None and timing.count and timing_model(t) is not None else UNKNOWN
        )
    keys = result.frame.select("group", "seed", "method").iter_rows()
    return [by.get((g, int(s), m), UNKNOWN) for g, s, m in keys]


def _nums(p: pl.DataFrame, term: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-episode (numerator, denominator) of ``term`` as the sweep pools it."""

    def col(name):
        return p.get_column(name).cast(pl.Float64).fill_null(0.0).to_numpy()

    N = col("num_batches") if "num_batches" in p.columns else np.ones(p.height)  # a table without it: episodes weigh alike
    if term in ("utility", "acc", "kappa"):
        return col(term) * N, N
    if term == "alpha":
        return col("served"), N
    if term == "served_acc":
        return col("served_acc") * col("served"), col("served")
    if term == "m":
        return col("m"), np.ones_like(N)
    if term == "beta":
        return col("m"), N
    if term == "acc_adapt":
        return col("acc_adapt") * col("m"), col("m")
    if term == "acc_frozen":
        return col("acc_frozen") * (N - col("m")), N - col("m")
    raise ValueError(term)  # pragma: no cover


def _ratio_boot(num: np.ndarray, den: np.ndarray, counts: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        d = den @ counts.T
        return np.where(d > 0, (num @ counts.T) / np.where(d > 0, d, 1.0), np.nan)


def _pooled(f: pl.DataFrame, boot: dict, has: dict, bootstrap: st.BootstrapOptions) -> None:
    """Pooled rows: resample the trace's episodes (ratio of resampled sums, per term)."""
    keys = [c for c in ("group", "seed", "method", "protocol", "value", "param2", "value2", "arrivals", "arrival_seed")]
    per = f.filter(pl.col("episode") != P.POOLED)
    pooled = f.filter(pl.col("episode") == P.POOLED).select(keys + ["_row"])
    # units in (seed, episode) order, as tempora_sim.analyses resamples them: the same draws
    grouped = per.sort(["seed", "episode"]).group_by(keys, maintain_order=True).agg(pl.all().exclude(keys))
    grouped = grouped.join(pooled.rename({"_row": "_pooled_row"}), on=keys, how="inner", nulls_equal=True)
    by_n: dict[int, list[dict]] = {}
    for r in grouped.iter_rows(named=True):
        by_n.setdefault(len(r["_row"]), []).append(r)
    for n, members in by_n.items():
        counts = st.resample_counts(n, bootstrap.resamples, bootstrap.seed) if n > 1 else np.ones((bootstrap.resamples, 1))
        frames = [pl.DataFrame({k: v for k, v in r.items() if k not in keys and k != "_pooled_row"}) for r in members]
        out_rows = np.array([r["_pooled_row"] for r in members], np.int64)
        proto = [r["protocol"] for r in members]
        for term in ALL_TERMS:
            if term == "cov":
                continue
            sel = [i for i, p in enumerate(proto) if term == "utility" or term in _terms(p)]
            sel = [i for i in sel if frames[i].get_column(term).null_count() < n or term == "utility"]
            if not sel:
                continue
            nd = [_nums(frames[i], term) for i in sel]
            b = _ratio_boot(np.stack([x[0] for x in nd]), np.stack([x[1] for x in nd]), counts)
            boot[term][out_rows[sel]] = b
            has[term][out_rows[sel]] = True
        cov_rows = [i for i, p in enumerate(proto) if "cov" in _terms(p)]
        if cov_rows:
            r_ = out_rows[cov_rows]
            boot["cov"][r_] = boot["utility"][r_] - boot["acc"][r_] * boot["kappa"][r_]
            has["cov"][r_] = True


def _terms(protocol: str) -> tuple[str, ...]:
    """The terms besides ``utility`` whose bounds a protocol's rows carry (a combined protocol:
    its discrete ones, U, α and ā_served)."""
    return P.get(protocol).interval_terms


def _episodes(result, f: pl.DataFrame, boot: dict, has: dict, bootstrap: st.BootstrapOptions) -> None:
    """Per-episode rows of the paper protocols (periodic arrivals): resample the batches."""
    s = result.series
    rows = f.filter(
        (pl.col("episode") != P.POOLED)
        & pl.col("protocol").is_in(P.single())
        & (pl.col("arrivals").is_null() | (pl.col("arrivals") == "periodic"))
        & pl.col("param2").is_null()
    )
    if not rows.height:
        return
    index = {}
    for i, ep in enumerate(s.episode):
        t = s.traces[int(s.trace_of[i])]
        index[(t.group.label(seed=False), int(t.meta["seed"]), t.method, ep)] = i
    counts_of: dict[int, np.ndarray] = {}
    for key, urows in rows.partition_by(["group", "seed", "method", "episode"], as_dict=True).items():
        i = index.get((key[0], int(key[1]), key[2], key[3]))
        if i is None:
            continue
        lo, hi = int(s.offsets[i]), int(s.offsets[i + 1])
        n = hi - lo
        if n == 0:
            continue
        if n not in counts_of:
            counts_of[n] = st.resample_counts(n, bootstrap.resamples, bootstrap.seed) if n > 1 else np.ones((bootstrap.resamples, 1))
        counts = counts_of[n]
        trows = pl.DataFrame({"correct": s.a[lo:hi], "n": np.ones(n), "e_ms": s.e[lo:hi], "l_ms": s.l[lo:hi], "delta_ms": s.delta[lo:hi]})
        scores = st.batch_scores(trows, urows)
        a = s.a[lo:hi]
        j = np.arange(n)
        out_rows = urows.get_column("_row").to_numpy()
        ones = np.ones(n)
        delays = partial(st._response_delays, s.e[lo:hi], s.l[lo:hi])  # d(λ) of these batches
        for k, r in enumerate(urows.iter_rows(named=True)):
            row = int(out_rows[k])
            proto = r["protocol"]
            terms = {"utility": (scores[k], ones)}
            terms.update(P.get(proto).batch_ratios(r, a, j, delays))
            for term, (num, den) in terms.items():
                if term != "utility" and r[term] is None:
                    continue
                boot[term][row] = _ratio_boot(num[None, :], den[None, :], counts)[0]
                has[term][row] = True
            if "cov" in _terms(proto):
                boot["cov"][row] = boot["utility"][row] - boot["acc"][row] * boot["kappa"][row]
                has["cov"][row] = True
            for term in SCHEDULE_TERMS & set(_terms(proto)):
                if r[term] is not None:
                    boot[term][row] = float(r[term])
                    has[term][row] = True


def pooled_bounds(frame: pl.DataFrame, bootstrap: st.BootstrapOptions | None = None, timing=None) -> pl.DataFrame:
    """Bounds of U and every term of each seed-pooled, episode-pooled row of a sweep table.

    One row per (group columns, method, protocol, param, value, scenario columns), with
    ``<term>_lo`` / ``<term>_hi``: the (seed, episode) units resampled as
    :func:`tempora_sim.analyses.intervals.utility_intervals` resamples them (same draws, so
    ``utility_lo``/``utility_hi`` equal its ``lo``/``hi``), each term a ratio of resampled sums
    as :func:`tempora_sim.sweeps.utility_table.pool_seeds` pools it, plus the timing replicates' shifts of
    the seed-pooled rows (``timing``: :class:`tempora_sim.uncertainty.timing_replicates.TimingReplicates`)."""
    bootstrap = bootstrap or st.BootstrapOptions()
    g = ut.group_columns(frame)
    scen = [c for c in ("param2", "value2", "arrivals", "arrival_seed") if c in frame.columns]
    keys = g + ["method", "protocol", "param", "value"] + scen
    per = frame.filter((pl.col("episode") != P.POOLED) & pl.col("utility").is_not_null())
    if not per.height:
        return pl.DataFrame()
    unit_cols = ([ut.SEED] if ut.SEED in per.columns else []) + ["episode"]
    grouped = per.sort(unit_cols).group_by(keys, maintain_order=True).agg(pl.all().exclude(keys))
    R = bootstrap.resamples
    boot = {t: np.full((grouped.height, R), np.nan) for t in ALL_TERMS}
    has = {t: np.zeros(grouped.height, bool) for t in ALL_TERMS}
    lists = grouped.drop(keys)
    for i, r in enumerate(lists.iter_rows(named=True)):
        p = pl.DataFrame(r)
        n = p.height
        counts = st.resample_counts(n, R, bootstrap.seed) if n > 1 else np.ones((R, 1))
        proto = grouped.get_column("protocol")[i]
        for term in ("utility",) + tuple(t for t in _terms(proto) if t != "cov"):
            needs = {"alpha": "served", "beta": "m"}.get(term, term)
            if term != "utility" and (needs not in p.columns or term not in p.columns or p.get_column(term).null_count() == n):
                continue
            num, den = _nums(p, term)
            boot[term][i] = _ratio_boot(num[None, :], den[None, :], counts)[0]
            has[term][i] = True
        if "cov" in _terms(proto) and has["acc"][i] and has["kappa"][i]:
            boot["cov"][i] = boot["utility"][i] - boot["acc"][i] * boot["kappa"][i]
            has["cov"][i] = True
    out = grouped.select(keys).with_columns(pl.lit(P.POOLED).alias("episode"))
    if timing is not None and timing.count:
        idx = out.select(keys + ["episode"])
        shift_keys = [k for k in keys if k != "param"] + ["episode"]
        shifted = [term for term in ALL_TERMS if has[term].any()]
        shifts = timing.shifts_of(idx, shift_keys, shifted, pool=ut.pool_seeds)
        for term in shifted:
            rows = np.flatnonzero(has[term])
            sh = shifts[term][rows]
            b = boot[term][rows] + sh[:, np.arange(R) % sh.shape[1]]
            boot[term][rows] = np.clip(b, 0.0, 1.0) if term in FRACTIONS else (np.maximum(b, 0.0) if term == "m" else b)
    cols = []
    for term in ALL_TERMS:
        lo = np.full(grouped.height, np.nan)
        hi = np.full(grouped.height, np.nan)
        rows = np.flatnonzero(has[term])
        if rows.size:
            with np.errstate(all="ignore"), _quiet():
                q = np.nanquantile(boot[term][rows], [(1 - bootstrap.level) / 2, 1 - (1 - bootstrap.level) / 2], axis=1)
            lo[rows], hi[rows] = q[0], q[1]
        cols += [pl.Series(f"{term}_lo", lo, nan_to_null=True), pl.Series(f"{term}_hi", hi, nan_to_null=True)]
    return out.with_columns(cols)


def attach_bounds(t: pl.DataFrame, bounds: pl.DataFrame | None) -> pl.DataFrame:
    """Join the ``<term>_lo``/``<term>_hi`` columns of :func:`pooled_bounds` onto a pooled table
    (group columns, ``method``, ``protocol``, ``value``); missing bounds are null."""
    names = [f"{t_}_{s}" for t_ in ALL_TERMS for s in ("lo", "hi")]
    if bounds is None or not bounds.height:
        return t.with_columns([pl.lit(None, pl.Float64).alias(c) for c in names])
    b = bounds
    for c in ("param2", "value2", "arrivals", "arrival_seed"):  # the paper's single-parameter rows
        if c in b.columns:
            b = b.filter(pl.col(c).is_null()) if c != "arrivals" else b.filter(pl.col(c).is_null() | (pl.col(c) == "periodic"))
    keys = [c for c in b.columns if c in t.columns and c in ("dataset", "model", "device", "batch_size", "stream", "group")]
    keys += ["method", "protocol", "value"]
    look = b.select(keys + names).with_columns(pl.col("value").cast(pl.Float64)).unique(subset=keys, keep="first")
    t2 = t.with_columns(pl.col("value").cast(pl.Float64)) if "value" in t.columns else t
    casts = [pl.col(c).cast(t2.schema[c]) for c in keys if c in t2.columns and c not in ("value",)]
    look = look.with_columns(casts)
    return t2.join(look, on=keys, how="left", nulls_equal=True)
