"""``tempora-sim validate``: live runs beside the replay of their traces (``docs/guide/validation.md``).

Prints one table (one row per live setting: live vs replay α, |Q|, served accuracy, utility,
the differences in pp, the run-to-run spread and the self-consistency of each run), lists the
self-consistency disagreements, optionally writes ``validation.{parquet,csv}``,
``validation-runs.{parquet,csv}`` and ``validation-disagreements.{parquet,csv}`` atomically,
and exits 1 when a tolerance is exceeded. Bad input is one line and exit status 2.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from tempora_schema.errors import OptionError
from tempora_sim.commands.main import main
from tempora_sim.validation.tolerances import (
    DEFAULT_ABS_TOL_PP,
    DEFAULT_AMORTISED_TOL_PP,
    DEFAULT_CLOCK_TOL_PCT,
    DEFAULT_MIN_AGREEMENT_PCT,
    DEFAULT_SPREAD_SLACK_PP,
    DEFAULT_TIE_US,
    Tolerances,
)

#: Exit status when every input was fine but a tolerance is exceeded.
EXIT_TOLERANCE = 1


@main.command("validate")
@click.argument("live", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--traces",
    "traces",
    required=True,
    type=click.Path(path_type=Path),
    help="Trace files/directories holding each live run's group (its method's trace).",
)
@click.option(
    "--sandwich",
    "sandwich",
    type=click.Path(path_type=Path),
    default=None,
    metavar="TRACES",
    help="The same configurations traced on the other side of the live runs (after them, when --traces came before): "
    "the clock check then compares the live δ with the geometric mean of both traces, so a steady drift of the machine "
    "cancels; the replay stays that of --traces.",
)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Directory for validation*.parquet/csv (omit to only print).")
@click.option(
    "--tol-pp",
    "abs_pp",
    type=float,
    default=DEFAULT_ABS_TOL_PP,
    show_default=True,
    help="Discrete: largest |ΔU| and |Δα| (pp) between replay and live, whatever the spread.",
)
@click.option(
    "--spread-slack-pp",
    "slack_pp",
    type=float,
    default=DEFAULT_SPREAD_SLACK_PP,
    show_default=True,
    help="Discrete, with ≥ 2 runs of a setting: |Δ| may exceed their spread by this much (pp).",
)
@click.option(
    "--amortised-tol-pp",
    "amortised_pp",
    type=float,
    default=DEFAULT_AMORTISED_TOL_PP,
    show_default=True,
    help="Amortised: largest |ΔU| (pp) between replay and the live exact-budget run.",
)
@click.option(
    "--min-agreement",
    "min_agreement",
    type=float,
    default=DEFAULT_MIN_AGREEMENT_PCT,
    show_default=True,
    help="Self-consistency: least share (%) of identical serve/skip decisions per run.",
)
@click.option(
    "--tie-us",
    "tie_us",
    type=float,
    default=DEFAULT_TIE_US,
    show_default=True,
    help="Self-consistency: a disagreement is a near-tie when an arrival is this close (µs) to the decision.",
)
@click.option(
    "--clock-tol-pct",
    "clock_pct",
    type=float,
    default=DEFAULT_CLOCK_TOL_PCT,
    show_default=True,
    help="Largest gap (%) between the live events' mean δ and the traced δ of the same batches with the trace's idle "
    "effect applied, unless the trace's own pass-to-pass spread is wider.",
)
def validate_command(live, traces, sandwich, out, abs_pp, slack_pp, amortised_pp, min_agreement, tie_us, clock_pct):
    """Put every LIVE run (files/directories from `tempora-trace live`) beside the replay of
    its trace group; exit 1 when a tolerance is exceeded or a clock check is inconclusive."""
    # lazy: the replay and rich load when validate runs, not with `tempora-sim --help`
    from tempora_sim.validation.live_runs import validate_into
    from tempora_sim.validation.view import print_validation, validation_console

    for name, value in (
        ("--tol-pp", abs_pp),
        ("--spread-slack-pp", slack_pp),
        ("--amortised-tol-pp", amortised_pp),
        ("--tie-us", tie_us),
        ("--clock-tol-pct", clock_pct),
    ):
        if not (math.isfinite(value) and value >= 0):
            raise OptionError(f"{name} must be ≥ 0, got {value:g}")
    if not 0 <= min_agreement <= 100:
        raise OptionError(f"--min-agreement must be a percentage in 0..100, got {min_agreement:g}")
    tol = Tolerances(abs_pp, slack_pp, amortised_pp, min_agreement, tie_us, clock_pct)
    result, written = validate_into(live, traces, tol, out, sandwich)
    console = validation_console()
    print_validation(result, console)
    if written:
        console.print(f"wrote {', '.join(str(p) for p in written if p.suffix == '.csv')} (and .parquet)")
    if not result.passed:
        parts = [f"{result.checks_beyond_tolerance} check(s) beyond tolerance"]
        if result.clock_inconclusive:
            parts.append(f"{result.clock_inconclusive} clock check(s) inconclusive (their traces too noisy to tell the clocks apart)")
        click.echo(f"tempora-sim: validate: {', '.join(parts)}", err=True)
        raise click.exceptions.Exit(EXIT_TOLERANCE)
    click.echo("validate: every check within tolerance")
