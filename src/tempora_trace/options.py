"""Trace options, declared once: ``tempora-trace run``, ``live``, ``calibrate``, ``profile`` and campaigns share them.

:data:`TRACE_OPTIONS` is the single declaration of every option of the commands that trace
(flag, type, default, help, which commands take it, where its value goes). From it come

* the command-line options of ``run``, ``live``, ``calibrate`` and ``profile`` (:func:`click_options`),
* the :class:`~tempora_trace.config.TraceConfig` fields a command line sets (:func:`config_kwargs`)
  and the :class:`~tempora_trace.live_runner.LiveSettings` of ``live`` (:func:`live_kwargs`),
* the keys a campaign group may set under ``options`` (:data:`CAMPAIGN_OPTIONS`), and the
  ``tempora-trace run`` arguments of a campaign's trace (:func:`to_argv`, :func:`parse_args`).

Adding a trace option is one :class:`TraceOption` here plus its use (the ``TraceConfig`` field
it fills and the code that reads it). ``tempora_sim.sweeps.options`` does the same for the simulator.

This module is what ``tempora-trace --help`` loads: click, ``tempora_schema`` and nothing that
imports torch (``TraceConfig`` does, for its checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import click

from tempora_schema import DEFAULT_BATCH_SIZE, DEFAULT_SEED, DEFAULT_SEVERITY
from tempora_schema.errors import OptionError
from tempora_schema.policies import parse_policies
from tempora_schema.provision import LAMBDA_RULES
from tempora_schema.vocabulary import BUDGET_RULES
from tempora_toolkit.command_line import (
    INT32_MAX,
    INT64_MAX,
    ValueType,
    int_list_type,
    parse_int,
    parse_ratio,
    split_list,
    time_list_type,
    time_type,
)

from .errors import ConfigError
from .heap import DEFAULT_HEAP, HEAP_POLICIES
from .option_values import MAX_PARAM_DEPTH, parse_corruptions, parse_domains, parse_param  # noqa: F401

#: Later batches scored per frozen checkpoint (``--frozen-sample``).
DEFAULT_FROZEN_SAMPLE = 32
#: Untimed warm-up copies of the first batch (``--warmup-batches``).
WARMUP_BATCHES = 5
#: Host memory of one staged chunk, MiB (``--stage-mb``; docs/design/timing.md).
DEFAULT_STAGE_MB = 1024.0
#: Timing variability after the main pass (tempora_trace.variability, docs/guide/tracer.md): sample
#: events per pass (``--timing-sample``, 0 = off), repeat passes, idle waits of the idle pass.
DEFAULT_TIMING_SAMPLE = 16
DEFAULT_TIMING_PASSES = 2
DEFAULT_IDLE_GAPS = "0.25x,1x,4x"
#: No run-in: on the 2-core VM whose sleeping costs most, blocks with and without 1.5 s of it
#: measured the same factors (docs/results/validation-runs.md, "Idle blocks").
DEFAULT_IDLE_SETTLE_S = 0.0
#: A speed probe before steps 0, k, 2k, … of an episode (``--probe-every``): a trace needs three
#: to show the machine moving while it ran (:func:`tempora_schema.probe_drift`).
DEFAULT_PROBE_EVERY = 50
#: Batches per episode a profile times (``tempora-trace profile --profile-batches``): by default
#: (``auto``) a share of the stream's longest episode, at least a floor. A fixed count per
#: episode is 5 % of a demo episode (156 batches) but 0.3 % of the same data as one continual
#: episode, whose profile would then fit its transfer on 8 events. The floor is 8 because
#: 4-batch profiles of the demo stream, paired with 8-batch ones against the same full traces,
#: kept 85 % of the certain winners in one of four directions (8 batches: 94.5 % or more);
#: docs/guide/predict.md, "Half the profile" and "Cost".
PROFILE_AUTO = "auto"
PROFILE_SHARE = 0.025
PROFILE_MIN_BATCHES = 8
DEFAULT_PROFILE_BATCHES = PROFILE_AUTO


def profile_auto_rule() -> dict[str, float | int]:
    """What ``--profile-batches auto`` means, as a profile's metadata records it."""
    return {"share": PROFILE_SHARE, "min": PROFILE_MIN_BATCHES}


#: The subcommands that trace; a :class:`TraceOption` names the ones that take it.
COMMANDS = ("run", "live", "calibrate", "profile")
RUN, LIVE, CALIBRATE, PROFILE = COMMANDS
STREAMS = ("episodic", "continual", "gradual", "mixed", "dirichlet")
#: Most rounds a stream may repeat (``--rounds``; tempora_trace.config checks the same bound).
MAX_ROUNDS = 1000
PROFILES = ("default", "paper")


