"""Why a method loses under the strictest pressure of each protocol: the decomposition of its
utility into the protocol's terms (paper Tables 3–5), the timing-derived terms at the strictest
values (Table 14) and insolvency."""

from __future__ import annotations

import polars as pl

from tempora_schema.vocabulary import BASELINE_METHOD as BASELINE
from tempora_sim import protocols as P
from tempora_sim.analyses.cells_and_orders import (
    AnalysisError,
    cell_keys,
    cells,
    check_utility_table,
    format_value,
    method_order,
    sort_methods,
    with_best_other,
)
from tempora_sim.sweeps.utility_table import POOLED, group_columns, pool_seeds


def pooled_rows(df: pl.DataFrame, protocol: str) -> pl.DataFrame:
    """The protocol's rows pooled over seeds and episodes (refused in one line where there are none)."""
    check_utility_table(df)
    part = pool_seeds(df).filter((pl.col("protocol") == protocol) & (pl.col("episode") == POOLED))
    if part.height == 0:
        raise AnalysisError(f"no pooled ('{POOLED}') {protocol} rows in the results")
    return part


def strictest_value(df: pl.DataFrame, protocol: str) -> pl.DataFrame:
    """Per group, the strictest parameter value of ``protocol`` (max ρ, min T, min B)."""
    part = pool_seeds(df).filter((pl.col("protocol") == protocol) & pl.col("value").is_not_null())
    g = group_columns(part)
    agg = pl.col("value").max() if P.get(protocol).strictest == "max" else pl.col("value").min()
    if not g:
        return pl.DataFrame({"value": [part.select(agg).item()]})
    return part.group_by(g).agg(agg)


def _at(df: pl.DataFrame, protocol: str, value: float | None) -> pl.DataFrame:
    """The protocol's pooled rows at ``value`` (its strictest where None), each with its best competitor."""
    part = pooled_rows(df, protocol)
    g = group_columns(part)
    if value is None:
        sel = strictest_value(part, protocol)
        part = part.join(sel, on=g + ["value"], how="inner") if g else part.filter(pl.col("value") == sel.item())
    else:
        part = part.filter((pl.col("value") - value).abs() <= 1e-9 * max(1.0, abs(value)))
        if part.height == 0:
            raise AnalysisError(f"no {protocol} results at {format_value(protocol, value)}")
    return with_best_other(part, g + ["value"])


def _required(utility_col: str, factor: str) -> pl.Expr:
    """best competitor / factor: the accuracy needed to match the best other method."""
    need = pl.col(utility_col) / pl.col(factor)
    return (
        pl.when(pl.col(utility_col).is_null() | pl.col(factor).is_null())
        .then(None)
        .when(pl.col(factor) > 0)
        .then(need)
        .when(pl.col(utility_col) > 0)
        .then(float("inf"))
        .otherwise(0.0)
    )


def decomposition(df: pl.DataFrame, protocol: str, value: float | None = None) -> pl.DataFrame:
    """A protocol's decomposition at ``value`` (default: its strictest), pooled over episodes
    (paper Tables 3–5): per method its decomposition terms and U. Where a timing factor caps
    the protocol's utility (α, κ̄), the accuracy term needed to match the best competitor (best
    other U / factor, ``required_<accuracy term>``) and ``insolvent`` where that is above 1;
    elsewhere ``below_standard``, whether adaptation was harmful (U below the baseline's U at
    the same value)."""
    proto = P.get(protocol)
    if not proto.decomposition_terms:
        raise AnalysisError(f"protocol '{protocol}' has no decomposition")
    part = _at(df, protocol, value)
    g = group_columns(part)
    cols = g + ["value", "method", *proto.decomposition_terms, "utility"]
    if proto.insolvency_factor:
        need = f"required_{proto.insolvency_accuracy}" if proto.insolvency_accuracy else "required"
        part = part.with_columns(_required("best_other", proto.insolvency_factor).alias(need))
        part = part.with_columns((pl.col(need) > 1).alias("insolvent"))
        cols += ["best_other_method", "best_other", need, "insolvent"]
    else:
        base = part.filter(pl.col("method") == BASELINE).select(g + ["value", pl.col("utility").alias("_base")])
        if base.height:
            part = part.join(base, on=g + ["value"], how="left").with_columns((pl.col("utility") < pl.col("_base")).alias("below_standard"))
        else:
            part = part.with_columns(pl.lit(None, pl.Boolean).alias("below_standard"))
        cols += ["below_standard"]
    return sort_methods(part.select([c for c in cols if c in part.columns]), method_order(df), g)


