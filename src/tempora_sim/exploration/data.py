"""The data behind ``tempora-sim explore``: every number the interactive page shows, computed here.

The page (:mod:`tempora_sim.commands.explore`, ``exploration/assets/``) never computes a utility: it
looks up what this module wrote. For every comparison group (seeds pooled, like episodes) and
every arrival process asked for, the traces are replayed by the same kernels and analyses as
``tempora-sim sweep``, ``report`` and ``advise`` on dense grids:

* discrete: ρ from 1 % to 100 % in steps of 1 % (plus the values given with ``--rho``);
* continuous: :data:`POINTS` values of T, geometric from just above the group's λ to
  ``max(2 s, 40 λ)`` (plus the sweep's default T grid and ``--T``);
* amortised: B = 0 and :data:`POINTS` values geometric from 1 ms to the largest overhead any
  trace can spend, plus the sweep's default B grid, ``--B`` and every *checkpoint budget*: for
  each method and frozen checkpoint m*, the budget at which the method has adapted m* batches
  in every episode (the costliest episode freezes exactly at its checkpoint there);
* the combined protocols on :data:`POINTS_2D` × :data:`POINTS_2D` grids (ρ × T, ρ × B).

Per method and cell (each corruption and all corruptions pooled): the utility, its bootstrap
interval (pooled: corruptions resampled, every method; per corruption: batches resampled, as
``report``, for the cell's winner and runner-up, which decide its certainty) and the decomposition (α, |Q|, ā_served; ā, κ̄, Cov; m, β, ā_adapt, ā_frozen). Per cell: the
winner, the runner-up, the paired interval of the lead and whether the winner is certain
(docs/design/statistics.md). Per pooled cell of a one-parameter protocol: the nearest values on each
side where the recommendation changes, searched and refined as ``advise`` does.

The result is a plain dict, columnar and rounded (fractions as integers in units of 10⁻⁴,
i.e. 0.01 pp), written into the page compressed (:func:`tempora_sim.commands.explore.render_page`).
"""

from __future__ import annotations

import time
import warnings
from typing import Callable, Sequence

import numpy as np
import polars as pl
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tempora_sim import analyses as an
from tempora_sim import protocols as P

#: the boundary refinement of ``advise``: REFINE_POINTS values between the last grid value where
#: the recommendation holds and the first where it does not, spaced by its ``_span``
from tempora_sim.analyses.advice import REFINE_POINTS
from tempora_sim.analyses.advice import _span as _span
from tempora_sim.engine import grids
from tempora_sim.errors import SimError
from tempora_sim.exploration.dense_grids import POINTS, group_grids
from tempora_sim.exploration.short_keys import ShortKeys
from tempora_sim.palette import method_colour
from tempora_sim.process import version
from tempora_sim.sweeps.options import SweepOptions
from tempora_sim.sweeps.replay import run_sweep
from tempora_sim.sweeps.traces import TraceSet, group_lambdas
from tempora_sim.uncertainty import timing_replicates
from tempora_sim.uncertainty.bootstrap import BootstrapOptions
from tempora_sim.uncertainty.timing_replicates import INTERVAL_MEASURES, replicates_of

#: The most grid values a page takes from --rho, --T or --B each (the sweep takes up to a
#: million; the page stores every cell of every value, so larger grids belong to `sweep`).
MAX_GIVEN = 1000
#: Scale of the stored fractions: 10⁻⁴ (0.01 percentage points).
SCALE = 10_000
DATA_VERSION = 1


class ExploreError(SimError, ValueError):
    """Bad explore input (message is the whole story, shown as one line)."""


