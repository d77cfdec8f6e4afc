"""``tempora-sim sweep``: replay a directory of traces under ρ / T / B grids.

Writes ``OUT/utility.parquet`` and ``OUT/utility.csv`` atomically (staged, then renamed into
place under a lock, so a failure never leaves a partial OUT), prints the
corruption-aggregated tables and the strict-pressure decompositions, and ends with one line
saying how much was replayed and how long the kernels took. Bad input is one line on stderr
and exit status 2.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from .cli import main
from .options import click_options as sweep_options
from .options import from_click
from .stats import bootstrap_options, make_bootstrap


def write_outputs(frame, out: Path, traces=()) -> None:
    """Write utility.parquet/.csv into ``out`` atomically (never a partial or mixed directory):
    staged, fsynced, published by rename, under a lock (see :mod:`tempora_schema.outputs`)."""
    from tempora_schema.outputs import staged_dir, to_bytes, write_file

    from .traces import check_out_outside

    check_out_outside(traces, out)
    with staged_dir(out, what="sweep output", files=("utility.parquet", "utility.csv")) as stage:
        write_file(stage / "utility.parquet", to_bytes(frame.write_parquet))
        write_file(stage / "utility.csv", frame.write_csv().encode("utf-8"))


#: Rows serialised at a time by :func:`echo_json_rows`.
JSON_CHUNK_ROWS = 100_000


def echo_json_rows(frame) -> None:
    """Print ``frame`` as one JSON array of row objects (polars' own writer, compact), a chunk
    of rows at a time: a 1,000,000-value grid never holds its rows as Python objects, nor their
    whole text, at once (``json.dumps(frame.to_dicts())`` needed 13 GB there)."""
    import sys

    out = sys.stdout
    out.write("[")
    for start in range(0, frame.height, JSON_CHUNK_ROWS):
        text = frame.slice(start, JSON_CHUNK_ROWS).write_json()
        out.write(("," if start else "") + text[1:-1])
    out.write("]\n")
    out.flush()


@main.command("sweep")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out", "out", type=click.Path(path_type=str), default=None, help="Directory for utility.parquet and utility.csv (omit to only print)."
)
@sweep_options
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
    from .replay import ALL_EPISODES, SimWarning, run_sweep

    opts = from_click(options)
    boot = make_bootstrap(ci_level, resamples, ci_seed, timing_replicates)  # checked before anything is read
    if out is not None:
        from tempora_schema.outputs import check_output_dir

        from .traces import check_out_outside

        out = check_output_dir(out)  # refused before anything is read or replayed
        check_out_outside(traces, out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SimWarning)
        result = run_sweep([str(p) for p in traces], opts)
    for w in caught:
        if issubclass(w.category, SimWarning):
            click.echo(f"tempora-sim: warning: {w.message}", err=True)
    timing_text = None
    if intervals:
        from . import timing_noise
        from .replicates import replicates_of
        from .term_intervals import interval_columns

        timing = replicates_of(result, boot.timing_replicates, boot.seed)
        result.frame = interval_columns(result, boot, timing)
        timing_text = timing_noise.describe(timing, boot.timing_replicates)
    if out is not None:
        write_outputs(result.frame, out, traces)

    import polars as pl

    if fmt == "json":
        pooled = result.frame.filter(pl.col("episode") == ALL_EPISODES)
        echo_json_rows(pooled)
        click.echo(result.stats.line(), err=True)
        if timing_text:
            click.echo(timing_text, err=True)
        return
    from rich.console import Console

    from .report.terminal import print_report

    console = Console()
    print_report(result, console)
    if out is not None:
        console.print(f"wrote {out / 'utility.parquet'} and {out / 'utility.csv'} ({result.frame.height:,} rows)")
    if timing_text:
        console.print(timing_text)
    click.echo(result.stats.line())
