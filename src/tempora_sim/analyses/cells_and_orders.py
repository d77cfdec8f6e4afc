"""The utility table as every analysis reads it: its check, its cells and scenarios, and the
orders the tables list episodes, scenarios and methods in (the package docstring states the
conventions)."""

from __future__ import annotations

from typing import Sequence

import polars as pl

from tempora_schema.policies import split_label
from tempora_schema.vocabulary import BASELINE_METHOD as BASELINE
from tempora_schema.vocabulary import CORRUPTION_CATEGORIES
from tempora_sim import protocols as P
from tempora_sim.errors import SimError
from tempora_sim.sweeps.utility_table import POOLED, group_columns, pool_seeds

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
    """Refuse, in one line, a table without the columns the analyses read or with an unknown protocol."""
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


def _without_value() -> list[str]:
    """The protocols without a grid (offline): their scenarios carry no parameter value."""
    return [p for p in P.single() if not P.get(p).grids]


def with_scenario(df: pl.DataFrame) -> pl.DataFrame:
    """Add ``scenario`` (label) and ``scenario_order`` (int, strict → relaxed) columns."""
    no_value = _without_value()
    pairs = [(p, None if p in no_value else v) for p, v in df.select("protocol", "value").unique().iter_rows()]
    pairs = sorted(pairs, key=lambda r: pressure_order(*r))
    keys = pl.DataFrame(
        {
            "protocol": [p for p, _ in pairs],
            "value": [v for _, v in pairs],
            "scenario": [format_value(p, v) for p, v in pairs],
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
    base = base.with_columns(pl.when(pl.col("protocol").is_in(no_value)).then(None).otherwise(pl.col("value")).alias("value"))
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
        out = out.filter(pl.col("protocol") != P.reference())
    return with_scenario(out)


def cell_keys(df: pl.DataFrame) -> list[str]:
    """The columns that name one cell: the group columns present, the episode and the scenario."""
    return group_columns(df) + ["episode", "scenario"]


def method_order(df: pl.DataFrame, baseline: str = BASELINE) -> list[str]:
    """Methods in reading order: the baseline first, then fastest to slowest as measured by the
    speed term a protocol declares (pooled availability α at the strictest ρ; ties and missing
    values: by name). This puts gradient-free methods before gradient-based ones, like the
    paper's tables."""
    df = pool_seeds(df)
    methods = sorted(set(df.get_column("method").to_list()))
    speed: dict[str, float] = {}
    by = next((P.get(p) for p in P.temporal() if P.get(p).speed_term), None)
    part = df.filter((pl.col("protocol") == by.name) & (pl.col("episode") == POOLED) & pl.col("value").is_not_null()) if by else df.clear()
    if part.height and by.speed_term in part.columns:
        strict = part.get_column("value").max() if by.strictest == "max" else part.get_column("value").min()
        for m, a in part.filter(pl.col("value") == strict).group_by("method").agg(pl.col(by.speed_term).mean()).iter_rows():
            if a is not None:
                speed[m] = a
    # a method's policy traces (tent@every:4, docs/design/design.md §11) follow the method itself
    base_speed: dict[str, float] = {}
    for m in methods:
        b = split_label(m)[0]
        if b == m or b not in methods:
            base_speed[b] = max(base_speed.get(b, -1.0), speed.get(m, -1.0))

    def key(m: str) -> tuple:
        b, policy = split_label(m)
        return (-base_speed.get(b, -1.0), b, policy is not None, -speed.get(m, -1.0), m)

    rest = sorted((m for m in methods if m != baseline), key=key)
    return ([baseline] if baseline in methods else []) + rest


def sort_methods(df: pl.DataFrame, order: Sequence[str], extra: Sequence[str] = ()) -> pl.DataFrame:
    """Rows sorted by the ``extra`` columns present, then by the methods' place in ``order``."""
    rank = pl.DataFrame({"method": list(order), "_m": list(range(len(order)))})
    by = [c for c in extra if c in df.columns] + ["_m"]
    return df.join(rank, on="method", how="left").sort(by, nulls_last=True).drop("_m")


def with_best(c: pl.DataFrame, tol: float) -> pl.DataFrame:
    """Add the cell's best utility ``best`` and ``is_winner`` (within ``tol`` of it)."""
    keys = cell_keys(c)
    return c.with_columns(pl.col("utility").max().over(keys).alias("best")).with_columns(
        (pl.col("utility") >= pl.col("best") - tol).alias("is_winner")
    )


def with_best_other(c: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
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
