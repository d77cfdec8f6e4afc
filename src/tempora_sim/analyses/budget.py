"""What each extra second of adaptation budget buys: the overhead a method actually spends under
the amortised protocol, and its Pareto frontier over the budget."""

from __future__ import annotations

import math

import polars as pl

from tempora_sim import protocols as P
from tempora_sim.analyses.cells_and_orders import DEFAULT_TOL, AnalysisError, method_order, sort_methods
from tempora_sim.analyses.decompositions import pooled_rows
from tempora_sim.sweeps.utility_table import POOLED, SEED, _seed_keys, group_columns


def budget_protocol() -> str:
    """The protocol whose grid is an overhead budget spent batch by batch (amortised, B): the one
    the budget and its Pareto frontier are read from."""
    found = [p for p in P.temporal() if P.get(p).spends_budget]
    if not found:
        raise AnalysisError("no protocol spends an adaptation budget")
    return found[0]


def budget_spent(trace_rows: pl.DataFrame, utility: pl.DataFrame) -> pl.DataFrame:
    """Overhead actually spent per amortised cell: Σ_{i≤m} c_i with c_i = max(0, δ_i − λ)
    (docs/design/design.md §4), from the traces' adapt rows and the cell's cut-off m; pooled rows get the
    mean over episodes (the budget is per episode)."""
    g = _seed_keys(utility, trace_rows)
    lam = utility.select(g + ["lambda_ms"]).unique(subset=g) if g else utility.select("lambda_ms").head(1)
    rows = trace_rows.filter(pl.col("phase") == "adapt")
    rows = rows.join(lam, on=g, how="inner") if g else rows.join(lam, how="cross")
    rows = rows.sort(g + ["method", "episode", "step"]).with_columns(
        (pl.col("delta_ms") - pl.col("lambda_ms")).clip(lower_bound=0).cum_sum().over(g + ["method", "episode"]).alias("_cum"),
    )
    am = utility.filter((pl.col("protocol") == budget_protocol()) & (pl.col("episode") != POOLED))
    am = am.with_columns((pl.col("m") - 1).cast(pl.Int64).alias("_last"))
    spent = am.join(
        rows.select(g + ["method", "episode", pl.col("step").cast(pl.Int64).alias("_last"), "_cum"]),
        on=g + ["method", "episode", "_last"],
        how="left",
    ).with_columns(pl.when(pl.col("m") <= 0).then(0.0).otherwise(pl.col("_cum")).alias("spent_ms"))
    per_episode = spent.select(g + ["method", "episode", "value", "spent_ms"])
    if SEED in g:  # seeds are replicates: the mean over seeds, like every other pooled number
        g = [c for c in g if c != SEED]
        per_episode = per_episode.group_by(g + ["method", "episode", "value"], maintain_order=True).agg(pl.col("spent_ms").mean())
    pooled = per_episode.group_by(g + ["method", "value"]).agg(pl.col("spent_ms").mean()).with_columns(pl.lit(POOLED).alias("episode"))
    return pl.concat([per_episode, pooled.select(per_episode.columns)], how="vertical_relaxed")


def pareto(df: pl.DataFrame, spent: pl.DataFrame | None = None, tol: float = DEFAULT_TOL) -> pl.DataFrame:
    """The amortised Pareto frontier per method over the budget, on pooled utilities.

    x is the overhead actually spent (``spent_ms``, when :func:`budget_spent` could compute it
    from traces) or else the budget B itself. A point is ``efficient`` if it beats every point
    of the same method with less x; ``gain_pp_per_s`` is the utility gained (pp) per extra
    second of x since the previous efficient point; ``best_at_B`` marks the method(s) with
    the highest utility at that budget."""
    part = pooled_rows(df, budget_protocol()).filter(pl.col("utility").is_not_null())
    g = group_columns(part)
    if spent is not None:
        spent = spent.filter(pl.col("episode") == POOLED).drop("episode")
        part = part.join(
            spent.select([c for c in g if c in spent.columns] + ["method", "value", "spent_ms"]),
            on=[c for c in g if c in spent.columns] + ["method", "value"],
            how="left",
        )
    else:
        part = part.with_columns(pl.lit(None, pl.Float64).alias("spent_ms"))
    part = part.with_columns(pl.coalesce("spent_ms", "value").alias("_x"))
    part = part.with_columns((pl.col("utility") >= pl.col("utility").max().over(g + ["value"]) - tol).alias("best_at_B"))
    rows = []
    for _key, sub in part.sort(g + ["method", "_x", "utility"], descending=[False] * (len(g) + 2) + [True]).group_by(
        g + ["method"], maintain_order=True
    ):
        best_u, best_x = -math.inf, None
        for r in sub.iter_rows(named=True):
            eff = r["utility"] > best_u + tol
            gain = None
            if eff and best_x is not None and r["_x"] > best_x:
                gain = (r["utility"] - best_u) * 100 / ((r["_x"] - best_x) / 1000)
            if eff:
                best_u, best_x = r["utility"], r["_x"]
            rows.append(
                {
                    **{k: r[k] for k in g},
                    "method": r["method"],
                    "B_ms": r["value"],
                    "spent_ms": r["spent_ms"],
                    "m": r.get("m"),
                    "beta": r.get("beta"),
                    "utility": r["utility"],
                    "efficient": eff,
                    "gain_pp_per_s": gain,
                    "best_at_B": r["best_at_B"],
                }
            )
    out = pl.DataFrame(rows, schema_overrides={"spent_ms": pl.Float64, "gain_pp_per_s": pl.Float64})
    return sort_methods(out, method_order(df), g).sort(g, maintain_order=True) if out.height else out
