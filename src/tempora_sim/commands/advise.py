"""``tempora-sim advise``: the command over :mod:`tempora_sim.analyses.advice` (the algorithm)."""

from __future__ import annotations

import json

import click
import numpy as np

from tempora_schema.vocabulary import BUDGET_RULES
from tempora_sim.commands.main import main
from tempora_sim.uncertainty.bootstrap import bootstrap_options, make_bootstrap


@main.command("advise")
@click.argument("source", nargs=-1, required=True, type=click.Path())
@click.option("--rho", default=None, help="Utilisation ρ = λ/γ, a fraction or %, e.g. 0.6 or 60%.")
@click.option("--gamma-ms", "gamma_ms", default=None, help="Inter-arrival time γ (ms, or with ms/s suffix).")
@click.option("--T", "T", default=None, help="HCI threshold T (ms, or with ms/s suffix); must exceed λ.")
@click.option("--B", "B", default=None, help="Overhead budget B per episode (ms, or with ms/s suffix).")
@click.option(
    "--budget-rule",
    "budget_rule",
    default="strict",
    show_default=True,
    type=click.Choice(list(BUDGET_RULES)),
    help="As in `tempora-sim sweep`.",
)
@click.option(
    "--format",
    "fmt",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one object per comparison group, for scripts.",
)
@click.option("--no-idle-effect", "no_idle_effect", is_flag=True, help="As in `tempora-sim sweep`.")
@bootstrap_options
def advise_command(source, rho, gamma_ms, T, B, budget_rule, fmt, no_idle_effect, ci_level, resamples, ci_seed, timing_replicates):
    """Recommend a method for each trace group at one constraint, with its certainty and
    how far the constraint can move before the recommendation changes."""
    # lazy: the advise search loads the replay, the analyses and polars, which `--help` does not need
    from tempora_sim.analyses.advice import advise, parse_constraint, text_lines

    # every error is a SimError: the command group prints it as one line, exit status 2
    c = parse_constraint(rho, gamma_ms, T, B)
    boot = make_bootstrap(ci_level, resamples, ci_seed, timing_replicates)
    sweep_opts = {"budget_rule": budget_rule, **({"no_idle_effect": True} if no_idle_effect else {})}
    advice = advise([str(s) for s in source], c, boot, sweep_opts)
    if fmt == "json":
        click.echo(json.dumps(advice, default=_json_default))
    else:
        click.echo("\n".join(text_lines(advice, c)))


def _json_default(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)
