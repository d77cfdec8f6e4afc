"""``tempora-trace``: measure one TTA method once on this device and write a Parquet trace.

    tempora-trace run --method tent --device cuda              # demo data, demo model
    tempora-trace --method tent --device cuda                  # the same: `run` is the default
    tempora-trace run --method tent --dataset imagenet-c --data-root ~/data/ImageNet-C --device cuda
    tempora-trace profile --method tent --device cpu           # the first batches only, timing only
    tempora-trace calibrate --device cuda                      # trace `standard`, print λ
    tempora-trace live --method tent --rho 1,0.5 --queue 1     # the protocol against a real clock
    tempora-trace list [--methods-for MODEL]
    tempora-trace synthesize data/synthetic                    # random JPEGs, ImageNet-C layout

Bad input is one ``tempora-trace: error: …`` line on stderr with exit status 2 (see
``docs/reference/errors.md``). A subcommand is one ``@cli.command(...)`` function; the options of the
commands that trace are declared once, in :mod:`tempora_trace.options`.
"""

from __future__ import annotations

import os as _os
import signal as _signal
import sys


def _interrupted_at_start_up(signum, frame):  # noqa: ARG001 - signal handler signature
    _os.write(2, b"tempora-trace: interrupted\n")
    _os._exit(130)


# Ctrl-C while the heavy modules import (seconds) is one line, not a KeyboardInterrupt traceback.
# Only in the tool's own process (script or `python -m`), never when a library imports this
# module; OneLineGroup.run restores Python's handler once the command starts. Nothing but the
# standard library may be imported before this line.
if __name__ == "__main__" or _os.path.basename(sys.argv[0] if sys.argv else "") == "tempora-trace":
    _signal.signal(_signal.SIGINT, _interrupted_at_start_up)

from pathlib import Path  # noqa: E402
from typing import Any, Callable, Sequence  # noqa: E402

import click  # noqa: E402

from tempora_schema import DEFAULT_SEVERITY  # noqa: E402
from tempora_schema.vocabulary import BASELINE_METHOD  # noqa: E402
from tempora_toolkit.command_line import INT32_MAX, OneLineGroup, leave_program  # noqa: E402

from .errors import ConfigError  # noqa: E402
from .options import click_options, config_kwargs, live_kwargs, method_params, parse_domains, parse_param, policies_of  # noqa: E402, F401

# The command boundary: what `--help` and option parsing need is imported above (click, the
# option declaration, tempora_schema; no torch, no numpy of our own). Each command imports the
# library modules it runs (they load torch) when it runs, so `--help` and bad input stay fast.

PROG = "tempora-trace"


class _TraceCommand(click.Command):
    """Accepts the space-separated form ``--domains fog snow`` beside ``--domains fog,snow``
    (the words after ``--domains`` up to the next option are joined with commas)."""

    list_options = ("--domains", "--corruptions")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            out.append(arg)
            i += 1
            if arg in self.list_options:
                words = []
                while i < len(args) and not args[i].startswith("-"):
                    words.append(args[i])
                    i += 1
                if words:
                    out.append(",".join(words))
        return super().parse_args(ctx, out)


