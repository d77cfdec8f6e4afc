"""Deadline + budget (docs/design/design.md §9, grid ρ × B): the first ``m`` events adapt (``m`` from
the amortised cut-off of the same budget rule), then the frozen checkpoint serves the rest of
the stream under the same arrivals with its own latency (mean δ of its frozen rows) and
accuracy (the amortised protocol's frozen accuracy)."""

from __future__ import annotations

import numpy as np
import polars as pl

from tempora_sim.engine import grids
from tempora_sim.protocols.base import Protocol, reduce_rows, warm_general_kernel
from tempora_sim.protocols.discrete import Discrete


class DiscreteAmortised(Discrete):
    name = "discrete-amortised"
    grids = (grids.RHO, grids.B)
    combined = True
    has_idle_effect = False  # the general kernel replays every event at its traced time
    live = False
    serves_subset = True
    needs = ("amortised",)  # its cut-offs and frozen accuracies drive the freeze
    terms = ("alpha", "served", "served_acc", "m", "beta", "acc_frozen")
    insolvency_factor = None
    decomposition_headers = ()
    advise_terms = ("alpha", "served_acc", "beta", "acc_frozen")
    page_terms = (
        ("alpha", "availability α", "frac"),
        ("served_acc", "ā_served", "frac"),
        ("beta", "adapted share β", "frac"),
        ("acc_frozen", "ā_frozen", "frac"),
    )
    short = ""
    title = "Deadline + budget: winner (utility %) per ρ × B"
    #: its section of the report
    heading = "Deadline + budget"

    replay_numba = Protocol.replay_numba
    replay_python = Protocol.replay_python

    def advise_why(self, m: str, mech: dict, pc) -> str:
        frozen = "" if mech["acc_frozen"] is None else f", then ā_frozen = {pc(mech['acc_frozen'])}"
        return f"{m} serves α = {pc(mech['alpha'])} at ā_served = {pc(mech['served_acc'])}, adapting on β = {pc(mech['beta'])}{frozen}"

    def warm(self, K) -> None:
        warm_general_kernel(K)

    def replay_arrivals(self, ctx) -> dict:
        amortised = ctx.needed["amortised"]
        m, facc = amortised["m"], amortised["frozen_acc"]
        fdelta = ctx.frozen_latency(amortised)
        B_v = ctx.grid(grids.B)
        nB = len(B_v)
        n_rho = len(ctx.rho_a)
        tile = (1, n_rho)
        # budgets that freeze a series at the same cut-off with the same checkpoint replay alike:
        # each series replays its distinct ones (cells (ρ_i, u) -> i·U + u), read back per budget
        cells, pick = distinct_cells(m.astype(np.int64), fdelta, facc)
        U = cells.shape[1]
        at = lambda x: np.take_along_axis(x, cells, axis=1)  # noqa: E731
        scale = np.repeat(ctx.gamma, U, axis=1)
        served, ssum, score, _, frozen = ctx.run(
            scale, np.zeros((ctx.S, 0)), np.tile(at(m.astype(np.int64)), tile), np.tile(at(fdelta), tile), np.tile(at(facc), tile)
        )
        # (ρ_i, B_b) -> i·nB + b, from i·U + pick[s, b]; rows s·ns + k
        back = np.repeat((np.arange(n_rho)[:, None] * U)[None, :, :] + pick[:, None, :], ctx.ns, axis=0).reshape(ctx.S * ctx.ns, n_rho * nB)
        served, ssum, score, frozen = (np.take_along_axis(x, back, axis=1) for x in (served, ssum, score, frozen))
        return {
            "served": served,
            "served_sum": ssum,
            "score_sum": score,
            "frozen_served": frozen,
            "values": tuple(r for r in ctx.rho_v for _ in B_v),
            "values2": tuple(b for _ in ctx.rho_v for b in B_v),
            "frozen_acc": np.repeat(np.tile(facc, tile), ctx.ns, axis=0),
        }

    def scenario_columns(self, xs, raw: dict, frame: pl.DataFrame, pooled: bool) -> list[pl.Series]:
        served = reduce_rows(xs, raw["served"], pooled)
        frozen = reduce_rows(xs, raw["frozen_served"], pooled)
        N = frame["num_batches"].to_numpy().astype(np.float64)
        adapted = served - frozen
        facc = raw["frozen_acc"]
        fsum = reduce_rows(xs, np.where(raw["frozen_served"] > 0, np.nan_to_num(facc) * raw["frozen_served"], 0.0), pooled)
        with np.errstate(invalid="ignore", divide="ignore"):
            return [
                pl.Series("m", adapted, nan_to_null=True),
                pl.Series("beta", adapted / N, nan_to_null=True),
                pl.Series("acc_frozen", np.where(frozen > 0, fsum / np.maximum(frozen, 1), np.nan), nan_to_null=True),
            ]


def distinct_cells(*per_budget: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The budgets of each series whose freeze settings (arrays [S, B] alike: the cut-off, the
    frozen latency and accuracy) differ: ``cells`` [S, U], each series' distinct budgets in
    order (the last repeated to fill U, the most any series has), and ``pick`` [S, B], the
    column of ``cells`` that replays each budget. Equal settings compare bit for bit (NaN too)."""
    key = np.stack([np.ascontiguousarray(x, np.float64).view(np.int64) if x.dtype != np.int64 else x for x in per_budget], axis=-1)
    S, B = key.shape[:2]
    if not B:
        return np.zeros((S, 0), np.int64), np.zeros((S, 0), np.int64)
    same = (key[:, :, None, :] == key[:, None, :, :]).all(axis=-1)  # [S, B, B]
    first = np.argmax(same, axis=2)  # the first budget with the same settings
    own = first == np.arange(B)[None, :]
    rank = np.cumsum(own, axis=1) - 1
    U = int(own.sum(axis=1).max()) if S else 1
    cells = np.empty((S, U), np.int64)
    for s in range(S):
        kept = np.flatnonzero(own[s])
        cells[s, : kept.size] = kept
        cells[s, kept.size :] = kept[-1]
    return cells, np.take_along_axis(rank, first, axis=1)


PROTOCOL = DiscreteAmortised()
