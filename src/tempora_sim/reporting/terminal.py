"""Terminal tables of a sweep (what ``tempora-sim sweep`` prints): corruption-aggregated
utilities, strict-pressure decompositions and the combined protocols' winners maps.

The layouts follow the paper: Tables 11–13 (utility per method × parameter value, aggregated
over episodes, best in bold) and Tables 3–5 (the decomposition at the strictest value of each
protocol). Rows are the pooled ``episode = "__all__"`` rows of the sweep; methods are listed by
mean per-batch latency, so the non-adaptive baseline comes first and the slowest method last.

A combined protocol (docs/design/design.md §9) has two grid parameters (ρ × T or ρ × B), so one
utility table per method would be a wall of numbers. Its map answers the question a user asks
of it — which method wins where — with one cell per (second parameter, ρ): the winner and its
utility.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

import polars as pl
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.reporting.scenarios import best_per_cell
from tempora_sim.sweeps.replay import POOLED, SweepResult
from tempora_sim.uncertainty.bootstrap import BootstrapOptions
from tempora_toolkit.command_line import visible


def term_name(text: object) -> str:
    """A name from the data as a terminal table shows it: its control characters visible
    (``\\x1b``, not an escape sequence that clears the screen) and rich's markup escaped (a
    method named ``[bold red]`` is shown, not applied)."""
    return escape(visible(text))


#: control characters and how a terminal table shows them (:func:`tempora_toolkit.command_line.visible`)
_CONTROLS = [chr(c) for c in (*range(0, 9), *range(10, 32), *range(127, 160))]
_SHOWN = [f"\\x{ord(c):02x}" for c in _CONTROLS]


def _term_expr(e: pl.Expr) -> pl.Expr:
    # rich.markup.escape, vectorised: a backslash before every tag-like [..]
    return e.str.replace_many(_CONTROLS, _SHOWN).str.replace_all(r"(\\*)(\[[a-z#/@][^\[]*?\])", "$1$1\\$2")


def terminal_frame(t: pl.DataFrame) -> pl.DataFrame:
    """Every text value of ``t`` (and of its lists of text) as :func:`term_name` shows it."""
    exprs = []
    for name, dtype in t.schema.items():
        if dtype == pl.Utf8:
            exprs.append(_term_expr(pl.col(name)))
        elif isinstance(dtype, pl.List) and dtype.inner == pl.Utf8:
            exprs.append(pl.col(name).list.eval(_term_expr(pl.element())))
    return t.with_columns(exprs) if exprs else t


def value_label(param: str | None, value: float | None) -> str:
    """Column header of one grid value: ``ρ=70%``, ``T=50ms``, ``B=1s``."""
    if param is None or value is None:
        return P.reference()
    return P.grid_of(param).label(value)


def _pct(x: float | None, digits: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.{digits}f}"


def _method_order(frame: pl.DataFrame, latency: dict) -> list[str]:
    methods = frame["method"].unique().to_list()
    return sorted(methods, key=lambda m: (latency.get(m, math.inf), m))


def _groups(frame: pl.DataFrame) -> Iterable[tuple[str, pl.DataFrame]]:
    """Comparison groups of the seed-pooled rows (seeds are replicates, not groups), named by
    the group's label (tempora_schema.GroupKey.label without the seed) and the seeds pooled."""
    keys = an.group_columns(frame)
    for key, part in frame.group_by(keys, maintain_order=True):
        seeds = ", ".join(sorted(set(", ".join(part.get_column(an.SEEDS).to_list()).split(", ")))) if an.SEEDS in part.columns else "?"
        name = part["group"][0] if "group" in part.columns else " · ".join(str(k) for k in key)
        yield f"{name} · seed{'s' if ',' in seeds else ''} {seeds}", part


#: A terminal table shows at most this many grid values (columns); larger grids are summarised.
MAX_TABLE_COLUMNS = 12


def shown_values(values: list) -> list:
    """All values, or :data:`MAX_TABLE_COLUMNS` evenly spaced ones (first and last included), so a
    grid of 100,000 values prints as fast as the paper's."""
    if len(values) <= MAX_TABLE_COLUMNS:
        return values
    step = (len(values) - 1) / (MAX_TABLE_COLUMNS - 1)
    return [values[round(i * step)] for i in range(MAX_TABLE_COLUMNS)]


def _latency_of(latency: dict[str, dict[str, float]], group: pl.DataFrame) -> dict[str, float]:
    """Mean δ per method over the seeds of this group: the sweep keys latency by the group's
    label with its seed (``…/bs64/seed2025/episodic/…``); the seed-pooled rows carry it without."""
    name = group["group"][0] if "group" in group.columns else None
    merged: dict[str, list[float]] = {}
    for label, per in latency.items():
        if name is not None and re.sub(r"/seed-?\d+/", "/", label, count=1) != name:
            continue
        for m, d in per.items():
            merged.setdefault(m, []).append(d)
    return {m: sum(v) / len(v) for m, v in merged.items()}


