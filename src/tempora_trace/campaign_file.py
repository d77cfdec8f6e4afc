"""A campaign's TOML file: its tables (``[campaign]``, ``[machines.KIND]``, ``[[groups]]``),
the trace tasks it expands into (:class:`TraceTask`, one per trace or profile file) and the
checks made before any work, each a one-line :class:`CampaignError`.

A group with ``profiles = true`` is a profile group: its tasks are ``tempora-trace profile``
runs of the same configuration (``profile_batches`` long), written under the campaign's
``profiles_out`` instead of ``out``, so that ``tempora-sim predict OUT --profiles PROFILES_OUT``
reads each tree as what it is.

:func:`load_campaign` reads the file, expands every group's methods × domains × batch sizes ×
severities × seeds × streams × policies, and checks each trace as ``tempora-trace run`` would
check its options (an unknown method, model or dataset, a value out of range, a method
parameter of the wrong type). Running the tasks is :mod:`tempora_trace.campaign`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import click

from tempora_schema import is_stream, stream_base, stream_rounds
from tempora_schema.errors import TemporaError
from tempora_schema.policies import parse_policies
from tempora_schema.vocabulary import BASELINE_METHOD

from . import options as trace_options
from .config import TraceConfig
from .data import expand_domains, get_dataset
from .errors import ConfigError, TraceError
from .methods import MethodError, available_methods, get_method, resolve_method
from .methods.base import MethodContext
from .methods.gradient import check_param_types
from .models import MODEL_NORMS, model_norms
from .norms import describe_norms, method_fits
from .options import DEFAULT_PROFILE_BATCHES, PROFILE, PROFILE_AUTO
from .policies import adapts_after_prediction

DEVICE_TYPES = ("cpu", "cuda")
ENGINES = ("local", "ray")
#: Tracer options a group may set under ``options`` (the `tempora-trace run` flags, as keys),
#: declared with the options themselves (:data:`tempora_trace.options.CAMPAIGN_OPTIONS`).
TRACE_OPTIONS = trace_options.CAMPAIGN_OPTIONS
_GROUP_KEYS = {
    "machine",
    "dataset",
    "model",
    "weights",
    "batch_size",
    "severities",
    "seeds",
    "streams",
    "methods",
    "domains",
    "options",
    "params",
    "budgets_ms",
    "policies",
    "profiles",
    "profile_batches",
}
_MACHINE_KEYS = {"device", "data_root", "accelerator", "cpus_per_trace", "gpus"}


class CampaignError(TraceError):
    """A campaign file that cannot be run (one line: the file, the place, the rule)."""


@dataclass(frozen=True)
class Machine:
    """A kind of machine: the device its traces use and where it keeps the data."""

    kind: str
    device: str = "cpu"
    data_root: str | None = None
    accelerator: str | None = None
    cpus_per_trace: int = 1
    #: local engine: the GPU indices to use (default: every visible GPU)
    gpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TraceTask:
    """One trace file of the campaign, as the arguments of one ``tempora-trace run``."""

    group: int
    machine: Machine
    dataset: str
    model: str | None
    method: str
    batch_size: int
    severity: int
    seed: int
    stream: str
    domains: tuple[str, ...] | None = None
    weights: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    budgets_ms: tuple[float, ...] = ()
    #: sparse-adaptation policy (docs/design/design.md §11); None: adapt on every batch
    policy: str | None = None
    #: a profile (``tempora-trace profile``) of this many batches per episode (``"auto"``: a
    #: share of the longest episode); None: a full trace
    profile_batches: int | str | None = None

    @property
    def is_profile(self) -> bool:
        return self.profile_batches is not None

    @property
    def command(self) -> str:
        """The ``tempora-trace`` subcommand that writes this task's file."""
        return PROFILE if self.is_profile else "run"

    @property
    def label(self) -> str:
        method = self.method if self.policy is None else f"{self.method}@{self.policy}"
        kind = f" profile:{self.profile_batches}" if self.is_profile else ""
        return (
            f"{self.dataset}/{self.model or 'default'}/{self.machine.device}/{method}"
            f" bs{self.batch_size} sev{self.severity} seed{self.seed} {self.stream}{kind}"
        )

    @property
    def group_key(self) -> tuple:
        """Traces that share λ: everything but the method."""
        return (
            self.group,
            self.machine.kind,
            self.dataset,
            self.model,
            self.batch_size,
            self.severity,
            self.seed,
            self.stream,
            self.domains,
        )

    def values(self, lambda_ms: float | None = None, device: str | None = None) -> dict[str, Any]:
        """The ``tempora-trace run`` (or ``profile``) options of this task, by name (:mod:`tempora_trace.options`)."""
        values: dict[str, Any] = {
            "method": self.method,
            "dataset": self.dataset,
            "device": device or self.machine.device,
            "batch_size": self.batch_size,
            "severity": self.severity,
            "seed": self.seed,
            "quiet": True,
            "model": self.model,
            "weights": self.weights,
            "data_root": str(Path(self.machine.data_root).expanduser()) if self.machine.data_root else None,
            "domains": self.domains or None,
            "policy": self.policy,
            **dict(self.options),
            # JSON for non-strings, as `--param` parses them (a TOML true stays a boolean)
            "params": [f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in self.params],
        }
        if self.stream.startswith("dirichlet:"):
            values["stream"], values["dirichlet_alpha"] = "dirichlet", self.stream.split(":", 1)[1]
        elif is_stream(self.stream) and stream_rounds(self.stream) > 1:  # ``continual:x3``: the stream and its --rounds
            values["stream"], values["rounds"] = stream_base(self.stream), stream_rounds(self.stream)
        else:
            values["stream"] = self.stream
        if self.budgets_ms and lambda_ms is not None:
            values["budgets_ms"], values["lambda_ms"] = list(self.budgets_ms), f"{lambda_ms:.6f}"
        if self.is_profile:
            values["profile_batches"] = self.profile_batches
        return values

    def argv(self, out_root: Path, lambda_ms: float | None = None, device: str | None = None) -> list[str]:
        """``tempora-trace run`` (``profile``) arguments writing into ``out_root/<dataset>/<model>/<device-slug>``."""
        return [self.command, *trace_options.to_argv(self.values(lambda_ms, device))]


