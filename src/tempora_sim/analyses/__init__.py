"""Analyses over a sweep's ``utility.parquet``: who wins where, and why the others lose.

Every public function takes the sweep's utility table (docs/design/design.md §6 columns) and returns one
polars table. They answer the practitioner's questions behind the paper's findings:
which method wins each (episode, scenario) cell (Table 15 / Figure 1), how far the offline
ranking predicts the temporal one (Table 25), what losing costs (Table 23), how often a
method does worse than not adapting at all (Table 24), why it loses under the strictest
pressure of each protocol (Tables 3–5, 14, insolvency), and what each extra second of
adaptation budget buys (the amortised Pareto frontier). The latency breakdown (Table 2)
needs the traces' per-batch times, so it takes trace rows instead.

Conventions, stated once and used everywhere:

* A *scenario* is (protocol, parameter value); ``offline`` is one scenario. A *cell* is one
  (group, episode, scenario); pooled ``episode == "__all__"`` rows are not cells, they feed
  the aggregate decompositions only.
* *Winner* of a cell: every method whose utility is within ``tol`` (default 1e-12, absolute)
  of the cell's best utility. Tied methods share the cell and each is credited one win.
* Losses and deficits (Table 23) and below-standard counts (Table 24) are over *temporal*
  cells (offline excluded), as in the paper; a tied winner has not lost. The mean deficit is
  the mean of ``best − utility`` over the cells a method lost (the paper's "upon losing").
* Spearman r_s: ranks with ties averaged, then the Pearson correlation of the two rank
  vectors. If either ranking is constant (or fewer than 2 methods), r_s is undefined → null.
  Across episodes we report the mean and the *sample* standard deviation (ddof = 1), which
  reproduces the paper's Table 25 (e.g. its ρ = 100 % column: std 0.51 from the listed cells).
* "Best competitor" of a method = the best *other* method in the same cell. Insolvent means
  the method would need more than 100 % served accuracy (discrete: best competitor / α) or
  accuracy (continuous: best competitor / κ̄, zero alignment) to match it.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Iterable, Sequence

import numpy as np
import polars as pl

from tempora_schema.policies import parse_policy, split_label
from tempora_schema.vocabulary import BASELINE_METHOD as BASELINE
from tempora_schema.vocabulary import CORRUPTION_CATEGORIES
from tempora_sim import protocols as P
from tempora_sim.errors import SimError
from tempora_sim.sweeps.utility_table import GROUP_COLUMNS, POOLED, SEED, SEEDS, _seed_keys, _wmean, group_columns, pool_seeds  # noqa: F401  (an.X)
from tempora_sim.uncertainty import bootstrap as st

DEFAULT_TOL = 1e-12

#: ImageNet-C / CIFAR-10-C corruption categories (Hendrycks & Dietterich, 2019): episodes are
#: listed in this canonical order, and one per category represents it in the utility curves
#: (like the paper's Figure 3).
CATEGORIES = CORRUPTION_CATEGORIES
CANONICAL_EPISODES = [c for cs in CATEGORIES.values() for c in cs]

REQUIRED_COLUMNS = ("method", "episode", "protocol", "param", "value", "utility")


class AnalysisError(SimError, ValueError):
    """The utility table cannot support the requested analysis (message says why)."""










def check_utility_table(df: pl.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise AnalysisError(f"utility table lacks column(s) {', '.join(missing)} (docs/design/design.md §6)")
    known = P.single()
    unknown = set(df.get_column("protocol").unique().to_list()) - set(known)
    if unknown:
        raise AnalysisError(f"unknown protocol(s) {sorted(unknown)}; expected {known}")


def format_value(protocol: str, value: float | None) -> str:
    """Human label of a scenario parameter: ρ in %, T in ms, B in s (or ms below 1 s)."""
    return P.get(protocol).scenario_label(value)


def pressure_order(protocol: str, value: float | None) -> tuple[int, float]:
    """Sort key: offline first, then each protocol from its strictest value to its most relaxed
    (ρ descending, T ascending, B ascending), in the registry's order."""
    p = P.single().index(protocol)
    if value is None:
        return (p, 0.0)
    return (p, P.get(protocol).pressure_key(value))


