"""Everything one trace run needs, with the defaults that make a bare command work.

``TraceConfig.resolved()`` fills dataset-dependent defaults (model, domains, thread count)
and checks values, so the runner, the CLI and the resume check all see one canonical config.
The trace identity (``tempora_schema.TraceIdentity``: file stem, metadata, resume check and
the simulator's groups) is derived from it in :meth:`TraceConfig.trace_identity`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

import tempora_schema as schema
from tempora_schema import DEFAULT_BATCH_SIZE, DEFAULT_SEED, DEFAULT_SEVERITY
from tempora_schema.policies import parse_policy
from tempora_schema.vocabulary import BASELINE_METHOD
from tempora_toolkit.atomic_files import check_output_dir
from tempora_toolkit.command_line import INT32_MAX, INT64_MAX

from .data import expand_domains, get_dataset
from .data.folder import expand_corruptions
from .errors import ConfigError
from .heap import DEFAULT_HEAP, HEAP_POLICIES
from .methods import available_methods, get_method, resolve_method
from .methods.base import PROFILES
from .models.external import MAX_INPUT_SIZE, MIN_INPUT_SIZE
from .models.external import model_label as spec_model_label
from .options import (
    DEFAULT_FROZEN_SAMPLE,
    DEFAULT_IDLE_GAPS,
    DEFAULT_IDLE_SETTLE_S,
    DEFAULT_PROBE_EVERY,
    DEFAULT_STAGE_MB,
    DEFAULT_TIMING_PASSES,
    DEFAULT_TIMING_SAMPLE,
    LIVE,
    MAX_PARAM_DEPTH,
    MAX_ROUNDS,
    PROFILE_AUTO,
    WARMUP_BATCHES,
    config_kwargs,
)
from .policies import check_policy_method
from .variability import format_idle_gaps, parse_idle_gaps

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_FROZEN_SAMPLE",
    "DEFAULT_SEED",
    "DEFAULT_SEVERITY",
    "DEFAULT_STAGE_MB",
    "WARMUP_BATCHES",
    "TraceConfig",
]

#: Fields that do not change the rows a run writes; every other field (and the trace
#: identity, which replaces ``weights`` by the file's hash and ``device`` by its name) must
#: match exactly for ``--resume``.
_IDENTITY_EXCLUDE = {
    "resume", "force", "quiet", "workers", "stage_mb", "out", "name", "data_root", "method_spec",
    # timed after the main pass, outside every row (tempora_trace.variability)
    "timing_sample", "timing_passes", "idle_gaps", "idle_settle",
    # outside the events; the probes' steps are in the metadata
    "probe_every",
    # carried by the stream's name (``continual:x3``), which is in the identity
    "rounds",
}  # fmt: skip


#: The environment variable that sets ``--idle-settle`` for every run on a machine that does not
#: give it: how long waiting takes to slow a machine down and to wear off is the machine's, not
#: one run's.
IDLE_SETTLE_ENV = "TEMPORA_IDLE_SETTLE"


def _machine_idle_settle() -> float:
    """$TEMPORA_IDLE_SETTLE as seconds (ConfigError if it is not a number), else the default."""
    text = os.environ.get(IDLE_SETTLE_ENV, "").strip()
    if not text:
        return DEFAULT_IDLE_SETTLE_S
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{IDLE_SETTLE_ENV}={text!r} is not a number of seconds (0..60)") from None


#: Options of models by spec and folder datasets: in the resume identity only when set, so a
#: run of the built-ins compares exactly as it always did.
_BYO_FIELDS = {"input_size", "class_map", "corruptions"}
#: A profile's length (``tempora-trace profile``): in the resume identity of a profile only.
_PROFILE_FIELDS = {"profile_batches"}


def path_part(label: str) -> str:
    """A dataset or model label as one folder name (``timm:mobilenetv3_small_100`` →
    ``timm-mobilenetv3_small_100``); built-in names are already one and stay as they are."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", label).strip("-") or "model"