@dataclass
class Campaign:
    path: Path
    name: str
    out: Path
    shared_storage: bool
    machines: dict[str, Machine]
    tasks: list[TraceTask] = field(default_factory=list)
    #: where the profile groups' files land (default: a ``profiles`` folder beside ``out``)
    profiles_out: Path | None = None

    def root(self, task: TraceTask) -> Path:
        """The folder ``task``'s file lands under: ``out`` for a trace, ``profiles_out`` for a profile."""
        if task.is_profile:
            return self.profiles_out or self.out.parent / "profiles"
        return self.out

    @property
    def profiles(self) -> list[TraceTask]:
        return [t for t in self.tasks if t.is_profile]

    def ordered(self) -> tuple[list[TraceTask], list[TraceTask]]:
        """(the groups' ``standard`` traces, everything else): the first set runs first."""
        first = [t for t in self.tasks if t.method == BASELINE_METHOD]
        return first, [t for t in self.tasks if t.method != BASELINE_METHOD]


# --------------------------------------------------------------------------- loading
def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise CampaignError(f"{path}: no such campaign file") from None
    except OSError as exc:
        raise CampaignError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise CampaignError(f"{path}: not valid TOML ({exc})") from None


def _list(value: Any, where: str, kind: type | tuple) -> list:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, kind):
            raise CampaignError(
                f"{where}: expected {'a list of ' if isinstance(value, list) else ''}{getattr(kind, '__name__', 'value')}, got {item!r}"
            )
    return items


def _corruptions(value: Any) -> list[str] | None:
    """``options.corruptions`` as a list (a comma-separated string or a TOML list)."""
    if value is None:
        return None
    return [str(v) for v in value] if isinstance(value, list) else [value]