# ------------------------------------------------------------------------ value types
def _frozen_sample(text: str, option: str) -> int | None:
    if text.strip() == "all":
        return None
    try:
        return parse_int(text, option, 1, INT32_MAX)
    except OptionError:
        raise OptionError(f"{option}: expected a number ≥ 1 or 'all', got '{text}'") from None


def _profile_batches(text: str, option: str) -> int | str:
    if text.strip() == PROFILE_AUTO:
        return PROFILE_AUTO
    try:
        return parse_int(text, option, 1, INT32_MAX)
    except OptionError:
        raise OptionError(f"{option}: expected a number ≥ 1 or '{PROFILE_AUTO}', got '{text}'") from None


def _ratio_list(text: str, option: str) -> list[float]:
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


FROZEN_SAMPLE = ValueType("N|all", _frozen_sample)
PROFILE_BATCHES = ValueType("N|auto", _profile_batches)


def _list_or_empty(value: Sequence | None) -> list:
    return list(value or [])


# ------------------------------------------------------------------------ the declaration
@dataclass(frozen=True)
class TraceOption:
    """One option of the commands that trace.

    ``config``: the :class:`TraceConfig` field the value fills (``True``: the option's own name;
    ``None``: none). ``live``: the :class:`LiveSettings` field it fills instead on ``live``.
    ``convert`` turns the parsed value into the field's value. ``campaign``: the TOML type a
    campaign group may give it under ``options`` (``None``: not settable there).
    """

    flag: str
    help: str | Mapping[str, str]
    commands: tuple[str, ...]
    default: Any = None
    type: Any = None
    dest: str | None = None
    is_flag: bool = False
    multiple: bool = False
    metavar: str | None = None
    config: str | bool | None = True
    live: str | None = None
    convert: Callable[[Any], Any] | None = None
    campaign: type | tuple[type, ...] | None = None

    @property
    def name(self) -> str:
        """The parameter name (the key of the parsed options)."""
        return self.dest or self.flag.lstrip("-").replace("-", "_")

    @property
    def config_field(self) -> str | None:
        if self.config is True:
            return self.name
        return self.config or None

    def help_for(self, command: str) -> str:
        return self.help if isinstance(self.help, str) else self.help[command]

    def click_declaration(self, command: str) -> tuple[list[str], dict[str, Any]]:
        """The parameter declarations and attributes of this option's click option on ``command``."""
        attrs: dict[str, Any] = {"help": self.help_for(command)}
        decls = [self.flag] if self.dest is None else [self.flag, self.dest]
        if self.is_flag:
            attrs["is_flag"] = True
        else:
            attrs["default"] = self.default
            attrs["show_default"] = self.default is not None
        for key in ("type", "metavar"):
            if getattr(self, key) is not None:
                attrs[key] = getattr(self, key)
        if self.multiple:
            attrs["multiple"] = True
        return decls, attrs

    def value(self, raw: Any) -> Any:
        return self.convert(raw) if self.convert is not None else raw

    def argv(self, value: Any) -> list[str]:
        """The command-line words that give this option ``value`` (a TOML or Python value)."""
        if self.is_flag:
            return [self.flag] if value else []
        if value is None:
            return []
        if self.multiple:
            return [w for v in value for w in (self.flag, str(v))]
        if isinstance(value, (list, tuple)):
            return [self.flag, ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)]
        return [self.flag, str(value)]


_R, _L, _C, _P = (RUN,), (LIVE,), (CALIBRATE,), (PROFILE,)
_RL = (RUN, LIVE)
#: what a profile shares with a trace run: the method and the timing-variability measurement
_RLP = (RUN, LIVE, PROFILE)
_ALL = COMMANDS

