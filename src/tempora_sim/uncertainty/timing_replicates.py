"""Timing replicates of a sweep: the same grid replayed under the traces' measured variability.

:mod:`tempora_sim.sweeps.variability` defines the model (which the replay uses for the idle
effect); this module draws a replicate's factors from it, replays them through
:func:`tempora_sim.sweeps.replay.replay_frames` and keeps the replicates' rows beside the
sweep's own (:class:`TimingReplicates`), matched once.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import polars as pl

from tempora_sim.protocols.base import MEASURES
from tempora_sim.sweeps.replay import replay_frames, run_sweep
from tempora_sim.sweeps.utility_table import pooling_inputs
from tempora_sim.sweeps.variability import (
    DEFAULT_REPLICATES,
    MEASURED,
    UNKNOWN,
    TimingModel,
    idle_curves,
    timing_models,
)


def replicates_of(
    result,
    count: int = DEFAULT_REPLICATES,
    seed: int = 0,
    models: list | None = None,
    measures: Sequence[str] | None = None,
    memo: dict | None = None,
) -> TimingReplicates | None:
    """Replay a sweep (:class:`tempora_sim.sweeps.replay.SweepResult`) again under ``count`` timing
    replicates drawn from its traces' measured variability. ``base`` is the sweep's own frame.
    None when the sweep kept no series; no replicates when ``count`` is 0 or no trace measured
    its variability (the status then says ``unknown``).

    ``measures``: the measure columns the answers will read of the replicates (``("utility",)``
    for the utility's intervals). Each replicate is then a light frame of those columns (and
    of what pooling them over seeds reads), in the base's row order, without the names that
    identify a row: building the names of every row of every replicate cost more than the
    replay. None: every replicate is a full frame of the sweep's columns.

    ``memo`` (a dict the caller keeps): the models and the replicates' speed factors of a
    series, drawn once for every sweep of the same traces on other grids (the explore page's
    views of one group); they depend on the traces, their episodes and the seed only."""
    if result is None or getattr(result, "series", None) is None:
        return None
    series, opt = result.series, result.resolved
    drawn: dict[int, np.ndarray] = {}
    if models is None:  # else one per trace of the series (e.g. measured on the uncut trace)
        models, drawn = _drawn(memo, series, seed) if memo is not None else (timing_models(series.traces), drawn)
    # a predicted trace whose profile measured no variability has a model for its transfer error only
    status = {trace_label(t): (MEASURED if m is not None and m.events > 0 else UNKNOWN) for t, m in zip(series.traces, models)}
    if count <= 0 or all(m is None for m in models):
        return TimingReplicates(result.frame, [], status)
    curves = None if opt.no_idle_effect else idle_curves(series, models)
    light = None if measures is None else pooling_inputs(measures)
    reps = []
    for r in range(count):
        if r not in drawn:
            drawn[r] = replicate_factors(series, models, r, seed)
        factors = drawn[r]
        frames = replay_frames(scaled(series, factors), opt, None, idle_curves=curves if curves is not None else _NO_CURVES, measures=light)
        reps.append(pl.concat(frames, how="vertical"))
    drift = max((m.drift[0] for m in models if m is not None and m.drift is not None), default=0.0)
    prediction = max((m.prediction[0] for m in models if m is not None and m.prediction is not None), default=0.0)
    return TimingReplicates(result.frame, reps, status, drift, prediction, light)


def _drawn(memo: dict, series, seed: int) -> tuple[list, dict[int, np.ndarray]]:
    """The models of ``series``' traces and its replicates' factors so far, kept in ``memo``
    (which holds the traces too, so that their ids name them while it lives)."""
    key = (seed, tuple(map(id, series.traces)), tuple(series.episode), series.offsets.tobytes())
    if key not in memo:
        memo[key] = (list(series.traces), timing_models(series.traces), {})
    _, models, drawn = memo[key]
    return models, drawn


#: What the utility's intervals read of a timing replicate (``replicates_of``'s ``measures``).
INTERVAL_MEASURES = ("utility",)

#: The row index a light replicate set's :meth:`TimingReplicates.map` follows.
_ROW = "_replicate_row"

#: ``replay_frames``'s idle_curves value meaning "no idle effect" (None means "from the traces").
_NO_CURVES = (np.zeros(1, np.int64), np.zeros(0), np.zeros(0))


def replicates(source, options=None, count: int = DEFAULT_REPLICATES, seed: int = 0, /, **changes) -> TimingReplicates:
    """Sweep ``source`` (as :func:`tempora_sim.sweep`) and replay it under ``count`` timing replicates."""
    return replicates_of(run_sweep(source, options, **changes), count, seed)


# ----------------------------------------------------------------------------- draws
def _pick(sorted_values: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The ⌊u·K⌋-th smallest of K values (u in [0, 1)): the same u, the same rank, any method."""
    k = sorted_values.size
    return sorted_values[np.minimum((u * k).astype(np.int64), k - 1)]


