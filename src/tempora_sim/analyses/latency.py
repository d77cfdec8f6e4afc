"""Where the time goes: the per-batch latency breakdown of every method (paper Table 2), from the
traces' adapt rows gathered with their group keys."""

from __future__ import annotations

from typing import Iterable, Sequence

import polars as pl

from tempora_schema.vocabulary import BASELINE_METHOD as BASELINE
from tempora_sim.analyses.cells_and_orders import AnalysisError
from tempora_sim.sweeps.utility_table import GROUP_COLUMNS, SEED, _seed_keys, group_columns


def latency_breakdown(trace_rows: pl.DataFrame, lambdas: pl.DataFrame) -> pl.DataFrame:
    """Per-batch latency decomposition per method over the adapt rows (paper Table 2):
    δ̄, ē, ē − λ (intrinsic overhead), ℓ̄ (extrinsic), δ̄/λ (slowdown), the fraction of batches
    that updated parameters, and the peak device memory (MiB; null where unmeasured).

    ``trace_rows``: adapt/frozen rows with the group columns and ``method`` (see
    :func:`trace_rows`); ``lambdas``: group columns + ``lambda_ms``."""
    gs = _seed_keys(lambdas, trace_rows)
    g = [c for c in gs if c != SEED]
    lam = lambdas.select(gs + ["lambda_ms"]).unique(subset=gs) if gs else lambdas.select("lambda_ms").head(1)
    rows = trace_rows.filter(pl.col("phase") == "adapt")
    rows = rows.join(lam, on=gs, how="inner") if gs else rows.join(lam, how="cross")
    # several seeds: every batch of every seed, against the mean of the seeds' λ
    out = (
        rows.group_by(g + ["method"])
        .agg(
            pl.len().alias("batches"),
            pl.col("lambda_ms").unique().mean(),
            pl.col("delta_ms").mean().alias("delta_mean"),
            pl.col("e_ms").mean().alias("e_mean"),
            pl.col("l_ms").mean().alias("l_mean"),
            pl.col("updated").cast(pl.Float64).mean().alias("update_rate"),
            (pl.col("peak_mem_bytes").max() / 2**20).alias("peak_mem_mib"),
        )
        .with_columns(
            (pl.col("e_mean") - pl.col("lambda_ms")).alias("e_minus_lambda"),
            (pl.col("delta_mean") / pl.col("lambda_ms")).alias("slowdown"),
        )
    )
    # the baseline first, then fastest to slowest
    out = out.with_columns((pl.col("method") != BASELINE).alias("_b")).sort(g + ["_b", "delta_mean", "method"]).drop("_b")
    return out.select(
        g
        + ["method", "lambda_ms", "batches", "delta_mean", "e_mean", "e_minus_lambda", "l_mean", "slowdown", "update_rate", "peak_mem_mib"]
    )


def trace_rows(
    traces: Iterable,
    columns: Sequence[str] = ("phase", "episode", "step", "correct", "n", "e_ms", "l_ms", "delta_ms", "updated", "peak_mem_bytes"),
) -> pl.DataFrame:
    """Adapt rows of every trace with its group-key metadata and method name as columns.

    ``traces`` is any iterable of objects with ``.meta`` (dict) and ``.rows`` (polars frame),
    e.g. ``tempora_sim.sweeps.traces.load_traces(path).traces``."""
    frames = []
    for t in traces:
        meta = t.meta
        rows = t.rows.filter(pl.col("phase") == "adapt").select(list(columns))
        lits = [pl.lit(meta[k]).alias(k) for k in GROUP_COLUMNS + (SEED,) if k in meta]
        if hasattr(t, "group"):
            lits.append(pl.lit(t.group.label(seed=False)).alias("group"))
        method = t.method if hasattr(t, "method") else meta["method"]
        frames.append(rows.with_columns(*lits, pl.lit(method).alias("method")))
    if not frames:
        raise AnalysisError("no traces given")
    return pl.concat(frames, how="diagonal_relaxed")


def align_group_dtypes(frame: pl.DataFrame, like: pl.DataFrame) -> pl.DataFrame:
    """Cast ``frame``'s group columns to ``like``'s dtypes so the two can be joined."""
    casts = [pl.col(c).cast(like.schema[c]) for c in group_columns(frame) + [SEED] if c in like.columns and c in frame.columns]
    return frame.with_columns(casts) if casts else frame