cli = OneLineGroup(
    name=PROG,
    prog=PROG,
    default_command="run",
    aliases={"--list": ["list"], "--methods-for": ["list", "--methods-for"]},
    help="Trace a test-time adaptation method once on this device: a per-batch Parquet trace that "
    "`tempora-sim` replays under any deadline, patience threshold or budget.\n\n"
    "`tempora-trace --method X …` (no subcommand) is `tempora-trace run --method X …`. "
    "`--debug` anywhere on the line prints the traceback behind an error.",
)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``, as click's version option prints it; the version is looked up only when
    asked for (reading the package metadata is a cost every command would pay otherwise)."""
    if not value or ctx.resilient_parsing:
        return
    from . import __version__  # lazy: the package metadata is read only for --version

    click.echo(f"{PROG}, version {__version__}", color=ctx.color)
    ctx.exit()


cli = click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version and exit."
)(cli)


# ------------------------------------------------------------------------ options
def _method_required(cli_values: dict[str, Any]) -> None:
    if cli_values["method"] is None:
        from .methods import available_methods  # lazy: loads torch; `--help` and refused options do not

        raise ConfigError(f"--method is required; available: {', '.join(available_methods())}")


# ------------------------------------------------------------------------ subcommands
@cli.command("run", cls=_TraceCommand)
@click_options("run")
def run_command(**cli_values: Any) -> None:
    """Trace one method: warm up, stream every domain through it under the clock, score frozen
    checkpoints on the side, and write <out>/<name>.parquet atomically."""
    from .config import config_from_options  # lazy: loads torch; `--help` and refused options do not
    from .runner import trace_run

    _method_required(cli_values)
    policies = policies_of(cli_values)
    if len(policies) > 1 and cli_values["name"] is not None:
        raise ConfigError("--name names one file, and --policy lists several: leave --name out (each policy names its own file)")
    # every configuration checked before the first trace starts
    configs = [config_from_options("run", cli_values, policy=p) for p in policies]
    # two policies that name one trace (fraction:0.5 and fraction:0.5:SEED with the run's own
    # seed, or values equal to the label's precision) are one trace: traced once, said so
    first: dict[str, str | None] = {}
    for given, cfg in zip(policies, configs):
        stem = cfg.file_stem()
        if stem in first:
            click.echo(
                f"tempora-trace: warning: --policy {given} names the same trace as {first[stem]} ({stem}); it is traced once", err=True
            )
        else:
            first[stem] = given
    unique: dict[str, Any] = {}
    for cfg in configs:
        unique.setdefault(cfg.file_stem(), cfg)
    configs = list(unique.values())
    for cfg in configs:
        try:
            path = trace_run(cfg)
        except KeyboardInterrupt:
            raise KeyboardInterrupt("interrupted: completed episodes are kept; rerun with --resume to continue") from None
        click.echo(f"wrote {path}")


@cli.command("profile", cls=_TraceCommand)
@click_options("profile")
def profile_command(**cli_values: Any) -> None:
    """Profile one method: the first --profile-batches batches of every episode of the stream
    `run` would trace with these options, timing only (no frozen checkpoints; the speed probe
    and the timing-variability measurement kept). Writes <out>/<name>.parquet atomically
    (default folder profiles/<dataset>/<model>/<device>/); `tempora-sim predict` turns a trace
    taken elsewhere and this profile into a predicted trace of this device."""
    from .config import config_from_options  # lazy: loads torch; `--help` and refused options do not
    from .profiling import profile_run

    _method_required(cli_values)
    policies = policies_of(cli_values)
    if len(policies) > 1 and cli_values["name"] is not None:
        raise ConfigError("--name names one file, and --policy lists several: leave --name out (each policy names its own file)")
    configs = [config_from_options("profile", cli_values, policy=p) for p in policies]
    for cfg in configs:
        try:
            path = profile_run(cfg)
        except KeyboardInterrupt:
            raise KeyboardInterrupt("interrupted: completed episodes are kept; rerun with --resume to continue") from None
        click.echo(f"wrote {path}")


@cli.command("calibrate", cls=_TraceCommand)
@click_options("calibrate")
def calibrate_command(**cli_values: Any) -> None:
    """Trace `standard` (or reuse its complete trace) and print λ = mean + 6σ of its per-batch latency.

    The trace is the one `run --method standard` writes, so it doubles as the group's baseline."""
    from .calibration import calibrate, calibration_lines  # lazy: loads torch; `--help` and refused options do not
    from .config import config_from_options

    cfg = config_from_options("calibrate", cli_values, method=BASELINE_METHOD)
    echo = (lambda s: None) if cfg.quiet else (lambda s: click.echo(s))
    try:
        result = calibrate(cfg, echo)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("interrupted: completed episodes are kept; rerun with --resume to continue") from None
    for line in calibration_lines(result):
        click.echo(line)


