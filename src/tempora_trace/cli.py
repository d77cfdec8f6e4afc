"""``tempora-trace``: measure one TTA method once on this device and write a Parquet trace.

    tempora-trace run --method tent --device cuda              # demo data, demo model
    tempora-trace --method tent --device cuda                  # the same: `run` is the default
    tempora-trace run --method tent --dataset imagenet-c --data-root ~/data/ImageNet-C --device cuda
    tempora-trace calibrate --device cuda                      # trace `standard`, print λ
    tempora-trace live --method tent --rho 1,0.5 --queue 1     # the protocol against a real clock
    tempora-trace list [--methods-for MODEL]
    tempora-trace synthesize data/synthetic                    # random JPEGs, ImageNet-C layout

Bad input is one ``tempora-trace: error: …`` line on stderr with exit status 2 (see
``docs/errors.md``). A subcommand is one ``@cli.command(...)`` function; options shared by
several subcommands are declared once in :data:`RUN_OPTIONS` / :func:`run_options`.
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

import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Sequence  # noqa: E402

import click  # noqa: E402

from tempora_schema.command import (  # noqa: E402
    INT32_MAX,
    INT64_MAX,
    OneLineGroup,
    ValueType,
    int_list_type,
    parse_int,
    time_list_type,
    time_type,
)
from tempora_schema.errors import OptionError  # noqa: E402
from tempora_schema.provision import LAMBDA_RULES  # noqa: E402

from . import __version__  # noqa: E402
from .calibration import lambda_ms_of  # noqa: E402
from .config import (  # noqa: E402
    DEFAULT_BATCH_SIZE,
    DEFAULT_FROZEN_SAMPLE,
    DEFAULT_IDLE_GAPS,
    DEFAULT_SEED,
    DEFAULT_SEVERITY,
    DEFAULT_STAGE_MB,
    DEFAULT_TIMING_PASSES,
    DEFAULT_TIMING_SAMPLE,
    WARMUP_BATCHES,
    TraceConfig,
)
from .errors import ConfigError  # noqa: E402

PROG = "tempora-trace"


class _TraceCommand(click.Command):
    """Accepts the space-separated form ``--domains fog snow`` beside ``--domains fog,snow``
    (the words after ``--domains`` up to the next option are joined with commas)."""

    list_options = ("--domains",)

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
    "`tempora-trace --method X …` (no subcommand) is `tempora-trace run --method X …`.",
)
cli = click.version_option(__version__, "--version", prog_name=PROG)(cli)


# ------------------------------------------------------------------------ option types
def _frozen_sample(text: str, option: str) -> int | None:
    if text.strip() == "all":
        return None
    try:
        return parse_int(text, option, 1, INT32_MAX)
    except OptionError:
        raise OptionError(f"{option}: expected a number ≥ 1 or 'all', got '{text}'") from None


def _finite_json(value: Any, where: str) -> Any:
    """``--param`` values must be finite: NaN/∞ would collapse the model and break strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        raise OptionError(f"--param {where}: {value} is not a finite number")
    if isinstance(value, list):
        for v in value:
            _finite_json(v, where)
    if isinstance(value, dict):
        for v in value.values():
            _finite_json(v, where)
    return value


def parse_param(pair: str) -> tuple[str, Any]:
    """``KEY=VALUE``: VALUE is JSON when it parses (numbers, true/false, lists), else a string."""
    if "=" not in pair:
        raise OptionError(f"--param expects KEY=VALUE, got '{pair}'")
    key, text = (s.strip() for s in pair.split("=", 1))
    if not key:
        raise OptionError(f"--param expects KEY=VALUE, got '{pair}'")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return key, text
    if text.strip().lower().lstrip("+-") in ("nan", "infinity", "inf"):
        raise OptionError(f"--param {key}: {text} is not a finite number")
    return key, _finite_json(value, key)


FROZEN_SAMPLE = ValueType("N|all", _frozen_sample)


# ------------------------------------------------------------------------ options, declared once
def _opt(*decls: str, **attrs: Any) -> Callable:
    attrs.setdefault("show_default", "default" in attrs and attrs["default"] not in (None, False))
    return click.option(*decls, **attrs)