def with_scenario(df: pl.DataFrame) -> pl.DataFrame:
    """Add ``scenario`` (label) and ``scenario_order`` (int, strict → relaxed) columns."""
    pairs = df.select("protocol", "value").unique()
    pairs = sorted(pairs.iter_rows(), key=lambda r: pressure_order(r[0], None if r[0] == "offline" else r[1]))
    keys = pl.DataFrame(
        {
            "protocol": [p for p, _ in pairs],
            "value": [None if p == "offline" else v for p, v in pairs],
            "scenario": [format_value(p, None if p == "offline" else v) for p, v in pairs],
            "scenario_order": list(range(len(pairs))),
        },
        schema={
            "protocol": pl.String,
            "value": df.schema["value"] if df.schema["value"] != pl.Null else pl.Float64,
            "scenario": pl.String,
            "scenario_order": pl.Int64,
        },
    )
    base = df.drop([c for c in ("scenario", "scenario_order") if c in df.columns])
    if base.schema["value"] == pl.Null:
        base = base.with_columns(pl.col("value").cast(pl.Float64))
    base = base.with_columns(pl.when(pl.col("protocol") == "offline").then(None).otherwise(pl.col("value")).alias("value"))
    return base.join(keys, on=["protocol", "value"], how="left", nulls_equal=True)


def episode_order(episodes: Sequence[str]) -> list[str]:
    """Canonical corruption order where the names are known, then the rest by name (pooled
    rows excluded)."""
    known = [e for e in CANONICAL_EPISODES if e in episodes]
    return known + sorted(e for e in set(episodes) if e not in known and e != POOLED)


def representative_episodes(episodes: Sequence[str], k: int = 4) -> list[str]:
    """One episode per corruption category (the first present, in canonical order), topped up
    with the first other episodes up to ``k``."""
    eps = set(episodes) - {POOLED}
    picked = [next(e for e in cs if e in eps) for cs in CATEGORIES.values() if any(e in eps for e in cs)]
    for e in episode_order(list(eps)):
        if len(picked) >= k:
            break
        if e not in picked:
            picked.append(e)
    return episode_order(picked)[:k]


def cells(df: pl.DataFrame, temporal_only: bool = False) -> pl.DataFrame:
    """Per-episode rows with a utility, labelled by scenario (pooled rows dropped)."""
    check_utility_table(df)
    df = pool_seeds(df)
    out = df.filter((pl.col("episode") != POOLED) & pl.col("utility").is_not_null())
    if temporal_only:
        out = out.filter(pl.col("protocol") != "offline")
    return with_scenario(out)


def cell_keys(df: pl.DataFrame) -> list[str]:
    return group_columns(df) + ["episode", "scenario"]


def method_order(df: pl.DataFrame, baseline: str = BASELINE) -> list[str]:
    """Methods in reading order: the baseline first, then fastest to slowest as measured by
    pooled availability α at the strictest ρ (ties and missing α: by name). This puts
    gradient-free methods before gradient-based ones, like the paper's tables."""
    df = pool_seeds(df)
    methods = sorted(set(df.get_column("method").to_list()))
    alpha: dict[str, float] = {}
    disc = df.filter((pl.col("protocol") == "discrete") & (pl.col("episode") == POOLED) & pl.col("value").is_not_null())
    if disc.height and "alpha" in disc.columns:
        strict = disc.get_column("value").max()
        for m, a in disc.filter(pl.col("value") == strict).group_by("method").agg(pl.col("alpha").mean()).iter_rows():
            if a is not None:
                alpha[m] = a
    # a method's policy traces (tent@every:4, docs/design/design.md §11) follow the method itself
    base_alpha: dict[str, float] = {}
    for m in methods:
        b = split_label(m)[0]
        if b == m or b not in methods:
            base_alpha[b] = max(base_alpha.get(b, -1.0), alpha.get(m, -1.0))

    def key(m: str) -> tuple:
        b, policy = split_label(m)
        return (-base_alpha.get(b, -1.0), b, policy is not None, -alpha.get(m, -1.0), m)

    rest = sorted((m for m in methods if m != baseline), key=key)
    return ([baseline] if baseline in methods else []) + rest


