"""What ``tempora-sim show`` prints: the list of the report's tables, or one computed table as
a terminal table per group (dataset, model, device), with how to read it.

Apart from :mod:`tempora_sim.reporting` because it loads rich, which the command line imports
only when ``show`` runs.
"""

from __future__ import annotations

import sys

import polars as pl
from rich.console import Console
from rich.table import Table

from tempora_sim.reporting.groups import filter_group, group_label, groups_of
from tempora_sim.reporting.markdown import formatted_rows
from tempora_sim.reporting.registry import TABLES
from tempora_sim.reporting.terminal import term_name, terminal_frame


def print_table_list() -> None:
    """Every table ``show`` computes: its name, what it says and where the paper has it."""
    t = Table(title="tempora-sim show TABLE SOURCE", show_lines=False)
    t.add_column("table")
    t.add_column("what")
    t.add_column("paper")
    for spec in TABLES.values():
        t.add_row(spec.name, spec.title, spec.paper)
    Console().print(t)


def print_table(name: str, frame: pl.DataFrame) -> None:
    """The computed table ``name`` (a key of :data:`tempora_sim.reporting.TABLES`), one terminal
    table per group, then how to read it."""
    spec = TABLES[name]
    console = Console(width=None if sys.stdout.isatty() else 200)
    for group in groups_of(frame):
        part = filter_group(frame, group)
        if not part.height:
            continue
        headers, rows = formatted_rows(spec, terminal_frame(part))  # names from the data shown, never applied
        t = Table(title=f"{spec.title} ({spec.paper})", caption=term_name(group_label(group)))
        for h in headers:
            t.add_column(h, overflow="fold")
        for r in rows:
            t.add_row(*[c.replace("**", "") for c in r])
        console.print(t)
    console.print(spec.how_to_read, style="dim")