#: Options of every subcommand that runs a trace (run, calibrate, and later ones).
RUN_OPTIONS: list[Callable] = [
    _opt(
        "--dataset",
        default="demo",
        help="demo, cifar10-c, cifar100-c, imagenet-c, imagenet-r, imagenet-a or imagenet-v2 (see `tempora-trace list`).",
    ),
    _opt("--model", default=None, help="Model name [default: the dataset's model: demo-resnet, cifar-resnet18, resnet50]."),
    _opt("--weights", default=None, help="Weight file (state_dict), or 'random' for an untrained model (timing only)."),
    _opt(
        "--offline",
        is_flag=True,
        help="Never download weights: a missing file is an error naming where to put it (also TEMPORA_OFFLINE=1 or HF_HUB_OFFLINE=1).",
    ),
    _opt("--data-root", default=None, help="Dataset folder [default: $TEMPORA_DATA/<dataset folder>]."),
    _opt("--device", default="cpu", help="cpu, cuda or cuda:N."),
    _opt("--out", default=None, type=click.Path(path_type=str), help="Output folder [default: traces/<dataset>/<model>/<device>/]."),
    _opt("--name", default=None, help="Trace file stem [default: the method plus -bs/-seed/-sev/-continual suffixes when not default]."),
    _opt(
        "--domains",
        default=None,
        metavar="LIST",
        help="Corruptions or groups (noise, blur, weather, digital, all, clean), comma-separated "
        "(`--domains fog snow` works too) [default: all 15 corruptions].",
    ),
    _opt("--severity", type=click.IntRange(1, 5), default=DEFAULT_SEVERITY, help="Corruption severity."),
    _opt("--max-batches", type=click.IntRange(1, INT32_MAX), default=None, help="At most this many batches per domain."),
    _opt("--batch-size", type=click.IntRange(1, INT32_MAX), default=DEFAULT_BATCH_SIZE, help="Images per batch."),
    _opt("--seed", type=click.IntRange(0, INT64_MAX), default=DEFAULT_SEED, help="Seed of the batch order and the method."),
    _opt(
        "--stream",
        type=click.Choice(["episodic", "continual", "dirichlet"]),
        default="episodic",
        help="episodic: reset per domain; continual: never reset; dirichlet: reset per domain, batches in a "
        "label-shifted order (classes spread over time by Dirichlet(α)).",
    ),
    _opt(
        "--dirichlet-alpha",
        type=click.FloatRange(0, None, min_open=True),
        default=None,
        metavar="ALPHA",
        help="Concentration α of --stream dirichlet: smaller α, longer single-class runs [e.g. 0.01].",
    ),
    _opt(
        "--workers",
        type=click.IntRange(0, 1024),
        default=None,
        help="Parallel decode workers, active only between staged chunks, never during a timed event [default: min(8, cores)].",
    ),
    _opt(
        "--stage-mb",
        type=click.FloatRange(0, None, min_open=True),
        default=DEFAULT_STAGE_MB,
        metavar="MIB",
        help="Host memory for one staged chunk of batches, MiB (docs/timing.md).",
    ),
    _opt("--threads", type=click.IntRange(1, 4096), default=None, help="Torch intra-op threads [default: torch's choice]."),
    _opt(
        "--warmup-batches",
        type=click.IntRange(0, 1000),
        default=WARMUP_BATCHES,
        help="Untimed noise-perturbed copies of the first batch run before the clock starts, so lazy "
        "initialisation never lands in a timed row (0: none).",
    ),
    _opt("--resume", is_flag=True, help="Continue an interrupted run after its last complete episode."),
    _opt("--force", is_flag=True, help="Overwrite an existing trace or discard an interrupted run."),
    _opt("--quiet", is_flag=True, help="No progress bars or episode summaries."),
]

#: The method and its hyperparameters (`run` and `live`).
METHOD_CHOICE: list[Callable] = [
    _opt("--method", default=None, help="TTA method (see `tempora-trace list`). Required."),
    _opt("--param", "params", multiple=True, metavar="KEY=VALUE", help="Override a method hyperparameter (repeatable)."),
    _opt(
        "--profile",
        type=click.Choice(["default", "paper"]),
        default=None,
        help="paper: behave as the Tempora reference code wherever the default departs from it "
        "(docs/methods-parity.md); the trace is named <method>-paper. Same as --param profile=paper.",
    ),
]