def _sort_methods(df: pl.DataFrame, order: Sequence[str], extra: Sequence[str] = ()) -> pl.DataFrame:
    rank = pl.DataFrame({"method": list(order), "_m": list(range(len(order)))})
    by = [c for c in extra if c in df.columns] + ["_m"]
    return df.join(rank, on="method", how="left").sort(by, nulls_last=True).drop("_m")


def _with_best(c: pl.DataFrame, tol: float) -> pl.DataFrame:
    """Add the cell's best utility ``best`` and ``is_winner`` (within ``tol`` of it)."""
    keys = cell_keys(c)
    return c.with_columns(pl.col("utility").max().over(keys).alias("best")).with_columns(
        (pl.col("utility") >= pl.col("best") - tol).alias("is_winner")
    )


def _with_best_other(c: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Add ``best_other`` / ``best_other_method``: the best *other* method in the same cell."""
    ranked = c.sort(keys + ["utility", "method"], descending=[False] * len(keys) + [True, False], nulls_last=True)
    ranked = ranked.with_columns(pl.int_range(pl.len()).over(keys).alias("_pos"))
    top = ranked.filter(pl.col("_pos") <= 1).select(keys + [pl.col("_pos"), pl.col("method").alias("_bm"), pl.col("utility").alias("_bu")])
    first = top.filter(pl.col("_pos") == 0).drop("_pos").rename({"_bm": "_m0", "_bu": "_u0"})
    second = top.filter(pl.col("_pos") == 1).drop("_pos").rename({"_bm": "_m1", "_bu": "_u1"})
    out = ranked.join(first, on=keys, how="left", nulls_equal=True).join(second, on=keys, how="left", nulls_equal=True)
    is_top = pl.col("method") == pl.col("_m0")
    return out.with_columns(
        pl.when(is_top).then(pl.col("_u1")).otherwise(pl.col("_u0")).alias("best_other"),
        pl.when(is_top).then(pl.col("_m1")).otherwise(pl.col("_m0")).alias("best_other_method"),
    ).drop("_pos", "_m0", "_u0", "_m1", "_u1")


# ----------------------------------------------------------------------------- winners
def winners(df: pl.DataFrame, tol: float = DEFAULT_TOL, intervals: st.Intervals | None = None) -> pl.DataFrame:
    """One row per (group, episode, scenario) cell, offline included (paper Table 15).

    ``winner`` is the winning method, or the tied methods joined by " = " (sorted by name);
    ``n_winners`` > 1 marks a tie; ``margin`` is the lead over the best non-winner (null if
    every method tied). With ``intervals`` (:func:`utility_intervals`) the cell also gets
    ``runner_up``, the paired bootstrap interval of the winner's lead over it (``lead_lo``,
    ``lead_hi``) and ``certain`` (see :func:`with_certainty`)."""
    out = _winners(df, tol)
    return with_certainty(out, cells(df), cell_keys(out), intervals)


def _winners(df: pl.DataFrame, tol: float) -> pl.DataFrame:
    c = _with_best(cells(df), tol)
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


# ----------------------------------------------------------------------------- Spearman
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
    off = c.filter(pl.col("protocol") == "offline").select(g + ["episode", "method", pl.col("utility").alias("offline")])
    tmp = c.filter(pl.col("protocol") != "offline").join(off, on=g + ["episode", "method"], how="inner")
    keys = cell_keys(c)
    tmp = tmp.with_columns(
        pl.col("utility").rank("average").over(keys).alias("_r"),
        pl.col("offline").rank("average").over(keys).alias("_ro"),
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


# ----------------------------------------------------------------------------- deficits
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
    c = _with_best(cells(df, temporal_only=True), tol)
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
    return _sort_methods(out, method_order(df), g)


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
    return _sort_methods(out, method_order(df), g)


# ----------------------------------------------------------------------------- decompositions
def _pooled(df: pl.DataFrame, protocol: str) -> pl.DataFrame:
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
    part = _pooled(df, protocol)
    g = group_columns(part)
    if value is None:
        sel = strictest_value(part, protocol)
        part = part.join(sel, on=g + ["value"], how="inner") if g else part.filter(pl.col("value") == sel.item())
    else:
        part = part.filter((pl.col("value") - value).abs() <= 1e-9 * max(1.0, abs(value)))
        if part.height == 0:
            raise AnalysisError(f"no {protocol} results at {format_value(protocol, value)}")
    return _with_best_other(part, g + ["value"])


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


def discrete_decomposition(df: pl.DataFrame, rho: float | None = None) -> pl.DataFrame:
    """Table 3 at ρ (default: the strictest): α, |Q|, ā_served, U, and insolvency: the served
    accuracy needed to match the best competitor (best other U / α); insolvent if > 1."""
    part = _at(df, "discrete", rho).with_columns(_required("best_other", "alpha").alias("required_served_acc"))
    part = part.with_columns((pl.col("required_served_acc") > 1).alias("insolvent"))
    g = group_columns(part)
    cols = g + [
        "value",
        "method",
        "alpha",
        "served",
        "served_acc",
        "utility",
        "best_other_method",
        "best_other",
        "required_served_acc",
        "insolvent",
    ]
    return _sort_methods(part.select(cols), method_order(df), g)


def continuous_decomposition(df: pl.DataFrame, T_ms: float | None = None) -> pl.DataFrame:
    """Table 4 at T (default: the strictest): ā, κ̄, Cov(a, κ), U, and the accuracy needed to
    match the best competitor at zero alignment (best other U / κ̄); insolvent if > 1."""
    part = _at(df, "continuous", T_ms).with_columns(_required("best_other", "kappa").alias("required_acc"))
    part = part.with_columns((pl.col("required_acc") > 1).alias("insolvent"))
    g = group_columns(part)
    cols = g + ["value", "method", "acc", "kappa", "cov", "utility", "best_other_method", "best_other", "required_acc", "insolvent"]
    return _sort_methods(part.select(cols), method_order(df), g)


def amortised_decomposition(df: pl.DataFrame, B_ms: float | None = None) -> pl.DataFrame:
    """Table 5 at B (default: the strictest): β, m, ā_adapt, ā_frozen, U, and whether
    adaptation was harmful (U below the baseline's U in the same scenario)."""
    part = _at(df, "amortised", B_ms)
    g = group_columns(part)
    base = part.filter(pl.col("method") == BASELINE).select(g + ["value", pl.col("utility").alias("_base")])
    if base.height:
        part = part.join(base, on=g + ["value"], how="left").with_columns((pl.col("utility") < pl.col("_base")).alias("below_standard"))
    else:
        part = part.with_columns(pl.lit(None, pl.Boolean).alias("below_standard"))
    cols = g + ["value", "method", "beta", "m", "acc_adapt", "acc_frozen", "frozen_gap", "utility", "below_standard"]
    return _sort_methods(part.select([c for c in cols if c in part.columns]), method_order(df), g)


def strict_terms(df: pl.DataFrame) -> pl.DataFrame:
    """Table 14: the timing-derived terms under the strictest pressure of each protocol:
    pooled α at max ρ, pooled κ̄ at min T, and the per-episode cut-off m at min B (mean, min,
    max over episodes; ``exhausted`` = the budget ran out before the end in some episode)."""
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
    am = df.filter((pl.col("protocol") == "amortised") & (pl.col("episode") != POOLED) & pl.col("value").is_not_null())
    if am.height:
        sel = strictest_value(am, "amortised")
        am = am.join(sel, on=g + ["value"], how="inner") if g else am.filter(pl.col("value") == sel.item())
        parts.append(
            am.group_by(g + ["method"]).agg(
                pl.col("value").first().alias("m_at"),
                pl.col("m").mean().alias("m_mean"),
                pl.col("m").min().alias("m_min"),
                pl.col("m").max().alias("m_max"),
                (pl.col("beta") < 1).any().alias("exhausted"),
            )
        )
    if not parts:
        raise AnalysisError("no temporal results to decompose")
    out = parts[0]
    for p in parts[1:]:
        out = out.join(p, on=g + ["method"], how="full", coalesce=True)
    return _sort_methods(out, method_order(df), g)


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
    c = _with_best_other(c, keys)
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
    return _sort_methods(out, method_order(df), g)


# ----------------------------------------------------------------------------- Pareto
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
    am = utility.filter((pl.col("protocol") == "amortised") & (pl.col("episode") != POOLED))
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
    part = _pooled(df, "amortised").filter(pl.col("utility").is_not_null())
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
    return _sort_methods(out, method_order(df), g).sort(g, maintain_order=True) if out.height else out


# ----------------------------------------------------------------------------- latency
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


# ----------------------------------------------------------------------------- overviews
def offline_table(df: pl.DataFrame) -> pl.DataFrame:
    """Offline accuracy per episode and method, with the rank within the episode (1 = best,
    ties share the best rank), plus pooled (paper Tables 1 and 10)."""
    check_utility_table(df)
    off = pool_seeds(df).filter((pl.col("protocol") == "offline") & pl.col("utility").is_not_null())
    g = group_columns(off)
    off = off.with_columns(pl.col("utility").rank("min", descending=True).over(g + ["episode"]).cast(pl.Int64).alias("rank"))
    out = off.select(g + ["episode", "method", "utility", "rank"])
    return _sort_methods(out, method_order(df), g + ["episode"])


def sweep_table(df: pl.DataFrame) -> pl.DataFrame:
    """Pooled utility of every method in every scenario (paper Tables 11–13), long format
    with the winner(s) of each pooled scenario flagged."""
    check_utility_table(df)
    p = with_scenario(pool_seeds(df).filter((pl.col("episode") == POOLED) & pl.col("utility").is_not_null()))
    g = group_columns(p)
    p = p.with_columns((pl.col("utility") >= pl.col("utility").max().over(g + ["scenario"]) - DEFAULT_TOL).alias("best"))
    out = p.select(g + ["protocol", "param", "value", "scenario", "scenario_order", "method", "utility", "best"])
    return _sort_methods(out, method_order(df), g + ["scenario_order"])


# ----------------------------------------------------------------------------- uncertainty
def utility_intervals(
    df: pl.DataFrame,
    rows: pl.DataFrame | None = None,
    opts: st.BootstrapOptions | None = None,
    pooled: bool = True,
    timing=None,
) -> st.Intervals:
    """Bootstrap distributions and percentile intervals of every seed-pooled utility.

    ``df`` is the sweep's per-seed table. Per-episode cells resample the episode's batches
    (the seeds' batches concatenated) and need ``rows``, the traces' adapt rows with
    ``correct``, ``n``, ``e_ms``, ``l_ms`` (:func:`trace_rows`); without them only the pooled
    rows get intervals. Pooled rows resample the (seed, episode) units, weighted by their
    batches. Methods of one cell share resamples, so their differences are paired.
    ``pooled=False`` leaves the pooled rows out (only the per-episode cells).

    ``timing`` (:class:`tempora_sim.uncertainty.timing_replicates.TimingReplicates` of the same sweep) adds the
    traces' measured timing variability to every draw (:func:`tempora_sim.uncertainty.bootstrap.with_timing`)."""
    check_utility_table(df)
    opts = opts or st.BootstrapOptions()
    g = group_columns(df)
    per_ep = df.filter((pl.col("episode") != POOLED) & pl.col("utility").is_not_null())
    if per_ep.schema["value"] == pl.Null:
        per_ep = per_ep.with_columns(pl.col("value").cast(pl.Float64))
    parts = []
    need = ("correct", "n", "e_ms", "l_ms", "episode", "step", "method")
    if rows is not None and per_ep.height and all(c in rows.columns for c in need):
        parts.append(_cell_intervals(per_ep, rows, g, opts))
    if per_ep.height and pooled:
        parts.append(_pooled_intervals(per_ep, g, opts))
    out = st.concat(parts)
    if timing is not None and timing.count and out.index.height:
        keys = [c for c in g if c in out.index.columns] + ["method", "episode", "protocol", "value"]
        out = st.with_timing(out, timing.shifts(out.index, keys, "utility", pool=pool_seeds))
    return out


def _cell_intervals(per_ep: pl.DataFrame, rows: pl.DataFrame, g: list[str], opts) -> st.Intervals:
    has_seed = SEED in per_ep.columns and SEED in rows.columns
    sk = [c for c in g if c in rows.columns] + ([SEED] if has_seed else [])
    if "phase" in rows.columns:
        rows = rows.filter(pl.col("phase") == "adapt")
    rows = align_group_dtypes(rows, per_ep)
    by_trace = rows.sort(sk + ["method", "episode", "step"]).partition_by(sk + ["method", "episode"], as_dict=True)
    collected: dict[tuple, list[tuple[int, np.ndarray]]] = {}
    names = g + ["method", "episode", "protocol", "value"]
    for key, urows in per_ep.partition_by(sk + ["method", "episode"], as_dict=True).items():
        trows = by_trace.get(key)
        if trows is None:
            continue
        seed = urows.get_column(SEED)[0] if has_seed else 0
        for r, scores in zip(urows.iter_rows(named=True), st.batch_scores(trows, urows)):
            collected.setdefault(tuple(r[c] for c in names), []).append((seed, scores))
    cell_scores = [(dict(zip(names, k)), np.concatenate([s for _, s in sorted(v, key=lambda x: x[0])])) for k, v in collected.items()]
    return st.episode_intervals(cell_scores, opts)


def _pooled_intervals(per_ep: pl.DataFrame, g: list[str], opts) -> st.Intervals:
    unit_cols = ([SEED] if SEED in per_ep.columns else []) + ["episode"]
    weight = pl.col("num_batches").cast(pl.Float64) if "num_batches" in per_ep.columns else pl.lit(1.0)
    grouped = (
        per_ep.with_columns(weight.alias("_w"))
        .sort(unit_cols)
        .group_by(g + ["method", "protocol", "value"], maintain_order=True)
        .agg(pl.col("utility"), pl.col("_w"), pl.concat_str([pl.col(c).cast(pl.String) for c in unit_cols], separator="/").alias("_unit"))
    )
    units = []
    for r in grouped.iter_rows(named=True):
        key = {c: r[c] for c in g} | {"method": r["method"], "episode": POOLED, "protocol": r["protocol"], "value": r["value"]}
        units.append((key, np.asarray(r["utility"], np.float64), np.asarray(r["_w"], np.float64), tuple(r["_unit"])))
    return st.unit_intervals(units, opts)


def attach_intervals(t: pl.DataFrame, intervals: st.Intervals | None, episode: str | None = None) -> pl.DataFrame:
    """Join ``lo``/``hi`` (the utility's interval) onto a table with group columns, ``method``,
    ``protocol``, ``value`` and ``episode`` (or the given ``episode`` for pooled tables)."""
    if intervals is None or not intervals.index.height:
        return t.with_columns(pl.lit(None, pl.Float64).alias("lo"), pl.lit(None, pl.Float64).alias("hi"))
    idx = intervals.index
    t2 = t if "episode" in t.columns else t.with_columns(pl.lit(episode).alias("episode"))
    keys = [c for c in group_columns(t2) if c in idx.columns] + ["method", "episode", "protocol", "value"]
    look = idx.select(keys + ["lo", "hi"]).with_columns(pl.col("value").cast(pl.Float64))
    t2 = t2.with_columns(pl.col("value").cast(pl.Float64))
    out = t2.join(look, on=keys, how="left", nulls_equal=True)
    return out if "episode" in t.columns else out.drop("episode")


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


# ----------------------------------------------------------------------------- policies
#: ``best`` of a policy row whose best variant is the method without a policy
EVERY_BATCH = "every batch"


def _nominal_rate(label: str) -> float | None:
    policy = split_label(label)[1]
    if policy is None:
        return 1.0
    try:
        parsed = parse_policy(policy)
    except Exception:  # a label the simulator did not write: no rate
        return None
    return 1.0 if parsed is None else parsed.nominal_rate


def adaptation_rates(trace_rows: pl.DataFrame | None) -> dict[tuple, float]:
    """Share of adapt rows on which the model changed (``updated``), per (group values...,
    method); without trace rows, the policy's nominal rate (1/K, P; 1 without a policy)."""
    out: dict[tuple, float] = {}
    if trace_rows is not None and trace_rows.height:
        g = [c for c in GROUP_COLUMNS if c in trace_rows.columns]
        rates = trace_rows.filter(pl.col("phase") == "adapt").group_by(g + ["method"]).agg(pl.col("updated").cast(pl.Float64).mean())
        for row in rates.iter_rows(named=True):
            out[tuple(str(row[c]) for c in g) + (row["method"],)] = float(row["updated"])
    return out


def policy_gains(
    df: pl.DataFrame, intervals: st.Intervals | None = None, trace_rows: pl.DataFrame | None = None, tol: float = DEFAULT_TOL
) -> pl.DataFrame:
    """The best sparse-adaptation policy of each method in each pooled scenario
    (docs/design/design.md §11): per (group, method with at least one policy trace, scenario), the
    variant with the highest pooled utility among the method without a policy and its policy
    traces (``best``: the policy, or ``every batch``; ties go to adapting on every batch, then
    to the lower adaptation rate), its utility and interval, the utility of adapting on every
    batch, and ``gain`` = best − every batch with the paired bootstrap interval of the
    difference; ``certain`` when that interval lies above 0 (null when there is no interval,
    false when every batch is best). ``rate`` is the best variant's adaptation rate: the share
    of batches it changed the model on (from the traces; the nominal 1/K or P without them)."""
    check_utility_table(df)
    p = with_scenario(pool_seeds(df).filter((pl.col("episode") == POOLED) & pl.col("utility").is_not_null()))
    if not p.height:
        raise AnalysisError("no pooled results")
    g = group_columns(p)
    p = p.with_columns(pl.col("method").map_elements(lambda m: split_label(m)[0], return_dtype=pl.String).alias("_base"))
    with_policy = p.filter(pl.col("method") != pl.col("_base")).select(g + ["_base"]).unique()
    if not with_policy.height:
        raise AnalysisError("no trace under a sparse-adaptation policy (tempora-trace run --policy …)")
    p = p.join(with_policy, on=g + ["_base"], how="inner", nulls_equal=True)
    rates = adaptation_rates(trace_rows)
    look = None
    if intervals is not None and intervals.index.height:
        idx = intervals.index
        ik = [c for c in g if c in idx.columns] + ["method", "episode", "protocol", "value"]
        look = {
            tuple(r[:-3]): (r[-3], r[-2], r[-1])
            for r in idx.select(ik + ["row", "lo", "hi"]).with_columns(pl.col("value").cast(pl.Float64)).iter_rows()
        }
        ik_cols = ik
    out_rows = []
    for _, part in p.group_by(g + ["_base", "scenario"], maintain_order=True):
        rows = part.to_dicts()
        base = rows[0]["_base"]
        gvals = tuple(str(rows[0][c]) for c in g)

        def rate_of(m: str, gvals: tuple = gvals) -> float | None:
            return rates.get(gvals + (m,), _nominal_rate(m))

        plain = next((r for r in rows if r["method"] == base), None)
        top = max(r["utility"] for r in rows)
        tied = [r for r in rows if r["utility"] >= top - tol]
        best = min(
            tied, key=lambda r: (r["method"] != base, rate_of(r["method"]) if rate_of(r["method"]) is not None else 2.0, r["method"])
        )

        def row_of(r):
            if look is None:
                return None
            key = tuple(r[c] if c not in ("value",) else (None if r["value"] is None else float(r["value"])) for c in ik_cols)
            return look.get(key)

        b_iv = row_of(best)
        gain_lo = gain_hi = certain = None
        if plain is not None and b_iv is not None:
            p_iv = row_of(plain)
            if best is plain:
                gain_lo = gain_hi = 0.0
                certain = False
            elif p_iv is not None:
                lo, hi = intervals.difference([b_iv[0]], [p_iv[0]])
                gain_lo, gain_hi = float(lo[0]), float(hi[0])
                certain = gain_lo > 0
        out_rows.append(
            {
                **{c: rows[0][c] for c in g},
                "method": base,
                "protocol": rows[0]["protocol"],
                "param": rows[0]["param"],
                "value": rows[0]["value"],
                "scenario": rows[0]["scenario"],
                "scenario_order": rows[0]["scenario_order"],
                "best": EVERY_BATCH if best["method"] == base else split_label(best["method"])[1],
                "best_method": best["method"],
                "utility": best["utility"],
                "lo": None if b_iv is None else b_iv[1],
                "hi": None if b_iv is None else b_iv[2],
                "every_batch": None if plain is None else plain["utility"],
                "gain": None if plain is None else best["utility"] - plain["utility"],
                "gain_lo": gain_lo,
                "gain_hi": gain_hi,
                "certain": certain,
                "rate": rate_of(best["method"]),
                "variants": len(rows),
            }
        )
    schema = {c: p.schema[c] for c in g}
    schema.update(
        method=pl.String, protocol=pl.String, param=pl.String, value=pl.Float64, scenario=pl.String, scenario_order=pl.Int64,
        best=pl.String, best_method=pl.String, utility=pl.Float64, lo=pl.Float64, hi=pl.Float64, every_batch=pl.Float64,
        gain=pl.Float64, gain_lo=pl.Float64, gain_hi=pl.Float64, certain=pl.Boolean, rate=pl.Float64, variants=pl.Int64,
    )  # fmt: skip
    out = pl.DataFrame(out_rows, schema=schema)
    order = {m: i for i, m in enumerate(method_order(df))}
    return (
        out.with_columns(pl.col("method").replace_strict(order, default=len(order), return_dtype=pl.Int64).alias("_o"))
        .sort(g + ["_o", "scenario_order"])
        .drop("_o")
    )


def policy_points(pooled: pl.DataFrame, trace_rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Pooled utility of every variant of the methods with policy traces, with its adaptation
    rate (as :func:`policy_gains`), per scenario: the points of the utility-against-rate figure."""
    p = with_scenario(pool_seeds(pooled).filter((pl.col("episode") == POOLED) & pl.col("utility").is_not_null()))
    g = group_columns(p)
    p = p.with_columns(pl.col("method").map_elements(lambda m: split_label(m)[0], return_dtype=pl.String).alias("base"))
    bases = set(p.filter(pl.col("method") != pl.col("base")).get_column("base").to_list())
    p = p.filter(pl.col("base").is_in(sorted(bases)))
    rates = adaptation_rates(trace_rows)
    r = [rates.get(tuple(str(row[c]) for c in g) + (row["method"],), _nominal_rate(row["method"])) for row in p.iter_rows(named=True)]
    return p.with_columns(pl.Series("rate", r, pl.Float64))


def policy_advice(frame: pl.DataFrame, intervals: st.Intervals | None, recommended: str) -> dict:
    """What ``advise`` says about the recommended method's policy (one scenario's sweep rows):
    the method and policy it stands for, the policy in words and, when the method was traced
    under policies, the gain of the recommended variant over adapting on every batch with its
    paired interval and certainty (``vs_every_batch``; None otherwise)."""
    base, policy = split_label(recommended)
    parsed = None if policy is None else parse_policy(policy)
    words = "adapting on every batch" if parsed is None else parsed.describe()
    out = {"method": base, "policy": policy, "policy_words": words, "vs_every_batch": None}
    try:
        gains = policy_gains(frame, intervals)
    except AnalysisError:
        return out
    mine = gains.filter(pl.col("method") == base)
    if not mine.height or mine.row(0, named=True)["every_batch"] is None:
        return out
    r = mine.row(0, named=True)
    vs = {"every_batch_utility": r["every_batch"], "gain": r["gain"], "gain_ci": [r["gain_lo"], r["gain_hi"]], "certain": r["certain"]}
    if r["best_method"] != recommended:
        # the recommendation and the method's best variant differ only by a tie broken the other way
        rec = pool_seeds(frame).filter((pl.col("episode") == POOLED) & (pl.col("method") == recommended)).get_column("utility")
        vs = {**vs, "gain": float(rec.mean()) - r["every_batch"], "gain_ci": [None, None], "certain": None}
    return {**out, "vs_every_batch": {**vs, "variants": r["variants"]}}