#: Every trace option, in the order ``--help`` lists them.
TRACE_OPTIONS: tuple[TraceOption, ...] = (
    # the method and its hyperparameters
    TraceOption(
        "--method",
        "TTA method: a name (built in or an installed plugin; see `tempora-trace list`), package.module:CLASS or PATH.py:CLASS. Required.",
        _RLP,
    ),
    TraceOption(
        "--param", "Override a method hyperparameter (repeatable).", _RLP, dest="params", multiple=True, metavar="KEY=VALUE", config=None
    ),
    TraceOption(
        "--profile",
        "paper: behave as the Tempora reference code wherever the default departs from it "
        "(docs/results/methods-parity.md); the trace is named <method>-paper. Same as --param profile=paper.",
        _RLP,
        type=click.Choice(list(PROFILES)),
        config=None,
    ),
    TraceOption(
        "--policy",
        {
            RUN: "Sparse adaptation: every:K, fraction:P[:SEED], entropy:T or warmup:N (docs/design/design.md §11); "
            "a comma list (every:1,2,4,8) traces one file per policy, one after the other [default: every batch].",
            LIVE: "Sparse adaptation: every:K, fraction:P[:SEED], entropy:T or warmup:N (docs/design/design.md §11), "
            "decided per processing event as the replay assumes [default: every batch].",
            PROFILE: "Sparse adaptation: every:K, fraction:P[:SEED], entropy:T or warmup:N (docs/design/design.md §11); "
            "a comma list profiles one file per policy [default: every batch].",
        },
        _RLP,
        metavar="POLICY",
    ),
    # the protocol of a live run
    TraceOption("--protocol", "discrete, amortised, or both: discrete,amortised.", _L, default="discrete", config=None, live="protocols"),
    TraceOption(
        "--rho",
        "Discrete: utilisations ρ = λ/γ, fractions or %, comma-separated (1,0.5 or 100%,50%).",
        _L,
        type=ValueType("RATIOS", _ratio_list),
        metavar="RATIOS",
        config=None,
        live="rho",
    ),
    TraceOption(
        "--gamma-ms",
        "Discrete: inter-arrival times γ instead of --rho (ms, or with ms/s).",
        _L,
        type=ValueType("TIMES", _positive_time_list),
        metavar="TIMES",
        config=None,
        live="gamma_ms",
    ),
    TraceOption(
        "--queue",
        "Discrete: queue capacity b (0 = drop arrivals while busy).",
        _L,
        default=1,
        type=click.IntRange(0, INT32_MAX),
        config=None,
        live="queue",
    ),
    TraceOption(
        "--B",
        "Amortised: overhead budgets (ms, or with ms/s: 1s,4s).",
        _L,
        dest="budgets",
        type=time_list_type(0.0),
        metavar="TIMES",
        config=None,
        live="budgets_ms",
        convert=_list_or_empty,
    ),
    TraceOption(
        "--budget-rule",
        "Amortised cut-off: strict m = max{j: Σc ≤ B}, or overshoot (adapt while spent < B).",
        _L,
        default="strict",
        type=click.Choice(list(BUDGET_RULES)),
        config=None,
        live="budget_rule",
    ),
    # exact budget cut-offs of a trace (run), λ (run and live)
    TraceOption(
        "--budgets-ms",
        "Add the exact cut-off checkpoints of these budgets (ms, or with ms/s: 1s,2s); needs --lambda-ms.",
        _R,
        type=time_list_type(0.0),
        metavar="TIMES",
        convert=_list_or_empty,
    ),
    TraceOption(
        "--lambda-ms",
        {
            RUN: "λ for --budgets-ms (ms, or with ms/s; see `tempora-trace calibrate`).",
            LIVE: "λ (ms, or with ms/s) [default: mean + 6σ of the group's standard trace].",
        },
        _RL,
        type=time_type(0.0, allow_zero=False),
        metavar="TIME",
        live="lambda_ms",
    ),
    TraceOption(
        "--standard",
        "Standard trace (file or folder) to take λ from [default: the folder `run` writes this group to].",
        _L,
        type=click.Path(path_type=str),
        config=None,
        live="standard",
    ),
    TraceOption(
        "--lambda-rule",
        "λ from the standard trace's δ: paper = mean + 6σ, robust = median + 6·1.4826·MAD (one stall cannot inflate it).",
        _L,
        default="paper",
        type=click.Choice(list(LAMBDA_RULES)),
        config=None,
        live="lambda_rule",
    ),
    TraceOption(
        "--repeats",
        "Play every setting this many times (run-to-run spread).",
        _L,
        default=1,
        type=click.IntRange(1, 1000),
        config=None,
        live="repeats",
    ),
    TraceOption(
        "--spin-us",
        "Before an arrival, busy-wait this last stretch (µs) instead of sleeping.",
        _L,
        default=500.0,
        type=click.FloatRange(0, 1e6),
        config=None,
        live="spin_us",
    ),
    TraceOption(
        "--trace-alongside",
        "Also trace the method in this run into DIR, each episode's trace pass beside its live runs "
        "(a replay that shares the machine's state; docs/guide/validation.md). Checkpoint options apply to it.",
        _L,
        type=click.Path(path_type=str, file_okay=False),
        metavar="DIR",
        config=None,
        live="trace_alongside",
    ),
    TraceOption(
        "--budget-checkpoints",
        "The trace taken alongside also holds the exact cut-off checkpoints of the --B budgets "
        "(at its own cut-offs, under the live λ), so its amortised replay needs no nearest checkpoint.",
        _L,
        is_flag=True,
        config=None,
        live="budget_checkpoints",
    ),
    # which frozen checkpoints a trace scores (run, and live --trace-alongside)
    TraceOption(
        "--frozen-sample",
        "Later batches scored per frozen checkpoint, or 'all' (exact).",
        _RL,
        default=str(DEFAULT_FROZEN_SAMPLE),
        type=FROZEN_SAMPLE,
        campaign=(int, str),
    ),
    TraceOption(
        "--checkpoints",
        "Extra exact checkpoints, comma-separated, e.g. 0,5,17.",
        _RL,
        type=int_list_type(0, INT32_MAX),
        metavar="STEPS",
        convert=_list_or_empty,
        campaign=list,
    ),
    TraceOption(
        "--no-default-checkpoints",
        "Only --checkpoints and budget checkpoints.",
        _RL,
        is_flag=True,
        config="default_checkpoints",
        convert=lambda flag: not flag,
        campaign=bool,
    ),
    # timing variability measured after the main pass (run, and live --trace-alongside; docs/guide/tracer.md)
    TraceOption(
        "--timing-sample",
        "Events timed again after the main pass, per repeat pass (timing variability; 0 turns it off).",
        _RLP,
        default=DEFAULT_TIMING_SAMPLE,
        type=click.IntRange(0, 100_000),
        campaign=int,
    ),
    TraceOption(
        "--timing-passes",
        "Back-to-back repeat passes over the timing sample.",
        _RLP,
        default=DEFAULT_TIMING_PASSES,
        type=click.IntRange(1, 100),
        campaign=int,
    ),
    TraceOption(
        "--probe-every",
        "A machine-speed probe before every N-th batch of an episode (its first included; on live, of the trace "
        "taken alongside), outside the timed events; with three or more a trace shows whether the machine changed speed.",
        _RLP,
        default=DEFAULT_PROBE_EVERY,
        type=click.IntRange(1, 100_000),
        metavar="N",
        campaign=int,
    ),
    TraceOption(
        "--idle-gaps",
        "Idle waits of the waited idle blocks, one block each, every event after the wait: <k>x (multiples of the "
        "sample's median δ) and/or times (ms, or with ms/s), comma-separated; 'none' for no idle blocks.",
        _RLP,
        default=DEFAULT_IDLE_GAPS,
        metavar="GAPS",
        campaign=str,
    ),
    TraceOption(
        "--idle-settle",
        "Seconds every idle block but the first runs the sample untimed before its timed pass, for a machine "
        f"that takes longer than a block to settle into waiting or not waiting (default ${{TEMPORA_IDLE_SETTLE}} "
        f"where set, else {DEFAULT_IDLE_SETTLE_S:g}: none).",
        _RLP,
        default=None,
        type=click.FloatRange(0.0, 60.0),
        metavar="SECONDS",
        campaign=float,
    ),
    # how much of the stream a profile times (profile)
    TraceOption(
        "--profile-batches",
        "Batches per episode the profile times: the first ones of each episode of the stream a full trace of this "
        f"configuration would take; '{PROFILE_AUTO}': {PROFILE_SHARE * 100:g} % of the longest episode, at least "
        f"{PROFILE_MIN_BATCHES}: 8 on the demo stream, 2.3–6.1 % of a full trace by method (docs/guide/predict.md).",
        _P,
        default=DEFAULT_PROFILE_BATCHES,
        type=PROFILE_BATCHES,
    ),
    # the data, the model, the device and the run (every command that traces)
    TraceOption(
        "--dataset",
        "demo, cifar10-c, cifar100-c, imagenet-c, imagenet-r, imagenet-a, imagenet-v2 (see `tempora-trace list`), "
        "or folder:PATH, your own images as PATH/<class>/<image> or PATH/<domain>/<class>/<image>.",
        _ALL,
        default="demo",
    ),
    TraceOption(
        "--model",
        "Model name, timm:NAME, torchvision:NAME[:WEIGHTS], or your own MODULE:FACTORY / PATH.py:FACTORY "
        "[default: the dataset's model: demo-resnet, cifar-resnet18, resnet50].",
        _ALL,
    ),
    TraceOption(
        "--input-size",
        "Image side of a model by spec (timm:, torchvision:, your factory) [default: its library's, else 224].",
        _ALL,
        type=click.IntRange(8, 8192),
        metavar="PX",
        campaign=int,
    ),
    TraceOption(
        "--class-map",
        "folder:PATH only: lines folder,index mapping class folders onto the model's classes [default: sorted folder order].",
        _ALL,
        type=click.Path(path_type=str, dir_okay=False),
        metavar="CSV",
        campaign=str,
    ),
    TraceOption(
        "--corruptions",
        "folder:PATH only: apply these ImageNet-C corruptions (or groups noise, blur, weather, digital, all; clean) "
        "at --severity on the fly, one domain each.",
        _ALL,
        metavar="LIST",
        convert=parse_corruptions,
        campaign=(str, list),
    ),
    TraceOption("--weights", "Weight file (state_dict), or 'random' for an untrained model (timing only).", _ALL),
    TraceOption(
        "--offline",
        "Never download weights: a missing file is an error naming where to put it (also TEMPORA_OFFLINE=1 or HF_HUB_OFFLINE=1).",
        _ALL,
        is_flag=True,
        config=None,
    ),
    TraceOption("--data-root", "Dataset folder [default: $TEMPORA_DATA/<dataset folder>].", _ALL),
    TraceOption("--device", "cpu, cuda or cuda:N.", _ALL, default="cpu"),
    TraceOption("--out", "Output folder [default: traces/<dataset>/<model>/<device>/].", _ALL, type=click.Path(path_type=str)),
    TraceOption("--name", "Trace file stem [default: the method plus -bs/-seed/-sev/-continual suffixes when not default].", _ALL),
    TraceOption(
        "--domains",
        "Corruptions or groups (noise, blur, weather, digital, all, clean), comma-separated "
        "(`--domains fog snow` works too) [default: all 15 corruptions].",
        _ALL,
        metavar="LIST",
        convert=parse_domains,
    ),
    TraceOption(
        "--severity", "Corruption severity (the peak of a gradual ramp).", _ALL, default=DEFAULT_SEVERITY, type=click.IntRange(1, 5)
    ),
    TraceOption(
        "--max-batches",
        "At most this many batches per domain (per step of a gradual ramp; this many times the domains for a mixed stream), per round.",
        _ALL,
        type=click.IntRange(1, INT32_MAX),
        campaign=int,
    ),
    TraceOption("--batch-size", "Images per batch.", _ALL, default=DEFAULT_BATCH_SIZE, type=click.IntRange(1, INT32_MAX)),
    TraceOption("--seed", "Seed of the batch order and the method.", _ALL, default=DEFAULT_SEED, type=click.IntRange(0, INT64_MAX)),
    TraceOption(
        "--stream",
        "episodic: reset per domain; continual: never reset; gradual: never reset, each domain's severity "
        "ramped 1 → --severity → 1; mixed: never reset, every batch drawn from all the domains at once; "
        "dirichlet: reset per domain, batches in a label-shifted order (classes spread over time by Dirichlet(α)).",
        _ALL,
        default="episodic",
        type=click.Choice(list(STREAMS)),
    ),
    TraceOption(
        "--rounds",
        "Times a continual, gradual or mixed stream plays its domains, each round shuffled afresh "
        "(a long stream, to show collapse over time). A campaign names them in its streams: continual:x10.",
        _ALL,
        default=1,
        type=click.IntRange(1, MAX_ROUNDS),
    ),
    TraceOption(
        "--dirichlet-alpha",
        "Concentration α of --stream dirichlet: smaller α, longer single-class runs [e.g. 0.01].",
        _ALL,
        type=click.FloatRange(0, None, min_open=True),
        metavar="ALPHA",
    ),
    TraceOption(
        "--workers",
        "Parallel decode workers, active only between staged chunks, never during a timed event [default: min(8, cores)].",
        _ALL,
        type=click.IntRange(0, 1024),
        campaign=int,
    ),
    TraceOption(
        "--stage-mb",
        "Host memory for one staged chunk of batches, MiB (docs/design/timing.md).",
        _ALL,
        default=DEFAULT_STAGE_MB,
        type=click.FloatRange(0, None, min_open=True),
        metavar="MIB",
    ),
    TraceOption("--threads", "Torch intra-op threads [default: torch's choice].", _ALL, type=click.IntRange(1, 4096), campaign=int),
    TraceOption(
        "--heap",
        "Host heap policy while events are timed: steady (pages of one event reused by the next, as in a "
        "long-running server) or system (the C library's adaptive defaults; times may differ run to run). "
        "docs/design/timing.md.",
        _ALL,
        default=DEFAULT_HEAP,
        type=click.Choice(list(HEAP_POLICIES)),
        campaign=str,
    ),
    TraceOption(
        "--warmup-batches",
        "Untimed noise-perturbed copies of the first batch run before the clock starts, so lazy "
        "initialisation never lands in a timed row (0: none).",
        _ALL,
        default=WARMUP_BATCHES,
        type=click.IntRange(0, 1000),
    ),
    TraceOption("--resume", "Continue an interrupted run after its last complete episode.", _ALL, is_flag=True),
    TraceOption("--force", "Overwrite an existing trace or discard an interrupted run.", _ALL, is_flag=True),
    TraceOption("--quiet", "No progress bars or episode summaries.", _ALL, is_flag=True),
)