# ----------------------------------------------------------------------------- encoding
def _q(values, kind: str = "frac") -> list:
    """Rounded, JSON-ready nested lists of any shape: fractions as integers in 10⁻⁴, counts as
    integers, reals to 0.1; None where there is no number."""
    arr = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(arr)
    clean = np.where(ok, arr, 0.0)
    if kind == "frac":
        r = np.rint(clean * SCALE).astype(np.int64)
    elif kind == "count":
        r = np.rint(clean).astype(np.int64)
    else:
        r = np.round(clean, 1)
    if ok.all():
        return r.tolist()
    out = r.astype(object)
    out[~ok] = None
    return out.tolist()


def _x(values: Sequence[float]) -> list[float]:
    """Grid values exactly as replayed (a checkpoint budget rounded down would cut one batch early)."""
    return [float(v) for v in values]


# ----------------------------------------------------------------------------- tables
def _cube(frame: pl.DataFrame, episodes: list[str], methods: list[str], xkeys: list[tuple], cols: Sequence[str], xcols: Sequence[str]):
    """Arrays [episode, method, x] of each column in ``cols`` (NaN where missing)."""
    E, M, X = len(episodes), len(methods), len(xkeys)
    ei = {e: i for i, e in enumerate(episodes)}
    mi = {m: i for i, m in enumerate(methods)}
    f = frame.with_columns(
        pl.col("episode").replace_strict(ei, default=-1, return_dtype=pl.Int64).alias("_e"),
        pl.col("method").replace_strict(mi, default=-1, return_dtype=pl.Int64).alias("_m"),
    )
    look = pl.DataFrame(
        {f"_k{n}": [k[n] for k in xkeys] for n in range(len(xcols))} | {"_x": list(range(X))},
        schema={f"_k{n}": pl.Float64 for n in range(len(xcols))} | {"_x": pl.Int64},
    )
    f = f.with_columns([pl.col(c).cast(pl.Float64).round(9).alias(f"_k{n}") for n, c in enumerate(xcols)])
    f = f.join(look, on=[f"_k{n}" for n in range(len(xcols))], how="left", nulls_equal=True).with_columns(pl.col("_x").fill_null(-1))
    x_idx = f.get_column("_x").to_numpy()
    e_idx = f.get_column("_e").to_numpy()
    m_idx = f.get_column("_m").to_numpy()
    ok = (x_idx >= 0) & (e_idx >= 0) & (m_idx >= 0)
    out = {}
    for c in cols:
        a = np.full((E, M, X), np.nan)
        if c in f.columns:
            v = f.get_column(c).cast(pl.Float64).fill_null(float("nan")).to_numpy()
            a[e_idx[ok], m_idx[ok], x_idx[ok]] = v[ok]
        out[c] = a
    return out


def _winners(U: np.ndarray, tol: float = an.DEFAULT_TOL):
    """Per [episode, x]: winner index (highest utility; ties to the first method in order),
    runner-up index (the best non-winner; in a tie the next tied method, with a lead of 0, as
    ``advise`` names it), whether the best is tied. -1 where nothing."""
    E, M, X = U.shape
    V = np.where(np.isfinite(U), U, -np.inf)
    best = V.max(axis=1)
    is_win = V >= best[:, None, :] - tol
    win = np.argmax(is_win, axis=1)
    tie = is_win.sum(axis=1) > 1
    rest = np.where(is_win, -np.inf, V)
    ru = np.argmax(rest, axis=1)
    has_ru = np.isfinite(rest.max(axis=1))
    none = ~np.isfinite(best)
    win = np.where(none, -1, win)
    ru = np.where(none | ~has_ru, -1, ru)
    others = is_win & (np.arange(M)[None, :, None] != win[:, None, :])
    ru = np.where(tie, np.argmax(others, axis=1), ru)
    return win, ru, tie


def _row_lookup(intervals) -> dict[tuple, int]:
    """(episode, value, method) -> row of ``intervals`` (one group)."""
    if intervals is None or not intervals.index.height:
        return {}
    idx = intervals.index
    return {(e, round(float(v), 9), m): r for e, v, m, r in idx.select("episode", "value", "method", "row").iter_rows() if v is not None}


