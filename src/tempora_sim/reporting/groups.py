"""The comparison groups a report is split into (one section per group in report.md, one
table per group in ``tempora-sim show``), and their labels."""

from __future__ import annotations

import polars as pl

from tempora_sim import analyses as an


def groups_of(df: pl.DataFrame) -> list[dict]:
    g = an.group_columns(df)
    if not g:
        return [{}]
    return [dict(zip(g, r)) for r in df.select(g).unique(maintain_order=True).sort(g).iter_rows()]


def filter_group(t: pl.DataFrame, group: dict) -> pl.DataFrame:
    for k, v in group.items():
        if k in t.columns:
            t = t.filter(pl.col(k) == v)
    return t


def group_label(group: dict) -> str:
    """The group's own label when the table carries one (it names every identity field)."""
    if group.get("group"):
        return str(group["group"])
    return " · ".join(f"{k}={v}" for k, v in group.items()) or "all traces"
