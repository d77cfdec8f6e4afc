"""How far the offline ranking predicts the temporal one: the offline table with its ranks and
Spearman's r_s per temporal cell, summarised per scenario (paper Tables 1, 10 and 25)."""

from __future__ import annotations

import numpy as np
import polars as pl

from tempora_sim import protocols as P
from tempora_sim.analyses.cells_and_orders import cell_keys, cells, check_utility_table, method_order, sort_methods
from tempora_sim.sweeps.utility_table import group_columns, pool_seeds
from tempora_sim.uncertainty import bootstrap as st


def _pearson(x: pl.Expr, y: pl.Expr) -> pl.Expr:
    """Population Pearson correlation; null when either side is constant."""
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = (dx * dx).sum(), (dy * dy).sum()
    return pl.when((sxx > 0) & (syy > 0)).then((dx * dy).sum() / (sxx * syy).sqrt()).otherwise(None)


def rank_correlation_cells(df: pl.DataFrame) -> pl.DataFrame:
    """Spearman r_s per temporal cell between the episode's offline ranking of methods and the
    cell's utility ranking (methods present in both; average ranks for ties)."""
    c = cells(df)
    g = group_columns(c)
    reference = P.reference()
    off = c.filter(pl.col("protocol") == reference).select(g + ["episode", "method", pl.col("utility").alias("_reference")])
    tmp = c.filter(pl.col("protocol") != reference).join(off, on=g + ["episode", "method"], how="inner")
    keys = cell_keys(c)
    tmp = tmp.with_columns(
        pl.col("utility").rank("average").over(keys).alias("_r"),
        pl.col("_reference").rank("average").over(keys).alias("_ro"),
    )
    out = tmp.group_by(keys + ["protocol", "param", "value", "scenario_order"]).agg(
        _pearson(pl.col("_ro"), pl.col("_r")).alias("spearman"), pl.len().alias("n_methods")
    )
    out = out.with_columns(pl.when(pl.col("n_methods") >= 2).then(pl.col("spearman")).otherwise(None).alias("spearman"))
    return out.sort(g + ["scenario_order", "episode"])


def rank_correlation(df: pl.DataFrame) -> pl.DataFrame:
    """Per temporal scenario: mean and sample std (ddof=1) across episodes of r_s (Table 25);
    ``episodes`` counts the defined r_s, ``undefined`` the episodes where it is null."""
    return summarise_rank_correlation(rank_correlation_cells(df))


def summarise_rank_correlation(per: pl.DataFrame, opts: st.BootstrapOptions | None = None) -> pl.DataFrame:
    """Mean / sample std / range of per-cell r_s (from :func:`rank_correlation_cells`), and
    the percentile bootstrap interval of the mean over episodes (``ci_lo``, ``ci_hi``;
    episodes resampled, ``opts`` or the defaults)."""
    opts = opts or st.BootstrapOptions()
    g = group_columns(per)
    out = (
        per.group_by(g + ["protocol", "param", "value", "scenario", "scenario_order"])
        .agg(
            pl.col("spearman").mean().alias("mean"),
            pl.col("spearman").std(ddof=1).alias("std"),
            pl.col("spearman").min().alias("min"),
            pl.col("spearman").max().alias("max"),
            pl.col("spearman").count().alias("episodes"),
            pl.col("spearman").null_count().alias("undefined"),
            pl.col("spearman").drop_nulls().alias("_r"),
        )
        .sort(g + ["scenario_order"])
    )
    cis = [st.mean_interval(np.asarray(r, np.float64), opts) if len(r) else (None, None) for r in out.get_column("_r").to_list()]
    return out.with_columns(
        pl.Series("ci_lo", [c[0] for c in cis], pl.Float64),
        pl.Series("ci_hi", [c[1] for c in cis], pl.Float64),
    ).drop("_r")


def offline_table(df: pl.DataFrame) -> pl.DataFrame:
    """Offline accuracy per episode and method, with the rank within the episode (1 = best,
    ties share the best rank), plus pooled (paper Tables 1 and 10)."""
    check_utility_table(df)
    off = pool_seeds(df).filter((pl.col("protocol") == P.reference()) & pl.col("utility").is_not_null())
    g = group_columns(off)
    off = off.with_columns(pl.col("utility").rank("min", descending=True).over(g + ["episode"]).cast(pl.Int64).alias("rank"))
    out = off.select(g + ["episode", "method", "utility", "rank"])
    return sort_methods(out, method_order(df), g + ["episode"])