def _stream(seed: int, replicate: int, label: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(replicate), zlib.crc32(label.encode("utf-8"))])


def replicate_factors(series, models: list[TimingModel | None], replicate: int, seed: int) -> np.ndarray:
    """Per-batch speed factor of every batch of ``series`` in timing replicate ``replicate``.

    ``models[t]`` belongs to ``series.traces[t]`` (None: factor 1). Uniforms come from streams
    keyed by (seed, replicate, group) and (seed, replicate, group, episode), so every method of
    a group — whatever its position in the series — gets the same draws. Each stream is drawn
    once per call and each trace's pass shift computed once: the methods of a group reuse them."""
    out = np.ones(series.a.shape[0], np.float64)
    u_group: dict[str, float] = {}
    w_trace: dict[int, float] = {}
    shift_of: dict[int, float] = {}
    draws: dict[tuple[str, object, int], np.ndarray] = {}
    labels: dict[int, str] = {}
    for s_idx, ep in enumerate(series.episode):
        t = int(series.trace_of[s_idx])
        model = models[t]
        if model is None:
            continue
        if t not in labels:
            labels[t] = series.traces[t].group.label()
        label = labels[t]
        if t not in shift_of:
            if label not in u_group:
                u_group[label] = float(_stream(seed, replicate, label).random())
            shift = model.shift(u_group[label])
            if model.prediction is not None:  # one draw per predicted trace, all its episodes alike
                if t not in w_trace:
                    w_trace[t] = float(_stream(seed, replicate, f"{label}\x00predicted\x00{series.traces[t].method}").random())
                shift += model.prediction_shift(w_trace[t])
            shift_of[t] = shift
        lo, hi = int(series.offsets[s_idx]), int(series.offsets[s_idx + 1])
        key = (label, ep, hi - lo)
        if key not in draws:
            draws[key] = _stream(seed, replicate, f"{label}\x00{ep}").random(hi - lo)
        out[lo:hi] = np.exp(shift_of[t] + _pick(model.residuals, draws[key]))
    return out


def scaled(series, factors: np.ndarray):
    """A copy of ``series`` whose e, ℓ and δ are multiplied by ``factors``."""
    return dataclasses.replace(series, e=series.e * factors, l=series.l * factors, delta=series.delta * factors)


