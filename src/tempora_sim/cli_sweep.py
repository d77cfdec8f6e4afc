"""``tempora-sim sweep``: replay a directory of traces under ρ / T / B grids.

Writes ``OUT/utility.parquet`` and ``OUT/utility.csv`` atomically (a temporary directory next
to OUT is renamed into place, so a failure never leaves a partial OUT), prints the
corruption-aggregated tables and the strict-pressure decompositions, and ends with one line
saying how much was replayed and how long the kernels took. Bad input is one line on stderr
and exit status 2.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import click

from .cli import main
from .errors import SimError
from .options import click_options as sweep_options
from .options import from_click


def write_outputs(frame, out: Path) -> None:
    """Write utility.parquet/.csv into ``out`` atomically (never a partial directory)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SimError(f"{out}: --out exists and is not a directory")
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
    try:
        frame.write_parquet(tmp / "utility.parquet")
        frame.write_csv(tmp / "utility.csv")
        if out.exists():
            # replace the two files one by one (each os.replace is atomic); other files stay
            for name in ("utility.parquet", "utility.csv"):
                os.replace(tmp / name, out / name)
        else:
            os.replace(tmp, out)
    except OSError as exc:
        raise SimError(f"{out}: cannot write outputs ({exc.strerror or exc})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@main.command("sweep")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Directory for utility.parquet and utility.csv (omit to only print).")
@sweep_options
@click.option("--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"]),
              help="json prints the aggregated rows as JSON on stdout instead of tables.")
def sweep_command(traces, out, fmt, **options):
    """Replay TRACES (files or directories of *.parquet) under temporal grids."""
    from .replay import ALL_EPISODES, SimWarning, run_sweep

    opts = from_click(options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SimWarning)
        result = run_sweep([str(p) for p in traces], opts)
    for w in caught:
        if issubclass(w.category, SimWarning):
            click.echo(f"tempora-sim: warning: {w.message}", err=True)
    if out is not None:
        write_outputs(result.frame, out)

    import polars as pl

    if fmt == "json":
        pooled = result.frame.filter(pl.col("episode") == ALL_EPISODES)
        click.echo(json.dumps(pooled.to_dicts(), allow_nan=False, default=str))
        click.echo(result.stats.line(), err=True)
        return
    from rich.console import Console

    from .tables import print_report

    console = Console()
    print_report(result, console)
    if out is not None:
        console.print(f"wrote {out / 'utility.parquet'} and {out / 'utility.csv'} ({result.frame.height:,} rows)")
    click.echo(result.stats.line())