def strict_terms(df: pl.DataFrame) -> pl.DataFrame:
    """Table 14: the timing-derived terms under the strictest pressure of each protocol: the
    pooled insolvency factors (α at max ρ, κ̄ at min T) and the per-episode terms a protocol
    summarises over episodes (the cut-off m at min B: mean, min, max; ``exhausted`` = the
    budget ran out before the end in some episode)."""
    parts = []
    for proto, col in _insolvency_factors():
        try:
            p = _at(df, proto, None)
        except AnalysisError:
            continue
        g = group_columns(p)
        parts.append(p.select(g + ["method", pl.col("value").alias(f"{col}_at"), pl.col(col)]))
    df = pool_seeds(df)
    g = group_columns(df)
    for proto in P.temporal():
        summary = P.get(proto).strict_episode_terms()
        if not summary:
            continue
        ep = df.filter((pl.col("protocol") == proto) & (pl.col("episode") != POOLED) & pl.col("value").is_not_null())
        if ep.height:
            sel = strictest_value(ep, proto)
            ep = ep.join(sel, on=g + ["value"], how="inner") if g else ep.filter(pl.col("value") == sel.item())
            parts.append(ep.group_by(g + ["method"]).agg([e.alias(n) for n, e in summary.items()]))
    if not parts:
        raise AnalysisError("no temporal results to decompose")
    out = parts[0]
    for p in parts[1:]:
        out = out.join(p, on=g + ["method"], how="full", coalesce=True)
    return sort_methods(out, method_order(df), g)


def _insolvency_factors() -> list[tuple[str, str]]:
    """(protocol, factor column) of the protocols whose utility is capped by a timing factor
    (α, κ̄): at accuracy 1 they reach only the factor, so a larger gap is insolvency."""
    return [(p, P.get(p).insolvency_factor) for p in P.temporal() if P.get(p).insolvency_factor]


def insolvency(df: pl.DataFrame) -> pl.DataFrame:
    """Across every per-episode discrete and continuous cell: how often each method is
    insolvent (needs > 100 % served accuracy / accuracy to match the best competitor)."""
    factors = _insolvency_factors()
    c = cells(df, temporal_only=True).filter(pl.col("protocol").is_in([p for p, _ in factors]))
    keys = cell_keys(c)
    c = with_best_other(c, keys)
    factor = pl.lit(None, pl.Float64)
    for p, col in reversed(factors):
        factor = pl.when(pl.col("protocol") == p).then(pl.col(col)).otherwise(factor)
    c = c.with_columns(factor.alias("_factor")).with_columns(_required("best_other", "_factor").alias("required"))
    c = c.with_columns((pl.col("required") > 1).alias("insolvent"))
    g = group_columns(c)
    aggs = {"cells": pl.len(), "insolvent": pl.col("insolvent").sum(), "max_required": pl.col("required").max()}
    out = c.group_by(g + ["method"]).agg([e.alias(n) for n, e in aggs.items()])
    for p, _ in factors:
        part = c.filter(pl.col("protocol") == p)
        if part.height:
            out = out.join(
                part.group_by(g + ["method"]).agg(pl.len().alias(f"{p}_cells"), pl.col("insolvent").sum().alias(f"{p}_insolvent")),
                on=g + ["method"],
                how="left",
            )
    return sort_methods(out, method_order(df), g)
