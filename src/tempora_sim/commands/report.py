"""``tempora-sim report`` and ``tempora-sim show``: the analyses, from one command.

``report`` writes DIR/report.md (summary, every table, embedded figures), DIR/tables/*.csv and
DIR/figures/*.{png,pdf}; given traces it runs the sweep first and keeps its results in DIR so
``show TABLE DIR`` can read them back without sweeping again.
"""

from __future__ import annotations

import time
import warnings

import click

from tempora_sim.commands.main import main
from tempora_sim.sweeps.options import click_options as sweep_options
from tempora_sim.sweeps.options import from_click

# bootstrap intervals (docs/design/statistics.md): the same options as `tempora-sim advise`
from tempora_sim.uncertainty.bootstrap import bootstrap_options, make_bootstrap
from tempora_toolkit.atomic_files import check_output_dir


def _fail(message: str) -> None:
    """One line on stderr and exit status 2, the same convention as every Tempora command."""
    from tempora_sim.reporting import ReportError  # lazy: the analyses load when the command runs, not with `tempora-sim --help`

    raise ReportError(message)


def _load(rp, source, options, out=None, bootstrap=None, scenarios=False):
    """Load results, or sweep traces, echoing the simulator's warnings as one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inputs = rp.load_inputs(list(source), options, out, bootstrap, scenarios)
    for w in caught:
        if w.category.__name__ == "SimWarning":
            click.echo(f"tempora-sim: warning: {w.message}", err=True)
    return inputs


_SOURCE = click.argument("source", nargs=-1, required=True, type=click.Path(path_type=str))


@main.command("report")
@_SOURCE
@click.option("--out", "out", required=True, type=click.Path(path_type=str), help="Directory for the report.")
@click.option("--all-episodes", is_flag=True, help="Utility curves for every episode (default: one per category).")
@click.option("--episodes", default=None, help="Utility curves for these episodes, comma-separated.")
@click.option(
    "--scenarios",
    is_flag=True,
    help="Also replay the traces under bursty arrivals (burst:1,4, 5 seeds) and the combined "
    "deadline+patience / deadline+budget protocols, in a section of their own (docs/design/design.md §9).",
)
@click.option(
    "--no-explore",
    "no_explore",
    is_flag=True,
    help="Do not write explore.html, the interactive page (written when SOURCE is traces; see tempora-sim explore).",
)
@click.option(
    "--no-figures",
    "no_figures",
    is_flag=True,
    help="Do not draw the figures (DIR/figures/): report.md and the tables only, in a fraction of the time.",
)
@sweep_options
@bootstrap_options
def report_command(
    source, out, all_episodes, episodes, scenarios, no_explore, no_figures, ci_level, resamples, ci_seed, timing_replicates, **options
):
    """Analyse RESULTS_OR_TRACES and write DIR/report.md with tables, CSVs and figures.

    SOURCE is a sweep's results (a directory holding utility.parquet) or trace files /
    directories, which are swept first with the paper's grid (or --protocol/--rho/--T/--B)."""
    from tempora_sim import reporting as rp  # lazy: the analyses load when the command runs, not with `tempora-sim --help`

    if no_figures and (all_episodes or episodes):
        flag = "--all-episodes" if all_episodes else "--episodes"
        _fail(f"{flag} chooses the episodes of the utility curves, and --no-figures draws no figures: give one or the other")
    check_output_dir(out, folders=rp.REPORT_FOLDERS, files=rp.REPORT_FILES)  # before anything is swept
    t0 = time.perf_counter()
    inputs = _load(rp, source, from_click(options), out, make_bootstrap(ci_level, resamples, ci_seed, timing_replicates), scenarios)
    swept = time.perf_counter() - t0
    eps = [e.strip() for e in episodes.split(",") if e.strip()] if episodes else None
    result = rp.build_report(inputs, out, all_episodes=all_episodes, episodes=eps, figures=not no_figures, explore=not no_explore)
    total = time.perf_counter() - t0
    click.echo(
        f"wrote {result.report} ({len(result.tables)} tables, {len(result.figures)} figure files) "
        f"in {total:.1f} s ({'sweep' if inputs.from_traces else 'read'} {swept:.1f} s)"
    )


@main.command("show")
@click.argument("table", required=False)
@click.argument("source", nargs=-1, type=click.Path(exists=True))
@sweep_options
@bootstrap_options
def show_command(table, source, ci_level, resamples, ci_seed, timing_replicates, **options):
    """Print TABLE computed from SOURCE (results, traces or a report directory).

    Without arguments, list the tables."""
    from tempora_sim import reporting as rp  # lazy: the analyses and rich load when the command runs, not with `--help`
    from tempora_sim.reporting.show import print_table, print_table_list

    if table is None or not source:
        if table is not None and table not in rp.TABLES:
            _fail(f"unknown table '{table}'; tables: {', '.join(rp.TABLES)}")
        print_table_list()
        if table is not None:
            _fail("give the results, traces or report directory to compute the table from")
        return
    if table not in rp.TABLES:
        _fail(f"unknown table '{table}'; tables: {', '.join(rp.TABLES)}")
    inputs = _load(rp, source, from_click(options), None, make_bootstrap(ci_level, resamples, ci_seed, timing_replicates))
    frame = rp.compute_table(table, inputs)
    if frame is None:
        _fail(f"table '{table}' {rp.why_missing(table, inputs)}")
    print_table(table, frame)