def check_param_values(value: Any, option: str) -> None:
    """NaN/∞ hyperparameters would collapse the model and write metadata strict JSON rejects;
    a value nested beyond :data:`~tempora_trace.options.MAX_PARAM_DEPTH` could not be written
    at all, after the whole run (ConfigError)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(f"{option}: {item} is not a finite number")
        if isinstance(item, (dict, list, tuple)) and depth >= MAX_PARAM_DEPTH:
            raise ConfigError(f"{option}: a value nested more than {MAX_PARAM_DEPTH} levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)


def _check_profile_clash(spec: str) -> None:
    """A method from outside the package named like another method's paper-profile label
    (``tent-paper``) would share its traces' label, and a sweep could not tell them apart."""
    if ":" not in spec and "-" not in spec:
        return
    ref = resolve_method(spec)
    if ref.source.builtin:
        return
    for profile in PROFILES[1:]:
        base = ref.name.removesuffix(f"-{profile}")
        if base != ref.name and base in available_methods():
            raise ConfigError(
                f"method '{ref.name}' ({ref.source.describe()}) is named like method '{base}' with profile={profile}, "
                "whose traces carry that label: a sweep could not tell the two apart; rename it"
            )


def canonical_policy(text: str | None, seed: int) -> str | None:
    """One policy as the trace records it (None: every batch), or ConfigError."""
    if text is None:
        return None
    try:
        policy = parse_policy(text)
    except schema.TemporaError as exc:
        raise ConfigError(str(exc)) from None
    return None if policy is None else policy.spec(seed)


def _stream_rounds(stream: str, rounds: int) -> tuple[str, int]:
    """The canonical stream name and its rounds, from ``--stream`` (which may already name its
    rounds, as a campaign or a resumed identity does) and ``--rounds``."""
    named = schema.stream_rounds(stream)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise ConfigError(f"--rounds must be in 1..{MAX_ROUNDS}, not {rounds}")
    if named > 1 and rounds not in (1, named):
        raise ConfigError(f"--stream {stream} names {named} rounds but --rounds is {rounds}; pass one")
    rounds = max(named, rounds)
    base = schema.stream_base(stream)
    if rounds > 1 and base not in schema.UNRESET_STREAMS:
        kind = "dirichlet" if schema.stream_alpha(stream) is not None else base
        raise ConfigError(f"--rounds repeats a stream that never resets (continual, gradual, mixed); --stream {kind} resets per domain")
    return schema.stream_name(base, rounds), rounds


def _check_gradual(cfg: "TraceConfig", spec) -> None:
    """A gradual stream ramps each corruption's severity 1 → ``--severity`` → 1: it needs data
    with severities, a peak above 1, and no ``clean`` domain (ConfigError otherwise)."""
    if schema.stream_base(cfg.stream) != "gradual":
        return
    if not spec.has_severity:
        hint = " (a folder of clean images takes them with --corruptions)" if spec.folder else ""
        raise ConfigError(f"--stream gradual ramps the corruption severity, and dataset '{spec.name}' has no severities{hint}")
    if cfg.severity < 2:
        raise ConfigError(f"--stream gradual ramps the severity 1 → --severity → 1: it needs --severity 2..5, not {cfg.severity}")
    if "clean" in (cfg.domains or ()):
        raise ConfigError("--stream gradual ramps each corruption's severity; the 'clean' domain has none (leave it out of --domains)")