#: Which frozen checkpoints a trace scores (`run`, and `live --trace-alongside`).
CHECKPOINT_OPTIONS: list[Callable] = [
    _opt(
        "--frozen-sample",
        type=FROZEN_SAMPLE,
        default=str(DEFAULT_FROZEN_SAMPLE),
        help="Later batches scored per frozen checkpoint, or 'all' (exact).",
    ),
    _opt(
        "--checkpoints",
        type=int_list_type(0, INT32_MAX),
        default=None,
        metavar="STEPS",
        help="Extra exact checkpoints, comma-separated, e.g. 0,5,17.",
    ),
    _opt("--no-default-checkpoints", is_flag=True, help="Only --checkpoints and budget checkpoints."),
]

#: Timing variability measured after the main pass (docs/tracer.md, tempora_trace.variability).
TIMING_OPTIONS: list[Callable] = [
    _opt(
        "--timing-sample",
        type=click.IntRange(0, 100_000),
        default=DEFAULT_TIMING_SAMPLE,
        help="Events timed again after the main pass, per repeat pass (timing variability; 0 turns it off).",
    ),
    _opt("--timing-passes", type=click.IntRange(1, 100), default=DEFAULT_TIMING_PASSES, help="Back-to-back repeat passes over the sample."),
    _opt(
        "--idle-gaps",
        default=DEFAULT_IDLE_GAPS,
        metavar="GAPS",
        help="Idle waits before every other event of the idle pass: <k>x (multiples of the sample's median δ) "
        "and/or times (ms, or with ms/s), comma-separated; 'none' for no idle pass.",
    ),
]


def timing_settings(opts: dict[str, Any]) -> dict[str, Any]:
    """The TraceConfig fields of :data:`TIMING_OPTIONS`."""
    return {"timing_sample": opts["timing_sample"], "timing_passes": opts["timing_passes"], "idle_gaps": opts["idle_gaps"]}


#: Options of `run` only: the method, its checkpoints, the exact budget cut-offs, timing variability.
METHOD_OPTIONS: list[Callable] = [
    *METHOD_CHOICE,
    *CHECKPOINT_OPTIONS,
    *TIMING_OPTIONS,
    _opt(
        "--budgets-ms",
        type=time_list_type(0.0),
        default=None,
        metavar="TIMES",
        help="Add the exact cut-off checkpoints of these budgets (ms, or with ms/s: 1s,2s); needs --lambda-ms.",
    ),
    _opt(
        "--lambda-ms",
        type=time_type(0.0, allow_zero=False),
        default=None,
        metavar="TIME",
        help="λ for --budgets-ms (ms, or with ms/s; see `tempora-trace calibrate`).",
    ),
]


def run_options(*groups: list[Callable]) -> Callable:
    """Decorator applying option lists in order (the help lists them as declared)."""

    def apply(fn: Callable) -> Callable:
        for group in reversed(groups):
            for option in reversed(group):
                fn = option(fn)
        return fn

    return apply


def checkpoint_settings(opts: dict[str, Any]) -> dict[str, Any]:
    """The TraceConfig fields of :data:`CHECKPOINT_OPTIONS`."""
    return {
        "frozen_sample": opts["frozen_sample"],
        "checkpoints": opts["checkpoints"] or [],
        "default_checkpoints": not opts["no_default_checkpoints"],
    }


def method_params(opts: dict[str, Any]) -> dict[str, Any]:
    """``--param`` pairs plus ``--profile`` (which is the method parameter ``profile``)."""
    params = dict(parse_param(p) for p in opts["params"])
    if opts.get("profile") is not None:
        if params.get("profile", opts["profile"]) != opts["profile"]:
            raise ConfigError(f"--profile {opts['profile']} contradicts --param profile={params['profile']}")
        params["profile"] = opts["profile"]
    return params


def _domains(text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.replace(" ", ",").split(",") if t.strip()]
    if not items:
        raise OptionError("--domains: empty list")
    return items


