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

import time
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from tempora_schema import GroupKey

from . import grids
from .errors import GridError, ProtocolError, SimWarning  # noqa: F401  (GridError, SimWarning re-exported)
from .options import BUDGET_RULES, ENGINES, SKIPPED_MODES, SYNC_MODES, SweepOptions  # noqa: F401
from .traces import Trace, TraceSet, group_lambdas, group_warnings, load_traces

ALL_EPISODES = "__all__"

#: Output columns, in order (docs/design/design.md §6 plus seed, stream, severity, group, lambda_rule,
#: num_batches), then the scenario columns of docs/design/design.md §9 (``param2``/``value2`` of a 2-D
#: grid, the arrival process). ``group`` is the comparison group's label without its seed
#: (tempora_schema.GroupKey.label): rows of two groups that differ only in severity, domains,
#: weights or threads stay apart, and the seeds of one setting share it (they pool).
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
    #: what was replayed (timing replicates replay it again: tempora_sim.timing_noise)
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


def warm_kernels(protocols=grids.PROTOCOLS) -> float:
    """Compile (or load from the on-disk cache) the kernels of ``protocols`` once per process.

    Runs each on a two-batch input so the sweep can report JIT/cache-load time separately
    from replay time. Returns seconds spent (0 when already warm).
    """
    todo = [p for p in protocols if p not in _WARM]
    if not todo:
        return 0.0
    t0 = time.perf_counter()
    from . import kernels as K

    a = np.array([0.5, 0.25])
    off = np.array([0, 2], np.int64)
    lam = np.array([1.0])
    v = np.array([1.0, 2.0])
    K.offline_kernel(a, off)
    if "discrete" in todo:
        K.discrete_kernel(a, a + 1, off, lam, v, 1, False, 0, lam, lam, lam)
    if "continuous" in todo:
        d = K.response_delays(a, a, off, lam)
        K.continuous_kernel(a, d, off, lam, v + 1)
    if "amortised" in todo:
        pa_, _ = K.amortised_prefixes(a, a, off, lam)
        K.amortised_kernel(
            pa_,
            pa_,
            off,
            v,
            False,
            np.array([True]),
            np.array([0, 1], np.int64),
            np.array([0], np.int64),
            np.array([0, 1], np.int64),
            np.array([1], np.int64),
            np.array([1.0]),
            np.array([2.0]),
        )
    if any(p in todo for p in grids.COMBINED_PROTOCOLS + ("arrivals",)):
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
    _WARM.update(todo)
    return time.perf_counter() - t0


_WARMING: dict[str, object] = {}


def _start_warm_up(protocols) -> None:
    """Start :func:`warm_kernels` on a background thread (once per process).

    Importing Numba and loading the cached kernels is pure start-up cost; reading and
    validating traces spends most of its time inside polars and numpy with the GIL released,
    so the two overlap on a second core instead of running back to back."""
    import threading

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


