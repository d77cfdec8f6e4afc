"""``tempora-sim sweep``: replay a directory of traces under ρ / T / B grids.

Writes ``OUT/utility.parquet`` and ``OUT/utility.csv`` atomically (staged, then renamed into
place under a lock, so a failure never leaves a partial OUT), prints the
corruption-aggregated tables and the strict-pressure decompositions, and ends with one line
saying how much was replayed and how long the kernels took. Bad input is one line on stderr
and exit status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tempora_sim.commands.main import main
from tempora_sim.sweeps.options import click_options as sweep_click_options
from tempora_sim.sweeps.options import from_click
from tempora_sim.uncertainty.bootstrap import bootstrap_options, make_bootstrap


@main.command("sweep")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out", "out", type=click.Path(path_type=str), default=None, help="Directory for utility.parquet and utility.csv (omit to only print)."
)
@sweep_click_options
@click.option(
    "--intervals",
    is_flag=True,
    help="Add <term>_lo/<term>_hi bounds of U and every decomposition term (bootstrap over batches/episodes, "
    "plus the traces' measured timing variability) and a timing_uncertainty column.",
)
@bootstrap_options
@click.option(
    "--format",
    "fmt",
    default="table",
    show_default=True,
    type=click.Choice(["table", "json"]),
    help="json prints the aggregated rows as JSON on stdout instead of tables.",
)
def sweep_command(traces, out, fmt, intervals, ci_level, resamples, ci_seed, timing_replicates, **options):
    """Replay TRACES (files or directories of *.parquet) under temporal grids."""
    # lazy: the replay's intervals and tables load the analyses and rich, which `--help` does not need
    from rich.console import Console

    from tempora_sim.reporting.sweep_files import json_row_chunks, sweep_into
    from tempora_sim.reporting.terminal import print_report

    sweep_options = from_click(options)
    boot = make_bootstrap(ci_level, resamples, ci_seed, timing_replicates)  # checked before anything is read
    sweep = sweep_into(
        traces, sweep_options, boot, intervals, out, on_warning=lambda line: click.echo(f"tempora-sim: warning: {line}", err=True)
    )
    result = sweep.result
    if fmt == "json":
        for text in json_row_chunks(result.frame):
            sys.stdout.write(text)
        sys.stdout.flush()
        click.echo(result.stats.line(), err=True)
        if sweep.timing_text:
            click.echo(sweep.timing_text, err=True)
        return
    console = Console()
    print_report(result, console)
    if sweep.out is not None:
        console.print(f"wrote {sweep.out / 'utility.parquet'} and {sweep.out / 'utility.csv'} ({result.frame.height:,} rows)")
    if sweep.timing_text:
        console.print(sweep.timing_text)
    click.echo(result.stats.line())
