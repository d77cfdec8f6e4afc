"""What a protocol is to the simulator, and the sweep's output rows every protocol fills.

A :class:`Protocol` declares its name (a word of :mod:`tempora_schema.vocabulary`), its grid
parameter(s), how it calls its Numba kernel and the plain-Python oracle, which output columns it
fills, its decomposition terms and how the tables label and order its values. The replay
(:mod:`tempora_sim.sweeps.replay`), the analyses and the report iterate over the registry
(:mod:`tempora_sim.protocols`) instead of comparing names.

Output columns (docs/design/design.md §6 plus seed, stream, severity, group, lambda_rule,
num_batches), then the scenario columns of docs/design/design.md §9 (``param2``/``value2`` of a 2-D
grid, the arrival process). ``group`` is the comparison group's label without its seed
(tempora_schema.GroupKey.label): rows of two groups that differ only in severity, domains,
weights or threads stay apart, and the seeds of one setting share it (they pool).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl

from tempora_sim.engine.grids import Grid
from tempora_sim.engine.replay_options import ReplayOptions

#: The pooled episode's name in a sweep's rows: a trace's episodes (and arrival seeds) pooled.
POOLED = "__all__"

BASE_COLUMNS = {
    "dataset": pl.Utf8,
    "model": pl.Utf8,
    "device": pl.Utf8,
    "batch_size": pl.Int64,
    "seed": pl.Int64,
    "stream": pl.Utf8,
    "severity": pl.Int64,
    "group": pl.Utf8,
    "method": pl.Utf8,
    "episode": pl.Utf8,
    "protocol": pl.Utf8,
    "param": pl.Utf8,
    "value": pl.Float64,
    "lambda_ms": pl.Float64,
    "lambda_rule": pl.Utf8,
    "utility": pl.Float64,
    "alpha": pl.Float64,
    "served": pl.Int64,
    "served_acc": pl.Float64,
    "acc": pl.Float64,
    "kappa": pl.Float64,
    "cov": pl.Float64,
    "m": pl.Float64,
    "beta": pl.Float64,
    "acc_adapt": pl.Float64,
    "acc_frozen": pl.Float64,
    "frozen_gap": pl.Int64,
    "num_batches": pl.Int64,
}
SCENARIO_COLUMNS = {"param2": pl.Utf8, "value2": pl.Float64, "arrivals": pl.Utf8, "arrival_seed": pl.Int64}
COLUMNS = BASE_COLUMNS | SCENARIO_COLUMNS
#: The measures a protocol may fill (the columns from ``utility`` to ``num_batches``).
MEASURES = tuple(list(BASE_COLUMNS)[list(BASE_COLUMNS).index("utility") : -1])


def div(num, den):
    """num / den where den > 0, NaN elsewhere (no warnings)."""
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def series_slices(series) -> list[slice]:
    """The batches of each series (episode of a trace) in the flat arrays."""
    return [slice(series.offsets[i], series.offsets[i + 1]) for i in range(len(series.episode))]


def warm_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A two-batch input (accuracies, offsets, λ, grid) on which a kernel compiles in no time."""
    return np.array([0.5, 0.25]), np.array([0, 2], np.int64), np.array([1.0]), np.array([1.0, 2.0])


def warm_general_kernel(K) -> None:
    """Compile the general discrete kernel (non-periodic arrivals and the combined protocols)."""
    a, off, lam, _ = warm_inputs()
    K.discrete_general_kernel(
        a,
        a,
        a + 1,
        a,
        np.ones((1, 1)),
        off,
        lam,
        1,
        False,
        0,
        lam,
        np.ones((1, 1)),
        np.array([[2]], np.int64),
        np.ones((1, 1)),
        np.ones((1, 1)),
    )