# ----------------------------------------------------------------------------- replicates
@dataclass
class TimingReplicates:
    """The sweep's rows replayed with the trace's own times (``base``, the point estimates) and
    under ``R`` timing replicates (``reps``), in the same row order; ``status`` per trace
    label: ``measured`` or ``unknown``. With ``measures``, the replicates are light frames
    holding those columns only; the base's columns name their rows."""

    base: pl.DataFrame
    reps: list[pl.DataFrame]
    status: dict[str, str] = field(default_factory=dict)
    #: the largest σ_d of the machine's drift between tracing times in the models (0: none measured)
    drift: float = 0.0
    #: the largest σ_p of a predicted trace's transfer error (0: no predicted trace)
    prediction: float = 0.0
    #: the measure columns light replicates hold (None: full frames, every column of the sweep)
    measures: tuple[str, ...] | None = None
    #: the frames after a ``pool`` function, by that function (every interval of a view pools alike)
    _pooled: dict = field(default_factory=dict, repr=False, compare=False)
    #: per (pool, keys): each replicate's row of every base row ([base rows, R], -1: none)
    _matched: dict = field(default_factory=dict, repr=False, compare=False)
    #: per (pool, keys, column): the base column and the replicates' aligned to it ([base rows, R])
    _aligned: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def count(self) -> int:
        return len(self.reps)

    def map(self, fn: Callable[[pl.DataFrame], pl.DataFrame]) -> "TimingReplicates":
        """The same transformation (a relabelling, a filter, a reordering of rows) applied to
        every frame. Light replicates follow the base: ``fn`` runs once, on the base with a row
        index column beside its own (which ``fn`` must keep), and each replicate keeps the rows
        it names, in its order. ``fn`` may change the names of the rows, not their measures."""
        if self.measures is None:
            return TimingReplicates(fn(self.base), [fn(r) for r in self.reps], dict(self.status), self.drift, self.prediction)
        mapped = fn(self.base.with_row_index(_ROW))
        if _ROW not in mapped.columns:
            raise ValueError(f"TimingReplicates.map: the relabelling dropped the row index '{_ROW}' the light replicates follow")
        rows = mapped.get_column(_ROW)
        reps = [r.select(pl.all().gather(rows)) for r in self.reps]
        return TimingReplicates(mapped.drop(_ROW), reps, dict(self.status), self.drift, self.prediction, self.measures)

    def _full(self) -> list[pl.DataFrame]:
        """[base, *reps] as frames of the sweep's columns: a light replicate's measures beside
        the base's names (the measures it does not hold left out)."""
        if self.measures is None:
            return [self.base, *self.reps]
        names = self.base.drop([c for c in MEASURES if c in self.base.columns])
        return [self.base, *(names.with_columns(r.get_columns()) for r in self.reps)]

    def _frames(self, pool: Callable | None) -> list[pl.DataFrame]:
        """[base, *reps], each after ``pool`` (pooling over seeds; computed once per function).
        Frames of one seed are returned as they are: pooling one seed's rows changes none of
        their values, and a dense view's 21 frames took most of its time to pool."""
        frames = [self.base, *self.reps]
        if pool is None or all("seed" not in f.columns or f.get_column("seed").n_unique() <= 1 for f in frames):
            return frames
        if pool not in self._pooled:
            self._pooled[pool] = [pool(f) for f in self._full()]
        return self._pooled[pool]

    def _replicate_rows(self, pool: Callable | None, keys: tuple[str, ...]) -> np.ndarray:
        """[base rows, R]: the row of each replicate holding a base row's keys (its first such
        row; -1 where it has none), found once per (pool, keys), for every base row that holds
        its keys first (the rows :meth:`shifts_of` reads). A replicate whose keys come in the
        base's order (the replay writes them so) is read by position; the others are matched
        together in one join."""
        if (pool, keys) in self._matched:
            return self._matched[(pool, keys)]
        base, *reps = self._frames(pool)
        base_keys = base.select(keys)
        pos = np.full((base.height, len(reps)), -1, np.int64)
        own = np.arange(base.height)  # the base rows that index rows match are their keys' first
        others = []
        for r, f in enumerate(reps):
            if not set(keys) <= set(f.columns):  # a light replicate: the base's rows, in its order
                pos[:, r] = own
            elif f.height == base.height and f.select(keys).equals(base_keys):
                pos[:, r] = own
            else:
                others.append(f.select(keys).with_row_index("_j").with_columns(pl.lit(r, pl.Int64).alias("_r")))
        if others:
            cast = _value_cast(keys)
            cands = pl.concat(others, how="vertical_relaxed").with_columns(cast).unique(subset=[*keys, "_r"], keep="first")
            look = base_keys.with_columns(cast).with_row_index("_i")
            hit = look.join(cands, on=list(keys), how="inner", nulls_equal=True)
            i, r, j = (hit.get_column(c).cast(pl.Int64).to_numpy() for c in ("_i", "_r", "_j"))
            pos[i, r] = j
        self._matched[(pool, keys)] = pos
        return pos

    def _columns(self, pool: Callable | None, keys: tuple[str, ...], column: str) -> tuple[np.ndarray, np.ndarray]:
        """``column`` of the base ([base rows]) and of every replicate at the base's rows
        ([base rows, R]); NaN where a frame lacks the column, the row or the value."""
        if (pool, keys, column) in self._aligned:
            return self._aligned[(pool, keys, column)]
        if self.measures is not None and column not in self.measures:
            raise ValueError(f"timing replicates replayed {list(self.measures)} only, not '{column}'")
        base, *reps = self._frames(pool)
        pos = self._replicate_rows(pool, keys)
        mat = np.full(pos.shape, np.nan)
        for r, f in enumerate(reps):
            if column in f.columns and f.height:
                col = _floats(f, column)
                mat[:, r] = np.where(pos[:, r] >= 0, col[np.maximum(pos[:, r], 0)], np.nan)
        here = _floats(base, column) if column in base.columns else np.full(base.height, np.nan)
        self._aligned[(pool, keys, column)] = (here, mat)
        return here, mat

    def shifts(self, index: pl.DataFrame, keys: Sequence[str], column: str = "utility", pool: Callable | None = None) -> np.ndarray:
        """[index.height, R]: ``column`` of each replicate minus the base value, for the rows of
        ``index`` (matched on ``keys``; 0 where a row has no match or a value is missing).
        ``pool`` (pooling over seeds) is applied to every frame of several seeds first."""
        return self.shifts_of(index, keys, [column], pool)[column]

    def shifts_of(
        self, index: pl.DataFrame, keys: Sequence[str], columns: Sequence[str], pool: Callable | None = None
    ) -> dict[str, np.ndarray]:
        """:meth:`shifts` of several columns at once, as one array operation per column: the
        rows of ``index`` are matched to the base's rows (one join), the replicates' rows to the
        base's once per (pool, keys), and every replicate's column is read into one
        [base rows, R] matrix once per (pool, keys, column)."""
        out = {c: np.zeros((index.height, self.count)) for c in columns}
        if not self.count or not index.height:
            return out
        keys = tuple(keys)
        base = self._frames(pool)[0]
        cast = _value_cast(keys)
        look = index.select(keys).with_columns(cast).with_row_index("_i")
        rows = base.select(keys).with_columns(cast).with_row_index("_j").unique(subset=list(keys), keep="first", maintain_order=True)
        j = look.join(rows, on=list(keys), how="left", nulls_equal=True).sort("_i").get_column("_j")
        at = j.fill_null(-1).cast(pl.Int64).to_numpy()
        found = at >= 0
        safe = np.maximum(at, 0)
        for c in columns:
            here, mat = self._columns(pool, keys, c)
            if not here.size:
                continue
            with np.errstate(invalid="ignore"):
                diff = mat[safe] - here[safe][:, None]
            out[c] = np.where(found[:, None] & np.isfinite(diff), diff, 0.0)
        return out