def make_config(method: str, opts: dict[str, Any], **extra: Any) -> TraceConfig:
    """A resolved :class:`TraceConfig` from the shared options; every value is checked here,
    before any model, data or output is touched."""
    cfg = TraceConfig(
        method=method,
        dataset=opts["dataset"],
        model=opts["model"],
        weights=opts["weights"],
        data_root=opts["data_root"],
        device=opts["device"],
        out=opts["out"],
        name=opts["name"],
        domains=_domains(opts["domains"]),
        severity=opts["severity"],
        max_batches=opts["max_batches"],
        batch_size=opts["batch_size"],
        seed=opts["seed"],
        stream=opts["stream"],
        dirichlet_alpha=opts["dirichlet_alpha"],
        workers=opts["workers"],
        threads=opts["threads"],  # part of the trace identity; the run applies it
        stage_mb=opts["stage_mb"],
        resume=opts["resume"],
        force=opts["force"],
        quiet=opts["quiet"],
        warmup_batches=opts["warmup_batches"],
        **extra,
    ).resolved()
    if opts["resume"] and opts["force"]:
        raise ConfigError("--resume and --force contradict each other; pass one")
    from tempora_schema.outputs import check_output_dir

    check_output_dir(cfg.out if cfg.out is not None else "traces")  # writable, before any work
    if opts["offline"]:
        os.environ["TEMPORA_OFFLINE"] = "1"  # read where weights are fetched (models.pretrained)
    return cfg


def _common(opts: dict[str, Any]) -> dict[str, Any]:
    return {
        k: opts[k]
        for k in (
            "dataset",
            "model",
            "weights",
            "data_root",
            "device",
            "out",
            "name",
            "domains",
            "severity",
            "max_batches",
            "batch_size",
            "seed",
            "stream",
            "dirichlet_alpha",
            "workers",
            "stage_mb",
            "threads",
            "resume",
            "force",
            "quiet",
            "offline",
            "warmup_batches",
        )
    }


# ------------------------------------------------------------------------ subcommands
@cli.command("run", cls=_TraceCommand)
@run_options(METHOD_OPTIONS, RUN_OPTIONS)
def run_command(**opts: Any) -> None:
    """Trace one method: warm up, stream every domain through it under the clock, score frozen
    checkpoints on the side, and write <out>/<name>.parquet atomically."""
    from .runner import trace_run

    if opts["method"] is None:
        from .methods import available_methods

        raise ConfigError(f"--method is required; available: {', '.join(available_methods())}")
    params = method_params(opts)
    cfg = make_config(
        opts["method"],
        _common(opts),
        method_params=params,
        **checkpoint_settings(opts),
        **timing_settings(opts),
        budgets_ms=opts["budgets_ms"] or [],
        lambda_ms=opts["lambda_ms"],
    )
    try:
        path = trace_run(cfg)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("interrupted: completed episodes are kept; rerun with --resume to continue") from None
    click.echo(f"wrote {path}")


@cli.command("calibrate", cls=_TraceCommand)
@run_options(RUN_OPTIONS)
def calibrate_command(**opts: Any) -> None:
    """Trace `standard` (or reuse its complete trace) and print λ = mean + 6σ of its per-batch latency.

    The trace is the one `run --method standard` writes, so it doubles as the group's baseline."""
    calibrate(make_config("standard", opts))


def _ratio_list(text: str, option: str) -> list[float]:
    from tempora_schema.command import parse_ratio, split_list

    values = [parse_ratio(t, option) for t in split_list(text, option)]
    bad = [v for v in values if not v > 0]
    if bad:
        raise OptionError(f"{option}: utilisation must be > 0 (got {bad[0]:g}); ρ = λ/γ and γ must be finite")
    return values


def _positive_time_list(text: str, option: str) -> list[float]:
    values = time_list_type(0.0).parse(text, option)
    if any(v <= 0 for v in values):
        raise OptionError(f"{option}: every inter-arrival time must be > 0 ms")
    return values


