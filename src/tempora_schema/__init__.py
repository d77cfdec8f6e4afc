"""Trace schema v2: the only contract shared by ``tempora_trace`` and ``tempora_sim``.

Defined in ``docs/reference/trace-schema.md``. It lives in its own tiny package so the simulator can
import it without pulling in torch, and the tracer checks what it writes against the same
rules the reader enforces. Nothing here imports torch; pyarrow is imported only by the
functions that build or take Arrow objects, so a reader that uses polars never loads it.

What is here: the column set, the metadata keys, the *trace identity* (one definition that
drives the file stem, the metadata, the tracer's ``--resume`` check and the simulator's
comparison groups), validation, reading of schema-v1 files, λ (:mod:`.provision`) and the
machine-speed probe.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from tempora_schema.errors import TemporaError, TraceSchemaError  # noqa: F401  (re-exported: the package's own error)
from tempora_schema.policies import file_part as policy_file_part
from tempora_schema.policies import parse_policy, policy_label, validate_policy_metadata
from tempora_schema.prediction import (  # noqa: F401  (re-exported)
    KIND_KEY,
    KIND_PROFILE,
    PREDICTED_KEY,
    PROFILE_BATCHES_KEY,
    check_kind_rows,
    validate_kind,
)
from tempora_schema.provision import LAMBDA_RULES, LAMBDA_SIGMAS, MAD_TO_SIGMA, lambda_ms  # noqa: F401  (re-exported)
from tempora_schema.variability import (  # noqa: F401  (re-exported)
    VARIABILITY_KEY,
    check_variability_rows,
    sample_size,
    validate_variability,
)
from tempora_schema.vocabulary import CORRUPTIONS  # noqa: F401  (re-exported: the episodes of the paper's episodic stream)

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

SCHEMA_VERSION = 2
#: Versions this reader understands (v1 files are read with a warning; see :func:`upgrade_v1_metadata`).
READABLE_VERSIONS = (1, 2)
#: Parquet key-value metadata key holding the run's JSON metadata.
METADATA_KEY = "tempora"

PHASE_ADAPT = "adapt"
PHASE_FROZEN = "frozen"
PHASES = (PHASE_ADAPT, PHASE_FROZEN)
STREAMS = ("episodic", "continual")
#: Label-shift streams name their Dirichlet concentration: ``dirichlet:<α>`` (episodic resets).
DIRICHLET_PREFIX = "dirichlet:"


def stream_alpha(stream: str) -> float | None:
    """α of a ``dirichlet:<α>`` stream (finite, > 0), or None for any other value."""
    if not isinstance(stream, str) or not stream.startswith(DIRICHLET_PREFIX):
        return None
    try:
        alpha = float(stream[len(DIRICHLET_PREFIX) :])
    except ValueError:
        return None
    return alpha if math.isfinite(alpha) and alpha > 0 else None


#: Streams of one episode that never resets: ``continual`` (the domains in order), ``gradual``
#: (each domain's severity ramped 1 → peak → 1) and ``mixed`` (every domain's samples shuffled
#: together, so each batch draws from all of them). Only these repeat over rounds.
UNRESET_STREAMS = ("continual", "gradual", "mixed")
#: Every stream name but ``dirichlet:<α>`` (which names its concentration).
TRACE_STREAMS = ("episodic", *UNRESET_STREAMS)
#: A stream repeated over ``r ≥ 2`` rounds is named ``<stream>:x<r>`` (``continual:x10``);
#: one round carries no suffix, so a one-round stream is named as it always was.
ROUNDS_MARK = ":x"
#: The rows' domain of a mixed stream: each of its batches holds samples of every listed domain.
MIXED_DOMAIN = "mixed"
_ROUNDS = re.compile(r"(continual|gradual|mixed):x([1-9][0-9]*)")


def stream_rounds(stream: str) -> int:
    """How many times the stream plays its domain sequence (1 unless named ``<stream>:x<r>``)."""
    found = _ROUNDS.fullmatch(stream) if isinstance(stream, str) else None
    return int(found.group(2)) if found else 1


def stream_base(stream: str) -> str:
    """The stream without its rounds (``continual:x3`` → ``continual``)."""
    found = _ROUNDS.fullmatch(stream) if isinstance(stream, str) else None
    return found.group(1) if found else stream


def stream_name(base: str, rounds: int = 1) -> str:
    """The canonical name of ``base`` played over ``rounds`` rounds."""
    return base if rounds == 1 else f"{base}{ROUNDS_MARK}{rounds}"


def gradual_severities(peak: int) -> list[int]:
    """The severities a gradual stream plays within each domain, in order: 1 up to ``peak`` and
    back down to 1 (``[1, 2, 3, 4, 5, 4, 3, 2, 1]`` for the default 5)."""
    return [*range(1, peak + 1), *range(peak - 1, 0, -1)]


def is_stream(stream: object) -> bool:
    """``episodic``, ``continual``, ``gradual``, ``mixed`` (the last three optionally over
    ``:x<r>`` rounds, r ≥ 2) or ``dirichlet:<α>`` with a finite α > 0."""
    if stream in TRACE_STREAMS or stream_alpha(stream) is not None:  # type: ignore[arg-type]
        return True
    return isinstance(stream, str) and stream_base(stream) != stream and stream_rounds(stream) >= 2


def resets_per_episode(stream: str) -> bool:
    """``episodic`` and ``dirichlet`` reset the method at each episode (domain); ``continual``,
    ``gradual`` and ``mixed`` play one episode that never resets."""
    return stream_base(stream) not in UNRESET_STREAMS


#: ``checkpoint`` value of adapt rows.
NO_CHECKPOINT = -1

#: Column name -> Arrow type name, in file order (unchanged from v1).
COLUMN_TYPES: dict[str, str] = {
    "episode": "string",
    "domain": "string",
    "severity": "int8",
    "phase": "string",
    "checkpoint": "int32",
    "step": "int32",
    "n": "int32",
    "correct": "int32",
    "e_ms": "float64",
    "l_ms": "float64",
    "delta_ms": "float64",
    "updated": "bool",
    "peak_mem_bytes": "int64",
}
#: Column names in file order.
COLUMNS: tuple[str, ...] = tuple(COLUMN_TYPES)
#: Columns that may hold nulls; every other column must be fully populated.
NULLABLE_COLUMNS = frozenset({"severity", "peak_mem_bytes"})
#: The kind every column's type must have (widths are not part of the contract).
COLUMN_KINDS: dict[str, str] = {
    name: ("string" if t == "string" else "boolean" if t == "bool" else "floating" if t.startswith("float") else "integer")
    for name, t in COLUMN_TYPES.items()
}

# ------------------------------------------------------------------------------ identity
#: Defaults of the tracer; a field that differs from its default shows in the file stem.
DEFAULT_BATCH_SIZE = 64
DEFAULT_SEED = 2025
DEFAULT_SEVERITY = 5
DEFAULT_STREAM = "episodic"
#: ``weights`` of an untrained (randomly initialised) model.
WEIGHTS_RANDOM = "random"
#: ``weights`` of a schema-v1 trace read in memory: v1 did not record the weights.
WEIGHTS_UNKNOWN = "unknown"
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")

#: Metadata keys that make up a trace's comparison group: traces that agree on all of them
#: were measured under the same conditions and share one λ. The trace identity is the group
#: plus ``method``.
GROUP_KEYS = (
    "dataset",
    "model",
    "weights",
    "device",
    "threads",
    "batch_size",
    "seed",
    "stream",
    "severity",
    "domains",
    "max_batches",
)
#: ``policy`` (a sparse-adaptation policy, :mod:`.policies`) is optional: absent means every batch.
IDENTITY_KEYS = ("method", "policy") + GROUP_KEYS
#: Longest name a trace may carry (method, model, dataset, device, each domain and episode), in
#: characters: room for any file or folder name (255 bytes) with its prefix and hash, and a
#: bound on what every reader, table and page holds per name (the tracer refuses longer ones).
MAX_LABEL_CHARS = 512
#: Optional metadata key: where a method that is not built in comes from (part of the trace
#: identity when present; absent for the built-in methods).
METHOD_SOURCE_KEY = "method_source"
METHOD_SOURCE_KINDS = {"distribution": ("distribution", "version", "object"), "file": ("path", "sha256", "object")}

#: Keys every v2 trace's metadata must carry (docs/reference/trace-schema.md).
METADATA_FIELDS = (
    "schema_version",
    "method",
    "method_params",
    "model",
    "dataset",
    "stream",
    "batch_size",
    "seed",
    "num_classes",
    "device",
    "torch_version",
    "tracer_version",
    "warmup_batches",
    "frozen_eval",
    "created_at",
    # new in v2
    "severity",
    "domains",
    "max_batches",
    "weights",
    "threads",
    "speed_probe",
    "speed_probe_kind",
)
#: Keys a trace carries only when they apply (docs/reference/trace-schema.md): the sparse-adaptation
#: policy, where a plugin method, a model by spec and a folder dataset came from, the
#: timing-variability measurement, a profile's or a predicted trace's markers, and the host
#: heap's policy while events were timed (``steady`` or ``system``; absent in traces taken
#: before it was recorded: ``system``) with the minor page faults of the main pass's events
#: (``{"events", "median", "max"}``, where the OS counts them). A reader that does not know one
#: ignores it.
HEAP_KEY = "heap"
HEAP_FAULTS_KEY = "heap_faults"
OPTIONAL_METADATA_FIELDS = (
    "policy",
    METHOD_SOURCE_KEY,
    "model_source",
    "dataset_source",
    VARIABILITY_KEY,
    KIND_KEY,
    PROFILE_BATCHES_KEY,
    PREDICTED_KEY,
    HEAP_KEY,
    HEAP_FAULTS_KEY,
)
#: The v1 subset (what a v1 file must carry to be readable).
METADATA_FIELDS_V1 = METADATA_FIELDS[:15]
#: ``speed_probe_kind`` of a trace whose machine speed was not measured (empty probe list).
PROBE_NOT_MEASURED = "none"


@dataclass(frozen=True)
class GroupKey:
    """What makes traces comparable: same data, model and weights, same machine settings.

    ``threads``, ``max_batches`` and ``severity`` may be ``None`` (v1 traces: not recorded;
    ``severity``: datasets without severities); ``weights`` is ``"random"``,
    ``"sha256:<hex>"`` or, for v1 traces, ``"unknown"``.
    """

    dataset: str
    model: str
    weights: str
    device: str
    threads: int | None
    batch_size: int
    seed: int
    stream: str
    severity: int | None
    domains: tuple[str, ...]
    max_batches: int | None

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "GroupKey":
        values = {k: meta[k] for k in GROUP_KEYS}
        values["domains"] = tuple(values["domains"])
        return cls(**values)

    def as_metadata(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in GROUP_KEYS}
        out["domains"] = list(self.domains)
        return out

    def label(self, seed: bool = True) -> str:
        """Compact one-line name: the v1 fields, then whatever else sets this group apart.

        ``seed=False`` names the setting the group's seeds replicate (seeds pool like episodes)."""
        parts = [self.dataset, self.model, self.device, f"bs{self.batch_size}"]
        parts += [f"seed{self.seed}", self.stream] if seed else [self.stream]
        if self.severity is not None:
            parts.append(f"sev{self.severity}")
        if len(self.domains) <= 2:
            parts.append("+".join(self.domains))
        else:
            parts.append(f"{len(self.domains)} domains")
        if self.max_batches is not None:
            parts.append(f"max{self.max_batches}")
        if self.threads is not None:
            parts.append(f"{self.threads}thr")
        parts.append("weights " + (self.weights[7:19] if self.weights.startswith("sha256:") else self.weights))
        return "/".join(parts)


