"""Amortised: the model adapts until the overhead budget B is spent, then runs frozen;
U = β · ā_adapt + (1 − β) · ā_frozen (docs/design/design.md §3)."""

from __future__ import annotations

import numpy as np
import polars as pl

from tempora_sim.engine import grids
from tempora_sim.engine.oracle import amortised_reference
from tempora_sim.engine.replay_options import ReplayOptions
from tempora_sim.errors import ProtocolError
from tempora_sim.protocols.base import Protocol, Rows, div, series_slices, warm_inputs


class Amortised(Protocol):
    name = "amortised"
    grids = (grids.B,)
    live = True
    live_setting = ("budget_ms", "budget_rule")
    terms = ("m", "beta", "acc_adapt", "acc_frozen", "frozen_gap")
    interval_terms = ("m", "beta", "acc_adapt", "acc_frozen")
    advise_terms = ("beta", "acc_adapt", "acc_frozen")
    short = "amort. "
    title = "Amortised utility (%) across overhead budget B"
    decomposition_headers = ("β (%)", "m", "ā_adapt (%)", "ā_frozen (%)", "gap", "U_amortised (%)")
    page_terms = (
        ("m", "adapted batches m", "real"),
        ("beta", "adapted share β", "frac"),
        ("acc_adapt", "ā_adapt", "frac"),
        ("acc_frozen", "ā_frozen", "frac"),
    )
    decomposition_terms = ("beta", "m", "acc_adapt", "acc_frozen", "frozen_gap")
    spends_budget = True

    def decomposition_cells(self, r: dict, pct) -> list[str]:
        return [
            pct(r["beta"], 1),
            f"{r['m']:.1f}",
            pct(r["acc_adapt"]),
            pct(r["acc_frozen"]),
            "–" if r["frozen_gap"] is None else str(r["frozen_gap"]),
            pct(r["utility"]),
        ]

    def advise_why(self, m: str, mech: dict, pc) -> str:
        frozen = "" if mech["acc_frozen"] is None else f", then ā_frozen = {pc(mech['acc_frozen'])}"
        adapt = "" if mech["acc_adapt"] is None else f" (ā_adapt = {pc(mech['acc_adapt'])})"
        return f"{m} adapts on β = {pc(mech['beta'])} of the stream{adapt}{frozen}"

    def strict_episode_terms(self) -> dict[str, pl.Expr]:
        """The cut-off m over the episodes (the budget is per episode); ``exhausted``: the budget
        ran out before the end (β < 1) in some episode."""
        return {
            "m_at": pl.col("value").first(),
            "m_mean": pl.col("m").mean(),
            "m_min": pl.col("m").min(),
            "m_max": pl.col("m").max(),
            "exhausted": (pl.col("beta") < 1).any(),
        }

    def strict_sentence(self, r: dict, rival, pc, name) -> str:
        frozen = "" if r["acc_frozen"] is None else f", then ā_frozen = {pc(r['acc_frozen'])} frozen"
        return f"it adapts on β = {pc(r['beta'])} of the stream{frozen}, U = {pc(r['utility'])}."

    def live_setting_values(self, run: dict) -> dict:
        return {"budget_ms": float(run["budget_ms"]), "budget_rule": run["budget_rule"]}

    def live_key(self, run: dict) -> tuple:
        return (float(run["budget_ms"]), run["budget_rule"])

    def live_replay(self, run: dict, lam: float) -> dict:
        return {"protocols": self.name, "B_ms": [float(run["budget_ms"])], "budget_rule": run["budget_rule"]}

    def warm(self, K) -> None:
        a, off, lam, v = warm_inputs()
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

    def replay_numba(self, series, B, replay: ReplayOptions) -> dict:
        from tempora_sim.engine import kernels as K  # Numba loads only when a kernel runs

        s = series
        K.use_threads(int(s.a.shape[0]))
        pa_, pc_ = K.amortised_prefixes(s.a, s.delta, s.offsets, s.lam)
        K.use_threads(len(s.episode) * len(B) * 64)  # binary searches: cheap per value
        m, adapt_sum, frozen_acc, gap = K.amortised_kernel(
            pa_,
            pc_,
            s.offsets,
            np.asarray(B, np.float64),
            replay.overshoot,
            s.frozen_from_adapt,
            s.ck_offsets,
            s.ck_values,
            s.row_offsets,
            s.f_steps,
            s.f_suf_correct,
            s.f_suf_n,
        )
        return {"m": m, "adapt_sum": adapt_sum, "frozen_acc": frozen_acc, "gap": gap}

    def replay_python(self, series, B, replay: ReplayOptions) -> dict:
        s = series
        sl = series_slices(s)
        S = len(sl)
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
                res = amortised_reference(a, d, float(s.lam[i]), b, rows, replay.budget_rule, bool(s.frozen_from_adapt[i]))
                m[i, k] = res.m
                asum[i, k] = sum(a[: res.m])
                if res.m < len(a):
                    if res.acc_frozen is None:
                        gap[i, k] = -2
                    else:
                        facc[i, k], gap[i, k] = res.acc_frozen, res.frozen_gap
        return {"m": m, "adapt_sum": asum, "frozen_acc": facc, "gap": gap}

    def check_replay(self, series, raw: dict, budgets) -> None:
        """A cut-off m < N needs a frozen checkpoint at or before m with rows from m on."""
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

    def batch_scores(self, row: dict, a, j, delays) -> np.ndarray:
        frozen = row["acc_frozen"]
        return np.where(j < int(round(row["m"])), a, 0.0 if frozen is None else float(frozen))

    def batch_score_rows(self, rows, a, j, delays) -> np.ndarray:
        m = np.round(rows.get_column("m").cast(pl.Float64).to_numpy())  # half to even, as round()
        frozen = rows.get_column("acc_frozen").cast(pl.Float64).fill_null(0.0).to_numpy()
        return np.where(j[None, :] < m[:, None], a, frozen[:, None])

    def batch_ratios(self, row: dict, a, j, delays) -> dict:
        adapt = (j < int(round(row["m"]))).astype(np.float64)
        return {"acc_adapt": (a * adapt, adapt)}

    def columns(self, rows: Rows, stats: dict) -> dict[str, np.ndarray]:
        m = np.asarray(stats["m"], np.float64)
        adapt_sum = np.asarray(stats["adapt_sum"])
        facc = np.asarray(stats["frozen_acc"])
        gap = np.asarray(stats["gap"], np.float64)
        NN = rows.NN
        nrep = np.repeat(rows.n[:, None], rows.n_vals, axis=1)
        frozen_n = nrep - m
        fsum = np.where(frozen_n > 0, np.nan_to_num(facc) * frozen_n, 0.0)
        util_sum = adapt_sum + fsum
        if rows.pooled:
            agg = rows.agg
            M = agg(m)
            FN = agg(frozen_n)
            g = np.where(frozen_n > 0, gap, -1.0)
            gmax = np.maximum.reduceat(g, rows.starts, axis=0)
            return {
                "m": M / rows.nep[:, None],
                "beta": M / NN,
                "acc_adapt": div(agg(adapt_sum), M),
                "acc_frozen": div(agg(fsum), FN),
                "utility": agg(util_sum) / NN,
                "frozen_gap": np.where(gmax >= 0, gmax, np.nan),
            }
        return {
            "m": m,
            "beta": m / NN,
            "acc_adapt": div(adapt_sum, m),
            "acc_frozen": np.where(frozen_n > 0, facc, np.nan),
            "utility": util_sum / NN,
            "frozen_gap": np.where(gap >= 0, gap, np.nan),
        }


PROTOCOL = Amortised()