def load_campaign(path: str | os.PathLike) -> Campaign:
    """Parse, expand and check a campaign file (CampaignError on the first problem)."""
    path = Path(path)
    raw = _read_toml(path)
    unknown = set(raw) - {"campaign", "machines", "groups"}
    if unknown:
        raise CampaignError(f"{path}: unknown table(s) {sorted(unknown)}; expected campaign, machines, groups")
    head = _table(raw.get("campaign", {}), f"{path}: [campaign]")
    bad = set(head) - {"name", "out", "profiles_out", "shared_storage"}
    if bad:
        raise CampaignError(f"{path}: [campaign] has unknown key(s) {sorted(bad)}; known: name, out, profiles_out, shared_storage")
    for key, kind in (("name", str), ("out", str), ("profiles_out", str), ("shared_storage", bool)):
        if key in head and not isinstance(head[key], kind):
            raise CampaignError(f"{path}: [campaign] {key} must be a {kind.__name__}, got {head[key]!r}")
    out = Path(str(head.get("out", "traces"))).expanduser()
    if not out.is_absolute():
        out = (path.parent / out).resolve() if "out" in head else Path("traces").resolve()
    profiles_out = out.parent / "profiles"  # beside the traces, as the tracer's own default folders
    if "profiles_out" in head:
        profiles_out = Path(head["profiles_out"]).expanduser()
        profiles_out = profiles_out if profiles_out.is_absolute() else (path.parent / profiles_out).resolve()
    machines: dict[str, Machine] = {}
    for kind, spec in _table(raw.get("machines") or {"cpu": {"device": "cpu"}}, f"{path}: [machines]").items():
        if not isinstance(spec, dict):
            raise CampaignError(f"{path}: [machines.{kind}] must be a table")
        for key in ("device", "data_root", "accelerator"):
            if key in spec and not isinstance(spec[key], str):
                raise CampaignError(f"{path}: [machines.{kind}] {key} must be a string, got {spec[key]!r}")
        bad = set(spec) - _MACHINE_KEYS
        if bad:
            raise CampaignError(f"{path}: [machines.{kind}] has unknown key(s) {sorted(bad)}; known: {', '.join(sorted(_MACHINE_KEYS))}")
        device = spec.get("device", "cpu")
        if device not in DEVICE_TYPES:
            raise CampaignError(f"{path}: [machines.{kind}] device must be cpu or cuda, not {device!r}")
        cpus = spec.get("cpus_per_trace", 1)
        if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1:
            raise CampaignError(f"{path}: [machines.{kind}] cpus_per_trace must be an integer >= 1")
        gpus = spec.get("gpus")
        if gpus is not None:
            gpus = tuple(_list(gpus, f"{path}: [machines.{kind}] gpus", int))
        machines[kind] = Machine(kind, device, spec.get("data_root"), spec.get("accelerator"), cpus, gpus)
    groups = raw.get("groups")
    if not isinstance(groups, list) or not groups:
        raise CampaignError(f"{path}: no [[groups]]: a campaign needs at least one trace group")
    methods_known = set(available_methods())
    tasks: list[TraceTask] = []
    for g, group in enumerate(groups):
        where = f"{path}: groups[{g}]"
        group = _table(group, where)
        for key in ("machine", "dataset", "model", "weights"):
            if key in group and not isinstance(group[key], str):
                raise CampaignError(f"{where}: {key} must be a string, got {group[key]!r}")
        bad = set(group) - _GROUP_KEYS
        if bad:
            raise CampaignError(f"{where}: unknown key(s) {sorted(bad)}; known: {', '.join(sorted(_GROUP_KEYS))}")
        kind = group.get("machine", next(iter(machines)))
        if kind not in machines:
            raise CampaignError(f"{where}: machine kind {kind!r} is not declared under [machines] (declared: {', '.join(machines)})")
        machine = machines[kind]
        dataset = group.get("dataset", "demo")
        options = _table(group.get("options", {}), f"{where} options")
        for key, value in options.items():
            if key not in TRACE_OPTIONS:
                raise CampaignError(f"{where}: options.{key} is not a tracer option here; known: {', '.join(sorted(TRACE_OPTIONS))}")
            if isinstance(value, bool) != (TRACE_OPTIONS[key] is bool) or not isinstance(value, TRACE_OPTIONS[key]):
                raise CampaignError(f"{where}: options.{key} has the wrong type ({value!r})")
        profile_batches = _profile_batches(group, where)
        if profile_batches is not None:
            for key in options:
                if PROFILE not in trace_options.BY_NAME[key].commands:
                    raise CampaignError(
                        f"{where}: options.{key} is not an option of a profile (profiles = true): a profile times the stream "
                        "only, without frozen checkpoints"
                    )
            if group.get("budgets_ms"):
                raise CampaignError(f"{where}: budgets_ms: a profile (profiles = true) scores no budget checkpoints")
        try:
            spec = get_dataset(dataset, options.get("class_map"), _corruptions(options.get("corruptions")))
        except TraceError as exc:
            raise CampaignError(f"{where}: {exc}") from None
        if spec.data_folder is not None and not machine.data_root and not os.environ.get("TEMPORA_DATA"):
            raise CampaignError(
                f"{where}: dataset {dataset!r} needs data, but machine kind {kind!r} has no "
                f'data_root (set [machines.{kind}] data_root = "/path")'
            )
        model = group.get("model")
        try:  # a model by spec is built once, untrained, to learn its normalisation layers
            norms = model_norms(model or spec.default_model, options.get("input_size"))
        except TraceError as exc:
            raise CampaignError(f"{where}: {exc}") from None
        written = _list(group.get("methods", []), f"{where} methods", str)
        if not written:
            raise CampaignError(f"{where}: methods is empty")
        methods, full_of = [], {}
        for m in written:
            # a PATH.py:CLASS spec is relative to the campaign file, like `out`
            target, colon, attr = m.rpartition(":")
            full = m
            if colon and (target.endswith(".py") or "/" in target) and not Path(target).expanduser().is_absolute():
                full = f"{(path.parent / target).resolve()}:{attr}"
            if not colon and m not in methods_known:
                raise CampaignError(
                    f"{where}: unknown method {m!r}; available: {', '.join(sorted(methods_known))} (or MODULE:CLASS, PATH.py:CLASS)"
                )
            try:
                cls = resolve_method(full).cls
            except MethodError as exc:
                raise CampaignError(f"{where}: {exc}") from None
            if not method_fits(cls, norms):
                raise CampaignError(
                    f"{where}: method {m!r} does not run on model {model or spec.default_model!r} ({describe_norms(norms)})"
                )
            methods.append(full)
            full_of[m] = full
        if BASELINE_METHOD not in methods:
            methods = [BASELINE_METHOD, *methods]  # λ of the group comes from its standard trace
        params = {}
        for m, given in _table(group.get("params") or {}, f"{where} params").items():
            _table(given, f"{where} params.{m}")
            if full_of.get(m, m) not in methods:
                raise CampaignError(f"{where}: params.{m} is for a method the group does not trace ({', '.join(methods)})")
            params[full_of.get(m, m)] = given
        batch_size = group.get("batch_size", 64)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise CampaignError(f"{where}: batch_size must be an integer, got {batch_size!r}")
        domains = group.get("domains")
        if domains is not None:
            domains = tuple(_list(domains, f"{where} domains", str))
            try:
                expand_domains(list(domains), spec.domains)
            except ConfigError as exc:
                raise CampaignError(f"{where}: {exc}") from None
        budgets = tuple(float(b) for b in _list(group.get("budgets_ms", []), f"{where} budgets_ms", (int, float)))
        # sparse-adaptation policies: each method with an adapt step is traced as it is and under each
        policy_items = _list(group.get("policies", []), f"{where} policies", str)
        try:
            policies = [p for p in parse_policies(",".join(policy_items)) if p is not None] if policy_items else []
        except TemporaError as exc:
            raise CampaignError(f"{where}: policies: {exc}") from None
        for sev in _list(group.get("severities", [5]), f"{where} severities", int):
            for seed in _list(group.get("seeds", [2025]), f"{where} seeds", int):
                for stream in _list(group.get("streams", ["episodic"]), f"{where} streams", str):
                    for m in methods:
                        variants = [None] + ([p.spec(seed) for p in policies] if adapts_after_prediction(get_method(m)) else [])
                        for policy in variants:
                            tasks.append(
                                TraceTask(
                                    g,
                                    machine,
                                    dataset,
                                    model,
                                    m,
                                    batch_size,
                                    sev,
                                    seed,
                                    stream,
                                    domains,
                                    group.get("weights"),
                                    tuple(sorted(options.items())),
                                    tuple(sorted(params.get(m, {}).items())),
                                    budgets if m != BASELINE_METHOD else (),
                                    policy,
                                    profile_batches,
                                )
                            )
    campaign = Campaign(path, str(head.get("name", path.stem)), out, bool(head.get("shared_storage", True)), machines, tasks, profiles_out)
    if campaign.profiles and (profiles_out == out or out in profiles_out.parents or profiles_out in out.parents):
        raise CampaignError(
            f"{path}: [campaign] profiles_out {profiles_out} and out {out} must be separate folders, neither inside the other "
            "(`tempora-sim predict` reads traces and profiles from separate trees)"
        )
    check_tasks(campaign)
    return campaign