def _replay_numba(series: Series, protocols, rho, T, B, opts) -> dict:
    from . import kernels as K

    out = {}
    s = series
    total = int(s.a.shape[0])
    K.use_threads(total)
    if "offline" in protocols:
        out["offline"] = {"sum_a": K.offline_kernel(s.a, s.offsets)}
    if "discrete" in protocols:
        K.use_threads(total * len(rho))
        mode = K.SKIP_FALLBACK if opts["fallback"] else (K.SKIP_RANDOM if opts["skipped"] == "random" else K.SKIP_NULL)
        max_delta = np.maximum.reduceat(s.delta, s.offsets[:-1]) if total else np.zeros(0)
        served, served_sum, score = K.discrete_kernel(
            s.a,
            s.delta,
            s.offsets,
            s.lam,
            np.asarray(rho, np.float64),
            int(opts["queue"]),
            opts["sync"] == "strict",
            mode,
            s.skip_value,
            max_delta,
            K.offline_kernel(s.a, s.offsets),
        )
        out["discrete"] = {"served": served, "served_sum": served_sum, "score_sum": score}
    if "continuous" in protocols:
        K.use_threads(total)
        d = K.response_delays(s.e, s.l, s.offsets, s.lam)
        K.use_threads(total * len(T))
        sum_ak, sum_k, cov = K.continuous_kernel(s.a, d, s.offsets, s.lam, np.asarray(T, np.float64))
        K.use_threads(total)
        out["continuous"] = {"sum_ak": sum_ak, "sum_k": sum_k, "cov": cov, "sum_a": K.offline_kernel(s.a, s.offsets)}
    if "amortised" in protocols:
        K.use_threads(total)
        pa_, pc_ = K.amortised_prefixes(s.a, s.delta, s.offsets, s.lam)
        K.use_threads(len(s.episode) * len(B) * 64)  # binary searches: cheap per value
        m, adapt_sum, frozen_acc, gap = K.amortised_kernel(
            pa_,
            pc_,
            s.offsets,
            np.asarray(B, np.float64),
            opts["budget_rule"] == "overshoot",
            s.frozen_from_adapt,
            s.ck_offsets,
            s.ck_values,
            s.row_offsets,
            s.f_steps,
            s.f_suf_correct,
            s.f_suf_n,
        )
        out["amortised"] = {"m": m, "adapt_sum": adapt_sum, "frozen_acc": frozen_acc, "gap": gap}
    return out


def _replay_python(series: Series, protocols, rho, T, B, opts) -> dict:
    from . import oracle as R

    s = series
    S = len(s.episode)
    out = {}
    sl = [slice(s.offsets[i], s.offsets[i + 1]) for i in range(S)]
    if "offline" in protocols:
        out["offline"] = {"sum_a": np.array([sum(s.a[x].tolist()) for x in sl])}
    if "discrete" in protocols:
        served = np.zeros((S, len(rho)), np.int64)
        ssum = np.zeros((S, len(rho)))
        score = np.zeros((S, len(rho)))
        for i in range(S):
            a, d = s.a[sl[i]].tolist(), s.delta[sl[i]].tolist()
            for k, r in enumerate(rho):
                res = R.discrete_reference(
                    a,
                    d,
                    float(s.lam[i]) / r,
                    opts["queue"],
                    opts["sync"],
                    opts["skipped"],
                    int(round(1.0 / s.skip_value[i])),
                    opts["fallback"],
                )
                served[i, k], ssum[i, k], score[i, k] = res.served, res.served_sum, res.score_sum
        out["discrete"] = {"served": served, "served_sum": ssum, "score_sum": score}
    if "continuous" in protocols:
        sum_ak = np.full((S, len(T)), np.nan)
        sum_k = np.full((S, len(T)), np.nan)
        cov = np.full((S, len(T)), np.nan)
        for i in range(S):
            a, e, l = s.a[sl[i]].tolist(), s.e[sl[i]].tolist(), s.l[sl[i]].tolist()
            for k, t in enumerate(T):
                if t <= s.lam[i]:
                    continue
                res = R.continuous_reference(a, e, l, float(s.lam[i]), t)
                sum_ak[i, k], sum_k[i, k], cov[i, k] = res.utility * len(a), res.kappa * len(a), res.cov
        out["continuous"] = {"sum_ak": sum_ak, "sum_k": sum_k, "cov": cov, "sum_a": np.array([sum(s.a[x].tolist()) for x in sl])}
    if "amortised" in protocols:
        m = np.zeros((S, len(B)), np.int64)
        asum = np.zeros((S, len(B)))
        facc = np.full((S, len(B)), np.nan)
        gap = np.full((S, len(B)), -1, np.int64)
        for i in range(S):
            a, d = s.a[sl[i]].tolist(), s.delta[sl[i]].tolist()
            rows = {}
            for c in range(s.ck_offsets[i], s.ck_offsets[i + 1]):
                r0, r1 = s.row_offsets[c], s.row_offsets[c + 1]
                suf_c = s.f_suf_correct[r0:r1]
                suf_n = s.f_suf_n[r0:r1]
                corr = np.append(suf_c[:-1] - suf_c[1:], suf_c[-1])
                nn = np.append(suf_n[:-1] - suf_n[1:], suf_n[-1])
                rows[int(s.ck_values[c])] = list(zip(s.f_steps[r0:r1].tolist(), corr.tolist(), nn.tolist()))
            for k, b in enumerate(B):
                res = R.amortised_reference(a, d, float(s.lam[i]), b, rows, opts["budget_rule"], bool(s.frozen_from_adapt[i]))
                m[i, k] = res.m
                asum[i, k] = sum(a[: res.m])
                if res.m < len(a):
                    if res.acc_frozen is None:
                        gap[i, k] = -2
                    else:
                        facc[i, k], gap[i, k] = res.acc_frozen, res.frozen_gap
        out["amortised"] = {"m": m, "adapt_sum": asum, "frozen_acc": facc, "gap": gap}
    return out