BY_NAME: dict[str, TraceOption] = {o.name: o for o in TRACE_OPTIONS}

#: The keys a campaign group may set under ``options`` and their TOML types.
CAMPAIGN_OPTIONS: dict[str, type | tuple[type, ...]] = {o.name: o.campaign for o in TRACE_OPTIONS if o.campaign is not None}


def options_of(command: str) -> list[TraceOption]:
    """The options ``command`` takes, in declaration order."""
    if command not in COMMANDS:
        raise ValueError(f"unknown trace command {command!r}; one of {', '.join(COMMANDS)}")
    return [o for o in TRACE_OPTIONS if command in o.commands]


def click_options(command: str) -> Callable:
    """Decorator adding the click options of ``command`` (``--help`` lists them as declared)."""

    def apply(fn: Callable) -> Callable:
        for option in reversed(options_of(command)):
            decls, attrs = option.click_declaration(command)
            fn = click.option(*decls, **attrs)(fn)
        return fn

    return apply


def method_params(cli_values: Mapping[str, Any]) -> dict[str, Any]:
    """``--param`` pairs plus ``--profile`` (which is the method parameter ``profile``)."""
    params = dict(parse_param(p) for p in cli_values.get("params") or ())
    if cli_values.get("profile") is not None:
        if params.get("profile", cli_values["profile"]) != cli_values["profile"]:
            raise ConfigError(f"--profile {cli_values['profile']} contradicts --param profile={params['profile']}")
        params["profile"] = cli_values["profile"]
    return params


