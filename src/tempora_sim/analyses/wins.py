"""Who wins each cell and how sure that is: the winners per (episode, scenario) cell and per
pooled scenario, the win counts, the certainty of a lead, and how stable the winners are over
seeds (paper Table 15)."""

from __future__ import annotations

import math
from itertools import combinations

import polars as pl

from tempora_sim import protocols as P
from tempora_sim.analyses.cells_and_orders import (
    DEFAULT_TOL,
    AnalysisError,
    cell_keys,
    cells,
    check_utility_table,
    method_order,
    sort_methods,
    with_best,
    with_scenario,
)
from tempora_sim.sweeps.utility_table import POOLED, SEED, group_columns, pool_seeds
from tempora_sim.uncertainty import bootstrap as st


def winners(df: pl.DataFrame, tol: float = DEFAULT_TOL, intervals: st.Intervals | None = None) -> pl.DataFrame:
    """One row per (group, episode, scenario) cell, offline included (paper Table 15).

    ``winner`` is the winning method, or the tied methods joined by " = " (sorted by name);
    ``n_winners`` > 1 marks a tie; ``margin`` is the lead over the best non-winner (null if
    every method tied). With ``intervals`` (:func:`~tempora_sim.analyses.intervals.utility_intervals`) the cell also gets
    ``runner_up``, the paired bootstrap interval of the winner's lead over it (``lead_lo``,
    ``lead_hi``) and ``certain`` (see :func:`with_certainty`)."""
    out = _winners(df, tol)
    return with_certainty(out, cells(df), cell_keys(out), intervals)


def _winners(df: pl.DataFrame, tol: float) -> pl.DataFrame:
    c = with_best(cells(df), tol)
    keys = cell_keys(c)
    out = (
        c.group_by(keys + ["protocol", "param", "value", "scenario_order"])
        .agg(
            pl.col("method").filter(pl.col("is_winner")).sort().alias("winners"),
            pl.col("utility").max().alias("best_utility"),
            pl.col("utility").filter(~pl.col("is_winner")).max().alias("_runner_up"),
            pl.len().alias("n_methods"),
        )
        .with_columns(
            pl.col("winners").list.join(" = ").alias("winner"),
            pl.col("winners").list.len().alias("n_winners"),
            (pl.col("best_utility") - pl.col("_runner_up")).alias("margin"),
        )
        .drop("_runner_up")
    )
    return out.sort(group_columns(c) + ["episode", "scenario_order"]).select(
        keys + ["protocol", "param", "value", "scenario_order", "winner", "winners", "n_winners", "best_utility", "margin", "n_methods"]
    )


def with_certainty(w: pl.DataFrame, rows: pl.DataFrame, keys: list[str], intervals: st.Intervals | None) -> pl.DataFrame:
    """Add ``runner_up``, ``lead_lo``/``lead_hi`` and ``certain`` to one-row-per-cell ``w``.

    The uncertainty rule (docs/design/statistics.md): a cell's winner is *certain* when the paired
    bootstrap interval of (winner − runner-up) utility lies entirely above 0; otherwise, or
    when methods tie, it is *uncertain*. The runner-up is the best method that is not a
    winner. ``certain`` is null when the cell has a single method or no interval could be
    computed (e.g. results without the traces' per-batch rows)."""
    w = w.with_columns(
        pl.lit(None, pl.String).alias("runner_up"),
        pl.lit(None, pl.Float64).alias("lead_lo"),
        pl.lit(None, pl.Float64).alias("lead_hi"),
        pl.lit(None, pl.Boolean).alias("certain"),
    )
    if intervals is None or not intervals.index.height or not w.height:
        return w
    ranked = rows.filter(pl.col("utility").is_not_null()).sort(
        keys + ["utility", "method"], descending=[False] * len(keys) + [True, False], nulls_last=True
    )
    ranked = ranked.with_columns(pl.int_range(pl.len()).over(keys).alias("_pos"))
    first = ranked.filter(pl.col("_pos") == 0).select(keys + [pl.col("method").alias("_m0"), "protocol", "value"])
    second = ranked.filter(pl.col("_pos") == 1).select(keys + [pl.col("method").alias("_m1")])
    pairs = first.join(second, on=keys, how="left", nulls_equal=True)
    idx = intervals.index
    ik = [c for c in group_columns(pairs) if c in idx.columns] + ["episode", "protocol", "value"]
    look = idx.select(ik + ["method", "row"])
    pairs = pairs.with_columns(pl.col("value").cast(pl.Float64))
    look = look.with_columns(pl.col("value").cast(pl.Float64))
    pairs = pairs.join(look.rename({"method": "_m0", "row": "_r0"}), on=ik + ["_m0"], how="left", nulls_equal=True).join(
        look.rename({"method": "_m1", "row": "_r1"}), on=ik + ["_m1"], how="left", nulls_equal=True
    )
    ok = pairs.filter(pl.col("_r0").is_not_null() & pl.col("_r1").is_not_null())
    lo, hi = intervals.difference(ok.get_column("_r0").to_numpy(), ok.get_column("_r1").to_numpy())
    ok = ok.select(keys + [pl.col("_m1").alias("_ru"), pl.Series("_lo", lo, pl.Float64), pl.Series("_hi", hi, pl.Float64)])
    second_name = pairs.select(keys + [pl.col("_m1").alias("_ru0")])
    out = w.join(second_name, on=keys, how="left", nulls_equal=True).join(ok, on=keys, how="left", nulls_equal=True)
    tie = pl.col("n_winners") > 1
    return out.with_columns(
        pl.when(tie).then(None).otherwise(pl.col("_ru0")).alias("runner_up"),
        pl.when(tie).then(0.0).otherwise(pl.col("_lo")).alias("lead_lo"),
        pl.when(tie).then(0.0).otherwise(pl.col("_hi")).alias("lead_hi"),
        pl.when(tie).then(False).when(pl.col("_lo").is_null()).then(None).otherwise(pl.col("_lo") > 0).alias("certain"),
    ).drop("_ru0", "_ru", "_lo", "_hi")