@cli.command("live", cls=_TraceCommand)
@click_options("live")
def live_command(**cli_values: Any) -> None:
    """Play one method live against a real clock and write <out>/<name>.live.parquet.

    Discrete: batch i arrives at t0 + i·γ, a queue of b, the pipeline takes the oldest waiting
    batch; amortised: live overhead accounting, frozen from the cut-off on. Compare with the
    replay: `tempora-sim validate LIVE --traces DIR`."""
    from .config import config_from_options  # lazy: loads torch; `--help` and refused options do not
    from .live_runner import LiveSettings, run_live

    _method_required(cli_values)
    if cli_values["resume"]:
        raise ConfigError("--resume: a live run cannot be resumed (its clock would not be one run); start it again")
    policies = policies_of(cli_values)
    if len(policies) > 1:
        raise ConfigError(f"--policy {cli_values['policy']}: a live run plays one policy; run live once per policy")
    settings = LiveSettings(**live_kwargs(cli_values)).checked()
    cfg = config_from_options("live", cli_values, policy=policies[0])
    try:
        path = run_live(cfg, settings)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("interrupted: nothing written (a live run is written whole or not at all)") from None
    click.echo(f"wrote {path}")


def _opt(*decls: str, **attrs: Any) -> Callable:
    attrs.setdefault("show_default", "default" in attrs and attrs["default"] not in (None, False))
    return click.option(*decls, **attrs)


@cli.command("synthesize")
@click.argument("root", type=click.Path(path_type=Path, file_okay=False))
@_opt(
    "--domains",
    default="gaussian_noise,motion_blur,fog,contrast",
    help="Corruption folders to write, or groups (noise, blur, weather, digital, all).",
)
@_opt("--images", type=click.IntRange(1, INT32_MAX), default=3200, help="Images per domain (3200: 50 batches of 64).")
@_opt("--severity", type=click.IntRange(1, 5), default=DEFAULT_SEVERITY, help="Severity folder to write.")
@_opt("--size", type=click.IntRange(8, 4096), default=224, help="Image side, px (ImageNet-C: 224).")
@_opt("--seed", type=click.IntRange(0, INT32_MAX), default=0, help="Seed of the image content.")
@_opt("--workers", type=click.IntRange(1, 1024), default=None, help="Encoding processes [default: the cores].")
@_opt("--quiet", is_flag=True, help="No progress bar.")
def synthesize_command(
    root: Path, domains: str, images: int, severity: int, size: int, seed: int, workers: int | None, quiet: bool
) -> None:
    """Write random JPEGs in the ImageNet-C layout under ROOT, to time methods where the dataset
    is not on disk: trace with --dataset imagenet-c --data-root ROOT --weights random (timing
    only; accuracies mean nothing). A complete folder is reused."""
    from .data.synthetic import synthesize  # lazy: loads torch; `--help` and refused options do not

    click.echo(synthesize(root, parse_domains(domains) or [], images, severity, size, seed, workers, quiet))


@cli.command("list")
@click.option(
    "--methods-for", metavar="MODEL", default=None, help="Print only the methods that run on MODEL (space-separated, for scripts)."
)
@click.option(
    "--model",
    "model",
    metavar="SPEC",
    default=None,
    help="Describe one model (a name, timm:NAME, torchvision:NAME, MODULE:FACTORY, PATH.py:FACTORY; built untrained, "
    "nothing downloaded): its normalisation layers and the methods that fit it.",
)
@click.option("--input-size", type=click.IntRange(8, 8192), default=None, metavar="PX", help="With --model: the image side.")
@click.option(
    "--demo-set",
    is_flag=True,
    help="With --methods-for: leave out the field's methods, as the demo set does (cotta, rotta, roid, t3a, memo, eata).",
)
def list_command(methods_for: str | None, model: str | None, input_size: int | None, demo_set: bool) -> None:
    """List methods, models and datasets (or the methods that fit one model)."""
    from .catalogue import catalogue_lines, methods_for_line, model_lines  # lazy: loads torch; `--help` and refused options do not

    if methods_for is not None:
        click.echo(methods_for_line(methods_for, demo_set))
        return
    lines = model_lines(model, input_size) if model is not None else catalogue_lines()
    for line in lines:
        click.echo(line)