def _leads(intervals, lookup, episodes, methods, xvals, win, ru, tie, only_pooled: bool):
    """Per [episode, x]: the paired interval of the winner's lead over the runner-up and
    whether the winner is certain (docs/design/statistics.md: the interval lies above 0; a tie is
    uncertain with lead 0), from the bootstrap distributions in ``intervals``: the rule of
    :func:`tempora_sim.analyses.wins.with_certainty`, read off the same resamples."""
    E, X = win.shape
    lead_lo = np.full((E, X), np.nan)
    lead_hi = np.full((E, X), np.nan)
    cert = np.full((E, X), np.nan)
    ra, rb, at = [], [], []
    for e in range(1 if only_pooled else E):
        for j in range(X):
            w, r = int(win[e, j]), int(ru[e, j])
            if w < 0:
                continue
            if tie[e, j]:
                lead_lo[e, j] = lead_hi[e, j] = 0.0
                cert[e, j] = 0.0
                continue
            if r < 0:
                continue
            a = lookup.get((episodes[e], xvals[j], methods[w]))
            b = lookup.get((episodes[e], xvals[j], methods[r]))
            if a is None or b is None:
                continue
            ra.append(a)
            rb.append(b)
            at.append((e, j))
    if at:
        lo, hi = intervals.difference(np.asarray(ra), np.asarray(rb))
        for (e, j), a, b in zip(at, lo, hi):
            lead_lo[e, j], lead_hi[e, j] = a, b
            cert[e, j] = float(a > 0)
    return lead_lo, lead_hi, cert


def _bounds(lookup, intervals, episodes, methods, xvals):
    """[episode, method, x] arrays of the utility intervals found in ``lookup``."""
    E, M, X = len(episodes), len(methods), len(xvals)
    lo = np.full((E, M, X), np.nan)
    hi = np.full((E, M, X), np.nan)
    if not lookup:
        return lo, hi
    ei = {e: i for i, e in enumerate(episodes)}
    mi = {m: i for i, m in enumerate(methods)}
    xi = {v: i for i, v in enumerate(xvals)}
    idx_lo = intervals.index.get_column("lo").to_numpy()
    idx_hi = intervals.index.get_column("hi").to_numpy()
    for (e, v, m), r in lookup.items():
        i, k, j = ei.get(e), mi.get(m), xi.get(v)
        if i is None or k is None or j is None:
            continue
        lo[i, k, j], hi[i, k, j] = idx_lo[r], idx_hi[r]
    return lo, hi


def _cell_subset(frame: pl.DataFrame, episodes, methods, xvals, win, ru) -> pl.DataFrame:
    """Per-corruption rows of each cell's winner and runner-up (what its certainty needs)."""
    keys: dict[str, list] = {"episode": [], "_v": [], "method": []}
    for e in range(1, win.shape[0]):
        for j in range(win.shape[1]):
            for k in (win[e, j], ru[e, j]):
                if k >= 0:
                    keys["episode"].append(episodes[e])
                    keys["_v"].append(xvals[j])
                    keys["method"].append(methods[int(k)])
    want = pl.DataFrame(keys, schema={"episode": pl.String, "_v": pl.Float64, "method": pl.String}).unique()
    f = frame.filter(pl.col("episode") != an.POOLED).with_columns(pl.col("value").cast(pl.Float64).round(9).alias("_v"))
    return f.join(want, on=["episode", "_v", "method"], how="semi").drop("_v")


# ----------------------------------------------------------------------------- switch points
def _holds(U: np.ndarray, j: int, tol: float = an.DEFAULT_TOL) -> np.ndarray:
    V = np.where(np.isfinite(U), U, -np.inf)
    return V[:, j] >= V.max(axis=1) - tol


