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
        scale = np.repeat(ctx.gamma, nB, axis=1)  # (ρ_i, B_b) -> i·nB + b
        tile = (1, len(ctx.rho_a))
        served, ssum, score, _, frozen = ctx.run(
            scale, np.zeros((ctx.S, 0)), np.tile(m.astype(np.int64), tile), np.tile(fdelta, tile), np.tile(facc, tile)
        )
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


PROTOCOL = DiscreteAmortised()