@cli.command("campaign")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="local: one trace at a time per device on this machine (one dispatcher per GPU); "
    "ray: every trace a Ray task holding a whole GPU (or its CPU cores).",
)
@click.option("--address", default=None, help="Ray cluster to join (auto, or HOST:PORT); default: start a local one.")
@click.option(
    "--retries",
    type=click.IntRange(0, 100),
    default=3,
    show_default=True,
    help="Ray: how often a lost trace is retried (each retry resumes after the last complete episode).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Trace again a complete trace of another identity (options, batch limit, parameters) found under a trace's name.",
)
@click.option("--dry-run", is_flag=True, help="List the traces and profiles (ending 'profile:N') the campaign would run, then exit.")
@click.option("--quiet", is_flag=True, help="No progress view, only the summary line.")
def campaign_command(file: Path, engine: str, address: str | None, retries: int, force: bool, dry_run: bool, quiet: bool) -> None:
    """Run every trace and profile of a campaign FILE (TOML): standard traces first, complete ones skipped."""
    from .campaign import check_results, dry_run_lines, run_campaign, summary_line  # lazy: loads torch; `--help` and refused options do not

    if dry_run:
        for line in dry_run_lines(file):
            click.echo(line)
        return
    campaign, results, seconds = run_campaign(file, engine, address, retries, quiet, force)
    click.echo(summary_line(campaign, results, seconds))
    check_results(results)


@cli.command("check-method")
@click.argument("method")
@_opt("--param", "params", multiple=True, metavar="KEY=VALUE", help="Build the method with this option (repeatable).")
@_opt("--batches", type=click.IntRange(2, 1000), default=6, help="Demo batches each check streams.")
@_opt("--batch-size", type=click.IntRange(2, 4096), default=16, help="Images per demo batch.")
@_opt(
    "--norm",
    type=click.Choice(["bn", "gn", "ln"]),
    default=None,
    help="Normalisation family of the demo model [default: the first of bn, gn, ln the method supports].",
)
@_opt("--device", default="cpu", help="cpu, cuda or cuda:N (synchronisation is detected on either).")
@_opt("--threads", type=click.IntRange(1, 4096), default=1, help="Torch intra-op threads while checking.")
def check_method_command(
    method: str, params: tuple[str, ...], batches: int, batch_size: int, norm: str | None, device: str, threads: int
) -> None:
    """Check that METHOD (a name, package.module:CLASS or PATH.py:CLASS) keeps the contract every
    built-in method keeps with the tracer: reset and snapshot/restore replay bit for bit, frozen
    mode changes nothing, options are validated and recorded, predict learns nothing that
    belongs in adapt, no synchronisation or clock read inside the method, and the warm-up
    meets every input shape a stream does (docs/guide/add-a-method.md). Runs on the demo data in
    well under a minute; one line per check, exit status 1 when one fails."""
    from .methods import resolve_method  # lazy: loads torch; `--help` and refused options do not
    from .methods.testing import run_checks
    from .timing import resolve_device

    ref = resolve_method(method)
    dev = str(resolve_device(device))
    options = dict(parse_param(p) for p in params)
    passed = run_checks(ref, options, batches=batches, batch_size=batch_size, norm=norm, device=dev, threads=threads, echo=click.echo)
    if not passed:
        raise click.exceptions.Exit(1)


def __getattr__(name: str) -> Any:
    # Library names callers used to import from here, resolved on first use so that start-up
    # does not load them: `methods_for` / `methods_for_model` (tempora_trace.methods),
    # `lambda_ms_of` (tempora_trace.calibration) and `make_config`
    # (tempora_trace.config.config_from_options).
    if name in ("methods_for", "methods_for_model"):
        from .methods import methods_for_model  # lazy: loads torch; `--help` and refused options do not

        return methods_for_model
    if name == "lambda_ms_of":
        from .calibration import lambda_ms_of  # lazy: loads torch; `--help` and refused options do not

        return lambda_ms_of
    if name == "make_config":
        from .config import config_from_options  # lazy: loads torch; `--help` and refused options do not

        return config_from_options
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run the command line ``argv`` and return its exit status (never raises)."""
    return cli.main(args=None if argv is None else [str(a) for a in argv], standalone_mode=False)


def run() -> None:
    """The ``tempora-trace`` program (and ``python -m tempora_trace.cli``): :func:`main`, then
    leave without the interpreter's teardown (:func:`tempora_toolkit.command_line.leave_program`),
    which would spend about 0.8 s freeing torch after the last line; a campaign pays it once per
    trace. A library caller of :func:`main` keeps the ordinary exit."""
    leave_program(main())


if __name__ == "__main__":
    run()
