"""Discrete: batches arrive every γ = λ/ρ; the pipeline serves what it can, U = α · ā_served
(docs/design/design.md §3). Non-periodic arrivals replay on the general kernel (tempora_sim.sweeps.scenarios)."""

from __future__ import annotations

import numpy as np
import polars as pl

from tempora_sim.engine import grids
from tempora_sim.engine.oracle import discrete_reference
from tempora_sim.engine.replay_options import ReplayOptions
from tempora_sim.protocols.base import Protocol, Rows, div, series_slices, warm_inputs


class Discrete(Protocol):
    name = "discrete"
    grids = (grids.RHO,)
    strictest = "max"
    arrival_bound = True
    has_idle_effect = True
    live = True
    live_setting = ("rho", "gamma_ms", "queue")
    serves_subset = True
    terms = ("alpha", "served", "served_acc")
    insolvency_factor = "alpha"
    interval_terms = ("alpha", "served_acc")
    advise_terms = ("alpha", "served_acc")
    short = "disc. "
    title = "Discrete utility (%) across utilisation ρ"  # + the arrival process, if not periodic
    decomposition_headers = ("α (%)", "|Q|", "ā_served (%)", "U_discrete (%)")
    page_terms = (("alpha", "availability α", "frac"), ("served", "served batches |Q|", "count"), ("served_acc", "ā_served", "frac"))
    decomposition_terms = ("alpha", "served", "served_acc")
    insolvency_accuracy = "served_acc"
    speed_term = "alpha"

    def decomposition_cells(self, r: dict, pct) -> list[str]:
        return [pct(r["alpha"], 1), f"{int(r['served']):,}", pct(r["served_acc"]), pct(r["utility"])]

    def advise_why(self, m: str, mech: dict, pc) -> str:
        return f"{m} serves α = {pc(mech['alpha'])} of batches at ā_served = {pc(mech['served_acc'])}"

    def strict_sentence(self, r: dict, rival, pc, name) -> str:
        s = f"it serves α = {pc(r['alpha'])} of batches at {pc(r['served_acc'])} served accuracy, U = {pc(r['utility'])}."
        if rival:
            other, o = rival
            s += (
                f" {name(other)} serves only α = {pc(o['alpha'])}; to match the best competitor it would need "
                f"{pc(o['required_served_acc'])} served accuracy (it reaches {pc(o['served_acc'])})"
                + (" — insolvent: no accuracy gain can close the gap." if o["insolvent"] else ".")
            )
        return s

    def live_setting_values(self, run: dict) -> dict:
        return {"rho": float(run["rho"]), "gamma_ms": float(run["gamma_ms"]), "queue": int(run["queue"])}

    def live_key(self, run: dict) -> tuple:
        return (round(float(run["gamma_ms"]), 9), int(run["queue"]))

    def live_replay(self, run: dict, lam: float) -> dict:
        return {"protocols": self.name, "rho": [lam / float(run["gamma_ms"])], "queue": int(run["queue"])}

    def warm(self, K) -> None:
        a, off, lam, v = warm_inputs()
        K.discrete_kernel(a, a + 1, off, lam, v, 1, False, 0, lam, lam, lam)

    def replay_numba(self, series, rho, replay: ReplayOptions) -> dict:
        from tempora_sim.engine import kernels as K  # Numba loads only when a kernel runs

        s = series
        total = int(s.a.shape[0])
        K.use_threads(total * len(rho))
        max_delta = np.maximum.reduceat(s.delta, s.offsets[:-1]) if total else np.zeros(0)
        served, served_sum, score = K.discrete_kernel(
            s.a,
            s.delta,
            s.offsets,
            s.lam,
            np.asarray(rho, np.float64),
            replay.queue,
            replay.strict_sync,
            replay.skip_mode(K),
            s.skip_value,
            max_delta,
            K.offline_kernel(s.a, s.offsets),
        )
        return {"served": served, "served_sum": served_sum, "score_sum": score}

    def replay_python(self, series, rho, replay: ReplayOptions) -> dict:
        s = series
        sl = series_slices(s)
        S = len(sl)
        served = np.zeros((S, len(rho)), np.int64)
        ssum = np.zeros((S, len(rho)))
        score = np.zeros((S, len(rho)))
        for i in range(S):
            a, d = s.a[sl[i]].tolist(), s.delta[sl[i]].tolist()
            for k, r in enumerate(rho):
                res = discrete_reference(
                    a,
                    d,
                    float(s.lam[i]) / r,
                    replay.queue,
                    replay.sync,
                    replay.skipped,
                    int(round(1.0 / s.skip_value[i])),
                    replay.fallback,
                )
                served[i, k], ssum[i, k], score[i, k] = res.served, res.served_sum, res.score_sum
        return {"served": served, "served_sum": ssum, "score_sum": score}

    def replay_arrivals(self, ctx) -> dict:
        """Under non-periodic arrivals: the general kernel with every batch adapting."""
        n_adapt, nan = ctx.unlimited(len(ctx.rho_a))
        served, ssum, score, _, _ = ctx.run(ctx.gamma, np.zeros((ctx.S, 0)), n_adapt, nan, nan)
        return {"served": served, "served_sum": ssum, "score_sum": score, "values": tuple(ctx.rho_v), "values2": None}

    def batch_scores(self, row: dict, a, j, delays) -> np.ndarray:
        return np.where(j < int(row["served"]), a, 0.0)  # step-indexed: event j scores trace row j

    def batch_score_rows(self, rows, a, j, delays) -> np.ndarray:
        served = np.trunc(rows.get_column("served").cast(pl.Float64).to_numpy())
        return np.where(j[None, :] < served[:, None], a, 0.0)

    def batch_ratios(self, row: dict, a, j, delays) -> dict:
        served = (j < int(row["served"])).astype(np.float64)
        return {"served_acc": (a * served, served)}

    def columns(self, rows: Rows, stats: dict) -> dict[str, np.ndarray]:
        served = rows.reduce(stats["served"])
        return {
            "served": served,
            "alpha": served / rows.NN,
            "served_acc": div(rows.reduce(stats["served_sum"]), served),
            "utility": rows.reduce(stats["score_sum"]) / rows.NN,
        }


PROTOCOL = Discrete()