def _shown_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of the grid values the tables show: intervals are bootstrapped for those only,
    so printing a 100,000-value grid costs what printing the paper's grid does."""
    keep = []
    for protocol in frame.get_column("protocol").unique(maintain_order=True).to_list():
        part = frame.filter(pl.col("protocol") == protocol)
        values = part.get_column("value").unique(maintain_order=True).to_list()
        shown = shown_values(values)
        if len(shown) < len(values):
            part = part.filter(pl.col("value").is_in([v for v in shown if v is not None]))
        keep.append(part)
    return pl.concat(keep, how="vertical") if keep else frame


def grid_view(frame: pl.DataFrame) -> dict[str, tuple[int, list]]:
    """Per protocol: how many grid values ``frame`` holds, and the ones the tables show."""
    view = {}
    for protocol in frame.get_column("protocol").unique(maintain_order=True).to_list():
        values = frame.filter(pl.col("protocol") == protocol).get_column("value").unique(maintain_order=True).to_list()
        view[protocol] = (len(values), shown_values(values))
    return view


def _table_rows(frame: pl.DataFrame, view: dict[str, tuple[int, list]]) -> pl.DataFrame:
    """The rows the terminal tables read: the shown grid values, and each single protocol's
    smallest and largest (the decompositions are at the strictest); a million-value grid is
    then pooled and printed at the cost of a small one."""
    keep = []
    for protocol, (count, shown) in view.items():
        part = frame.filter(pl.col("protocol") == protocol)
        if len(shown) < count and protocol in P.single():  # the combined grids' own tables show every row
            values = part.get_column("value")
            wanted = [v for v in shown if v is not None] + [values.min(), values.max()]
            part = part.filter(pl.col("value").is_in([v for v in wanted if v is not None]))
        keep.append(part)
    return pl.concat(keep, how="vertical") if keep else frame


def utility_tables(
    group: pl.DataFrame, latency: dict[str, float], intervals=None, certain: dict | None = None, view: dict | None = None
) -> list[Table]:
    """Tables 11–13 for one group's pooled rows: utility (%) per method × grid value, '?' after
    the best value when its lead over the runner-up is uncertain (``certain``: value → bool),
    and the typical and widest half-width of the bootstrap intervals in the caption.
    ``view``: :func:`grid_view` of the whole grid, when ``group`` holds only the rows shown."""
    certain = certain or {}
    view = view if view is not None else grid_view(group)
    ci = {}
    if intervals is not None:
        for r in an.attach_intervals(group, intervals).iter_rows(named=True):
            ci[(r["method"], r["protocol"], _key(r["value"]))] = r
    tables = []
    if True:
        for protocol in P.single():
            part = group.filter(pl.col("protocol") == protocol)
            if part.height == 0:
                continue
            count, values = view[protocol]
            all_values = range(count)
            if len(values) < count:
                part = part.filter(pl.col("value").is_in([v for v in values if v is not None]))
            param = part["param"][0]
            widths = [
                (r["hi"] - r["lo"]) * 50
                for (m, p, _), r in ci.items()
                if p == protocol and r.get("lo") is not None and r.get("hi") is not None
            ]
            spread = (
                (
                    f"; intervals over episodes: ±{sorted(widths)[len(widths) // 2]:.1f} pp typical, "
                    f"±{max(widths):.1f} widest (`tempora-sim report` has each)"
                )
                if widths
                else ""
            )
            caption = (
                "* best per column (bold), underlined: second; ? the best's lead over the runner-up is "
                "uncertain (its paired bootstrap interval contains 0)" + spread
            )
            if len(values) < len(all_values):
                caption += (
                    f"; {len(values)} of {len(all_values):,} grid values shown, evenly spaced (every value is in --out or --format json)"
                )
            table = Table(
                title=P.get(protocol).title,
                box=box.SIMPLE_HEAD,
                title_justify="left",
                min_width=60,
                caption=caption,
                caption_justify="left",
            )
            table.add_column("Method")
            for v in values:
                table.add_column(value_label(param, v), justify="right")
            grid: dict[tuple[str, object], float | None] = {}
            for row in part.select("method", "value", "utility").iter_rows():
                grid[(row[0], _key(row[1]))] = row[2]
            ranks = {}
            methods = _method_order(part, latency)
            for v in values:
                col = [(grid.get((m, _key(v))), m) for m in methods]
                col = [(u, m) for u, m in col if u is not None]
                distinct = sorted({u for u, _ in col}, reverse=True)
                for u, m in col:  # ties share the mark
                    if u == distinct[0]:
                        ranks[(m, _key(v))] = 1
                    elif len(distinct) > 1 and u == distinct[1]:
                        ranks[(m, _key(v))] = 2
            for method in methods:
                cells = [method]
                for v in values:
                    text = _pct(grid.get((method, _key(v))))
                    rank = ranks.get((method, _key(v)))
                    if rank == 1:
                        unsure = certain.get((protocol, _key(v))) is False
                        text = f"[bold]{text}*{'?' if unsure else ''}[/bold]"
                    elif rank == 2:
                        text = f"[underline]{text}[/underline]"
                    cells.append(text)
                table.add_row(*cells)
            tables.append(table)
    return tables