def _value_cast(keys: Sequence[str]) -> list[pl.Expr]:
    """``value`` compared as a float (a grid value may be read back as an integer)."""
    return [pl.col("value").cast(pl.Float64)] if "value" in keys else []


def _floats(frame: pl.DataFrame, column: str) -> np.ndarray:
    return frame.get_column(column).cast(pl.Float64).fill_null(np.nan).to_numpy()


def trace_label(trace) -> str:
    return f"{trace.group.label()} · {trace.method}"


def describe(timing: TimingReplicates | None, count: int) -> str:
    """What the intervals include about time, in one sentence."""
    if timing is None:
        return "timing uncertainty: unknown (results read without their traces): intervals cover batches and episodes only"
    measured = [k for k, v in timing.status.items() if v == MEASURED]
    unknown = [k for k, v in timing.status.items() if v == UNKNOWN]
    if not measured and timing.prediction <= 0:
        return "timing uncertainty: unknown (no trace measured its timing variability): intervals are conditional on the traced times"
    if count <= 0:
        return "timing uncertainty: not included (--timing-replicates 0): intervals are conditional on the traced times"
    text = f"timing uncertainty: included ({timing.count} timing replicates from the variability measured on the device"
    if timing.drift > 0:
        text += f", and the machine's drift between the traces' speed probes, σ up to {timing.drift:.1%}"
    if timing.prediction > 0:
        text += f", and the transfer error of the predicted traces' times, σ up to {timing.prediction:.1%}"
    if unknown:
        text += f"; unknown for {len(unknown)} of {len(timing.status)} traces, replayed at their traced times"
    return text + ")"