# --------------------------------------------------------------------------------------
# Assembling the output frame
# --------------------------------------------------------------------------------------


def _div(num, den):
    num = np.asarray(num, np.float64)
    den = np.asarray(den, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _frame(series: Series, protocol: str, values, stats: dict, pooled: bool) -> pl.DataFrame:
    """Rows of one protocol: per episode (pooled=False) or per trace pooled over episodes."""
    s = series
    n_vals = max(1, len(values))
    n = s.n.astype(np.float64)
    if pooled:
        starts = np.flatnonzero(np.r_[True, s.trace_of[1:] != s.trace_of[:-1]])
        owner = s.trace_of[starts]

        def agg(x):
            x = np.asarray(x, np.float64)
            return np.add.reduceat(x, starts, axis=0)

        N = agg(n)
        episodes = [ALL_EPISODES] * len(starts)
        lam = s.lam[starts]
        nep = np.diff(np.r_[starts, len(s.episode)])
    else:
        owner = s.trace_of
        N = n
        episodes = s.episode
        lam = s.lam
        agg = None
    rows = len(owner)
    NN = np.repeat(N[:, None], n_vals, axis=1)
    cols: dict[str, np.ndarray] = {}
    nan = np.full((rows, n_vals), np.nan)

    def reduce_(x):
        x = np.asarray(x, np.float64)
        if x.ndim == 1:
            x = np.repeat(x[:, None], n_vals, axis=1)
        return agg(x) if pooled else x

    if protocol == "offline":
        cols["utility"] = reduce_(stats["sum_a"]) / NN
    elif protocol == "discrete":
        served = reduce_(stats["served"])
        cols["served"] = served
        cols["alpha"] = served / NN
        cols["served_acc"] = _div(reduce_(stats["served_sum"]), served)
        cols["utility"] = reduce_(stats["score_sum"]) / NN
    elif protocol == "continuous":
        util = reduce_(stats["sum_ak"]) / NN
        acc = reduce_(stats["sum_a"]) / NN
        kappa = reduce_(stats["sum_k"]) / NN
        cols["utility"], cols["acc"], cols["kappa"] = util, acc, kappa
        cols["cov"] = util - acc * kappa if pooled else np.asarray(stats["cov"])
    elif protocol == "amortised":
        m = np.asarray(stats["m"], np.float64)
        adapt_sum = np.asarray(stats["adapt_sum"])
        facc = np.asarray(stats["frozen_acc"])
        gap = np.asarray(stats["gap"], np.float64)
        nrep = np.repeat(n[:, None], n_vals, axis=1)
        frozen_n = nrep - m
        fsum = np.where(frozen_n > 0, np.nan_to_num(facc) * frozen_n, 0.0)
        util_sum = adapt_sum + fsum
        if pooled:
            M = agg(m)
            FN = agg(frozen_n)
            cols["m"] = M / nep[:, None]
            cols["beta"] = M / NN
            cols["acc_adapt"] = _div(agg(adapt_sum), M)
            cols["acc_frozen"] = _div(agg(fsum), FN)
            cols["utility"] = agg(util_sum) / NN
            g = np.where(frozen_n > 0, gap, -1.0)
            gmax = np.maximum.reduceat(g, starts, axis=0)
            cols["frozen_gap"] = np.where(gmax >= 0, gmax, np.nan)
        else:
            cols["m"] = m
            cols["beta"] = m / NN
            cols["acc_adapt"] = _div(adapt_sum, m)
            cols["acc_frozen"] = np.where(frozen_n > 0, facc, np.nan)
            cols["utility"] = util_sum / NN
            cols["frozen_gap"] = np.where(gap >= 0, gap, np.nan)

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
    frame = ident[np.repeat(np.arange(rows), n_vals)] if rows else ident.clear()
    columns = [
        pl.Series("protocol", [protocol], pl.Utf8).extend_constant(protocol, total - 1) if total else pl.Series("protocol", [], pl.Utf8),
        pl.Series("param", [grids.PARAM_OF[protocol]] * min(total, 1), pl.Utf8).extend_constant(
            grids.PARAM_OF[protocol], max(total - 1, 0)
        ),
        pl.Series("value", np.tile(np.asarray(values, np.float64), rows) if values else np.full(rows, np.nan), nan_to_null=True),
        pl.Series("lambda_ms", np.repeat(lam, n_vals)),
        pl.lit(s.lambda_rule, pl.Utf8).alias("lambda_rule"),
    ]
    measures = list(BASE_COLUMNS)[list(BASE_COLUMNS).index("utility") : -1]
    for name in measures:
        data = cols.get(name)
        values_ = np.asarray(data, np.float64).reshape(-1) if data is not None else nan.reshape(-1)
        columns.append(pl.Series(name, values_, nan_to_null=True).cast(BASE_COLUMNS[name]))
    columns.append(pl.Series("num_batches", np.repeat(N, n_vals).astype(np.int64)))
    return frame.with_columns(columns).select(list(BASE_COLUMNS))


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def run_sweep(source, options: SweepOptions | None = None, /, **changes) -> SweepResult:
    """Replay ``source`` (path(s) or a TraceSet) and return rows, timings, λ and warnings.

    ``options`` is a :class:`~tempora_sim.options.SweepOptions`; keyword arguments (its field
    names) override it. Every option is checked before a trace is read."""
    t_start = time.perf_counter()
    opt = SweepOptions.build(options, **changes).resolve()
    protos, rho_v, T_v, B_v, lambda_ms = opt.protocols, opt.rho, opt.T_ms, opt.B_ms, opt.lambda_ms
    engine, spec = opt.engine, opt.arrivals

    kernels_needed = tuple(protos) + (("amortised",) if "discrete-amortised" in protos else ()) + (() if spec.periodic else ("arrivals",))
    if engine == "numba":
        _start_warm_up(kernels_needed)  # overlaps Numba's import and cache load with reading the traces
    traceset = source if isinstance(source, TraceSet) else load_traces(source)
    lambdas = group_lambdas(traceset, lambda_ms, opt.lambda_rule)
    notes: list[str] = [] if lambda_ms is not None else group_warnings(traceset, lambdas)

    if "continuous" in protos or "discrete-continuous" in protos:
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


def replay_frames(series: Series, opt, stats: SweepStats | None = None, idle_curves=None) -> list[pl.DataFrame]:
    """Replay ``series`` under the resolved options ``opt``: the output frames, one per
    (protocol, per-episode | pooled). ``idle_curves`` (tempora_sim.timing_noise) replays the
    periodic discrete protocol with the measured idle effect; by default it is taken from the
    traces' timing-variability data unless ``opt.no_idle_effect``."""
    from .scenarios import replay_scenarios, scenario_frame

    protos, rho_v, T_v, B_v = opt.protocols, opt.rho, opt.T_ms, opt.B_ms
    spec, seeds, absolute, engine = opt.arrivals, list(opt.arrival_seeds), opt.arrivals_absolute, opt.engine
    opts = {"queue": int(opt.queue), "budget_rule": opt.budget_rule, "skipped": opt.skipped, "sync": opt.sync, "fallback": opt.fallback}
    replay = _replay_numba if engine == "numba" else _replay_python
    t0 = time.perf_counter()
    paper_protos = [p for p in protos if p in grids.PROTOCOLS and not (p == "discrete" and not spec.periodic)]
    if "discrete-amortised" in protos and "amortised" not in paper_protos:
        paper_protos.append("amortised")  # its cut-offs and frozen accuracies drive the freeze
    raw = replay(series, paper_protos, rho_v, T_v, B_v, opts)
    if idle_curves is None and not opt.no_idle_effect and "discrete" in raw:
        from . import timing_noise

        idle_curves = timing_noise.idle_curves(series, [timing_noise.timing_model(t) for t in series.traces])
    if idle_curves is not None:
        from .timing_noise import apply_idle_effect

        apply_idle_effect(series, raw, rho_v, opts, idle_curves)
    if "amortised" in raw:
        _check_frozen(series, raw["amortised"], B_v)
    scen = replay_scenarios(series, protos, rho_v, T_v, B_v, opts, spec, seeds, absolute, engine, raw.get("amortised"))
    if stats is not None:
        stats.kernel_s = time.perf_counter() - t0

    frames = []
    values_of = {"offline": (), "discrete": rho_v, "continuous": T_v, "amortised": B_v}
    total_n = int(series.n.sum())
    for proto in protos:
        for pooled in (False, True):
            if proto in scen:
                frame = scenario_frame(series, proto, scen[proto], pooled, spec, seeds, absolute, _frame)
            else:
                frame = _frame(series, proto, values_of[proto], raw[proto], pooled)
                if proto == "continuous":
                    frame = frame.filter(pl.col("value") > pl.col("lambda_ms"))
                frame = frame.with_columns(
                    pl.lit(None, pl.Utf8).alias("param2"),
                    pl.lit(None, pl.Float64).alias("value2"),
                    pl.lit("periodic" if proto == "discrete" else None, pl.Utf8).alias("arrivals"),
                    pl.lit(None, pl.Int64).alias("arrival_seed"),
                )
            frames.append(frame.select([pl.col(c).cast(t) for c, t in COLUMNS.items()]))
        if stats is not None:
            stats.evaluations += frames[-2].height
            stats.batch_events += int(frames[-2]["num_batches"].sum()) if proto != "offline" else total_n
    return frames


def _check_frozen(series: Series, raw: dict, budgets) -> None:
    gap = raw["gap"]
    bad = np.argwhere(gap == -2)
    if bad.size == 0:
        return
    s_idx, v_idx = bad[0]
    trace = series.traces[series.trace_of[s_idx]]
    m = int(raw["m"][s_idx, v_idx])
    ep = series.episode[s_idx]
    if not series.has_frozen[s_idx]:
        raise ProtocolError(
            f"{trace.path}: amortised utility needs frozen-mode rows (phase=frozen) but episode '{ep}' has none "
            f"(m = {m} < N at B = {budgets[v_idx]:g} ms); re-trace with frozen evaluation or leave out --protocol amortised"
        )
    lo = series.ck_offsets[s_idx]
    cks = series.ck_values[lo : series.ck_offsets[s_idx + 1]].tolist()
    raise ProtocolError(
        f"{trace.path}: episode '{ep}' has no frozen checkpoint <= m = {m} with rows at step >= {m} "
        f"(checkpoints: {cks}); needed for B = {budgets[v_idx]:g} ms"
    )


def sweep(source, options: SweepOptions | None = None, /, **changes) -> pl.DataFrame:
    """Replay traces under ρ / T / B grids; one row per (trace, episode|__all__, protocol, value).

    ``source``: a trace file, a directory (searched recursively for ``*.parquet``), a list of
    them, or a loaded :class:`~tempora_sim.traces.TraceSet`. The options are the fields of
    :class:`~tempora_sim.options.SweepOptions` (given as ``options`` and/or keywords): ``rho``
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
