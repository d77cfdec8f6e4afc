"""Continuous: every prediction counts, discounted by its lateness against the HCI threshold T;
U = ā · κ̄ + Cov(a, κ) (docs/design/design.md §3). Only T > λ is defined."""

from __future__ import annotations

import numpy as np
import polars as pl

from tempora_sim.engine import grids
from tempora_sim.engine.oracle import continuous_reference
from tempora_sim.protocols.base import Protocol, Rows, series_slices, warm_inputs


class Continuous(Protocol):
    name = "continuous"
    grids = (grids.T,)
    terms = ("acc", "kappa", "cov")
    insolvency_factor = "kappa"
    interval_terms = ("acc", "kappa", "cov")
    advise_terms = ("acc", "kappa", "cov")
    short = "cont. "
    title = "Continuous utility (%) across HCI threshold T"
    decomposition_headers = ("ā (%)", "κ̄ (%)", "Cov(a, κ)", "U_continuous (%)")
    page_terms = (("acc", "accuracy ā", "frac"), ("kappa", "responsiveness κ̄", "frac"), ("cov", "Cov(a, κ)", "frac"))
    decomposition_terms = ("acc", "kappa", "cov")
    insolvency_accuracy = "acc"

    def decomposition_cells(self, r: dict, pct) -> list[str]:
        return [pct(r["acc"]), pct(r["kappa"], 1), f"{r['cov']:+.4f}", pct(r["utility"])]

    def advise_why(self, m: str, mech: dict, pc) -> str:
        return f"{m}: ā = {pc(mech['acc'])} discounted by κ̄ = {pc(mech['kappa'])}"

    def strict_sentence(self, r: dict, rival, pc, name) -> str:
        s = f"its {pc(r['acc'])} accuracy, discounted by responsiveness κ̄ = {pc(r['kappa'])}, gives U = {pc(r['utility'])}."
        if rival:
            other, o = rival
            s += (
                f" {name(other)}'s {pc(o['acc'])} accuracy is discounted to U = {pc(o['utility'])} (κ̄ = "
                f"{pc(o['kappa'])}); it would need {pc(o['required_acc'])} accuracy to match" + (" — insolvent." if o["insolvent"] else ".")
            )
        return s

    def warm(self, K) -> None:
        a, off, lam, v = warm_inputs()
        d = K.response_delays(a, a, off, lam)
        K.continuous_kernel(a, d, off, lam, v + 1)

    def replay_numba(self, series, T, replay) -> dict:
        from tempora_sim.engine import kernels as K  # Numba loads only when a kernel runs

        s = series
        total = int(s.a.shape[0])
        K.use_threads(total)
        d = K.response_delays(s.e, s.l, s.offsets, s.lam)
        K.use_threads(total * len(T))
        sum_ak, sum_k, cov = K.continuous_kernel(s.a, d, s.offsets, s.lam, np.asarray(T, np.float64))
        K.use_threads(total)
        return {"sum_ak": sum_ak, "sum_k": sum_k, "cov": cov, "sum_a": K.offline_kernel(s.a, s.offsets)}

    def replay_python(self, series, T, replay) -> dict:
        s = series
        sl = series_slices(s)
        S = len(sl)
        sum_ak = np.full((S, len(T)), np.nan)
        sum_k = np.full((S, len(T)), np.nan)
        cov = np.full((S, len(T)), np.nan)
        for i in range(S):
            a, e, l = s.a[sl[i]].tolist(), s.e[sl[i]].tolist(), s.l[sl[i]].tolist()
            for k, t in enumerate(T):
                if t <= s.lam[i]:
                    continue
                res = continuous_reference(a, e, l, float(s.lam[i]), t)
                sum_ak[i, k], sum_k[i, k], cov[i, k] = res.utility * len(a), res.kappa * len(a), res.cov
        return {"sum_ak": sum_ak, "sum_k": sum_k, "cov": cov, "sum_a": np.array([sum(s.a[x].tolist()) for x in sl])}

    def batch_scores(self, row: dict, a, j, delays) -> np.ndarray:
        lam = float(row["lambda_ms"])
        d = delays(lam)
        h = float(row["value"]) - lam
        return a * (h / (h + d))

    def batch_score_rows(self, rows, a, j, delays) -> np.ndarray:
        lam = rows.get_column("lambda_ms").cast(pl.Float64).to_numpy()
        h = (rows.get_column("value").cast(pl.Float64).to_numpy() - lam)[:, None]
        lams, which = np.unique(lam, return_inverse=True)
        d = np.stack([delays(float(v)) for v in lams])[which.ravel()] if lams.size else np.zeros((0, a.size))
        return a * (h / (h + d))

    def batch_ratios(self, row: dict, a, j, delays) -> dict:
        h = float(row["value"]) - float(row["lambda_ms"])
        d = delays(float(row["lambda_ms"]))
        ones = np.ones(a.size)
        return {"acc": (a, ones), "kappa": (h / (h + d), ones)}

    def columns(self, rows: Rows, stats: dict) -> dict[str, np.ndarray]:
        util = rows.reduce(stats["sum_ak"]) / rows.NN
        acc = rows.reduce(stats["sum_a"]) / rows.NN
        kappa = rows.reduce(stats["sum_k"]) / rows.NN
        cov = util - acc * kappa if rows.pooled else np.asarray(stats["cov"])
        return {"utility": util, "acc": acc, "kappa": kappa, "cov": cov}


PROTOCOL = Continuous()
