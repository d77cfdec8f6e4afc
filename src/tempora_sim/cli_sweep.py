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


class UserInputError(click.ClickException):
    """One-line error for bad input (exit status 2, like click's usage errors)."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"tempora-sim: error: {self.format_message()}", err=True)


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
@click.option("--protocol", "protocol", default="all", show_default=True,
              help="all, offline, discrete, continuous, amortised (comma-separated list allowed).")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Directory for utility.parquet and utility.csv (omit to only print).")
@click.option("--rho", default=None, help="Utilisations ρ = λ/γ, fractions or %, e.g. 1,0.7,50%. [default: 1,0.7,0.5,0.35,0.25]")
@click.option("--T", "T", default=None, help="HCI thresholds, ms by default or with ms/s suffix. [default: 50,100,200,400,1000]")
@click.option("--B", "B", default=None, help="Overhead budgets, ms by default or with ms/s suffix. [default: 1s,2s,4s,8s,16s,32s]")
@click.option("--lambda-ms", "lambda_ms", default=None,
              help="Use this λ for every group instead of mean+6σ of its standard trace (ms, or with a suffix).")
# lambda-rule option (docs/trace-schema.md, "λ rules")
@click.option("--lambda-rule", "lambda_rule", default="paper", show_default=True, type=click.Choice(["paper", "robust"]),
              help="λ from standard's δ: paper = mean + 6σ, robust = median + 6·1.4826·MAD (recorded per row).")
@click.option("--queue", default=1, show_default=True, type=int, help="Discrete queue capacity b (0 = drop while busy).")
@click.option("--sync", default="buffered", show_default=True, type=click.Choice(["buffered", "strict"]),
              help="strict: Alfarra et al.'s +2 synchronisation (pickup only at arrivals, no drain).")
@click.option("--skipped", default="null", show_default=True, type=click.Choice(["null", "random"]),
              help="Score of a skipped batch: 0 (null prediction) or 1/C (random prediction).")
@click.option("--fallback", is_flag=True, default=False,
              help="Dual-model fallback: skipped batches get the adapting model's forward-only prediction.")
@click.option("--budget-rule", "budget_rule", default="strict", show_default=True,
              type=click.Choice(["strict", "overshoot"]),
              help="strict: m = max{j: Σc ≤ B} (paper); overshoot: adapt while spent < B (reference code).")
@click.option("--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "json"]),
              help="json prints the aggregated rows as JSON on stdout instead of tables.")
def sweep_command(traces, protocol, out, rho, T, B, lambda_ms, lambda_rule, queue, sync, skipped, fallback, budget_rule, fmt):
    """Replay TRACES (files or directories of *.parquet) under temporal grids."""
    from .replay import ALL_EPISODES, SimWarning, run_sweep

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SimWarning)
            result = run_sweep(
                [str(p) for p in traces], protocols=protocol, rho=rho, T_ms=T, B_ms=B, lambda_ms=lambda_ms,
                queue=queue, budget_rule=budget_rule, skipped=skipped, sync=sync, fallback=fallback,
                lambda_rule=lambda_rule,  # lambda-rule option
            )
        for w in caught:
            if issubclass(w.category, SimWarning):
                click.echo(f"tempora-sim: warning: {w.message}", err=True)
        if out is not None:
            write_outputs(result.frame, out)
    except SimError as exc:
        raise UserInputError(str(exc)) from None

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