def _switches(x: np.ndarray, U: np.ndarray, win: np.ndarray, refine: Callable[[list[float]], np.ndarray] | None):
    """Per grid index: (value below where the recommendation changes, the method winning
    there, value above, its winner); None where it holds to the end of the grid.

    The recommendation of a grid value is its winner j; going outward, the first grid value
    where j no longer has the highest utility (ties hold) bounds it, and the change is refined
    on :data:`REFINE_POINTS` values between the last grid value where j holds and that one, as
    ``advise`` refines its search. ``refine(values)`` returns the pooled utility matrix
    [values, methods] (None: grid resolution)."""
    X = len(x)
    runs = []
    start = 0
    for i in range(1, X + 1):
        if i == X or win[i] != win[start]:
            runs.append((start, i - 1))
            start = i
    todo: list[tuple[int, float, float]] = []  # (winner, last ok, first lost)
    found: dict[tuple[int, int, str], tuple[int, int]] = {}  # (run start, run end, side) -> (ok index, lost index)
    for a, b in runs:
        j = int(win[a])
        if j < 0:
            continue
        held = _holds(U, j)
        k = a - 1
        while k >= 0 and held[k]:
            k -= 1
        if k >= 0:
            found[(a, b, "down")] = (k + 1, k)
            todo.append((j, float(x[k + 1]), float(x[k])))
        k = b + 1
        while k < X and held[k]:
            k += 1
        if k < X:
            found[(a, b, "up")] = (k - 1, k)
            todo.append((j, float(x[k - 1]), float(x[k])))
    fine_vals = sorted({round(float(v), 9) for _, ok, lost in todo for v in _span(ok, lost, REFINE_POINTS)})
    fine_U = refine(fine_vals) if (refine is not None and fine_vals) else None
    fi = {v: i for i, v in enumerate(fine_vals)}

    def refined(j: int, ok: float, lost: float, lost_idx: int) -> tuple[float, int]:
        if fine_U is not None:
            vals = [round(float(v), 9) for v in _span(ok, lost, REFINE_POINTS)]
            rows = fine_U[[fi[v] for v in vals]]
            lost_mask = ~_holds(rows, j)
            hit = np.flatnonzero(lost_mask)
            if hit.size:
                r = rows[hit[0]]
                return vals[hit[0]], int(np.argmax(np.where(np.isfinite(r), r, -np.inf)))
        r = U[lost_idx]
        return lost, int(np.argmax(np.where(np.isfinite(r), r, -np.inf)))

    below_v = [None] * X
    below_m = [None] * X
    above_v = [None] * X
    above_m = [None] * X
    for a, b in runs:
        j = int(win[a])
        if j < 0:
            continue
        for side in ("down", "up"):
            hit = found.get((a, b, side))
            if hit is None:
                continue
            ok_i, lost_i = hit
            v, m = refined(j, float(x[ok_i]), float(x[lost_i]), lost_i)
            for i in range(a, b + 1):
                if side == "down":
                    below_v[i], below_m[i] = v, m
                else:
                    above_v[i], above_m[i] = v, m
    return below_v, below_m, above_v, above_m


# ----------------------------------------------------------------------------- one view
def _pooled_matrix(frame: pl.DataFrame, methods: list[str], xcol: str) -> tuple[np.ndarray, np.ndarray]:
    p = an.pool_seeds(frame.filter(pl.col("episode") == an.POOLED))
    vals = sorted({round(float(v), 9) for v in p.get_column(xcol).to_list()})
    vi = {v: i for i, v in enumerate(vals)}
    mi = {m: j for j, m in enumerate(methods)}
    U = np.full((len(vals), len(methods)), np.nan)
    for v, m, u in p.select(xcol, "method", "utility").iter_rows():
        if u is not None and m in mi:
            U[vi[round(float(v), 9)], mi[m]] = u
    return np.asarray(vals), U


