"""A sweep's utility table: the columns that name a comparison group, and seeds pooled like episodes.

Every answer (the analyses, the intervals, the report, the page) reads the sweep's rows through
these conventions; they sit with the sweep so that the uncertainty code below the analyses can
use them too.
"""

from __future__ import annotations

import polars as pl

from tempora_sim.protocols.base import POOLED  # noqa: F401  (an.POOLED)

#: Columns that identify a comparison group: the readable keys plus ``group``, the label of the
#: full group key without its seed (severity, domains, weights, threads …: tempora_schema.GroupKey).
#: The seed is *not* one of them: traces of one setting taken with different seeds are
#: replicates, pooled like episodes (each seed keeps its own λ from its own standard trace; see
#: :func:`pool_seeds`).
GROUP_COLUMNS = ("dataset", "model", "device", "batch_size", "stream", "group")
SEED = "seed"
#: Seed-pooled tables list the seeds they pooled here (e.g. "2025, 2026, 2027").
SEEDS = "seeds"


def group_columns(df: pl.DataFrame) -> list[str]:
    """The group-key columns present in ``df`` (hand-built tables may omit some)."""
    return [c for c in GROUP_COLUMNS if c in df.columns]


def _seed_keys(a: pl.DataFrame, b: pl.DataFrame) -> list[str]:
    """Group columns shared by two tables, plus the seed when both are per-seed."""
    g = [c for c in group_columns(a) if c in b.columns]
    return g + ([SEED] if SEED in a.columns and SEED in b.columns else [])


def _wmean(col: str, weight: pl.Expr) -> pl.Expr:
    """Weighted mean of ``col`` over its non-null values (null if none)."""
    w = pl.when(pl.col(col).is_not_null()).then(weight).otherwise(0.0)
    return pl.when(w.sum() > 0).then((pl.col(col) * w).sum() / w.sum()).otherwise(None)


#: The measures :func:`pool_seeds` reads beside a measure to pool it (``num_batches`` and the
#: keys aside): ā_served is weighted by |Q|, ā_adapt and ā_frozen by β, Cov recomputed from U, ā, κ̄.
POOLING_INPUTS = {"served_acc": ("served",), "acc_adapt": ("beta",), "acc_frozen": ("beta",), "cov": ("utility", "acc", "kappa")}


def pooling_inputs(measures) -> tuple[str, ...]:
    """``measures`` and every measure :func:`pool_seeds` reads to pool them, in that order."""
    return tuple(dict.fromkeys([*measures, *(c for m in measures for c in POOLING_INPUTS.get(m, ()))]))


def pool_seeds(df: pl.DataFrame) -> pl.DataFrame:
    """Pool a per-seed utility table over seeds, as the simulator pools episodes.

    Rows that differ only in ``seed`` become one row: utilities, α, ā, κ̄ and β are weighted
    by the batches behind them (so a seed-pooled cell is the utility of the seeds' batches
    concatenated), |Q| and the batch counts add up, ā_served / ā_adapt / ā_frozen are
    weighted by the batches they average over, Cov(a, κ) is recomputed as U − ā·κ̄ (the
    covariance of the concatenation), m is the mean over seeds, λ the mean of the seeds' λ,
    and the frozen gap the largest. ``seeds`` lists the pooled seeds and ``n_seeds`` counts
    them. A table without a ``seed`` column is returned unchanged; the per-seed table itself
    stays the sweep's output (``utility.parquet``)."""
    if SEED not in df.columns:
        return df
    scenario = ["param2", "value2", "arrivals", "arrival_seed"]  # docs/design/design.md §9 columns, where present
    keys = [c for c in group_columns(df) + ["method", "episode", "protocol", "param", "value"] + scenario if c in df.columns]
    n = pl.col("num_batches").cast(pl.Float64) if "num_batches" in df.columns else pl.lit(1.0)
    beta = pl.col("beta") if "beta" in df.columns else pl.lit(0.0)
    served = pl.col("served").cast(pl.Float64) if "served" in df.columns else pl.lit(0.0)
    aggs: list[pl.Expr] = []
    for col in df.columns:
        if col in keys or col == SEED:
            continue
        if col in ("utility", "alpha", "acc", "kappa", "beta"):
            aggs.append(_wmean(col, n).alias(col))
        elif col == "served_acc":
            aggs.append(_wmean(col, served).alias(col))
        elif col == "acc_adapt":
            aggs.append(_wmean(col, beta * n).alias(col))
        elif col == "acc_frozen":
            aggs.append(_wmean(col, (1 - beta) * n).alias(col))
        elif col in ("served", "num_batches"):
            aggs.append(pl.col(col).sum().alias(col))
        elif col in ("m", "lambda_ms"):
            aggs.append(pl.col(col).mean().alias(col))
        elif col == "frozen_gap":
            aggs.append(pl.col(col).max().alias(col))
        elif col == "cov":
            continue
        else:
            aggs.append(pl.col(col).first().alias(col))
    aggs.append(pl.col(SEED).unique().sort().cast(pl.String).str.join(", ").alias(SEEDS))
    aggs.append(pl.col(SEED).n_unique().alias("n_seeds"))
    out = df.group_by(keys, maintain_order=True).agg(aggs)
    if "cov" in df.columns:
        out = out.with_columns((pl.col("utility") - pl.col("acc") * pl.col("kappa")).alias("cov"))
    order = [c for c in df.columns if c != SEED and c in out.columns] + [SEEDS, "n_seeds"]
    return out.select(order)
