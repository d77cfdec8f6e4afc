"""``tempora-sim predict`` and ``tempora-sim validate-prediction`` (``docs/guide/predict.md``).

``predict`` pairs every profile (``tempora-trace profile``) with the source trace of its
configuration, fits the transfer model per method (:mod:`tempora_sim.prediction.transfer`), prints it
beside the two baselines and writes one predicted trace per method under ``--out``.
``validate-prediction`` compares predicted traces with full traces taken on the target
(:mod:`tempora_sim.prediction.check`). Bad input is one line and exit status 2, nothing written.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from tempora_sim.commands.main import main
from tempora_sim.uncertainty import bootstrap as st


def _ms(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.3g}"


@main.command("predict")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--profiles",
    required=True,
    type=click.Path(path_type=Path),
    help="Profiles (files or folders) taken on the target device with `tempora-trace profile`.",
)
@click.option(
    "--out", required=True, type=click.Path(path_type=Path), help="Folder for the predicted traces (one folder per target device)."
)
@click.option(
    "--transfer",
    "transfers",
    default="fit",
    show_default=True,
    help="What to write, comma-separated: fit (the transfer model), and/or the baselines speed-probe "
    "(one factor for every method) and method-median (one factor per method), for comparison.",
)
def predict_command(sources, profiles, out, transfers):
    """Predict traces of a profiled device from SOURCES (traces taken elsewhere): per method the
    source trace's accuracy and checkpoint rows, with times mapped by a transfer model fitted on
    the events it shares with the profile. The predicted traces read like any others; their
    device is marked '(predicted)' and their intervals include the transfer's error."""
    # lazy: the trace reader and polars load when the command runs, not with `tempora-sim --help`
    from tempora_sim.prediction.transfer import predict, write_prediction

    names = [t.strip() for t in str(transfers).split(",") if t.strip()]
    prediction = predict(list(sources), profiles, transfers=tuple(dict.fromkeys(names)) or ("fit",))
    click.echo("Transfer per method (held-out error σ of the mean δ, log scale), δ̄ in ms")
    click.echo(
        f"{'device · model · method':<60}{'e':>16}{'ℓ':>22}{'σ':>8}{'δ̄ source':>11}{'δ̄ profile':>11}{'δ̄ predicted':>13}"
        f"{'probe ×':>10}{'median ×':>10}"
    )
    for r in prediction.table():
        name = f"{r['device']} · {r['model']} · {r['method']}"
        click.echo(
            f"{name[:59]:<60}{r['e']:>16}{r['l']:>22}{100 * r['sd_log']:>7.1f}%{_ms(r['source_delta_ms']):>11}"
            f"{_ms(r['profile_delta_ms']):>11}{_ms(r['predicted_delta_ms']):>13}{_ms(r['speed-probe_delta_ms']):>10}"
            f"{_ms(r['method-median_delta_ms']):>10}"
        )
    differ = [p for p in prediction.pairings if p.pairs.correct_differ]
    for p in differ:
        click.echo(
            f"accuracy differs on {p.pairs.correct_differ} of {p.pairs.step.size} shared batches of {p.source.method} "
            f"(up to {p.pairs.max_correct_diff} images): the predicted trace keeps the source's accuracy",
            err=True,
        )
    written = write_prediction(prediction, out, list(sources), profiles)
    click.echo(f"wrote {len(written)} predicted trace(s) under {out} (their device is marked '(predicted)')")


@main.command("validate-prediction")
@click.argument("predicted", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--against",
    "measured",
    required=True,
    type=click.Path(path_type=Path),
    help="Full traces taken on the target device (the same configurations).",
)
@click.option(
    "--source",
    "sources",
    type=click.Path(path_type=Path),
    default=None,
    help="With --profiles: the source traces, to evaluate the two baselines beside the transfer model.",
)
@click.option("--profiles", type=click.Path(path_type=Path), default=None, help="With --source: the profiles the prediction used.")
@st.bootstrap_options
def validate_prediction_command(predicted, measured, sources, profiles, ci_level, resamples, ci_seed, timing_replicates):
    """Compare PREDICTED traces (from `tempora-sim predict`) with full traces measured on the
    target: per method the error of δ̄, ē, ℓ̄ and λ; over the default grids the share of cells
    with the same winner, the share of certain measured winners predicted, Spearman r_s of the
    utilities and the coverage of measured U by the predicted intervals."""
    # lazy: the replay, the analyses and polars load when the command runs
    from tempora_sim.prediction.check import check_lines, validate_prediction

    bootstrap = st.make_bootstrap(ci_level, resamples, ci_seed, timing_replicates)
    checks = validate_prediction(list(predicted), measured, bootstrap, sources, profiles)
    for line in check_lines(checks):
        click.echo(line)