def _key(v):
    return None if v is None else round(float(v), 12)


def _same(a, b) -> bool:
    return _key(a) == _key(b)


def decomposition_tables(group: pl.DataFrame, latency: dict[str, float]) -> list[Table]:
    """Tables 3–5 for one group: each protocol's decomposition at its strictest value."""
    tables = []
    if True:
        specs = [P.get(p) for p in P.temporal() if P.get(p).decomposition_headers]
        for proto in specs:
            protocol, headers = proto.name, proto.decomposition_headers
            part = group.filter(pl.col("protocol") == protocol)
            if part.height == 0:
                continue
            value = part["value"].max() if proto.strictest == "max" else part["value"].min()
            part = part.filter(pl.col("value") == value)
            param = part["param"][0]
            table = Table(
                title=f"{protocol.capitalize()} decomposition at {value_label(param, value)} (strictest)",
                box=box.SIMPLE_HEAD,
                title_justify="left",
                min_width=60,
            )
            table.add_column("Method")
            for h in headers:
                table.add_column(h, justify="right")
            rows = {r["method"]: r for r in part.iter_rows(named=True)}
            best = max((r["utility"] for r in rows.values() if r["utility"] is not None), default=None)
            for method in _method_order(part, latency):
                row = proto.decomposition_cells(rows[method], _pct)
                if best is not None and rows[method]["utility"] == best:
                    row[-1] = f"[bold]{row[-1]}*[/bold]"
                table.add_row(method, *row)
            tables.append(table)
    return tables


def print_report(result: SweepResult, console: Console | None = None, bootstrap: BootstrapOptions | None = None) -> None:
    """Per group (seeds pooled): a header with λ, the utility tables, then the decompositions."""
    console = console or Console()
    frame = result.frame
    latency_by_group = {term_name(label): {term_name(m): d for m, d in per.items()} for label, per in result.latency.items()}
    # intervals and certainty for the single-parameter protocols (the combined ρ × T / ρ × B
    # grids have their own winners maps)
    # names from the data are shown as they are, never as markup or terminal escapes
    single = terminal_frame(_shown_rows(frame.filter(pl.col("protocol").is_in(P.single()))))
    intervals = an.utility_intervals(single, None, bootstrap) if single.height else None
    certain = {}
    if intervals is not None and single.filter(pl.col("episode") == POOLED).height:
        pw = an.pooled_winners(single, intervals)
        g = an.group_columns(pw)
        for r in pw.iter_rows(named=True):
            certain[(tuple(r[c] for c in g), r["protocol"], _key(r["value"]))] = r["certain"]
    everything = terminal_frame(frame.filter(pl.col("episode") == POOLED))
    view = grid_view(everything)
    pooled = an.pool_seeds(_table_rows(everything, view))
    for label, group in _groups(pooled):
        lams = sorted(set(group["lambda_ms"].to_list()))
        lam = ", ".join(f"{x:.2f}" for x in lams)
        console.rule(f"[bold]{label}[/bold] · λ = {lam} ms")
        latency = _latency_of(latency_by_group, group)
        gk = tuple(group.row(0, named=True)[c] for c in an.group_columns(group))
        mine = {(p, v): c for (k, p, v), c in certain.items() if k == gk}
        for table in utility_tables(group, latency, intervals, mine, view) + decomposition_tables(group, latency) + scenario_tables(group):
            console.print(table)


# ----------------------------------------------------------------------------- combined protocols
def winners_map(group: pl.DataFrame) -> pl.DataFrame:
    """Per (protocol, value, value2): the best method (``winner``) and its utility."""
    return best_per_cell(group.filter(pl.col("protocol").is_in(list(P.combined()))), ["protocol", "value", "value2"])


def scenario_tables(group: pl.DataFrame) -> list[Table]:
    """One winners map per combined protocol present in ``group`` (pooled rows)."""
    tables = []
    wins = winners_map(group)
    for protocol in P.combined():
        proto = P.get(protocol)
        title = proto.title
        part = wins.filter(pl.col("protocol") == protocol)
        if part.height == 0:
            continue
        rhos = sorted(part["value"].unique().to_list(), reverse=True)
        seconds = sorted(part["value2"].unique().to_list())
        first, second = proto.grids
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", min_width=60)
        table.add_column("")
        for r in rhos:
            table.add_column(first.label(r) if not math.isnan(r) else "recorded", justify="right")
        cells = {(row["value"], row["value2"]): row for row in part.iter_rows(named=True)}
        for v2 in seconds:
            row = [second.label(v2)]
            for r in rhos:
                hit = cells.get((r, v2))
                row.append("–" if hit is None else f"{hit['winner']} {hit['utility'] * 100:.1f}")
            table.add_row(*row)
        tables.append(table)
    return tables