#: Options of `live` beyond the run options: the protocol and how λ is found.
LIVE_OPTIONS: list[Callable] = [
    *METHOD_CHOICE,
    _opt("--protocol", default="discrete", help="discrete, amortised, or both: discrete,amortised."),
    _opt(
        "--rho",
        type=ValueType("RATIOS", _ratio_list),
        default=None,
        metavar="RATIOS",
        help="Discrete: utilisations ρ = λ/γ, fractions or %, comma-separated (1,0.5 or 100%,50%).",
    ),
    _opt(
        "--gamma-ms",
        type=ValueType("TIMES", _positive_time_list),
        default=None,
        metavar="TIMES",
        help="Discrete: inter-arrival times γ instead of --rho (ms, or with ms/s).",
    ),
    _opt("--queue", type=click.IntRange(0, INT32_MAX), default=1, help="Discrete: queue capacity b (0 = drop arrivals while busy)."),
    _opt(
        "--B",
        "budgets",
        type=time_list_type(0.0),
        default=None,
        metavar="TIMES",
        help="Amortised: overhead budgets (ms, or with ms/s: 1s,4s).",
    ),
    _opt(
        "--budget-rule",
        type=click.Choice(["strict", "overshoot"]),
        default="strict",
        help="Amortised cut-off: strict m = max{j: Σc ≤ B}, or overshoot (adapt while spent < B).",
    ),
    _opt(
        "--lambda-ms",
        type=time_type(0.0, allow_zero=False),
        default=None,
        metavar="TIME",
        help="λ (ms, or with ms/s) [default: mean + 6σ of the group's standard trace].",
    ),
    _opt(
        "--standard",
        default=None,
        type=click.Path(path_type=str),
        help="Standard trace (file or folder) to take λ from [default: the folder `run` writes this group to].",
    ),
    _opt(
        "--lambda-rule",
        type=click.Choice(list(LAMBDA_RULES)),
        default="paper",
        help="λ from the standard trace's δ: paper = mean + 6σ, robust = median + 6·1.4826·MAD (one stall cannot inflate it).",
    ),
    _opt("--repeats", type=click.IntRange(1, 1000), default=1, help="Play every setting this many times (run-to-run spread)."),
    _opt(
        "--spin-us",
        type=click.FloatRange(0, 1e6),
        default=500.0,
        help="Before an arrival, busy-wait this last stretch (µs) instead of sleeping.",
    ),
    _opt(
        "--trace-alongside",
        default=None,
        type=click.Path(path_type=str, file_okay=False),
        metavar="DIR",
        help="Also trace the method in this run into DIR, each episode's trace pass beside its live runs "
        "(a replay that shares the machine's state; docs/validation.md). Checkpoint options apply to it.",
    ),
    _opt(
        "--budget-checkpoints",
        is_flag=True,
        help="The trace taken alongside also holds the exact cut-off checkpoints of the --B budgets "
        "(at its own cut-offs, under the live λ), so its amortised replay needs no nearest checkpoint.",
    ),
    *CHECKPOINT_OPTIONS,
]


@cli.command("live", cls=_TraceCommand)
@run_options(LIVE_OPTIONS, RUN_OPTIONS)
def live_command(**opts: Any) -> None:
    """Play one method live against a real clock and write <out>/<name>.live.parquet.

    Discrete: batch i arrives at t0 + i·γ, a queue of b, the pipeline takes the oldest waiting
    batch; amortised: live overhead accounting, frozen from the cut-off on. Compare with the
    replay: `tempora-sim validate LIVE --traces DIR`."""
    from .live import LiveSettings, run_live

    if opts["method"] is None:
        from .methods import available_methods

        raise ConfigError(f"--method is required; available: {', '.join(available_methods())}")
    if opts["resume"]:
        raise ConfigError("--resume: a live run cannot be resumed (its clock would not be one run); start it again")
    settings = LiveSettings(
        protocols=opts["protocol"],
        rho=opts["rho"],
        gamma_ms=opts["gamma_ms"],
        queue=opts["queue"],
        budgets_ms=opts["budgets"] or [],
        budget_rule=opts["budget_rule"],
        lambda_ms=opts["lambda_ms"],
        standard=opts["standard"],
        lambda_rule=opts["lambda_rule"],
        repeats=opts["repeats"],
        spin_us=opts["spin_us"],
        trace_alongside=opts["trace_alongside"],
        budget_checkpoints=opts["budget_checkpoints"],
    ).checked()
    params = method_params(opts)
    cfg = make_config(opts["method"], _common(opts), method_params=params, **checkpoint_settings(opts))
    try:
        path = run_live(cfg, settings)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("interrupted: nothing written (a live run is written whole or not at all)") from None
    click.echo(f"wrote {path}")


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
    from .data.streams import CORRUPTIONS, expand_domains
    from .data.synthetic import write_imagenet_c_folder
    from .runner import _Progress

    names = expand_domains(_domains(domains) or [], CORRUPTIONS)
    bar = _Progress(enabled=not quiet)
    bar.start("synthesize", total=images * len(names))
    try:
        written = write_imagenet_c_folder(root, names, images, severity, size, seed, workers, progress=bar.advance)
    finally:
        bar.close()
    reused = [d for d in names if d not in written]
    click.echo(
        f"{root}: {images} synthetic {size}-px JPEGs per domain, severity {severity}: "
        f"wrote {', '.join(written) or 'nothing'}" + (f"; reused {', '.join(reused)}" if reused else "")
    )


