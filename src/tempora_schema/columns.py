"""The trace file's layout: the schema version, the columns and their types, the stream
names, the metadata keys a trace must (and may) carry, and the Arrow schema and JSON metadata
that hold them. Part of :mod:`tempora_schema`, which re-exports every name here."""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any, Mapping

from tempora_schema.errors import TraceSchemaError
from tempora_schema.prediction import KIND_KEY, PREDICTED_KEY, PROFILE_BATCHES_KEY
from tempora_schema.variability import VARIABILITY_KEY

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
