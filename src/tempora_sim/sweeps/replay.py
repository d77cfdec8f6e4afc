"""The sweep: replay every trace under every requested ρ / T / B value (docs/design/design.md §4, §6).

``sweep(...)`` is the notebook API (a polars DataFrame with the docs/design/design.md §6 columns);
``run_sweep(...)`` also returns timings, warnings and λ per group, which the CLI prints.

Aggregation and meaning of the columns, per protocol (fractions in [0, 1], times in ms):

* per-episode rows use per-batch accuracies ``a_i = correct_i / n_i``; ``episode="__all__"``
  rows pool the batches of all episodes of a trace (with equal N per episode this is the
  mean over episodes, which is what the paper's "aggregated across 15 corruptions" tables
  report). Frozen accuracy is sample-weighted over the frozen rows of the checkpoint
  (Σ correct / Σ n) and pooled across episodes weighted by frozen batches (N − m).
* discrete: ``served`` = |Q| (pooled: total), ``alpha`` = |Q|/N, the fraction of batches served
  *by the adapting pipeline*; ``served_acc`` = mean a over served events; ``utility`` = Σ of
  all N batch scores / N. With ``skipped='null'`` (default) utility = alpha · served_acc;
  with ``skipped='random'`` or ``fallback`` skipped batches add 1/C or the fallback
  accuracy, so utility ≥ alpha · served_acc while alpha and served_acc keep their meaning.
* continuous: ``acc`` = ā, ``kappa`` = κ̄, ``cov`` = population Cov(a, κ); utility = ā·κ̄ + cov.
* amortised: ``m`` (pooled: mean m per episode, as in the paper's Table 14), ``beta`` = m/N,
  ``acc_adapt`` = mean a over the first m batches (null if m = 0), ``acc_frozen`` (null if
  m = N), ``frozen_gap`` = m − m* when the checkpoint used is m* < m (pooled: the largest).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from tempora_schema import GroupKey
from tempora_sim import protocols as P
from tempora_sim.engine.grids import T as T_GRID
from tempora_sim.errors import GridError, ProtocolError, SimWarning  # noqa: F401  (GridError, SimWarning re-exported)
from tempora_sim.protocols import BASE_COLUMNS, COLUMNS, POOLED, SCENARIO_COLUMNS  # noqa: F401  (re-exported)
from tempora_sim.protocols.base import warm_general_kernel, warm_inputs
from tempora_sim.sweeps import variability
from tempora_sim.sweeps.options import BUDGET_RULES, ENGINES, SKIPPED_MODES, SYNC_MODES, ResolvedOptions, SweepOptions  # noqa: F401
from tempora_sim.sweeps.scenarios import replay_scenarios, scenario_frame
from tempora_sim.sweeps.traces import Trace, TraceSet, group_lambdas, group_warnings, load_traces


@dataclass
class SweepStats:
    evaluations: int = 0  # per-episode (trace, episode, protocol, value) replays
    batch_events: int = 0  # Σ N over those evaluations
    kernel_s: float = 0.0  # time inside the replay kernels (or the oracle's loops)
    jit_s: float = 0.0  # first-use JIT compile / cache load in this process
    total_s: float = 0.0

    def line(self) -> str:
        jit = f" (+{self.jit_s * 1e3:.0f} ms JIT compile/cache load on first use)" if self.jit_s else ""
        return (
            f"{self.evaluations:,} evaluations, {self.batch_events:,} batch events replayed; "
            f"kernels {self.kernel_s * 1e3:.1f} ms{jit}; sweep {self.total_s * 1e3:.0f} ms"
        )


@dataclass
class SweepResult:
    frame: pl.DataFrame
    stats: SweepStats
    lambdas: dict[GroupKey, float]
    warnings: list[str] = field(default_factory=list)
    grids: dict[str, tuple[float, ...]] = field(default_factory=dict)
    #: group label (as the tables print it) -> method -> mean δ (ms), to order table rows
    latency: dict[str, dict[str, float]] = field(default_factory=dict)
    #: what was replayed (timing replicates replay it again: tempora_sim.sweeps.variability)
    series: "Series | None" = field(default=None, repr=False)
    resolved: object = field(default=None, repr=False)


# --------------------------------------------------------------------------------------
# Flattening traces into series (one series = one episode of one trace)
# --------------------------------------------------------------------------------------


@dataclass
class Series:
    """Concatenated per-batch arrays of every episode of every trace, plus bookkeeping."""

    traces: list[Trace]
    trace_of: np.ndarray  # series -> trace index
    episode: list[str]
    offsets: np.ndarray  # int64 [S+1]
    a: np.ndarray
    e: np.ndarray
    l: np.ndarray
    delta: np.ndarray
    lam: np.ndarray  # per series
    skip_value: np.ndarray  # 1/C per series
    frozen_from_adapt: np.ndarray  # bool per series: trace never updates and has no frozen rows
    has_frozen: np.ndarray  # bool per series
    # frozen tables: series -> checkpoints -> rows
    ck_offsets: np.ndarray
    ck_values: np.ndarray
    row_offsets: np.ndarray
    f_steps: np.ndarray
    f_suf_correct: np.ndarray
    f_suf_n: np.ndarray
    #: how λ was taken from the standard traces (recorded in every output row)
    lambda_rule: str = "paper"

    @property
    def n(self) -> np.ndarray:
        return np.diff(self.offsets)


def build_series(traces: Sequence[Trace], lambdas: dict[GroupKey, float], lambda_rule: str = "paper") -> Series:
    parts = [t.replay_arrays for t in traces]

    def cat(key, dtype):
        chunks = [getattr(p, key) for p in parts]
        return np.concatenate(chunks).astype(dtype, copy=False) if chunks else np.zeros(0, dtype)

    per_series = [len(p.episodes) for p in parts]
    lengths = cat("lengths", np.int64)
    ck_counts = cat("ck_counts", np.int64)
    row_counts = cat("row_counts", np.int64)
    return Series(
        traces=list(traces),
        trace_of=np.repeat(np.arange(len(traces), dtype=np.int64), per_series),
        episode=[ep for p in parts for ep in p.episodes],
        offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        a=cat("a", np.float64),
        e=cat("e", np.float64),
        l=cat("l", np.float64),
        delta=cat("delta", np.float64),
        lam=np.repeat(np.array([lambdas[t.group] for t in traces], np.float64), per_series),
        skip_value=np.repeat(np.array([1.0 / t.num_classes for t in traces], np.float64), per_series),
        frozen_from_adapt=np.repeat(np.array([p.from_adapt for p in parts], np.bool_), per_series),
        has_frozen=cat("has_frozen", np.bool_),
        ck_offsets=np.concatenate(([0], np.cumsum(ck_counts))).astype(np.int64),
        ck_values=cat("ck_values", np.int64),
        row_offsets=np.concatenate(([0], np.cumsum(row_counts))).astype(np.int64),
        f_steps=cat("f_steps", np.int64),
        f_suf_correct=cat("f_suf_correct", np.float64),
        f_suf_n=cat("f_suf_n", np.float64),
        lambda_rule=lambda_rule,
    )


# --------------------------------------------------------------------------------------
# Engines: Numba kernels, or the plain-Python oracle (for tests and the benchmark)
# --------------------------------------------------------------------------------------

_WARM: set[str] = set()


@contextlib.contextmanager
def _numba_without_scipy():
    """Numba's first dispatch imports ``numba.np.arraymath``, which imports
    ``scipy.linalg.cython_blas`` only to learn whether its ``np.convolve``/``np.correlate``
    may call BLAS: 0.17 s of a 1 s sweep (SciPy's array-API layer imports ``numpy.f2py``). No
    replay kernel calls BLAS. In the ``tempora-sim`` program, where nothing but the replay
    runs Numba (:data:`tempora_sim.process.IN_PROGRAM`), SciPy is hidden for that one import when it
    is not loaded yet, then unhidden: a later ``import scipy`` works as ever, and Numba's
    ``np.dot`` and ``np.linalg`` still find it (they import it when they compile)."""
    from tempora_sim import process

    hide = process.IN_PROGRAM and "scipy" not in sys.modules
    if hide:
        sys.modules["scipy"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        yield
    finally:
        if hide and sys.modules.get("scipy", 0) is None:
            del sys.modules["scipy"]


def warm_kernels(protocols=None) -> float:
    """Compile (or load from the on-disk cache) the kernels of ``protocols`` once per process
    (default: every single-pressure protocol); ``"arrivals"`` stands for the general discrete
    kernel of non-periodic arrivals.

    Runs each on a two-batch input so the sweep can report JIT/cache-load time separately
    from replay time. Returns seconds spent (0 when already warm).
    """
    protocols = P.single() if protocols is None else protocols
    todo = [p for p in protocols if p not in _WARM]
    if not todo:
        return 0.0
    t0 = time.perf_counter()
    a, off, _, _ = warm_inputs()
    with _numba_without_scipy():
        from tempora_sim.engine import kernels as K  # Numba loads here, on the warm-up thread when there is one

        K.offline_kernel(a, off)  # every replay uses it; its first dispatch loads Numba's registries
    for name in todo:
        if name == "arrivals":
            warm_general_kernel(K)
        else:
            P.get(name).warm(K)
    _WARM.update(todo)
    return time.perf_counter() - t0


_WARMING: dict[str, object] = {}


def _start_warm_up(protocols) -> None:
    """Start :func:`warm_kernels` on a background thread (once per process).

    Importing Numba and loading the cached kernels is pure start-up cost; reading and
    validating traces spends most of its time inside polars and numpy with the GIL released,
    so the two overlap on a second core instead of running back to back."""
    todo = tuple(p for p in protocols if p not in _WARM)
    if not todo or "thread" in _WARMING:
        return
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["seconds"] = warm_kernels(todo)
        except BaseException as exc:  # re-raised on the caller's thread by _finish_warm_up
            box["error"] = exc

    thread = threading.Thread(target=work, name="tempora-kernel-warm-up", daemon=True)
    _WARMING.update(thread=thread, box=box, t0=time.perf_counter())
    thread.start()


def _finish_warm_up(protocols) -> float:
    """Wait for the background warm-up (if any), then warm whatever is still cold.

    Returns the seconds the caller waited for the kernels (0 when they were already warm)."""
    waited = 0.0
    thread = _WARMING.pop("thread", None)
    box = _WARMING.pop("box", {})
    _WARMING.pop("t0", None)
    if thread is not None:
        t0 = time.perf_counter()
        thread.join()
        waited = time.perf_counter() - t0
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
    return waited + warm_kernels(protocols)


def _replay(series: Series, protocols, opt) -> dict:
    """Per-series sums of each protocol in ``protocols`` (single-pressure, periodic arrivals):
    the Numba kernels, or the plain-Python oracle with ``engine="python"``."""
    out = {}
    for name in protocols:
        proto = P.get(name)
        run = proto.replay_numba if opt.engine == "numba" else proto.replay_python
        out[name] = run(series, proto.values(opt), opt.replay)
    return out


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def run_sweep(source, options: SweepOptions | ResolvedOptions | None = None, /, **changes) -> SweepResult:
    """Replay ``source`` (path(s) or a TraceSet) and return rows, timings, λ and warnings.

    ``options`` is a :class:`~tempora_sim.sweeps.options.SweepOptions`; keyword arguments (its field
    names) override it. Every option is checked before a trace is read. A caller that has
    resolved its options already (a command checks them before anything is read) passes the
    :class:`~tempora_sim.sweeps.options.ResolvedOptions`, used as they are."""
    t_start = time.perf_counter()
    if isinstance(options, ResolvedOptions):
        if changes:
            raise TypeError("run_sweep: resolved options take no changes; change the SweepOptions and resolve them again")
        opt = options
    else:
        opt = SweepOptions.build(options, **changes).resolve()
    protos, rho_v, T_v, B_v, lambda_ms = opt.protocols, opt.rho, opt.T_ms, opt.B_ms, opt.lambda_ms
    engine, spec = opt.engine, opt.arrivals

    needs = tuple(n for p in protos for n in P.get(p).needs)
    kernels_needed = tuple(protos) + needs + (() if spec.periodic else ("arrivals",))
    if engine == "numba":
        _start_warm_up(kernels_needed)  # overlaps Numba's import and cache load with reading the traces
    traceset = source if isinstance(source, TraceSet) else load_traces(source)
    lambdas = group_lambdas(traceset, lambda_ms, opt.lambda_rule)
    notes: list[str] = [] if lambda_ms is not None else group_warnings(traceset, lambdas)

    if any(g is T_GRID for p in protos for g in P.get(p).grids):
        for key, lam in lambdas.items():
            bad = [t for t in T_v if t <= lam]
            if bad and opt.explicit_T:
                raise GridError(
                    f"--T {', '.join(f'{t:g}' for t in bad)} ms must exceed λ = {lam:.2f} ms of group {key.label()} "
                    "(continuous utility needs T > λ)"
                )
            for t in bad:
                notes.append(f"T = {t:g} ms skipped for group {key.label()}: not above λ = {lam:.2f} ms")

    traces = [t for members in traceset.groups().values() for t in members]
    series = build_series(traces, lambdas, opt.lambda_rule)
    stats = SweepStats()
    if engine == "numba":
        stats.jit_s = _finish_warm_up(kernels_needed)
    t0 = time.perf_counter()
    frames = replay_frames(series, opt, stats)
    stats.kernel_s = stats.kernel_s or time.perf_counter() - t0
    frame = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=COLUMNS)
    stats.total_s = time.perf_counter() - t_start
    for note in notes:
        warnings.warn(note, SimWarning, stacklevel=2)
    latency: dict[str, dict[str, float]] = {}
    for t in traces:
        latency.setdefault(t.group.label(), {})[t.method] = float(t.adapt_delta.mean())
    result = SweepResult(frame, stats, lambdas, notes, {"rho": rho_v, "T_ms": T_v, "B_ms": B_v}, latency)
    result.series, result.resolved = series, opt
    return result


def replay_frames(
    series: Series, opt, stats: SweepStats | None = None, idle_curves=None, measures: Sequence[str] | None = None
) -> list[pl.DataFrame]:
    """Replay ``series`` under the resolved options ``opt``: the output frames, one per
    (protocol, per-episode | pooled). ``idle_curves`` (tempora_sim.sweeps.variability) replays the
    protocols that have an idle effect (``Protocol.has_idle_effect``, on periodic arrivals) with
    the measured one; by default it is taken from the traces' timing-variability data unless
    ``opt.no_idle_effect``. ``measures`` (columns of ``protocols.MEASURES``) asks for light
    frames: the same rows in the same order, holding those columns only (a timing replicate's)."""
    protos, rho_v, T_v, B_v = opt.protocols, opt.rho, opt.T_ms, opt.B_ms
    spec, seeds, absolute, engine = opt.arrivals, list(opt.arrival_seeds), opt.arrivals_absolute, opt.engine
    t0 = time.perf_counter()
    # single-pressure protocols on their own kernels; non-periodic arrivals and the combined
    # protocols go to the general kernel (tempora_sim.sweeps.scenarios)
    on_own_kernel = [p for p in protos if not P.get(p).combined and not (P.get(p).arrival_bound and not spec.periodic)]
    for need in (n for p in protos for n in P.get(p).needs):
        if need not in on_own_kernel:
            on_own_kernel.append(need)
    raw = _replay(series, on_own_kernel, opt)
    idle = [name for name in raw if P.get(name).has_idle_effect]
    if idle_curves is None and not opt.no_idle_effect and idle:
        idle_curves = variability.idle_curves(series, [variability.timing_model(t) for t in series.traces])
    if idle_curves is not None:
        for name in idle:
            variability.apply_idle_effect(series, raw[name], P.get(name).values(opt), opt.replay, idle_curves)
    for name, stats_ in raw.items():
        P.get(name).check_replay(series, stats_, P.get(name).values(opt))
    needed = {n: raw[n] for p in protos for n in P.get(p).needs}
    scen = replay_scenarios(series, protos, rho_v, T_v, B_v, opt.replay, spec, seeds, absolute, engine, needed)
    if stats is not None:
        stats.kernel_s = time.perf_counter() - t0

    frames = []
    total_n = int(series.n.sum())
    for name in protos:
        proto = P.get(name)
        for pooled in (False, True):
            if name in scen:
                frame = scenario_frame(series, name, scen[name], pooled, spec, seeds, absolute, measures)
            else:
                frame = P.frame(series, proto, proto.values(opt), raw[name], pooled, measures)
                if proto.grids and proto.grids[0].above_lambda:
                    frame = frame.filter(pl.col("value") > pl.col("lambda_ms"))
            if measures is not None:
                frames.append(frame.select([pl.col(c).cast(COLUMNS[c]) for c in measures]))
                continue
            if name not in scen:
                frame = frame.with_columns(
                    pl.lit(None, pl.Utf8).alias("param2"),
                    pl.lit(None, pl.Float64).alias("value2"),
                    pl.lit("periodic" if proto.arrival_bound else None, pl.Utf8).alias("arrivals"),
                    pl.lit(None, pl.Int64).alias("arrival_seed"),
                )
            frames.append(frame.select([pl.col(c).cast(t) for c, t in COLUMNS.items()]))
        if stats is not None and measures is None:
            stats.evaluations += frames[-2].height
            stats.batch_events += int(frames[-2]["num_batches"].sum()) if proto.grids else total_n
    return frames


def sweep(source, options: SweepOptions | None = None, /, **changes) -> pl.DataFrame:
    """Replay traces under ρ / T / B grids; one row per (trace, episode|__all__, protocol, value).

    ``source``: a trace file, a directory (searched recursively for ``*.parquet``), a list of
    them, or a loaded :class:`~tempora_sim.sweeps.traces.TraceSet`. The options are the fields of
    :class:`~tempora_sim.sweeps.options.SweepOptions` (given as ``options`` and/or keywords): ``rho``
    (fractions or ``'70%'``), ``T_ms`` and ``B_ms`` (ms, or strings with ``ms``/``s`` suffixes)
    take a comma-separated string, ``'@file'``, ``'start:stop:step'`` or a sequence; ``None``
    means the paper's grids (default T values ≤ λ are dropped with a :class:`SimWarning`;
    explicit ones raise). ``lambda_ms`` overrides λ for every group. ``queue`` is the discrete
    queue capacity b; ``sync='strict'`` is Alfarra et al.'s +2 synchronisation;
    ``skipped='random'`` scores skipped batches 1/C; ``fallback=True`` scores them with the
    dual-model fallback; ``budget_rule`` is ``strict`` or ``overshoot``. ``engine='python'``
    runs the plain-Python oracle instead of the kernels (slow; tests). ``arrivals``
    (``periodic`` | ``poisson[:SEED]`` | ``burst:ON,OFF[:SEED]`` | ``file:PATH``), ``arrival_seeds``
    (seeds SEED … SEED+k−1, pooled like episodes) and ``arrivals_absolute`` (recorded times as
    they are) choose the arrival process; ``protocols`` may also name the combined
    ``discrete-continuous`` (ρ × T) and ``discrete-amortised`` (ρ × B) grids (docs/design/design.md §9).
    """
    return run_sweep(source, options, **changes).frame