@cli.command("list")
@click.option(
    "--methods-for", metavar="MODEL", default=None, help="Print only the methods that run on MODEL (space-separated, for scripts)."
)
def list_command(methods_for: str | None) -> None:
    """List methods, models and datasets (or the methods that fit one model)."""
    if methods_for is not None:
        click.echo(" ".join(methods_for_model(methods_for)))
        return
    from .data import DATASETS
    from .methods import available_methods
    from .models import available_models

    click.echo("methods: " + ", ".join(available_methods()))
    click.echo("models:  " + ", ".join(available_models()))
    click.echo("datasets: " + ", ".join(f"{n} (default model {d.default_model})" for n, d in DATASETS.items()))


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
@click.option("--dry-run", is_flag=True, help="List the traces the campaign would run, then exit.")
@click.option("--quiet", is_flag=True, help="No progress view, only the summary line.")
def campaign_command(file: Path, engine: str, address: str | None, retries: int, dry_run: bool, quiet: bool) -> None:
    """Run every trace of a campaign FILE (TOML): standard traces first, complete ones skipped."""
    from .campaign import load_campaign, run_campaign, summary_line

    if dry_run:
        campaign = load_campaign(file)
        for task in campaign.tasks:
            click.echo(task.label)
        click.echo(f"campaign {campaign.name}: {len(campaign.tasks)} traces under {campaign.out}")
        return
    campaign, results, seconds = run_campaign(file, engine, address, retries, quiet)
    click.echo(summary_line(campaign, results, seconds))
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise ConfigError(f"{len(failed)} trace(s) failed, e.g. {failed[0].task.label}: {failed[0].message}")


def methods_for_model(model: str) -> list[str]:
    """Methods whose normalisation needs the built-in ``model`` meets (no model is built)."""
    from .methods import available_methods, get_method
    from .models import MODEL_NORMS

    if model not in MODEL_NORMS:
        raise ConfigError(f"unknown model '{model}'; available: {', '.join(MODEL_NORMS)}")
    return [m for m in available_methods() if MODEL_NORMS[model] in get_method(m).compatible_norms]


#: Kept for callers of the pre-subcommand API.
methods_for = methods_for_model


# ------------------------------------------------------------------------ calibration


def calibrate(cfg: TraceConfig) -> None:
    """Trace `standard` (or reuse its complete, matching trace) and print λ."""
    from .runner import TraceRun
    from .timing import device_slug, resolve_device

    path = cfg.output_dir(device_slug(resolve_device(cfg.device))) / f"{cfg.file_stem()}.parquet"
    if path.exists() and not cfg.force and not cfg.resume:
        from .writer import check_reusable

        check_reusable(path, cfg)
        click.echo(f"using existing {path} (pass --force to re-measure)")
    else:
        echo = (lambda s: None) if cfg.quiet else (lambda s: click.echo(s))
        try:
            path = TraceRun(cfg, echo).run()
        except KeyboardInterrupt:
            raise KeyboardInterrupt("interrupted: completed episodes are kept; rerun with --resume to continue") from None
        click.echo(f"wrote {path}")
    lam, mean, std, count = lambda_ms_of(path)
    click.echo(f"λ = {lam:.3f} ms  (mean {mean:.3f} ms + 6 × σ {std:.3f} ms over {count} batches of standard inference)")
    from .calibration import print_dispersion

    print_dispersion(path)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run the command line ``argv`` and return its exit status (never raises)."""
    return cli.main(args=None if argv is None else [str(a) for a in argv], standalone_mode=False)


if __name__ == "__main__":
    sys.exit(main())
