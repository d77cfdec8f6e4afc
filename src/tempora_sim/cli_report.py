"""``tempora-sim report`` and ``tempora-sim show``: the analyses, from one command.

``report`` writes DIR/report.md (summary, every table, embedded figures), DIR/tables/*.csv and
DIR/figures/*.{png,pdf}; given traces it runs the sweep first and keeps its results in DIR so
``show TABLE DIR`` can read them back without sweeping again.
"""

from __future__ import annotations

import sys
import time

import click

from tempora_sim.cli import main


def _user_errors() -> tuple[type[BaseException], ...]:
    from tempora_sim import analyses, report

    from tempora_sim import stats

    errors: list[type[BaseException]] = [analyses.AnalysisError, report.ReportError, stats.StatsError]
    try:
        from tempora_sim.errors import SimError

        errors.append(SimError)
    except ImportError:  # pragma: no cover - the simulator always ships errors.py
        pass
    return tuple(errors)


def _fail(message: str) -> None:
    """One line on stderr and exit status 2, the same convention as ``tempora-sim sweep``."""
    click.echo(f"tempora-sim: error: {message}", err=True)
    sys.exit(2)


def _load(rp, source, options, out=None, bootstrap=None):
    """Load results, or sweep traces, echoing the simulator's warnings as one line each."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inputs = rp.load_inputs(list(source), options, out, bootstrap)
    for w in caught:
        if w.category.__name__ == "SimWarning":
            click.echo(f"tempora-sim: warning: {w.message}", err=True)
    return inputs


def _sweep_options(protocol, rho, T, B, lambda_ms) -> dict:
    """Sweep options as typed, so the simulator parses units (70%, 1s) exactly as ``sweep`` does."""
    opts = {"protocols": protocol, "rho": rho, "T_ms": T, "B_ms": B, "lambda_ms": lambda_ms}
    return {k: v for k, v in opts.items() if v is not None}


_SOURCE = click.argument("source", nargs=-1, required=True, type=click.Path(exists=True))
# The same grid options, names and units as `tempora-sim sweep` (used when SOURCE is traces).
_GRID = [
    click.option("--protocol", default=None, help="Protocols to sweep: all (default) or a comma-separated list."),
    click.option("--rho", default=None, help="Utilisations ρ, fractions or %, e.g. 1,0.7,50% [default: the paper's grid]."),
    click.option("--T", "T", default=None, help="HCI thresholds, ms by default or with ms/s suffix."),
    click.option("--B", "B", default=None, help="Overhead budgets, ms by default or with ms/s suffix, e.g. 1s,8s."),
    click.option("--lambda-ms", "lambda_ms", default=None,
                 help="Use this λ instead of mean + 6σ of the standard trace (ms, or with a suffix)."),
]


def _grid(fn):
    for opt in reversed(_GRID):
        fn = opt(fn)
    return fn


# Bootstrap intervals (docs/statistics.md); `tempora-sim advise` takes the same options.
from tempora_sim.stats import bootstrap_options, make_bootstrap  # noqa: E402


@main.command("report")
@_SOURCE
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Directory for the report.")
@click.option("--all-episodes", is_flag=True, help="Utility curves for every episode (default: one per category).")
@click.option("--episodes", default=None, help="Utility curves for these episodes, comma-separated.")
@_grid
@bootstrap_options
def report_command(source, out, all_episodes, episodes, protocol, rho, T, B, lambda_ms, ci_level, resamples, ci_seed):
    """Analyse RESULTS_OR_TRACES and write DIR/report.md with tables, CSVs and figures.

    SOURCE is a sweep's results (a directory holding utility.parquet) or trace files /
    directories, which are swept first with the paper's grid (or --protocol/--rho/--T/--B)."""
    from tempora_sim import report as rp

    t0 = time.perf_counter()
    try:
        boot = make_bootstrap(ci_level, resamples, ci_seed)
        inputs = _load(rp, source, _sweep_options(protocol, rho, T, B, lambda_ms), out, boot)
        swept = time.perf_counter() - t0
        eps = [e.strip() for e in episodes.split(",") if e.strip()] if episodes else None
        result = rp.build_report(inputs, out, all_episodes=all_episodes, episodes=eps)
    except _user_errors() as exc:
        _fail(str(exc))
    total = time.perf_counter() - t0
    click.echo(f"wrote {result.report} ({len(result.tables)} tables, {len(result.figures)} figure files) "
               f"in {total:.1f} s ({'sweep' if inputs.from_traces else 'read'} {swept:.1f} s)")


@main.command("show")
@click.argument("table", required=False)
@click.argument("source", nargs=-1, type=click.Path(exists=True))
@_grid
@bootstrap_options
def show_command(table, source, protocol, rho, T, B, lambda_ms, ci_level, resamples, ci_seed):
    """Print TABLE computed from SOURCE (results, traces or a report directory).

    Without arguments, list the tables."""
    from tempora_sim import report as rp

    if table is None or not source:
        if table is not None and table not in rp.TABLES:
            _fail(f"unknown table '{table}'; tables: {', '.join(rp.TABLES)}")
        _list_tables(rp, missing_source=table is not None)
        return
    if table not in rp.TABLES:
        _fail(f"unknown table '{table}'; tables: {', '.join(rp.TABLES)}")
    try:
        inputs = _load(rp, source, _sweep_options(protocol, rho, T, B, lambda_ms), None,
                       make_bootstrap(ci_level, resamples, ci_seed))
        frame = rp.compute_table(table, inputs)
    except _user_errors() as exc:
        _fail(str(exc))
    spec = rp.TABLES[table]
    if frame is None:
        _fail(f"table '{table}' {rp.why_missing(table, inputs)}")
    _print_table(rp, spec, frame)


def _list_tables(rp, missing_source: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="tempora-sim show TABLE SOURCE", show_lines=False)
    t.add_column("table")
    t.add_column("what")
    t.add_column("paper")
    for spec in rp.TABLES.values():
        t.add_row(spec.name, spec.title, spec.paper)
    Console().print(t)
    if missing_source:
        _fail("give the results, traces or report directory to compute the table from")


def _print_table(rp, spec, frame) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    for group in rp.groups_of(frame):
        part = rp.filter_group(frame, group)
        if not part.height:
            continue
        headers, rows = rp.formatted_rows(spec, part)
        t = Table(title=f"{spec.title} ({spec.paper})", caption=rp.group_label(group))
        for h in headers:
            t.add_column(h, overflow="fold")
        for r in rows:
            t.add_row(*[c.replace("**", "") for c in r])
        console.print(t)
    console.print(spec.how_to_read, style="dim")