@dataclass
class TraceConfig:
    #: a method name, or ``module:CLASS`` / ``PATH.py:CLASS`` (resolved() keeps that in
    #: ``method_spec`` and puts the class's name here; its provenance enters the identity).
    method: str = BASELINE_METHOD
    method_params: dict[str, Any] = field(default_factory=dict)
    #: sparse-adaptation policy (``every:4``, ``fraction:0.25``, ``entropy:0.5``, ``warmup:10``;
    #: tempora_schema.policies); None = adapt on every batch. resolved() canonicalises it.
    policy: str | None = None
    dataset: str = "demo"
    model: str | None = None
    weights: str | None = None
    data_root: str | None = None
    device: str = "cpu"
    #: output directory; default ``traces/<dataset>/<model>/<device-slug>/``.
    out: str | None = None
    #: file stem; default the method name plus suffixes for non-default settings.
    name: str | None = None
    domains: list[str] | None = None
    severity: int = DEFAULT_SEVERITY
    max_batches: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    seed: int = DEFAULT_SEED
    stream: str = "episodic"
    #: Dirichlet concentration of a ``dirichlet`` stream (resolved into ``stream = dirichlet:<α>``).
    dirichlet_alpha: float | None = None
    #: times an unreset stream (continual, gradual, mixed) plays its domain sequence (resolved
    #: into ``stream = <stream>:x<rounds>`` when more than one).
    rounds: int = 1
    #: later batches scored per checkpoint; None = all of them (exact).
    frozen_sample: int | None = DEFAULT_FROZEN_SAMPLE
    default_checkpoints: bool = True
    checkpoints: list[int] = field(default_factory=list)
    budgets_ms: list[float] = field(default_factory=list)
    lambda_ms: float | None = None
    #: parallel decode threads, active only between staged chunks; None = min(8, cores).
    workers: int | None = None
    #: torch intra-op threads; None = torch's choice, resolved to the actual count (identity).
    threads: int | None = None
    #: host-memory cap of one staged chunk of batches, MiB (docs/design/timing.md).
    stage_mb: float = DEFAULT_STAGE_MB
    #: the host heap's policy while the run times events (:mod:`tempora_trace.heap`): it moves
    #: CPU times, so it is in the resume identity and the metadata
    heap: str = DEFAULT_HEAP
    warmup_batches: int = WARMUP_BATCHES
    #: timing variability after the main pass (docs/guide/tracer.md): sample events per pass (0: off),
    #: back-to-back repeat passes, idle waits of the idle pass (``<k>x`` multiples of the median δ
    #: and/or times; ``none``: no idle pass)
    timing_sample: int = DEFAULT_TIMING_SAMPLE
    timing_passes: int = DEFAULT_TIMING_PASSES
    idle_gaps: str = DEFAULT_IDLE_GAPS
    #: None: $TEMPORA_IDLE_SETTLE where set, else DEFAULT_IDLE_SETTLE_S (:data:`IDLE_SETTLE_ENV`)
    idle_settle: float | None = None
    #: a machine-speed probe before every ``probe_every``-th step of an episode (outside events)
    probe_every: int = DEFAULT_PROBE_EVERY
    #: image side of a model by spec (timm:, torchvision:, a factory) where it cannot say
    input_size: int | None = None
    #: CSV ``folder,index`` mapping a folder dataset's classes onto the model's (folder:PATH only)
    class_map: str | None = None
    #: ImageNet-C corruptions applied on the fly to a folder of clean images (folder:PATH only)
    corruptions: list[str] | None = None
    #: a profile (``tempora-trace profile``): the first ``profile_batches`` batches of every
    #: episode, timing only (no frozen checkpoints); ``"auto"``: a share of the longest episode
    #: (:func:`tempora_trace.profiling.profile_length`); None: a full trace
    profile_batches: int | str | None = None
    resume: bool = False
    force: bool = False
    quiet: bool = False
    method_spec: str | None = None

    def resolved(self) -> "TraceConfig":
        """A copy with defaults filled in and every value checked (ConfigError otherwise)."""
        cfg = dataclasses.replace(
            self, method_params=dict(self.method_params), checkpoints=list(self.checkpoints), budgets_ms=list(self.budgets_ms)
        )
        if ":" in (cfg.method_spec or cfg.method):  # a module or file spec: the trace is named after the class
            cfg.method_spec = cfg.method_spec or cfg.method
            cfg.method = resolve_method(cfg.method_spec).name
        _check_profile_clash(cfg.method_spec or cfg.method)
        if cfg.dataset.startswith("folder:"):  # one spelling of the folder, wherever the run starts
            rest = cfg.dataset[len("folder:") :]
            cfg.dataset = "folder:" + (str(Path(rest).expanduser().resolve()) if rest else "")
        if cfg.class_map is not None:
            cfg.class_map = str(Path(cfg.class_map).expanduser().resolve())
        if cfg.corruptions is not None:
            cfg.corruptions = list(expand_corruptions(cfg.corruptions))
        if cfg.input_size is not None and not MIN_INPUT_SIZE <= cfg.input_size <= MAX_INPUT_SIZE:
            raise ConfigError(f"--input-size must be in {MIN_INPUT_SIZE}..{MAX_INPUT_SIZE} px, not {cfg.input_size}")
        spec = cfg.dataset_spec()
        if cfg.model is None:
            cfg.model = spec.default_model
        if cfg.domains is None or len(cfg.domains) == 0:
            cfg.domains = list(spec.default_domains)
        else:
            cfg.domains = expand_domains(cfg.domains, spec.domains)
        if cfg.stream == "dirichlet":
            if cfg.dirichlet_alpha is None or not (math.isfinite(cfg.dirichlet_alpha) and cfg.dirichlet_alpha > 0):
                raise ConfigError(f"--dirichlet-alpha must be a finite number > 0, not {cfg.dirichlet_alpha}")
            cfg.stream = f"{schema.DIRICHLET_PREFIX}{cfg.dirichlet_alpha:g}"
        elif cfg.dirichlet_alpha is not None and schema.stream_alpha(cfg.stream) is None:
            raise ConfigError("--dirichlet-alpha is for --stream dirichlet")
        if not schema.is_stream(cfg.stream):
            raise ConfigError(
                f"--stream must be episodic, continual, gradual, mixed or dirichlet (with --dirichlet-alpha), not '{cfg.stream}'"
            )
        cfg.dirichlet_alpha = schema.stream_alpha(cfg.stream)
        cfg.stream, cfg.rounds = _stream_rounds(cfg.stream, cfg.rounds)
        if not 1 <= cfg.batch_size <= INT32_MAX:
            raise ConfigError(f"--batch-size must be in 1..{INT32_MAX}, not {cfg.batch_size}")
        if not 0 <= cfg.seed <= INT64_MAX:
            raise ConfigError(f"--seed must be in 0..{INT64_MAX}, not {cfg.seed}")
        if spec.has_severity and not 1 <= cfg.severity <= 5:
            raise ConfigError(f"--severity must be 1..5, not {cfg.severity}")
        _check_gradual(cfg, spec)
        if cfg.max_batches is not None and not 1 <= cfg.max_batches <= INT32_MAX:
            raise ConfigError(f"--max-batches must be in 1..{INT32_MAX}, not {cfg.max_batches}")
        if cfg.frozen_sample is not None and cfg.frozen_sample < 1:
            raise ConfigError(f"--frozen-sample must be ≥ 1 or 'all', not {cfg.frozen_sample}")
        if any(not 0 <= m <= INT32_MAX for m in cfg.checkpoints):
            raise ConfigError(f"--checkpoints must be step counts in 0..{INT32_MAX}")
        check_param_values(cfg.method_params, "--param")
        cfg.policy = canonical_policy(cfg.policy, cfg.seed)
        if cfg.policy is not None:
            check_policy_method(get_method(cfg.method_spec or cfg.method), cfg.policy)  # a PATH.py:CLASS method by its spec
        if cfg.budgets_ms:
            if cfg.lambda_ms is None:
                raise ConfigError("--budgets-ms needs --lambda-ms (λ, e.g. from `tempora-trace calibrate`)")
            if not all(math.isfinite(b) for b in [*cfg.budgets_ms, cfg.lambda_ms]):
                raise ConfigError("--budgets-ms and --lambda-ms must be finite")
            if any(b < 0 for b in cfg.budgets_ms) or cfg.lambda_ms <= 0:
                raise ConfigError("--budgets-ms must be ≥ 0 and --lambda-ms > 0")
        if cfg.warmup_batches < 0:
            raise ConfigError("warm-up batches must be ≥ 0")
        if cfg.workers is not None and cfg.workers < 0:
            raise ConfigError("--workers must be ≥ 0")
        if cfg.threads is None:
            cfg.threads = torch.get_num_threads()
        elif cfg.threads < 1:
            raise ConfigError(f"--threads must be ≥ 1, not {cfg.threads}")
        if not cfg.stage_mb > 0:
            raise ConfigError(f"--stage-mb must be > 0, not {cfg.stage_mb}")
        if cfg.heap not in HEAP_POLICIES:
            raise ConfigError(f"--heap must be one of {', '.join(HEAP_POLICIES)}, not {cfg.heap!r}")
        if not 0 <= cfg.timing_sample <= 100_000:
            raise ConfigError(f"--timing-sample must be in 0..100000 (0 turns the measurement off), not {cfg.timing_sample}")
        if not 1 <= cfg.probe_every <= 100_000:
            raise ConfigError(f"--probe-every must be in 1..100000, not {cfg.probe_every}")
        if not 1 <= cfg.timing_passes <= 100:
            raise ConfigError(f"--timing-passes must be in 1..100, not {cfg.timing_passes}")
        if cfg.idle_settle is None:
            cfg.idle_settle = _machine_idle_settle()
        if not (isinstance(cfg.idle_settle, (int, float)) and 0 <= cfg.idle_settle <= 60):
            raise ConfigError(f"--idle-settle must be a number of seconds in 0..60, not {cfg.idle_settle!r}")
        try:
            cfg.idle_gaps = format_idle_gaps(parse_idle_gaps(str(cfg.idle_gaps)))
        except ValueError as exc:
            raise ConfigError(f"--idle-gaps: {exc} (use <k>x multiples of the median δ, times, or 'none')") from None
        if cfg.profile_batches is not None:
            if isinstance(cfg.profile_batches, (str, bool)):
                if cfg.profile_batches != PROFILE_AUTO:
                    raise ConfigError(f"--profile-batches must be a number ≥ 1 or '{PROFILE_AUTO}', not {cfg.profile_batches!r}")
            elif not 1 <= cfg.profile_batches <= INT32_MAX:
                raise ConfigError(f"--profile-batches must be in 1..{INT32_MAX}, not {cfg.profile_batches}")
            if cfg.budgets_ms or cfg.checkpoints:
                raise ConfigError("a profile times the stream only: it takes no frozen checkpoints or budgets")
            cfg.default_checkpoints = False
        if cfg.name is not None and not re.fullmatch(r"[A-Za-z0-9._+-]+", cfg.name):
            raise ConfigError(f"--name '{cfg.name}' may only use letters, digits and . _ + -")
        if cfg.name is not None and cfg.name.startswith("."):
            raise ConfigError(
                f"--name '{cfg.name}' starts with '.': a hidden file, which every sweep skips; start it with a letter or digit"
            )
        for what, label in (
            ("method", cfg.method),
            ("--model", cfg.model_label()),
            ("--dataset", cfg.dataset_label()),
            *(("domain", d) for d in cfg.domains),
        ):
            if len(label) > schema.MAX_LABEL_CHARS:
                raise ConfigError(
                    f"{what} '{label[:40]}…' would name the trace with {len(label):,} characters, more than the "
                    f"{schema.MAX_LABEL_CHARS} a name may have; use a shorter name"
                )
        cfg.checkpoints = sorted(set(cfg.checkpoints))
        cfg.budgets_ms = sorted(set(float(b) for b in cfg.budgets_ms))
        return cfg

    def file_stem(self) -> str:
        """``--name``, else the identity's stem (:func:`tempora_schema.file_stem`)."""
        if self.name:
            return self.name
        method = schema.policy_file_label(schema.method_label(self.method, self.method_params), self.policy)
        return schema.file_stem(method, self.batch_size, self.seed, self._severity(), self.stream)

    def dataset_spec(self):
        """The dataset (:class:`~tempora_trace.data.DatasetSpec`), a folder's included."""
        return get_dataset(self.dataset, self.class_map, self.corruptions)

    def _severity(self) -> int | None:
        return self.severity if self.dataset_spec().has_severity else None

    def dataset_label(self) -> str:
        """The dataset as the trace identity names it (``folder:<name>@<hash>`` for a folder)."""
        return self.dataset_spec().name

    def model_label(self) -> str:
        """The model as the trace identity names it (a factory file by its name only)."""
        return spec_model_label(str(self.model))

    def output_dir(self, device_slug: str) -> Path:
        if self.out is not None:
            return Path(self.out).expanduser()
        root = "profiles" if self.profile_batches is not None else "traces"
        return Path(root) / path_part(self.dataset_label()) / path_part(self.model_label()) / device_slug

    def trace_identity(self, weights: str, device: str, method_source: dict[str, str] | None = None) -> schema.TraceIdentity:
        """The identity of the trace this (resolved) config writes. ``weights``: the loaded
        file's :func:`tempora_schema.weights_identity`; ``device``: the device's name as the
        metadata records it (``cpu:<model>``, ``cuda:<name>``); ``method_source``: the
        provenance of a method that is not built in (``MethodSource.metadata()``)."""
        group = schema.GroupKey(
            dataset=self.dataset_label(),
            model=self.model_label(),
            weights=weights,
            device=device,
            threads=self.threads,
            batch_size=self.batch_size,
            seed=self.seed,
            stream=self.stream,
            severity=self._severity(),
            domains=tuple(self.domains or ()),
            max_batches=self.max_batches,
        )
        source = tuple(sorted(method_source.items())) if method_source else None
        return schema.TraceIdentity(self.method, group, self.policy, method_source=source)

    def identity(self, trace_identity: schema.TraceIdentity | None = None) -> dict[str, Any]:
        """What ``--resume`` compares: the trace identity plus every other option that
        changes the rows (frozen sample, checkpoints, budgets, method parameters …)."""
        d = dataclasses.asdict(self)
        optional = _BYO_FIELDS | _PROFILE_FIELDS
        out = {k: v for k, v in d.items() if k not in _IDENTITY_EXCLUDE and not (k in optional and v is None)}
        if trace_identity is not None:
            out.update(trace_identity.as_metadata())
        return out


def config_from_options(command: str, cli_values: Mapping[str, Any], **extra: Any) -> TraceConfig:
    """A resolved :class:`TraceConfig` from ``command``'s parsed options (mapped as
    :mod:`tempora_trace.options` declares them) and ``extra`` fields; every value is checked
    here, before any model, data or output is touched."""
    cfg = TraceConfig(**{**config_kwargs(command, cli_values), **extra}).resolved()
    if command == LIVE and (cfg.rounds > 1 or schema.stream_base(cfg.stream) in ("gradual", "mixed")):
        raise ConfigError("tempora-trace live plays episodic and continual streams; trace gradual, mixed and repeated ones with run")
    if cli_values["resume"] and cli_values["force"]:
        raise ConfigError("--resume and --force contradict each other; pass one")
    default_root = "profiles" if cfg.profile_batches is not None else "traces"
    check_output_dir(cfg.out if cfg.out is not None else default_root)  # writable, before any work
    if cli_values["offline"]:
        os.environ["TEMPORA_OFFLINE"] = "1"  # read where weights are fetched (models.pretrained)
    return cfg