def win_counts(
    df: pl.DataFrame, tol: float = DEFAULT_TOL, intervals: st.Intervals | None = None, w: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Wins per method over episodes × scenarios (the legend of the paper's Table 15):
    ``wins`` over all cells including offline, then per protocol; tied winners each get one.
    ``certain`` / ``uncertain`` split the wins by the uncertainty rule (null without
    intervals); a tie is an uncertain win for each tied method."""
    w = winners(df, tol, intervals) if w is None else w
    g = group_columns(w)
    exploded = w.explode("winners").rename({"winners": "method"})
    methods = df.select(g + ["method"]).unique()
    n_cells = w.group_by(g).agg(pl.len().alias("cells")) if g else pl.DataFrame({"cells": [w.height]})
    aggs = [
        pl.len().alias("wins"),
        pl.col("certain").fill_null(False).sum().alias("certain"),
        pl.col("certain").is_null().all().alias("_unassessed"),
    ] + [(pl.col("protocol") == p).sum().alias(p) for p in P.single()]
    counts = exploded.group_by(g + ["method"]).agg(aggs) if exploded.height else None
    out = methods
    if counts is not None:
        out = out.join(counts, on=g + ["method"], how="left")
    else:
        out = out.with_columns([pl.lit(0, pl.UInt32).alias(c) for c in ("wins", "certain") + P.single()], pl.lit(True).alias("_unassessed"))
    out = out.with_columns([pl.col(c).fill_null(0) for c in ("wins", "certain") + P.single()])
    assessed = w.get_column("certain").is_not_null().any() if "certain" in w.columns else False
    out = (
        out.with_columns(
            pl.when(pl.lit(assessed)).then(pl.col("certain")).otherwise(None).alias("certain"),
        )
        .with_columns((pl.col("wins") - pl.col("certain")).alias("uncertain"))
        .drop("_unassessed")
    )
    out = out.join(n_cells, on=g, how="left") if g else out.with_columns(pl.lit(w.height).alias("cells"))
    out = out.with_columns((pl.col("wins") / pl.col("cells")).alias("share"))
    return out.sort(g + ["wins", "method"], descending=[False] * len(g) + [True, False]).select(
        g + ["method", "wins", "certain", "uncertain", "cells", "share", *P.single()]
    )


def sweep_table(df: pl.DataFrame) -> pl.DataFrame:
    """Pooled utility of every method in every scenario (paper Tables 11–13), long format
    with the winner(s) of each pooled scenario flagged."""
    check_utility_table(df)
    p = with_scenario(pool_seeds(df).filter((pl.col("episode") == POOLED) & pl.col("utility").is_not_null()))
    g = group_columns(p)
    p = p.with_columns((pl.col("utility") >= pl.col("utility").max().over(g + ["scenario"]) - DEFAULT_TOL).alias("best"))
    out = p.select(g + ["protocol", "param", "value", "scenario", "scenario_order", "method", "utility", "best"])
    return sort_methods(out, method_order(df), g + ["scenario_order"])


def pooled_winners(df: pl.DataFrame, intervals: st.Intervals | None = None, tol: float = DEFAULT_TOL) -> pl.DataFrame:
    """The winner of every pooled scenario (episodes and seeds pooled), with its certainty:
    the same rule as :func:`winners`, on the pooled rows (units resampled)."""
    check_utility_table(df)
    p = with_scenario(pool_seeds(df).filter((pl.col("episode") == POOLED) & pl.col("utility").is_not_null()))
    if not p.height:
        raise AnalysisError("no pooled results")
    keys = group_columns(p) + ["episode", "scenario"]
    c = p.with_columns(pl.col("utility").max().over(keys).alias("best")).with_columns(
        (pl.col("utility") >= pl.col("best") - tol).alias("is_winner")
    )
    w = (
        c.group_by(keys + ["protocol", "param", "value", "scenario_order"])
        .agg(
            pl.col("method").filter(pl.col("is_winner")).sort().alias("winners"),
            pl.col("utility").max().alias("best_utility"),
            pl.col("utility").filter(~pl.col("is_winner")).max().alias("_ru"),
        )
        .with_columns(
            pl.col("winners").list.join(" = ").alias("winner"),
            pl.col("winners").list.len().alias("n_winners"),
            (pl.col("best_utility") - pl.col("_ru")).alias("margin"),
        )
        .drop("_ru")
    )
    w = w.sort(group_columns(p) + ["scenario_order"])
    return with_certainty(w, p, keys, intervals)


def seed_stability(df: pl.DataFrame, tol: float = DEFAULT_TOL, max_subsets: int = 10) -> pl.DataFrame:
    """How often the winners from k seeds equal the winners from all of a group's seeds.

    For every group with several seeds and each k from 1 to S (the number of seeds): the
    share of (episode, scenario) cells whose winner, with k seeds pooled, is the winner with
    all S pooled; averaged over the seed subsets of size k (at most ``max_subsets`` of them,
    in seed order), with the lowest and highest subset share. Where the share reaches 1 one
    seed earlier, more seeds would not have changed the grid. ``single`` rows give each seed
    alone."""
    check_utility_table(df)
    if SEED not in df.columns:
        raise AnalysisError("these results are pooled over seeds already: seed stability needs the per-seed table")
    g = group_columns(df)
    rows = []
    for key, part in df.group_by(g, maintain_order=True) if g else [((), df)]:
        seeds = sorted(set(part.get_column(SEED).to_list()))
        if len(seeds) < 2:
            continue
        ref = _winners(part, tol).select("episode", "scenario", pl.col("winner").alias("_ref"))
        cells_n = ref.height
        ident = dict(zip(g, key if isinstance(key, tuple) else (key,)))
        for k in range(1, len(seeds) + 1):
            shares = []
            for sub in list(combinations(seeds, k))[:max_subsets]:
                w = _winners(part.filter(pl.col(SEED).is_in(list(sub))), tol)
                same = w.join(ref, on=["episode", "scenario"], how="inner").filter(pl.col("winner") == pl.col("_ref"))
                shares.append(same.height / cells_n if cells_n else math.nan)
                if k == 1:
                    rows.append(
                        {
                            **ident,
                            "kind": "single",
                            "seeds": str(sub[0]),
                            "k": 1,
                            "subsets": 1,
                            "cells": cells_n,
                            "share": shares[-1],
                            "min": shares[-1],
                            "max": shares[-1],
                        }
                    )
            rows.append(
                {
                    **ident,
                    "kind": "pooled",
                    "seeds": f"{k} of {len(seeds)}",
                    "k": k,
                    "subsets": len(shares),
                    "cells": cells_n,
                    "share": sum(shares) / len(shares),
                    "min": min(shares),
                    "max": max(shares),
                }
            )
    if not rows:
        raise AnalysisError('one seed per group: trace several seeds (make demo SEEDS="2025 2026 2027") to see how stable the winners are')
    return pl.DataFrame(rows).sort(g + ["kind", "k"], descending=[False] * len(g) + [True, False], maintain_order=True)
