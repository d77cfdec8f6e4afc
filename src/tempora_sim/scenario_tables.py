"""Terminal tables of the combined protocols (docs/design/design.md §9): 2-D winners maps.

A combined protocol has two grid parameters (ρ × T or ρ × B), so one utility table per
method would be a wall of numbers. The map answers the question a user asks of it — which
method wins where — with one cell per (second parameter, ρ): the winner and its utility.
"""

from __future__ import annotations

import math

import polars as pl
from rich import box
from rich.table import Table

from . import grids

_TITLES = {
    "discrete-continuous": "Deadline + patience: winner (utility %) per ρ × T",
    "discrete-amortised": "Deadline + budget: winner (utility %) per ρ × B",
}


def _label(param: str, value: float) -> str:
    if param == "rho":
        return f"ρ={value * 100:g}%"
    if value >= 1000:
        return f"{'T' if param == 'T_ms' else 'B'}={value / 1000:g}s"
    return f"{'T' if param == 'T_ms' else 'B'}={value:g}ms"


def winners_map(group: pl.DataFrame) -> pl.DataFrame:
    """Per (protocol, value, value2): the best method (``winner``) and its utility."""
    from .report_scenarios import best_per_cell

    return best_per_cell(group.filter(pl.col("protocol").is_in(list(_TITLES))), ["protocol", "value", "value2"])


def scenario_tables(group: pl.DataFrame) -> list[Table]:
    """One winners map per combined protocol present in ``group`` (pooled rows)."""
    tables = []
    wins = winners_map(group)
    for protocol, title in _TITLES.items():
        part = wins.filter(pl.col("protocol") == protocol)
        if part.height == 0:
            continue
        rhos = sorted(part["value"].unique().to_list(), reverse=True)
        seconds = sorted(part["value2"].unique().to_list())
        param2 = grids.PARAM2_OF[protocol]
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", min_width=60)
        table.add_column("")
        for r in rhos:
            table.add_column(_label("rho", r) if not math.isnan(r) else "recorded", justify="right")
        cells = {(row["value"], row["value2"]): row for row in part.iter_rows(named=True)}
        for v2 in seconds:
            row = [_label(param2, v2)]
            for r in rhos:
                hit = cells.get((r, v2))
                row.append("–" if hit is None else f"{hit['winner']} {hit['utility'] * 100:.1f}")
            table.add_row(*row)
        tables.append(table)
    return tables