@dataclass(frozen=True)
class TraceIdentity:
    """One trace's identity: its method, its sparse-adaptation policy (None: adapt on every
    batch; :mod:`.policies`) and its group (docs/reference/trace-schema.md, "Identity").

    ``method_source`` is the provenance of a method that is not built in (metadata key
    ``method_source``: the distribution's name and version, or the file's path and SHA-256), as
    sorted ``(key, value)`` pairs; ``None`` for a built-in method, whose identity is its name."""

    method: str
    group: GroupKey
    policy: str | None = None
    method_source: tuple[tuple[str, str], ...] | None = None

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "TraceIdentity":
        source = meta.get(METHOD_SOURCE_KEY)
        pairs = tuple(sorted((str(k), str(v)) for k, v in source.items())) if isinstance(source, Mapping) else None
        return cls(str(meta["method"]), GroupKey.from_metadata(meta), meta.get("policy"), pairs)

    def as_metadata(self) -> dict[str, Any]:
        """The identity's metadata keys; ``policy`` and ``method_source`` only when the trace has
        them, so a trace of a built-in method without a policy carries exactly the keys it always did."""
        out = {"method": self.method, **({"policy": self.policy} if self.policy else {}), **self.group.as_metadata()}
        if self.method_source is not None:
            out[METHOD_SOURCE_KEY] = dict(self.method_source)
        return out

    def file_stem(self) -> str:
        """The trace's default file name without ``.parquet`` (see :func:`file_stem`)."""
        g = self.group
        return file_stem(policy_file_label(self.method, self.policy), g.batch_size, g.seed, g.severity, g.stream)

    def differences(self, other: "TraceIdentity") -> list[str]:
        """Identity keys on which the two differ (for the resume check's message)."""
        a, b = self.as_metadata(), other.as_metadata()
        return [k for k in (*IDENTITY_KEYS, METHOD_SOURCE_KEY) if a.get(k) != b.get(k)]