def _view_1d(
    members, protocol, x, opts_for, keys: ShortKeys, methods, episodes, rows, boot, refine_ok: bool, memo: dict | None = None
) -> dict:
    """A one-parameter protocol over grid ``x``: every array the page reads (``methods``,
    ``episodes`` and ``rows`` in ``keys``' codes, as the view's rows are). ``memo``: the group's
    timing draws, shared by its views (:func:`~tempora_sim.uncertainty.timing_replicates.replicates_of`)."""
    param = P.get(protocol).param
    kw = {"rho": list(x)} if param == "rho" else {param: list(x)}
    result = run_sweep(members, opts_for(protocols=protocol, **kw))
    frame = keys.frame(result.frame)
    # the traces' measured timing variability joins every interval and certainty, as in report
    # and advise (common random numbers across methods keep the leads paired)
    timing = replicates_of(result, boot.timing_replicates, boot.seed, measures=INTERVAL_MEASURES, memo=memo)
    timing = timing.map(keys.frame) if timing is not None else None
    pooled = an.pool_seeds(frame)
    xkeys = [(round(float(v), 9),) for v in x]
    terms = [t[0] for t in P.get(protocol).page_terms]
    cube = _cube(pooled, episodes, methods, xkeys, ["utility", *terms], ["value"])
    U = cube["utility"]
    win, ru, tie = _winners(U)
    xvals = [k[0] for k in xkeys]
    # pooled cells: corruptions (and seeds) resampled; every method
    pooled_iv = an.utility_intervals(frame.filter(pl.col("episode") != an.POOLED), None, boot, timing=timing)
    look = _row_lookup(pooled_iv)
    lo, hi = _bounds(look, pooled_iv, episodes, methods, xvals)
    lead_lo, lead_hi, cert = _leads(pooled_iv, look, episodes, methods, xvals, win, ru, tie, only_pooled=True)
    if rows is not None:
        # per corruption: batches resampled (report's rule), for each cell's winner and runner-up
        sub = _cell_subset(frame, episodes, methods, xvals, win, ru)
        cell_iv = an.utility_intervals(sub, an.align_group_dtypes(rows, frame), boot, pooled=False, timing=timing)
        cell_look = {k: r for k, r in _row_lookup(cell_iv).items() if k[0] != an.POOLED}
        clo, chi = _bounds(cell_look, cell_iv, episodes, methods, xvals)
        lo[1:], hi[1:] = clo[1:], chi[1:]
        l2, h2, c2 = _leads(cell_iv, cell_look, episodes, methods, xvals, win, ru, tie, only_pooled=False)
        lead_lo[1:], lead_hi[1:], cert[1:] = l2[1:], h2[1:], c2[1:]

    def refine(values):
        f = keys.frame(run_sweep(members, opts_for(protocols=protocol, **({"rho": values} if param == "rho" else {param: values}))).frame)
        return _pooled_matrix(f, methods, "value")[1]

    sw = _switches(np.asarray(x), U[0].T, win[0], refine if refine_ok else None)
    return _pack(protocol, [param], [x], U, lo, hi, cube, terms, win, ru, tie, lead_lo, lead_hi, cert) | {
        "timing": timing_replicates.describe(timing, boot.timing_replicates),
        "switch": {"below": sw[0], "below_m": sw[1], "above": sw[2], "above_m": sw[3], "lo": float(x[0]), "hi": float(x[-1])},
    }