def _profile_batches(group: dict, where: str) -> int | str | None:
    """A profile group's ``profile_batches`` (default :data:`DEFAULT_PROFILE_BATCHES`); None for a trace group."""
    profiles = group.get("profiles", False)
    if not isinstance(profiles, bool):
        raise CampaignError(f"{where}: profiles must be true or false, got {profiles!r}")
    if "profile_batches" not in group:
        return DEFAULT_PROFILE_BATCHES if profiles else None
    if not profiles:
        raise CampaignError(f"{where}: profile_batches is for a profile group; add profiles = true (or leave profile_batches out)")
    batches = group["profile_batches"]
    if batches == PROFILE_AUTO:
        return batches
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise CampaignError(f"{where}: profile_batches must be an integer >= 1 or '{PROFILE_AUTO}', got {batches!r}")
    return batches


def _table(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise CampaignError(f"{where} must be a table, got {value!r}")
    return value


def check_tasks(campaign: Campaign) -> None:
    """Every trace of ``campaign`` checked as ``tempora-trace run`` (a profile: ``profile``)
    checks its options, before any work: the values the run would refuse one trace at a time (severity 9, a negative seed,
    batch size 0, an infinite budget, a checkpoint that is not a number, a method parameter of
    the wrong type …) are one line naming the group. Budgets are checked with a stand-in λ
    (the real one comes from the group's standard trace)."""
    where = {id(t): f"{campaign.path}: groups[{t.group}] {t.method}" for t in campaign.tasks}
    for task in campaign.tasks:
        try:
            cli_values = trace_options.parse_args(task.command, task.argv(campaign.out, 1.0 if task.budgets_ms else None)[1:])
        except click.ClickException as exc:
            raise CampaignError(f"{where[id(task)]}: {first_line(exc.format_message())}") from None
        try:
            cfg = TraceConfig(**trace_options.config_kwargs(task.command, cli_values)).resolved()
            check_method_params(cfg)
        except TemporaError as exc:
            raise CampaignError(f"{where[id(task)]}: {exc}") from None


def check_method_params(cfg) -> None:
    """The method's own check of its parameters' names and types (as at construction), from
    the published defaults of this run's context; no model is built."""
    method = get_method(cfg.method_spec or cfg.method)  # a module/file spec resolves to its class's name
    spec = cfg.dataset_spec()
    context = MethodContext(
        num_classes=spec.num_classes,
        dataset_family=spec.family,
        batch_size=cfg.batch_size,
        device=str(cfg.device),
        model_name=str(cfg.model),
        norm_kind=MODEL_NORMS.get(str(cfg.model), "bn"),
    )
    check_param_types(method.name, method.all_params(context), dict(cfg.method_params))


def first_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())