def method_label(method: str, method_params: Mapping[str, Any] | None, policy: str | None = None) -> str:
    """The method as traces of one group tell it apart: ``tent``, ``tent-paper`` for a trace
    taken with ``profile=paper`` (the reference code's behaviour, docs/results/methods-parity.md), so a
    default and a paper-profile trace of one method can sit side by side, and ``tent@every:4``
    for a trace taken under a sparse-adaptation policy (:mod:`.policies`)."""
    profile = (method_params or {}).get("profile", "default") if isinstance(method_params, Mapping) else "default"
    name = method if profile in (None, "default") else f"{method}-{profile}"
    return policy_label(name, policy if isinstance(policy, str) else None)


def policy_file_label(method: str, policy: str | None) -> str:
    """A method label as part of a file name: ``tent@every4`` (no colons)."""
    return method if not policy else policy_label(method, policy_file_part(policy))


def file_stem(method: str, batch_size: int, seed: int, severity: int | None, stream: str) -> str:
    """``<method>`` plus ``-bs<B>``, ``-seed<S>``, ``-sev<k>``, ``-continual`` where they differ
    from the defaults, so the common variants never share a file. The other identity fields
    live in the folder (device) or only in the metadata; a file of another identity is never
    silently overwritten (the tracer refuses an existing file, and a resume whose identity
    differs)."""
    stem = method
    if batch_size != DEFAULT_BATCH_SIZE:
        stem += f"-bs{batch_size}"
    if seed != DEFAULT_SEED:
        stem += f"-seed{seed}"
    if severity is not None and severity != DEFAULT_SEVERITY:
        stem += f"-sev{severity}"
    if stream != DEFAULT_STREAM:
        stem += f"-{stream.replace(':', '')}"
    return stem