def _view_2d(members, protocol, x, y, opts_for, keys: ShortKeys, methods, episodes, boot, memo: dict | None = None) -> dict:
    """A combined protocol over ``x`` (ρ) × ``y`` (T or B), cells flattened x-major (``methods``
    and ``episodes`` in ``keys``' codes; ``memo`` as :func:`_view_1d`'s)."""
    p2 = P.get(protocol).param2
    result = run_sweep(members, opts_for(protocols=protocol, rho=list(x), **{p2: list(y)}))
    frame = keys.frame(result.frame)
    pooled = an.pool_seeds(frame)
    xkeys = [(round(float(a), 9), round(float(b), 9)) for a in x for b in y]
    terms = [t[0] for t in P.get(protocol).page_terms]
    cube = _cube(pooled, episodes, methods, xkeys, ["utility", *terms], ["value", "value2"])
    U = cube["utility"]
    # the interval machinery reads one-parameter scenarios: each (ρ, second) cell becomes one
    # value, as advise does for a combined constraint (its timing replicates relabelled alike)
    lookup = pl.DataFrame(
        {"_a": [k[0] for k in xkeys], "_b": [k[1] for k in xkeys], "_cell": [float(i) for i in range(len(xkeys))]},
        schema={"_a": pl.Float64, "_b": pl.Float64, "_cell": pl.Float64},
    )

    def to_cells(f: pl.DataFrame) -> pl.DataFrame:
        return (
            f.with_columns(pl.col("value").cast(pl.Float64).round(9).alias("_a"), pl.col("value2").cast(pl.Float64).round(9).alias("_b"))
            .join(lookup, on=["_a", "_b"], how="inner")
            .with_columns(pl.col("_cell").alias("value"), pl.lit(P.with_grids(("rho",))).alias("protocol"))
            .drop([c for c in ("param2", "value2", "_a", "_b", "_cell") if c in f.columns or c.startswith("_")])
        )

    timing = replicates_of(result, boot.timing_replicates, boot.seed, measures=INTERVAL_MEASURES, memo=memo)
    timing = timing.map(lambda f: to_cells(keys.frame(f))) if timing is not None else None
    pooled_iv = an.utility_intervals(to_cells(frame).filter(pl.col("episode") != an.POOLED), None, boot, timing=timing)
    look = _row_lookup(pooled_iv)
    cells = [float(i) for i in range(len(xkeys))]
    lo, hi = _bounds(look, pooled_iv, episodes, methods, cells)
    win, ru, tie = _winners(U)
    lead_lo, lead_hi, cert = _leads(pooled_iv, look, episodes, methods, cells, win, ru, tie, only_pooled=True)
    return _pack(protocol, ["rho", p2], [x, y], U, lo, hi, cube, terms, win, ru, tie, lead_lo, lead_hi, cert) | {
        "timing": timing_replicates.describe(timing, boot.timing_replicates),
        "switches": _switches_2d(np.asarray(x), np.asarray(y), U[0], win[0]),
    }


def _switches_2d(x: np.ndarray, y: np.ndarray, U0: np.ndarray, win0: np.ndarray) -> list[dict]:
    """Per cell of a combined grid: where the pooled recommendation changes when ρ moves with
    the second parameter held, and when the second moves with ρ held (grid resolution)."""
    nx, ny = len(x), len(y)
    U = U0.reshape(U0.shape[0], nx, ny)  # [method, ρ, second]
    W = win0.reshape(nx, ny)
    out = []
    for axis, n, vals in ((0, nx, x), (1, ny, y)):
        cells = nx * ny
        sw = {"below": [None] * cells, "below_m": [None] * cells, "above": [None] * cells, "above_m": [None] * cells}
        for k in range(ny if axis == 0 else nx):
            line_u = U[:, :, k].T if axis == 0 else U[:, k, :].T  # [values, methods]
            line_w = W[:, k] if axis == 0 else W[k, :]
            bv, bm, av, am = _switches(vals, line_u, line_w, None)
            for i in range(n):
                c = i * ny + k if axis == 0 else k * ny + i
                sw["below"][c], sw["below_m"][c], sw["above"][c], sw["above_m"][c] = bv[i], bm[i], av[i], am[i]
        sw["lo"], sw["hi"] = float(vals[0]), float(vals[-1])
        out.append(sw)
    return out