@dataclass
class Rows:
    """The output rows being framed: one per series (``pooled=False``) or per trace, each
    repeated once per grid value. ``reduce`` turns per-series sums into per-row sums."""

    pooled: bool
    #: N per series (float)
    n: np.ndarray
    n_vals: int
    #: N per row, repeated over the grid values: shape [rows, n_vals]
    NN: np.ndarray
    #: first series of each trace (pooled rows only)
    starts: np.ndarray | None
    #: episodes per trace (pooled rows only)
    nep: np.ndarray | None
    agg: Callable[[np.ndarray], np.ndarray] | None

    def reduce(self, x) -> np.ndarray:
        """Per-series values (one per series, or [series, values]) as per-row values."""
        x = np.asarray(x, np.float64)
        if x.ndim == 1:
            x = np.repeat(x[:, None], self.n_vals, axis=1)
        return self.agg(x) if self.pooled else x


class Protocol:
    """One protocol. Subclasses set the attributes and override what they replay and fill.

    A single-pressure protocol is replayed by :meth:`replay_numba` (or :meth:`replay_python`,
    the oracle) into per-series sums, which :meth:`columns` turns into output columns. A
    combined protocol (``combined = True``) is replayed under arrivals by
    :mod:`tempora_sim.sweeps.scenarios` and adds its own columns in :meth:`scenario_columns`."""

    #: its word in tempora_schema.vocabulary
    name: str = ""
    #: its grid parameters: none (offline), one, or two (a combined protocol: ρ × T, ρ × B)
    grids: tuple[Grid, ...] = ()
    #: which end of its (first) grid is the strictest pressure: "max" (ρ) or "min" (T, B)
    strictest: str = "min"
    #: two pressures at once (docs/design/design.md §9): opt-in, never part of ``all``
    combined: bool = False
    #: replayed under the arrival process (periodic on its own kernel, others on the general one)
    arrival_bound: bool = False
    #: its periodic replay has an idle-effect variant (events after an idle gap run at the
    #: measured speed: tempora_sim.sweeps.variability.apply_idle_effect, on its first grid)
    has_idle_effect: bool = False
    #: played against a real clock by ``tempora-trace live`` (a word of
    #: tempora_schema.vocabulary.LIVE_PROTOCOLS); ``tempora-sim validate`` replays its live runs
    live: bool = False
    #: a live run's setting beside λ, as the validation's columns name it (keys of the run's metadata)
    live_setting: tuple[str, ...] = ()
    #: it serves a subset of the batches: a live run has an availability α, compared with the
    #: replay's, and serve/skip decisions its own measured times must reproduce (self-consistency)
    serves_subset: bool = False
    #: protocols whose replay this one uses (discrete-amortised freezes where amortised stops)
    needs: tuple[str, ...] = ()
    #: the measure columns it fills beyond ``utility``: the terms of its decomposition
    terms: tuple[str, ...] = ()
    #: the terms ``tempora-sim advise`` states as why its recommendation wins
    advise_terms: tuple[str, ...] = ()
    #: the terms whose bootstrap bounds ``sweep --intervals`` and the report give
    interval_terms: tuple[str, ...] = ()
    #: the timing factor that caps its utility at accuracy 1 (α, κ̄): needing more than 100 %
    #: accuracy to match the best competitor is insolvency; None where no factor caps it
    insolvency_factor: str | None = None
    #: short prefix of its per-protocol report columns ("disc. ")
    short: str = ""
    #: title of its table in ``tempora-sim sweep``'s output
    title: str = ""
    #: a combined protocol's name in the report's section beyond the paper ("Deadline + budget")
    heading: str = ""
    #: headers of its decomposition at the strictest value in ``tempora-sim sweep``'s output
    decomposition_headers: tuple[str, ...] = ()
    #: the terms the interactive page shows: (column, what it is, kind), kind "frac" (a
    #: fraction), "count" (an integer) or "real" (one decimal)
    page_terms: tuple[tuple[str, str, str], ...] = ()
    #: the terms of its decomposition at the strictest value (the report's Tables 3–5), in column
    #: order; empty where it has none
    decomposition_terms: tuple[str, ...] = ()
    #: the accuracy term its insolvency factor multiplies (ā_served, ā): its decomposition's
    #: ``required_<term>`` is the value of that term that would match the best competitor
    insolvency_accuracy: str | None = None
    #: the term that orders the tables' methods from fastest to slowest, read pooled at its
    #: strictest value (availability α); None where it orders nothing
    speed_term: str | None = None
    #: its grid is an overhead budget spent batch by batch (B): what a method spends of it and
    #: the Pareto frontier over it are read from its rows
    spends_budget: bool = False

    # ------------------------------------------------------------------ grid
    @property
    def param(self) -> str | None:
        """The ``param`` column of its rows (None for offline)."""
        return self.grids[0].param if self.grids else None

    @property
    def param2(self) -> str | None:
        """The ``param2`` column of a combined protocol's rows."""
        return self.grids[1].param if len(self.grids) > 1 else None

    def values(self, opt) -> tuple[float, ...]:
        """Its (first) grid's values under the resolved options (none for offline)."""
        return opt.grid(self.grids[0]) if self.grids else ()

    def label(self, value: float | None) -> str:
        """Compact label of one grid value (``ρ=70%``); ``offline`` without a grid."""
        return self.grids[0].label(value) if self.grids and value is not None else "offline"

    def scenario_label(self, value: float | None) -> str:
        """The report's label of one scenario (``ρ=70%``, ``T=50ms``, ``B=1s``)."""
        return self.grids[0].scenario_label(value) if self.grids and value is not None else "offline"

    def pressure_key(self, value: float) -> float:
        """Sorts its values from the strictest to the most relaxed."""
        return -value if self.strictest == "max" else value

    # ------------------------------------------------------------------ replay
    def warm(self, K) -> None:
        """Compile (or load from the cache) its kernels on a tiny input."""

    def replay_numba(self, series, values, replay: ReplayOptions) -> dict:
        """Per-series sums under every grid value, from the Numba kernels."""
        raise NotImplementedError(f"protocol '{self.name}' is replayed under arrivals (tempora_sim.sweeps.scenarios)")

    def replay_python(self, series, values, replay: ReplayOptions) -> dict:
        """The same sums from the plain-Python oracle (tempora_sim.engine.oracle)."""
        raise NotImplementedError(f"protocol '{self.name}' is replayed under arrivals (tempora_sim.sweeps.scenarios)")

    def check_replay(self, series, stats: dict, values) -> None:
        """Refuse, in one line, sums that cannot be framed (amortised: no frozen rows to use)."""

    def batch_scores(self, row: dict, a: np.ndarray, j: np.ndarray, delays: Callable[[float], np.ndarray]) -> np.ndarray:
        """Each batch's score in one episode row's utility (what the bootstrap resamples): ``a``
        the batches' accuracies, ``j`` their indices, ``delays(λ)`` their response delays."""
        raise NotImplementedError(f"protocol '{self.name}' has no per-batch scores")

    def batch_score_rows(self, rows: pl.DataFrame, a: np.ndarray, j: np.ndarray, delays: Callable[[float], np.ndarray]) -> np.ndarray:
        """:meth:`batch_scores` of every row of ``rows`` (one episode's utility rows of this
        protocol) as one [rows, batches] matrix; a protocol overrides it with array arithmetic
        that gives the same numbers, bit for bit, without a Python step per row."""
        if not rows.height:
            return np.zeros((0, a.size))
        return np.stack([self.batch_scores(r, a, j, delays) for r in rows.iter_rows(named=True)])

    def batch_ratios(self, row: dict, a: np.ndarray, j: np.ndarray, delays: Callable[[float], np.ndarray]) -> dict:
        """Its per-episode terms as ratios of per-batch sums, term -> (numerator, denominator)
        vectors, for the terms a resample of batches moves (the rest move with the timing only)."""
        return {}

    def columns(self, rows: Rows, stats: dict) -> dict[str, np.ndarray]:
        """Its output columns (``utility`` and its terms), shaped [rows, n_vals]."""
        raise NotImplementedError

    def decomposition_cells(self, row: dict, pct: Callable[..., str]) -> list[str]:
        """One method's cells under :attr:`decomposition_headers` (``pct(x, digits=2)`` formats a
        fraction in %)."""
        return []

    def advise_why(self, method: str, mech: dict, pc: Callable[[float | None], str]) -> str:
        """``advise``'s sentence on why ``method`` scores what it does (``mech``: its
        :attr:`advise_terms`; ``pc`` formats a fraction in %)."""
        return f"{method}: " + ", ".join(f"{k} = {pc(v)}" for k, v in mech.items())

    def strict_episode_terms(self) -> dict[str, pl.Expr]:
        """Its columns in the table of timing terms at the strictest values (Table 14), as
        aggregations over one method's per-episode rows at its strictest value; empty where that
        table reads its pooled insolvency factor instead."""
        return {}

    def strict_sentence(self, winner: dict, rival: tuple[str, dict] | None, pc: Callable, name: Callable) -> str:
        """The report's words on the winner at its strictest value (``winner``: its row of the
        decomposition) and, where given, on the offline favourite (``rival``: its name and row);
        ``pc`` formats a fraction in %, ``name`` a method's name."""
        return f"U = {pc(winner['utility'])}."

    def scenario_columns(self, xs, raw: dict, frame: pl.DataFrame, pooled: bool) -> list[pl.Series]:
        """A combined protocol's own columns beside the discrete ones it is framed with."""
        return []

    # ------------------------------------------------------------------ live runs
    def live_setting_values(self, run: dict) -> dict:
        """A live run's :attr:`live_setting`, typed, from its metadata ``run``."""
        raise NotImplementedError(f"protocol '{self.name}' is not played live")

    def live_key(self, run: dict) -> tuple:
        """What makes two live runs (at one λ) the same setting, pooled as repeats."""
        raise NotImplementedError(f"protocol '{self.name}' is not played live")

    def live_replay(self, run: dict, lam: float) -> dict:
        """The sweep options (:class:`~tempora_sim.sweeps.options.SweepOptions` field names) that
        replay one live run's setting at λ = ``lam``."""
        raise NotImplementedError(f"protocol '{self.name}' is not played live")