def weights_identity(path: str | os.PathLike | None) -> str:
    """``"sha256:<hex>"`` of a weights file, or ``"random"`` for ``None`` (untrained model)."""
    if path is None:
        return WEIGHTS_RANDOM
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


# ------------------------------------------------------------------------------ Arrow
def arrow_schema(metadata: Mapping[str, Any] | None = None) -> "pa.Schema":
    """The Arrow schema of a trace, with ``metadata`` encoded under :data:`METADATA_KEY`."""
    import pyarrow as pa  # lazy: both commands import this package at start-up; pyarrow loads with the first trace

    types = {
        "string": pa.string(),
        "int8": pa.int8(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
    }
    fields = [pa.field(name, types[t], nullable=name in NULLABLE_COLUMNS) for name, t in COLUMN_TYPES.items()]
    return pa.schema(fields, metadata=None if metadata is None else encode_metadata(metadata))


def encode_metadata(metadata: Mapping[str, Any]) -> dict[str, str]:
    """The Parquet key-value metadata of a trace: its JSON under :data:`METADATA_KEY`."""
    return {METADATA_KEY: json.dumps(dict(metadata), sort_keys=True, default=str)}


def parse_metadata(raw: str | bytes | None, path: object = "<trace>") -> dict[str, Any]:
    """Decode the JSON text stored under :data:`METADATA_KEY`, or raise TraceSchemaError."""
    if raw is None:
        raise TraceSchemaError(path, f"missing Parquet metadata key '{METADATA_KEY}' (not a Tempora trace)")
    try:
        meta = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceSchemaError(path, f"metadata '{METADATA_KEY}' is not valid JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise TraceSchemaError(path, f"metadata '{METADATA_KEY}' is nested too deeply") from None
    if not isinstance(meta, dict):
        raise TraceSchemaError(path, f"metadata '{METADATA_KEY}' must be a JSON object")
    return meta


def decode_metadata(schema: "pa.Schema", path: object = "<trace>") -> dict[str, Any]:
    """Return the ``tempora`` JSON metadata of a file's Arrow schema, or raise TraceSchemaError."""
    return parse_metadata((schema.metadata or {}).get(METADATA_KEY.encode()), path)


# ------------------------------------------------------------------------------ metadata rules
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metadata_version(meta: Mapping[str, Any], path: object = "<trace>") -> int:
    """The schema version a metadata object declares (must be one this reader understands)."""
    version = meta.get("schema_version")
    if version is None:
        raise TraceSchemaError(path, "metadata lacks 'schema_version'")
    if not _is_int(version) or version not in READABLE_VERSIONS:
        raise TraceSchemaError(
            path, f"unknown schema version {version!r} (this reader understands {', '.join(map(str, READABLE_VERSIONS))})"
        )
    return int(version)


def validate_metadata(meta: Mapping[str, Any], path: object = "<trace>") -> int:
    """Check a trace's metadata (v1 or v2: version, required keys, their types); return the version."""
    version = metadata_version(meta, path)
    required = METADATA_FIELDS if version == 2 else METADATA_FIELDS_V1
    missing = [k for k in required if k not in meta]
    if missing:
        raise TraceSchemaError(path, f"metadata lacks required key(s): {', '.join(missing)}")
    for key in ("method", "model", "dataset", "device"):
        if not isinstance(meta[key], str) or not meta[key]:
            raise TraceSchemaError(path, f"metadata '{key}' must be a non-empty string, got {meta[key]!r}")
        if len(meta[key]) > MAX_LABEL_CHARS:
            raise TraceSchemaError(
                path, f"metadata '{key}' is {len(meta[key]):,} characters long, more than the {MAX_LABEL_CHARS} a name may have"
            )
    for key in ("batch_size", "num_classes"):
        if not _is_int(meta[key]) or meta[key] < 1:
            raise TraceSchemaError(path, f"metadata '{key}' must be a positive integer, got {meta[key]!r}")
    for key in ("seed", "warmup_batches"):
        if not _is_int(meta[key]) or meta[key] < 0:
            raise TraceSchemaError(path, f"metadata '{key}' must be a non-negative integer, got {meta[key]!r}")
    if not is_stream(meta["stream"]):
        raise TraceSchemaError(
            path, f"metadata 'stream' must be one of {', '.join(TRACE_STREAMS)} (with :x<rounds>) or dirichlet:<α>, got {meta['stream']!r}"
        )
    if not isinstance(meta["method_params"], dict):
        raise TraceSchemaError(path, "metadata 'method_params' must be a JSON object")
    fe = meta["frozen_eval"]
    if not (fe == "all" or (_is_int(fe) and fe >= 0)):
        raise TraceSchemaError(path, f"metadata 'frozen_eval' must be 'all' or a sample size >= 0, got {fe!r}")
    if version == 2:
        _validate_v2_keys(meta, path)
    return version


def trace_policy(meta: Mapping[str, Any], path: object = "<trace>") -> str | None:
    """The trace's sparse-adaptation policy (optional key ``policy``; None: every batch)."""
    try:
        return validate_policy_metadata(meta.get("policy"))
    except ValueError as exc:
        raise TraceSchemaError(path, str(exc)) from None


def _validate_v2_keys(meta: Mapping[str, Any], path: object) -> None:
    sev = meta["severity"]
    if sev is not None and not (_is_int(sev) and 1 <= sev <= 5):
        raise TraceSchemaError(path, f"metadata 'severity' must be 1..5 or null, got {sev!r}")
    domains = meta["domains"]
    if not isinstance(domains, list) or not domains or not all(isinstance(d, str) and d for d in domains):
        raise TraceSchemaError(path, f"metadata 'domains' must be a non-empty list of names, got {domains!r}")
    if len(set(domains)) != len(domains):
        raise TraceSchemaError(path, "metadata 'domains' lists a domain twice")
    if any(len(d) > MAX_LABEL_CHARS for d in domains):
        raise TraceSchemaError(path, f"metadata 'domains' holds a name longer than the {MAX_LABEL_CHARS} characters a name may have")
    mb = meta["max_batches"]
    if mb is not None and not (_is_int(mb) and mb >= 1):
        raise TraceSchemaError(path, f"metadata 'max_batches' must be a positive integer or null, got {mb!r}")
    w = meta["weights"]
    if not (w == WEIGHTS_RANDOM or (isinstance(w, str) and _SHA256.fullmatch(w))):
        raise TraceSchemaError(path, f"metadata 'weights' must be 'random' or 'sha256:<64 hex digits>', got {w!r}")
    th = meta["threads"]
    if not _is_int(th) or th < 1:
        raise TraceSchemaError(path, f"metadata 'threads' must be a positive integer, got {th!r}")
    validate_speed_probe(meta["speed_probe"], meta["speed_probe_kind"], path)
    trace_policy(meta, path)
    if VARIABILITY_KEY in meta:  # optional: timing variability measured after the main pass
        validate_variability(meta[VARIABILITY_KEY], path)
    if METHOD_SOURCE_KEY in meta:
        validate_method_source(meta[METHOD_SOURCE_KEY], path)
    validate_kind(meta, path)  # a profile or a predicted trace (tempora_schema.prediction)


def validate_method_source(source: Any, path: object = "<trace>") -> None:
    """``method_source``: ``{"kind": "distribution", "distribution", "version", "object"}`` or
    ``{"kind": "file", "path", "sha256" (64 hex digits), "object"}``, every value a non-empty string."""
    kind = source.get("kind") if isinstance(source, dict) else None
    if kind not in METHOD_SOURCE_KINDS:
        raise TraceSchemaError(path, f"metadata '{METHOD_SOURCE_KEY}' must be an object whose kind is distribution or file, got {source!r}")
    wanted = {"kind", *METHOD_SOURCE_KINDS[kind]}
    if set(source) != wanted or not all(isinstance(v, str) and v for v in source.values()):
        raise TraceSchemaError(
            path, f"metadata '{METHOD_SOURCE_KEY}' of kind {kind} must hold exactly {', '.join(sorted(wanted))} as non-empty strings"
        )
    if kind == "file" and not re.fullmatch(r"[0-9a-f]{64}", source["sha256"]):
        raise TraceSchemaError(path, f"metadata '{METHOD_SOURCE_KEY}': sha256 must be 64 hex digits, got {source['sha256']!r}")


def validate_speed_probe(probe: Any, kind: Any, path: object = "<trace>") -> None:
    """``speed_probe``: list of ``{"episode": str, "step": int >= 0, "ms": float > 0}``;
    ``speed_probe_kind``: a non-empty string, ``"none"`` exactly when the list is empty."""
    if not isinstance(kind, str) or not kind:
        raise TraceSchemaError(path, f"metadata 'speed_probe_kind' must be a non-empty string, got {kind!r}")
    if not isinstance(probe, list):
        raise TraceSchemaError(path, f"metadata 'speed_probe' must be a list, got {type(probe).__name__}")
    if (kind == PROBE_NOT_MEASURED) != (len(probe) == 0):
        raise TraceSchemaError(path, f"metadata 'speed_probe_kind' must be '{PROBE_NOT_MEASURED}' exactly when 'speed_probe' is empty")
    for i, item in enumerate(probe):
        if not isinstance(item, dict) or set(item) != {"episode", "step", "ms"}:
            raise TraceSchemaError(path, f"metadata 'speed_probe' item {i} must be an object with keys episode, step, ms")
        if not isinstance(item["episode"], str) or not item["episode"]:
            raise TraceSchemaError(path, f"metadata 'speed_probe' item {i}: 'episode' must be a non-empty string")
        if not _is_int(item["step"]) or item["step"] < 0:
            raise TraceSchemaError(path, f"metadata 'speed_probe' item {i}: 'step' must be an integer >= 0")
        if not _is_number(item["ms"]) or item["ms"] <= 0:
            raise TraceSchemaError(path, f"metadata 'speed_probe' item {i}: 'ms' must be a finite number > 0")


def probe_median_ms(meta: Mapping[str, Any]) -> float | None:
    """Median machine-speed probe time of a trace (ms), or ``None`` when it was not measured."""
    probe = meta.get("speed_probe") or []
    return float(np.median([p["ms"] for p in probe])) if probe else None


# ------------------------------------------------------------------------------ v1 files
def upgrade_v1_metadata(meta: Mapping[str, Any], severities: Sequence[Any], domains: Sequence[str]) -> dict[str, Any]:
    """A v1 trace's metadata with the v2 keys filled from what the file shows.

    ``severities`` and ``domains`` are the distinct values of those columns (domains in order
    of appearance): one severity becomes ``severity``, several or none become ``None``. What a
    v1 file cannot tell stays unknown: ``weights = "unknown"``, ``threads``/``max_batches``
    ``None``, no speed probe. ``schema_version`` stays 1 so callers can tell.
    """
    sev = [int(s) for s in severities if s is not None]
    out = dict(meta)
    out.update(
        severity=sev[0] if len(set(sev)) == 1 else None,
        domains=[str(d) for d in domains],
        max_batches=None,
        weights=WEIGHTS_UNKNOWN,
        threads=None,
        speed_probe=[],
        speed_probe_kind=PROBE_NOT_MEASURED,
    )
    return out


def v1_warning(path: object) -> str:
    """The one line a reader prints for a v1 file."""
    return (
        f"{path}: schema v1 trace: weights, thread count and max_batches were not recorded and "
        "machine speed was not probed; grouped by what the file shows (rewrite it as v2 with "
        "`tempora-sim migrate`)"
    )


# ------------------------------------------------------------------------------ row rules
@dataclass
class RowArrays:
    """The columns the row rules look at, as numpy arrays (built from Arrow or polars).

    ``episode_code`` numbers episodes in order of first appearance (``episode_names``);
    ``phase_values`` are the distinct phases present.
    """

    episode_names: list[str]
    episode_code: np.ndarray
    phase_values: list[str]
    adapt: np.ndarray
    checkpoint: np.ndarray
    step: np.ndarray
    n: np.ndarray
    correct: np.ndarray
    e_ms: np.ndarray
    l_ms: np.ndarray
    delta_ms: np.ndarray


@dataclass
class RowLayout:
    """What validation learnt about the row order, so readers need not sort again.

    ``canonical``: every episode's rows are one contiguous block (episodes in order of first
    appearance) holding its adapt rows by step, then its frozen rows by (checkpoint, step):
    what the tracer writes. ``adapt_counts``: adapt rows per episode (by code).
    """

    canonical: bool
    adapt_counts: np.ndarray


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def validate_rows(cols: RowArrays, path: object = "<trace>") -> RowLayout:
    """The row rules of docs/reference/trace-schema.md ("Rows"); raise TraceSchemaError on the first broken.

    Vectorised, and linear in the rows for files in the tracer's order (a sort only for
    files in another order)."""
    n_rows = cols.step.shape[0]
    if n_rows == 0:
        raise TraceSchemaError(path, "trace has no rows")
    bad_phase = sorted(set(cols.phase_values) - set(PHASES))
    if bad_phase:
        raise TraceSchemaError(path, f"column 'phase' has unknown value(s) {bad_phase} (expected adapt or frozen)")
    n, correct = cols.n, cols.correct
    if (n < 1).any():
        raise TraceSchemaError(path, f"column 'n' must be >= 1 (row {_first(n < 1)})")
    if (correct < 0).any():
        raise TraceSchemaError(path, f"column 'correct' is negative (row {_first(correct < 0)})")
    over = correct > n
    if over.any():
        row = _first(over)
        raise TraceSchemaError(path, f"correct > n on row {row} ({correct[row]} > {n[row]})")
    e, l, d = cols.e_ms, cols.l_ms, cols.delta_ms
    residual = d - (e + l)  # non-finite if any of the three is; one pass for the common case
    if not np.isfinite(residual).all():
        for name, t in (("e_ms", e), ("l_ms", l), ("delta_ms", d)):
            ok = np.isfinite(t)
            if not ok.all():
                row = _first(~ok)
                what = "NaN" if np.isnan(t[row]) else "an infinite time"
                raise TraceSchemaError(path, f"column '{name}' contains {what} (row {row})")
    for name, t in (("e_ms", e), ("l_ms", l), ("delta_ms", d)):
        if t.min() < 0:
            raise TraceSchemaError(path, f"column '{name}' contains a negative time (row {_first(t < 0)})")
    if np.abs(residual).max() > 1e-6:  # else within the tolerance below, whatever |d| is
        mismatch = np.abs(residual) > 1e-6 * np.maximum(1.0, np.abs(d))
        if mismatch.any():
            row = _first(mismatch)
            raise TraceSchemaError(path, f"delta_ms != e_ms + l_ms on row {row} ({d[row]} vs {e[row] + l[row]})")

    code, step, ck, adapt = cols.episode_code, cols.step, cols.checkpoint, cols.adapt
    n_ep = len(cols.episode_names)
    if not adapt.any():
        raise TraceSchemaError(path, "trace has no adapt rows")
    if (ck[adapt] != NO_CHECKPOINT).any():
        raise TraceSchemaError(path, f"adapt rows must have checkpoint = {NO_CHECKPOINT}")
    frozen = ~adapt
    canonical = _is_canonical(code, adapt, ck, step)
    a_code, a_step = code[adapt], step[adapt]
    counts = np.bincount(a_code, minlength=n_ep)
    if not canonical:
        order = np.lexsort((a_step, a_code))
        a_code, a_step = a_code[order], a_step[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    expected = np.arange(a_step.size) - np.repeat(starts, counts)
    if not np.array_equal(a_step, expected):
        where = _first(a_step != expected)
        ep = cols.episode_names[a_code[where]]
        if where > 0 and a_code[where - 1] == a_code[where] and a_step[where] == a_step[where - 1]:
            problem = f"step {int(a_step[where])} appears twice"
        else:
            problem = f"step {int(expected[where])} is missing"
        raise TraceSchemaError(path, f"episode '{ep}': adapt steps must be 0..N-1 without gaps ({problem})")

    if frozen.any():
        f_code, f_step, f_ck = code[frozen], step[frozen], ck[frozen]
        limit = counts[f_code]
        if (limit == 0).any():
            lonely = sorted({cols.episode_names[c] for c in np.unique(f_code[limit == 0])})
            raise TraceSchemaError(path, f"frozen rows for episode(s) without adapt rows: {lonely[:3]}")
        if (f_ck < 0).any():
            raise TraceSchemaError(path, "frozen rows must have checkpoint >= 0")
        early = f_step < f_ck
        if early.any():
            row = _first(early)
            raise TraceSchemaError(
                path, f"frozen row with step {int(f_step[row])} < checkpoint {int(f_ck[row])} (must evaluate later batches)"
            )
        beyond = f_step >= limit
        if beyond.any():
            row = _first(beyond)
            raise TraceSchemaError(
                path,
                f"frozen row step {int(f_step[row])} beyond episode '{cols.episode_names[f_code[row]]}' ({int(limit[row])} adapt rows)",
            )
        if not canonical:  # canonical order already proved (episode, checkpoint, step) strictly increasing
            span = int(limit.max()) + 1
            key = np.sort((f_code.astype(np.int64) * span + f_ck) * span + f_step)
            if (key[1:] == key[:-1]).any():
                raise TraceSchemaError(path, "duplicate frozen rows for the same (episode, checkpoint, step)")
    return RowLayout(canonical=canonical, adapt_counts=counts)


def _is_canonical(code: np.ndarray, adapt: np.ndarray, ck: np.ndarray, step: np.ndarray) -> bool:
    """True if rows are in the tracer's order (see :class:`RowLayout`), with no duplicate
    (episode, checkpoint, step): one pass over adjacent row pairs."""
    if code.size < 2:
        return True
    # rows sort by (episode code, checkpoint, step), strictly increasing pairwise; adapt rows
    # (checkpoint -1) come before the frozen ones of their episode automatically, and codes
    # number episodes by first appearance, so non-decreasing codes mean one block each.
    ck_lo, ck_hi = int(ck.min()), int(ck.max())
    st_lo, st_hi = int(step.min()), int(step.max())
    ck_span, st_span = ck_hi - ck_lo + 1, st_hi - st_lo + 1
    if (int(code.max()) + 1) * ck_span * st_span < 2**62:  # one int64 key: a single pass
        key = (code * ck_span + (ck.astype(np.int64) - ck_lo)) * st_span + (step.astype(np.int64) - st_lo)
        return bool((key[1:] > key[:-1]).all())
    c0, c1 = code[:-1], code[1:]
    k0, k1 = ck[:-1], ck[1:]
    s0, s1 = step[:-1], step[1:]
    return bool(((c1 > c0) | ((c1 == c0) & ((k1 > k0) | ((k1 == k0) & (s1 > s0))))).all())


def _arrow_kind_ok(typ: "pa.DataType", kind: str) -> bool:
    import pyarrow as pa  # lazy: both commands import this package at start-up; pyarrow loads with the first trace

    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    checks = {
        "string": (pa.types.is_string, pa.types.is_large_string, getattr(pa.types, "is_string_view", lambda t: False)),
        "integer": (pa.types.is_integer,),
        "floating": (pa.types.is_floating,),
        "boolean": (pa.types.is_boolean,),
    }[kind]
    return any(check(typ) for check in checks)


def rows_from_arrow(table: "pa.Table", path: object = "<trace>") -> RowArrays:
    """Check columns, kinds and nulls of an Arrow table and return its :class:`RowArrays`."""
    import pyarrow as pa  # lazy: both commands import this package at start-up; pyarrow loads with the first trace
    import pyarrow.compute as pc

    names = set(table.column_names)
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise TraceSchemaError(path, f"missing column(s): {', '.join(missing)}")
    for name in COLUMNS:
        actual = table.schema.field(name).type
        if not _arrow_kind_ok(actual, COLUMN_KINDS[name]):
            raise TraceSchemaError(path, f"column '{name}' has type {actual}, expected {COLUMN_TYPES[name]}")
    for name in COLUMNS:
        if name not in NULLABLE_COLUMNS and table.column(name).null_count:
            raise TraceSchemaError(path, f"column '{name}' has {table.column(name).null_count} null value(s)")

    def num(name, dtype):
        return table.column(name).to_numpy(zero_copy_only=False).astype(dtype, copy=False)

    encoded = pc.dictionary_encode(table.column("episode").combine_chunks().cast(pa.string()))
    phase = table.column("phase").cast(pa.string())
    return RowArrays(
        episode_names=[str(v) for v in encoded.dictionary.to_pylist()],
        episode_code=encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
        phase_values=[str(v) for v in pc.unique(phase).to_pylist()],
        adapt=pc.equal(phase, PHASE_ADAPT).to_numpy(zero_copy_only=False).astype(bool),
        checkpoint=num("checkpoint", np.int64),
        step=num("step", np.int64),
        n=num("n", np.int64),
        correct=num("correct", np.int64),
        e_ms=num("e_ms", np.float64),
        l_ms=num("l_ms", np.float64),
        delta_ms=num("delta_ms", np.float64),
    )


def validate_table(table: "pa.Table", meta: Mapping[str, Any], path: object = "<trace>") -> RowLayout:
    """Raise :class:`TraceSchemaError` unless ``table`` + ``meta`` form a valid trace (v1 or v2).

    Rules (docs/reference/trace-schema.md): known schema version and complete metadata; every column
    present with the right kind; no nulls outside ``NULLABLE_COLUMNS``; ``phase`` in
    adapt/frozen; adapt rows have ``checkpoint = -1`` and steps 0..N-1 per episode with no
    gaps or repeats; frozen rows have ``0 <= checkpoint <= step < N`` for an episode that has
    adapt rows, at most one row per (episode, checkpoint, step); ``n >= 1`` and
    ``0 <= correct <= n``; times finite and non-negative, and ``delta_ms = e_ms + l_ms`` up to
    rounding; v2: the metadata agrees with the rows (domains, severity, probe episodes).
    """
    validate_metadata(meta, path)
    cols = rows_from_arrow(table, path)
    if any(len(name) > MAX_LABEL_CHARS for name in cols.episode_names):
        raise TraceSchemaError(path, f"an episode name is longer than the {MAX_LABEL_CHARS} characters a name may have")
    layout = validate_rows(cols, path)
    if meta["schema_version"] == 2:
        import pyarrow.compute as pc  # lazy: both commands import this package at start-up; pyarrow loads with the first trace

        domains = [str(v) for v in pc.unique(table.column("domain")).to_pylist()]
        severities = pc.unique(table.column("severity")).to_pylist()
        check_metadata_matches_rows(meta, cols.episode_names, layout.adapt_counts, domains, severities, path)
        check_policy_rows(meta, cols, path)
        check_kind_rows(meta, layout.adapt_counts, bool((~cols.adapt).any()), path)
    return layout


def check_policy_rows(meta: Mapping[str, Any], cols: RowArrays, path: object = "<trace>") -> None:
    """A trace under a policy decided before each event (every, fraction, warmup) has
    ``l_ms = 0`` on every adapt row the policy does not adapt (docs/design/design.md §11): its
    metadata and its rows tell one story. (An entropy policy decides from the prediction,
    which the trace does not keep.)"""
    policy = trace_policy(meta, path)
    parsed = None if policy is None else parse_policy(policy)
    if parsed is None or not parsed.decides_before():
        return
    seed = int(meta["seed"])
    for code, name in enumerate(cols.episode_names):
        rows = np.flatnonzero(cols.adapt & (cols.episode_code == code))
        for i in rows[cols.l_ms[rows] != 0]:
            if not parsed.adapts(int(cols.step[i]), name, seed):
                raise TraceSchemaError(
                    path, f"policy {policy} does not adapt step {int(cols.step[i])} of episode {name!r}, but its row has l_ms > 0"
                )


def check_metadata_matches_rows(
    meta: Mapping[str, Any],
    episode_names: Sequence[str],
    adapt_counts: np.ndarray,
    domains: Sequence[str],
    severities: Sequence[Any],
    path: object = "<trace>",
) -> None:
    """v2 cross-checks: the rows' domains are the listed ones, their severity the recorded
    one, ``max_batches`` bounds every episode, and the probe names real episodes and steps."""
    listed = set(meta["domains"])
    base = stream_base(meta["stream"])
    extra = sorted(set(domains) - listed - ({MIXED_DOMAIN} if base == "mixed" else set()))
    if extra:
        raise TraceSchemaError(path, f"rows hold domain(s) {extra[:3]} not listed in metadata 'domains'")
    sev = {int(s) for s in severities if s is not None}
    if meta["severity"] is not None:
        allowed = set(gradual_severities(meta["severity"])) if base == "gradual" else {meta["severity"]}
        if sev - allowed:
            raise TraceSchemaError(path, f"rows have severity {sorted(sev)} but metadata 'severity' is {meta['severity']}")
    mb = meta["max_batches"]
    if mb is not None and resets_per_episode(meta["stream"]) and adapt_counts.size and int(adapt_counts.max()) > mb * len(listed):
        raise TraceSchemaError(path, f"an episode has {int(adapt_counts.max())} batches, more than max_batches allows")
    length = dict(zip(episode_names, (int(c) for c in adapt_counts)))
    for i, item in enumerate(meta["speed_probe"]):
        if item["episode"] not in length:
            raise TraceSchemaError(path, f"metadata 'speed_probe' item {i} names episode {item['episode']!r}, not in the rows")
        if item["step"] > length[item["episode"]]:
            raise TraceSchemaError(path, f"metadata 'speed_probe' item {i}: step {item['step']} is beyond its episode")
    if meta.get(VARIABILITY_KEY) is not None:
        check_variability_rows(meta[VARIABILITY_KEY], length, path)