def _lead(U: np.ndarray, win: np.ndarray, ru: np.ndarray) -> np.ndarray:
    """Winner's utility minus the runner-up's per x ([methods, x] in; NaN without a runner-up)."""
    cols = np.arange(U.shape[1])
    out = U[np.maximum(win, 0), cols] - U[np.maximum(ru, 0), cols]
    return np.where((win >= 0) & (ru >= 0), out, np.nan)


def _pack(protocol, params, axes, U, lo, hi, cube, terms, win, ru, tie, lead_lo, lead_hi, cert) -> dict:
    E = U.shape[0]
    kinds = {t[0]: t[2] for t in P.get(protocol).page_terms}
    return {
        "protocol": protocol,
        "params": params,
        "axes": [_x(a) for a in axes],
        "u": _q(U),
        "lo": _q(lo),
        "hi": _q(hi),
        "terms": {t: _q(cube[t], kinds[t]) for t in terms},
        "win": win.tolist(),
        "ru": ru.tolist(),
        "tie": tie.astype(int).tolist(),
        "lead": _q(np.stack([_lead(U[e], win[e], ru[e]) for e in range(E)])),
        "lead_lo": _q(lead_lo),
        "lead_hi": _q(lead_hi),
        "cert": _q(cert, "count"),
    }


