"""What losing costs: each method's losses and mean deficit to the cell winner (paper Table 23),
and how often it does worse than not adapting at all (Table 24)."""

from __future__ import annotations

import polars as pl

from tempora_schema.vocabulary import BASELINE_METHOD as BASELINE
from tempora_sim import protocols as P
from tempora_sim.analyses.cells_and_orders import DEFAULT_TOL, AnalysisError, cell_keys, cells, method_order, sort_methods, with_best
from tempora_sim.sweeps.utility_table import group_columns


def _per_protocol_columns(frame: pl.DataFrame, by: list[str], aggs: dict[str, pl.Expr]) -> pl.DataFrame:
    """Aggregate ``aggs`` overall and per temporal protocol, side by side (``<protocol>_<name>``)."""
    out = frame.group_by(by).agg([e.alias(n) for n, e in aggs.items()])
    for p in P.temporal():
        part = frame.filter(pl.col("protocol") == p)
        if part.height == 0:
            continue
        agg = part.group_by(by).agg([e.alias(f"{p}_{n}") for n, e in aggs.items()])
        out = out.join(agg, on=by, how="left")
    return out


def deficits(df: pl.DataFrame, tol: float = DEFAULT_TOL) -> pl.DataFrame:
    """Losses and mean utility deficit to the cell winner per method over temporal cells,
    overall and per protocol (paper Table 23). ``mean_deficit`` averages ``best − utility``
    over lost cells only (null if never lost); utilities stay fractions."""
    c = with_best(cells(df, temporal_only=True), tol)
    g = group_columns(c)
    lost = ~pl.col("is_winner")
    out = _per_protocol_columns(
        c,
        g + ["method"],
        {
            "cells": pl.len(),
            "losses": lost.sum(),
            "mean_deficit": (pl.col("best") - pl.col("utility")).filter(lost).mean(),
        },
    )
    return sort_methods(out, method_order(df), g)


def below_standard(df: pl.DataFrame, baseline: str = BASELINE) -> pl.DataFrame:
    """Temporal cells where a method's utility is strictly below the baseline's (Table 24):
    ``below`` over all temporal cells, ``<protocol>_below`` and ``<protocol>_share`` (the
    fraction of this method's misses that fall in that protocol)."""
    c = cells(df, temporal_only=True)
    if c.height == 0:
        raise AnalysisError("no temporal results to compare with standard inference")
    if baseline not in set(c.get_column("method").to_list()):
        raise AnalysisError(f"no '{baseline}' method in the results: cannot compare to standard inference")
    keys = cell_keys(c)
    base = c.filter(pl.col("method") == baseline).select(keys + [pl.col("utility").alias("_base")])
    c = c.filter(pl.col("method") != baseline).join(base, on=keys, how="inner")
    below = pl.col("utility") < pl.col("_base")
    g = group_columns(c)
    out = _per_protocol_columns(c, g + ["method"], {"cells": pl.len(), "below": below.sum()})
    for p in P.temporal():
        if f"{p}_below" in out.columns:
            out = out.with_columns(
                pl.when(pl.col("below") > 0).then(pl.col(f"{p}_below").fill_null(0) / pl.col("below")).otherwise(None).alias(f"{p}_share")
            )
    return sort_methods(out, method_order(df), g)
