"""Deadline + patience (docs/design/design.md §9, grid ρ × T): a served batch is worth ``a_j · κ(r_j)``
with its full response time ``r_j = (pickup − arrival) + e_j``."""

from __future__ import annotations

import numpy as np
import polars as pl

from tempora_sim.engine import grids
from tempora_sim.protocols.base import Protocol, reduce_rows, warm_general_kernel
from tempora_sim.protocols.discrete import Discrete


class DiscreteContinuous(Discrete):
    name = "discrete-continuous"
    grids = (grids.RHO, grids.T)
    combined = True
    has_idle_effect = False  # the general kernel replays every event at its traced time
    live = False
    serves_subset = True
    terms = ("alpha", "served", "served_acc", "kappa")
    insolvency_factor = None
    decomposition_headers = ()
    advise_terms = ("alpha", "served_acc", "kappa")
    page_terms = (("alpha", "availability α", "frac"), ("served_acc", "ā_served", "frac"), ("kappa", "responsiveness κ̃", "frac"))
    short = ""
    title = "Deadline + patience: winner (utility %) per ρ × T"
    #: its section of the report
    heading = "Deadline + patience"

    replay_numba = Protocol.replay_numba
    replay_python = Protocol.replay_python

    def advise_why(self, m: str, mech: dict, pc) -> str:
        return f"{m} serves α = {pc(mech['alpha'])} at ā_served = {pc(mech['served_acc'])}, responsiveness κ̃ = {pc(mech['kappa'])}"

    def warm(self, K) -> None:
        warm_general_kernel(K)

    def replay_arrivals(self, ctx) -> dict:
        series, S, ns = ctx.series, ctx.S, ctx.ns
        T_v = ctx.grid(grids.T)
        h = np.asarray(T_v, np.float64)[None, :] - series.lam[:, None]
        h = np.where(h > 0, h, 1.0)  # cells with T <= λ are dropped from the output
        n_adapt, nan = ctx.unlimited(len(ctx.rho_a))
        served, ssum, score, ak, _ = ctx.run(ctx.gamma, h, n_adapt, nan, nan)
        nT = len(T_v)
        # cells flattened ρ-major: (ρ_i, T_k) -> i·nT + k
        return {
            "served": np.repeat(served, nT, axis=1),
            "served_sum": np.repeat(ssum, nT, axis=1),
            "score_sum": np.repeat(score - ssum, nT, axis=1) + ak.reshape(S * ns, -1),
            "ak_sum": ak.reshape(S * ns, -1),
            "values": tuple(r for r in ctx.rho_v for _ in T_v),
            "values2": tuple(t for _ in ctx.rho_v for t in T_v),
        }

    def scenario_columns(self, xs, raw: dict, frame: pl.DataFrame, pooled: bool) -> list[pl.Series]:
        # κ̃ = Σ a·κ / Σ a over served events, so U = α · served_acc · κ̃ (+ skipped scores)
        ak = reduce_rows(xs, raw["ak_sum"], pooled)
        ssum = reduce_rows(xs, raw["served_sum"], pooled)
        with np.errstate(invalid="ignore", divide="ignore"):
            return [pl.Series("kappa", np.where(ssum > 0, ak / np.where(ssum > 0, ssum, 1.0), np.nan), nan_to_null=True)]


PROTOCOL = DiscreteContinuous()
