"""Scenarios beyond the paper's three (docs/design/design.md §9): non-periodic arrivals and two
pressures at once, replayed from the same traces with the general discrete kernel.

* ``discrete`` under ``poisson``/``burst``/``file`` arrivals (periodic stays on the O(1) kernel);
* ``discrete-continuous`` (deadline + patience, grid ρ × T): a served batch is worth
  ``a_j · κ(r_j)`` with its full response time ``r_j = (pickup − arrival) + e_j``;
* ``discrete-amortised`` (deadline + budget, grid ρ × B): the first ``m`` events adapt (``m``
  from the amortised cut-off of the same budget rule), then the frozen checkpoint serves the
  rest of the stream under the same arrivals with its own latency (mean δ of its frozen rows)
  and accuracy (the amortised protocol's frozen accuracy).

Each arrival seed is replayed like another episode: per-(episode, seed) rows carry
``arrival_seed``; the pooled ``__all__`` rows pool episodes and seeds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import polars as pl

from tempora_sim import protocols as P
from tempora_sim.engine.arrivals import ArrivalSpec, arrival_times
from tempora_sim.engine.grids import Grid
from tempora_sim.engine.oracle import discrete_reference
from tempora_sim.engine.replay_options import ReplayOptions
from tempora_sim.errors import GridError
from tempora_sim.protocols.base import MEASURES


def expand_seeds(series, n_seeds: int):
    """The series repeated once per arrival seed (row ``s·n_seeds + k``), for output framing."""
    if n_seeds == 1:
        return series
    n = np.repeat(series.n, n_seeds)
    return dataclasses.replace(
        series,
        trace_of=np.repeat(series.trace_of, n_seeds),
        episode=[ep for ep in series.episode for _ in range(n_seeds)],
        offsets=np.concatenate(([0], np.cumsum(n))).astype(np.int64),
        lam=np.repeat(series.lam, n_seeds),
    )


def unit_arrivals(series, spec: ArrivalSpec, seeds, absolute: bool) -> list[np.ndarray]:
    """Per seed: arrival times of every series at unit mean gap (or as recorded), flattened."""
    out = []
    for seed in seeds:
        sp = spec.with_seed(seed)
        parts = [arrival_times(sp, int(n), 1.0, ep, absolute=absolute) for n, ep in zip(series.n, series.episode)]
        out.append(np.concatenate(parts) if parts else np.zeros(0))
    return out


def frozen_latency(series, amortised: dict) -> np.ndarray:
    """Mean δ of the frozen checkpoint each (series, B) falls back to; NaN where none is used."""
    m, gap = amortised["m"], amortised["gap"]
    out = np.full(m.shape, np.nan)
    means: dict[int, dict[tuple[str, int], float]] = {}
    n, offsets = series.n, series.offsets  # ``series.n`` is computed on each access
    for s in np.flatnonzero(((m < n[:, None]) & (gap >= 0)).any(axis=1)).tolist():  # the series that fall back at all
        t_idx = int(series.trace_of[s])
        for v in range(m.shape[1]):
            if m[s, v] >= n[s] or gap[s, v] < 0:
                continue
            if series.frozen_from_adapt[s]:
                out[s, v] = series.delta[offsets[s] + m[s, v] : offsets[s + 1]].mean()
                continue
            if t_idx not in means:
                agg = series.traces[t_idx].frozen.group_by("episode", "checkpoint").agg(pl.col("delta_ms").mean())
                means[t_idx] = {(ep, int(ck)): d for ep, ck, d in agg.iter_rows()}
            out[s, v] = means[t_idx][(series.episode[s], int(m[s, v] - gap[s, v]))]
    return out


def _replay(series, u, scale, replay: ReplayOptions, h, n_adapt, f_delta, f_acc, engine):
    """Every series × cell once: (served, served_sum, score_sum, ak[S, K, H], frozen_served)."""
    if engine == "numba":
        from tempora_sim.engine import kernels as K  # Numba loads only when a kernel runs

        K.use_threads(int(series.a.shape[0]) * scale.shape[1] * max(1, h.shape[1]))
        return K.discrete_general_kernel(
            series.a,
            series.e,
            series.delta,
            u,
            scale,
            series.offsets,
            series.lam,
            replay.queue,
            replay.strict_sync,
            replay.skip_mode(K),
            series.skip_value,
            h,
            n_adapt,
            f_delta,
            f_acc,
        )
    S, C = scale.shape
    served = np.zeros((S, C), np.int64)
    ssum = np.zeros((S, C))
    score = np.zeros((S, C))
    ak = np.zeros((S, C, h.shape[1]))
    frozen = np.zeros((S, C), np.int64)
    for s in range(S):
        sl = slice(series.offsets[s], series.offsets[s + 1])
        lam = float(series.lam[s])
        for c in range(C):
            res = discrete_reference(
                series.a[sl].tolist(),
                series.delta[sl].tolist(),
                None,
                replay.queue,
                replay.sync,
                replay.skipped,
                int(round(1.0 / series.skip_value[s])),
                replay.fallback,
                arrivals=(u[sl] * scale[s, c]).tolist(),
                e=series.e[sl].tolist(),
                lam=lam,
                T=[lam + x for x in h[s]],
                n_adapt=int(n_adapt[s, c]),
                f_delta=float(f_delta[s, c]),
                f_acc=float(f_acc[s, c]),
            )
            served[s, c], ssum[s, c], score[s, c], frozen[s, c] = (res.served, res.served_sum, res.score_sum, res.frozen_served)
            ak[s, c] = res.ak_sums
    return served, ssum, score, ak, frozen


@dataclass
class ArrivalReplay:
    """What a protocol replayed under arrivals works with: the series, the ρ grid and the
    periods it sets, the other grids, the per-series sums of the protocols it ``needs``
    (:attr:`~tempora_sim.protocols.base.Protocol.needs`) by name, and ``run``, the general kernel
    over every arrival seed."""

    series: object
    S: int
    ns: int
    rho_v: tuple
    rho_a: np.ndarray
    gamma: np.ndarray
    grids: dict[str, tuple]
    needed: dict[str, dict]
    run: Callable

    def grid(self, grid: Grid) -> tuple:
        return self.grids[grid.param]

    def unlimited(self, cells: int) -> tuple[np.ndarray, np.ndarray]:
        """Every batch adapts (no freeze): n_adapt = N and no frozen latency or accuracy."""
        return np.repeat(self.series.n.astype(np.int64)[:, None], cells, axis=1), np.full((self.S, cells), np.nan)

    def frozen_latency(self, amortised: dict) -> np.ndarray:
        """Mean δ of the frozen checkpoint each (series, B) of the amortised sums falls back to."""
        return frozen_latency(self.series, amortised)


def replay_scenarios(
    series,
    protos,
    rho_v,
    T_v,
    B_v,
    replay: ReplayOptions,
    spec: ArrivalSpec,
    seeds,
    absolute,
    engine,
    needed: dict[str, dict] | None = None,
) -> dict:
    """Raw per-(series·seed, grid cell) sums of the protocols in ``protos`` replayed under
    arrivals: the arrival-bound ones (discrete) when arrivals are not periodic, and the
    combined ones; values hold arrays shaped [S·n_seeds, cells] plus ``values`` / ``values2``
    (the grid cells, flattened ρ-major). ``needed``: the single-pressure sums the protocols'
    ``needs`` name."""
    S = len(series.episode)
    ns = len(seeds)
    units = unit_arrivals(series, spec, seeds, absolute)
    if absolute:
        rho_v = (float("nan"),)
    rho_a = np.asarray(rho_v, np.float64)
    gamma = np.ones((S, len(rho_a))) if absolute else series.lam[:, None] / rho_a[None, :]

    def run(scale, h, n_adapt, f_delta, f_acc):
        """Stack the seeds' results into rows s·ns + k."""
        parts = [_replay(series, u, scale, replay, h, n_adapt, f_delta, f_acc, engine) for u in units]
        return [np.stack(p, axis=1).reshape((S * ns,) + p[0].shape[1:]) for p in zip(*parts)]

    ctx = ArrivalReplay(series, S, ns, tuple(rho_v), rho_a, gamma, {"rho": rho_v, "T_ms": T_v, "B_ms": B_v}, needed or {}, run)
    out = {}
    for name in protos:
        proto = P.get(name)
        if proto.combined or (proto.arrival_bound and not spec.periodic):
            out[name] = proto.replay_arrivals(ctx)
    return out