def reduce_rows(xs, x, pooled: bool) -> np.ndarray:
    """Rows of ``x`` [S·seeds, K] flattened as the frame orders them (pooled per trace if asked)."""
    x = np.asarray(x, np.float64)
    if pooled:
        starts = np.flatnonzero(np.r_[True, xs.trace_of[1:] != xs.trace_of[:-1]])
        x = np.add.reduceat(x, starts, axis=0)
    return x.reshape(-1)


#: What a light frame (:func:`frame` with ``measures``) holds beside the measures it was asked
#: for: the numbers the sweep filters and frames its rows by.
LIGHT_KEYS = ("value", "lambda_ms", "num_batches")


def frame(series, protocol: Protocol, values, stats: dict, pooled: bool, measures: Sequence[str] | None = None) -> pl.DataFrame:
    """Rows of one protocol: per episode (pooled=False) or per trace pooled over episodes.

    ``measures`` (columns of :data:`MEASURES`) asks for a *light* frame: the same rows in the
    same order, holding only those measures and :data:`LIGHT_KEYS`, without the names that
    identify a row. A timing replicate replays the sweep's rows again and reads a few measures
    of each; the names are the sweep's own."""
    s = series
    n_vals = max(1, len(values))
    n = s.n.astype(np.float64)
    starts = nep = agg = None
    if pooled:
        starts = np.flatnonzero(np.r_[True, s.trace_of[1:] != s.trace_of[:-1]])
        owner = s.trace_of[starts]

        def agg(x):
            x = np.asarray(x, np.float64)
            return np.add.reduceat(x, starts, axis=0)

        N = agg(n)
        episodes = [POOLED] * len(starts)
        lam = s.lam[starts]
        nep = np.diff(np.r_[starts, len(s.episode)])
    else:
        owner = s.trace_of
        N = n
        episodes = s.episode
        lam = s.lam
    rows = len(owner)
    NN = np.repeat(N[:, None], n_vals, axis=1)
    nan = np.full((rows, n_vals), np.nan)
    cols = protocol.columns(Rows(pooled, n, n_vals, NN, starts, nep, agg), stats)
    stray = sorted(set(cols) - {"utility", *protocol.terms})
    if stray:
        raise ValueError(f"protocol '{protocol.name}' fills {stray}, which are not among its terms")

    if measures is not None:
        return _light_frame(cols, measures, values, rows, n_vals, lam, N)

    # identity columns: one small frame per row owner, gathered once per grid value
    ident_cols = ("dataset", "model", "device", "batch_size", "seed", "stream", "severity", "group", "method")
    per_trace = [
        (
            m["dataset"],
            m["model"],
            m["device"],
            int(m["batch_size"]),
            int(m["seed"]),
            m["stream"],
            m["severity"],
            t.group.label(seed=False),
            t.method,
        )
        for t in s.traces
        for m in (t.meta,)
    ]
    ident = pl.DataFrame(
        {**{name: [per_trace[i][j] for i in owner] for j, name in enumerate(ident_cols)}, "episode": list(episodes)},
        schema={k: BASE_COLUMNS[k] for k in ident_cols + ("episode",)},
    )
    total = rows * n_vals
    out = ident[np.repeat(np.arange(rows), n_vals)] if rows else ident.clear()
    name, param = protocol.name, protocol.param
    columns = [
        pl.Series("protocol", [name], pl.Utf8).extend_constant(name, total - 1) if total else pl.Series("protocol", [], pl.Utf8),
        pl.Series("param", [param] * min(total, 1), pl.Utf8).extend_constant(param, max(total - 1, 0)),
        pl.Series("value", np.tile(np.asarray(values, np.float64), rows) if values else np.full(rows, np.nan), nan_to_null=True),
        pl.Series("lambda_ms", np.repeat(lam, n_vals)),
        pl.lit(s.lambda_rule, pl.Utf8).alias("lambda_rule"),
    ]
    for col in MEASURES:
        data = cols.get(col)
        values_ = np.asarray(data, np.float64).reshape(-1) if data is not None else nan.reshape(-1)
        columns.append(pl.Series(col, values_, nan_to_null=True).cast(BASE_COLUMNS[col]))
    columns.append(pl.Series("num_batches", np.repeat(N, n_vals).astype(np.int64)))
    return out.with_columns(columns).select(list(BASE_COLUMNS))


def _light_frame(cols: dict, measures: Sequence[str], values, rows: int, n_vals: int, lam: np.ndarray, N: np.ndarray) -> pl.DataFrame:
    """:func:`frame`'s rows as :data:`LIGHT_KEYS` and ``measures`` only (each column built as
    the full frame builds it)."""
    nan = np.full(rows * n_vals, np.nan)
    columns = [
        pl.Series("value", np.tile(np.asarray(values, np.float64), rows) if values else np.full(rows, np.nan), nan_to_null=True),
        pl.Series("lambda_ms", np.repeat(lam, n_vals)),
        pl.Series("num_batches", np.repeat(N, n_vals).astype(np.int64)),
    ]
    for col in measures:
        data = cols.get(col)
        values_ = np.asarray(data, np.float64).reshape(-1) if data is not None else nan
        columns.append(pl.Series(col, values_, nan_to_null=True).cast(BASE_COLUMNS[col]))
    return pl.DataFrame(columns)