# ----------------------------------------------------------------------------- build
def _progress():
    console = Console(stderr=True)
    if not console.is_terminal:
        return None  # a log or a pipe: no bar (errors stay one line)
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def build_data(
    traceset,
    options: SweepOptions,
    arrivals: Sequence[str] = ("periodic",),
    bootstrap: BootstrapOptions | None = None,
    source: str = "",
    progress: bool = True,
) -> dict:
    """Everything the page shows, for ``traceset`` (a loaded :class:`~tempora_sim.sweeps.traces.TraceSet`).

    ``options`` are the sweep's (grids given with it join the dense grids; ``protocols``
    chooses the views; ``arrivals`` is replaced by each entry of ``arrivals`` in turn for the
    discrete and combined protocols)."""
    boot = bootstrap or BootstrapOptions()
    arrivals = list(dict.fromkeys(arrivals)) or ["periodic"]
    resolved = [SweepOptions.build(options, arrivals=a).resolve() for a in arrivals]  # every spec checked first
    ropts = resolved[0]
    check_grid_sizes(ropts)
    protocols = [p for p in ropts.protocols]
    lambdas = group_lambdas(traceset, ropts.lambda_ms, ropts.lambda_rule)
    by_group: dict[str, list] = {}
    for t in traceset.traces:
        by_group.setdefault(t.group.label(seed=False), []).append(t)
    t0 = time.perf_counter()
    groups_out = []
    one_d = [p for p in protocols if p in P.temporal()]
    two_d = [p for p in protocols if p in P.combined()]
    if not one_d and not two_d:
        raise ExploreError("--protocol: the page moves a temporal constraint; give discrete, continuous, amortised or a combined protocol")
    arrival_bound = {p for p in one_d + two_d if P.get(p).arrival_bound}
    steps = len(by_group) * (1 + sum(len(arrivals) if p in arrival_bound else 1 for p in one_d + two_d))
    bar = _progress() if progress else None
    task = bar.add_task("explore: replaying", total=steps) if bar else None
    if bar:
        bar.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the sweep below states the group's warnings once
            for label, members in by_group.items():
                ts = TraceSet(members)
                lam = sorted({lambdas[t.group] for t in members})
                gg = group_grids(members, max(lam), ropts)
                keys = ShortKeys(members)
                rows = keys.frame(an.trace_rows(members))
                g = _group_meta(members, label, lam)
                off = _offline(ts, options, boot)
                methods = an.method_order(off["frame"]) if off else sorted({t.method for t in members})
                episodes = [an.POOLED] + an.episode_order(sorted({e for t in members for e in t.episodes}))
                g["methods"] = methods
                g["episodes"] = episodes
                g["offline"] = _offline_pack(off, methods, episodes) if off else None
                coded = (keys.of("method", methods), keys.of("episode", episodes))
                if bar:
                    bar.advance(task)
                views: dict[str, dict] = {}
                memo: dict = {}  # the group's timing models and draws, replayed on every view's grid
                for p in one_d + two_d:
                    for ai, arr in enumerate(arrivals if p in arrival_bound else arrivals[:1]):
                        base = SweepOptions.build(options, arrivals=arr)

                        def opts_for(_base=base, **changes):
                            return SweepOptions.build(_base, **changes)

                        key = f"{p}|{arr}" if p in arrival_bound else p
                        if bar:
                            bar.update(task, description=f"explore: {_short(label)} · {p}" + (f" · {arr}" if p in arrival_bound else ""))
                        if p in one_d:
                            x = gg.dense(P.get(p).param)
                            # per-corruption intervals resample batches (report's rule): periodic arrivals only
                            cell_rows = rows if (not P.get(p).arrival_bound or resolved[ai].arrivals.periodic) else None
                            views[key] = _view_1d(ts, p, x, opts_for, keys, *coded, cell_rows, boot, refine_ok=True, memo=memo)
                        else:
                            y = gg.dense_2d(P.get(p).param2)
                            views[key] = _view_2d(ts, p, gg.rho2, y, opts_for, keys, *coded, boot, memo=memo)
                        views[key]["arrivals"] = arr if p in arrival_bound else None
                        if bar:
                            bar.advance(task)
                g["views"] = views
                groups_out.append(g)
    finally:
        if bar:
            bar.stop()
    all_methods = sorted({m for g in groups_out for m in g["methods"]})
    return {
        "version": DATA_VERSION,
        "tool": f"tempora-sim {version()}",
        "source": source,
        "scale": SCALE,
        "ci_level": boot.level,
        "resamples": boot.resamples,
        "protocols": [p for p in (P.reference(), *one_d, *two_d) if p == P.reference() or p in protocols],
        "arrivals": arrivals,
        "terms": {p: [[c, name, kind] for c, name, kind in P.get(p).page_terms] for p in P.names() if P.get(p).page_terms},
        "colours": {m: method_colour(m) for m in all_methods},
        "groups": groups_out,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def check_grid_sizes(ropts) -> None:
    """Refuse given grids larger than a page holds (:data:`MAX_GIVEN` values each)."""
    for grid, given in ((grids.RHO, True), (grids.T, ropts.explicit_T), (grids.B, True)):
        values = ropts.grid(grid)
        if given and len(values) > MAX_GIVEN:
            raise ExploreError(
                f"{grid.flag}: {len(values):,} values; the page adds at most {MAX_GIVEN:,} given values to its own grid of "
                f"{POINTS} (use tempora-sim sweep for larger grids)"
            )


def _short(label: str) -> str:
    return label if len(label) <= 40 else label[:37] + "…"


def _group_meta(members, label: str, lam: list[float]) -> dict:
    meta = members[0].meta
    return {
        "label": label,
        "title": " · ".join(str(meta.get(k)) for k in ("dataset", "model", "device") if meta.get(k) is not None)
        + f" · bs {meta.get('batch_size')} · {meta.get('stream')}",
        "seeds": sorted({int(t.meta["seed"]) for t in members}),
        "lambda_ms": [float(v) for v in lam],
    }


def _offline(ts, options, boot) -> dict | None:
    frame = run_sweep(ts, SweepOptions.build(options, protocols=P.reference(), arrivals="periodic", arrival_seeds=1)).frame
    if not frame.height:
        return None
    return {"frame": frame, "pooled": an.pool_seeds(frame)}


def _offline_pack(off, methods, episodes) -> dict:
    p = off["pooled"]
    U = _cube(p.with_columns(pl.lit(0.0).alias("_v")), episodes, methods, [(0.0,)], ["utility"], ["_v"])["utility"][:, :, 0]
    return {"u": _q(U)}