def config_kwargs(command: str, cli_values: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`TraceConfig` fields that the parsed options of ``command`` set."""
    out: dict[str, Any] = {}
    for option in options_of(command):
        target = option.config_field
        if target is None or (command == LIVE and option.live is not None) or option.name not in cli_values:
            continue
        out[target] = option.value(cli_values[option.name])
    if any(o.name == "params" for o in options_of(command)):
        out["method_params"] = method_params(cli_values)
    return out


def live_kwargs(cli_values: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`LiveSettings` fields of ``live``'s parsed options."""
    return {o.live: o.value(cli_values[o.name]) for o in options_of(LIVE) if o.live is not None and o.name in cli_values}


def policies_of(cli_values: Mapping[str, Any]) -> list[str | None]:
    """The canonical policies of ``--policy`` (a comma list; None: every batch), parsed and
    checked before any work (one ``--policy`` line on bad input)."""
    text = cli_values.get("policy")
    if text is None:
        return [None]
    seed = int(cli_values.get("seed") if cli_values.get("seed") is not None else DEFAULT_SEED)
    return [None if p is None else p.spec(seed) for p in parse_policies(text)]


def to_argv(values: Mapping[str, Any]) -> list[str]:
    """Command-line words giving each named option its value (in declaration order)."""
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise ValueError(f"not trace options: {', '.join(unknown)}")
    return [word for o in TRACE_OPTIONS if o.name in values for word in o.argv(values[o.name])]


def parse_args(command: str, args: Sequence[str]) -> dict[str, Any]:
    """``args`` parsed exactly as ``tempora-trace COMMAND`` parses them (every option, defaults filled)."""
    params = []
    for option in options_of(command):
        decls, attrs = option.click_declaration(command)
        params.append(click.Option(decls, **attrs))
    ctx = click.Command(command, params=params).make_context(command, list(args))
    return dict(ctx.params)