def scenario_frame(
    series, protocol: str, raw: dict, pooled: bool, spec: ArrivalSpec, seeds, absolute, measures: Sequence[str] | None = None
) -> pl.DataFrame:
    """Output rows of one protocol replayed under arrivals, in the sweep's columns; with
    ``measures``, a light frame (:func:`tempora_sim.protocols.base.frame`): the same rows, only
    those measures beside ``value``, ``value2``, ``lambda_ms`` and ``num_batches``."""
    proto = P.get(protocol)
    ns = len(seeds)
    xs = expand_seeds(series, ns)
    values = list(raw["values"])
    # the protocol's own columns (scenario_columns) may be among the measures: the frame's are built first
    frame = P.frame(xs, proto, values, raw, pooled, None if measures is None else [m for m in measures if m in MEASURES])
    extra = proto.scenario_columns(xs, raw, frame, pooled)
    value2 = pl.Series(
        "value2",
        np.tile(np.asarray(raw["values2"] or [np.nan] * len(values), np.float64), frame.height // max(1, len(values))),
        nan_to_null=True,
    )
    if measures is not None:
        frame = frame.with_columns(value2, *(c for c in extra if c.name in measures))
    else:
        frame = frame.with_columns(pl.lit(protocol).alias("protocol"), pl.lit(proto.param2, pl.Utf8).alias("param2"), value2, *extra)
    if absolute:
        mean_gap = float(np.mean(spec.gaps))
        frame = frame.with_columns((pl.col("lambda_ms") / mean_gap).alias("value"))
    if measures is None:
        seed_col = (
            pl.lit(None, pl.Int64)
            if pooled
            else pl.Series("arrival_seed", np.tile(np.asarray(seeds, np.int64), frame.height // ns), pl.Int64)
        )
        frame = frame.with_columns(pl.lit(spec.label()).alias("arrivals"), seed_col.alias("arrival_seed"))
    if len(proto.grids) > 1 and proto.grids[1].above_lambda:
        frame = frame.filter(pl.col("value2") > pl.col("lambda_ms"))
    return frame


def check_scenario_options(protos, spec: ArrivalSpec, seeds, absolute: bool, rho_given: bool) -> None:
    if absolute and spec.kind != "file":
        raise GridError("--arrivals-absolute needs --arrivals file:PATH (only recorded times have absolute meaning)")
    if absolute and rho_given:
        raise GridError("--rho has no effect with --arrivals-absolute (the recorded times fix the load); leave it out")
    if len(seeds) > 1 and not spec.random:
        raise GridError("--arrival-seeds > 1 needs a random arrival process (poisson, burst or file)")
