"""Trace schema v1: the only contract shared by ``tempora_trace`` and ``tempora_sim``.

Defined in ``docs/design.md`` §3. It lives in its own tiny package so the simulator can
import it without pulling in torch, and the tracer can check what it writes against the
same definition the reader enforces. Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

SCHEMA_VERSION = 1
#: Parquet key-value metadata key holding the run's JSON metadata.
METADATA_KEY = "tempora"

PHASE_ADAPT = "adapt"
PHASE_FROZEN = "frozen"
PHASES = (PHASE_ADAPT, PHASE_FROZEN)
STREAMS = ("episodic", "continual")
#: ``checkpoint`` value of adapt rows.
NO_CHECKPOINT = -1

#: Column name -> Arrow type, in file order.
COLUMNS: dict[str, pa.DataType] = {
    "episode": pa.string(),
    "domain": pa.string(),
    "severity": pa.int8(),
    "phase": pa.string(),
    "checkpoint": pa.int32(),
    "step": pa.int32(),
    "n": pa.int32(),
    "correct": pa.int32(),
    "e_ms": pa.float64(),
    "l_ms": pa.float64(),
    "delta_ms": pa.float64(),
    "updated": pa.bool_(),
    "peak_mem_bytes": pa.int64(),
}
#: Columns that may hold nulls; every other column must be fully populated.
NULLABLE_COLUMNS = frozenset({"severity", "peak_mem_bytes"})

#: Keys every trace's metadata must carry (docs/design.md §3).
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
)
#: Metadata keys that identify the comparison group of a trace (traces in one group share λ).
GROUP_KEYS = ("dataset", "model", "device", "batch_size", "seed", "stream")


class TraceSchemaError(ValueError):
    """A trace file breaks schema v1; the message names the file and the rule."""

    def __init__(self, path: object, rule: str):
        self.path = str(path)
        self.rule = rule
        super().__init__(f"{self.path}: {rule}")


def arrow_schema(metadata: Mapping[str, Any] | None = None) -> pa.Schema:
    """The Arrow schema of a v1 trace, with ``metadata`` encoded under :data:`METADATA_KEY`."""
    fields = [pa.field(name, typ, nullable=name in NULLABLE_COLUMNS) for name, typ in COLUMNS.items()]
    md = None
    if metadata is not None:
        md = {METADATA_KEY: json.dumps(dict(metadata), sort_keys=True, default=str)}
    return pa.schema(fields, metadata=md)


def decode_metadata(schema: pa.Schema, path: object = "<trace>") -> dict[str, Any]:
    """Return the ``tempora`` JSON metadata of a file's schema, or raise TraceSchemaError."""
    raw = (schema.metadata or {}).get(METADATA_KEY.encode())
    if raw is None:
        raise TraceSchemaError(path, f"missing Parquet metadata key '{METADATA_KEY}' (not a Tempora trace)")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceSchemaError(path, f"metadata '{METADATA_KEY}' is not valid JSON ({exc.msg})") from None
    if not isinstance(meta, dict):
        raise TraceSchemaError(path, f"metadata '{METADATA_KEY}' must be a JSON object")
    return meta


@dataclass(frozen=True)
class GroupKey:
    """What makes two traces comparable: same data, model, device, batch size, seed, stream."""

    dataset: str
    model: str
    device: str
    batch_size: int
    seed: int
    stream: str

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "GroupKey":
        return cls(**{k: meta[k] for k in GROUP_KEYS})

    def label(self) -> str:
        return f"{self.dataset}/{self.model}/{self.device}/bs{self.batch_size}/seed{self.seed}/{self.stream}"


# --------------------------------------------------------------------------------------
# Validation (docs/design.md §3). The reader calls these on every file; the tracer may call them on
# what it is about to write. Each failure names the file and the one rule it breaks.
# --------------------------------------------------------------------------------------

#: Arrow type predicates a column may satisfy. Widths are not part of the contract for
#: strings (pyarrow/polars may write ``large_string``) but kinds are: a float ``correct`` or
#: a string ``step`` is a mistyped column.
_KIND_CHECKS = {
    "string": (pa.types.is_string, pa.types.is_large_string,
               getattr(pa.types, "is_string_view", lambda t: False)),
    "integer": (pa.types.is_integer,),
    "floating": (pa.types.is_floating,),
    "boolean": (pa.types.is_boolean,),
}


def _kind(typ: pa.DataType) -> str:
    if pa.types.is_string(typ):
        return "string"
    if pa.types.is_integer(typ):
        return "integer"
    if pa.types.is_floating(typ):
        return "floating"
    if pa.types.is_boolean(typ):
        return "boolean"
    raise AssertionError(typ)  # pragma: no cover - COLUMNS only uses these kinds


def _matches_kind(typ: pa.DataType, kind: str) -> bool:
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return any(check(typ) for check in _KIND_CHECKS[kind])


def validate_metadata(meta: Mapping[str, Any], path: object = "<trace>") -> None:
    """Check the ``tempora`` metadata of a trace: version, required keys and their types."""
    version = meta.get("schema_version")
    if version is None:
        raise TraceSchemaError(path, "metadata lacks 'schema_version'")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise TraceSchemaError(path, f"unknown schema version {version!r} (this reader understands {SCHEMA_VERSION})")
    missing = [k for k in METADATA_FIELDS if k not in meta]
    if missing:
        raise TraceSchemaError(path, f"metadata lacks required key(s): {', '.join(missing)}")
    for key in ("method", "model", "dataset", "device"):
        if not isinstance(meta[key], str) or not meta[key]:
            raise TraceSchemaError(path, f"metadata '{key}' must be a non-empty string, got {meta[key]!r}")
    for key in ("batch_size", "num_classes"):
        if not _is_int(meta[key]) or meta[key] < 1:
            raise TraceSchemaError(path, f"metadata '{key}' must be a positive integer, got {meta[key]!r}")
    for key in ("seed", "warmup_batches"):
        if not _is_int(meta[key]) or meta[key] < 0:
            raise TraceSchemaError(path, f"metadata '{key}' must be a non-negative integer, got {meta[key]!r}")
    if meta["stream"] not in STREAMS:
        raise TraceSchemaError(path, f"metadata 'stream' must be one of {', '.join(STREAMS)}, got {meta['stream']!r}")
    if not isinstance(meta["method_params"], dict):
        raise TraceSchemaError(path, "metadata 'method_params' must be a JSON object")
    fe = meta["frozen_eval"]
    if not (fe == "all" or (_is_int(fe) and fe >= 0)):
        raise TraceSchemaError(path, f"metadata 'frozen_eval' must be 'all' or a sample size >= 0, got {fe!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_table(table: pa.Table, meta: Mapping[str, Any], path: object = "<trace>") -> None:
    """Raise :class:`TraceSchemaError` unless ``table`` + ``meta`` form a valid v1 trace.

    Rules (docs/design.md §3): known schema version and complete metadata; every column present with
    the right kind; no nulls outside ``NULLABLE_COLUMNS``; ``phase`` in adapt/frozen; adapt
    rows have ``checkpoint = -1`` and steps 0..N-1 per episode with no gaps or repeats; frozen
    rows have ``0 <= checkpoint <= step < N`` for an episode that has adapt rows, at most one
    row per (episode, checkpoint, step); ``n >= 1`` and ``0 <= correct <= n``; times finite
    and non-negative, and ``delta_ms = e_ms + l_ms`` up to rounding.
    """
    validate_metadata(meta, path)
    names = set(table.column_names)
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise TraceSchemaError(path, f"missing column(s): {', '.join(missing)}")
    for name, typ in COLUMNS.items():
        actual = table.schema.field(name).type
        if not _matches_kind(actual, _kind(typ)):
            raise TraceSchemaError(path, f"column '{name}' has type {actual}, expected {typ}")
    for name in COLUMNS:
        if name not in NULLABLE_COLUMNS and table.column(name).null_count:
            raise TraceSchemaError(path, f"column '{name}' has {table.column(name).null_count} null value(s)")
    if table.num_rows == 0:
        raise TraceSchemaError(path, "trace has no rows")

    import pyarrow.compute as pc

    col = {
        name: table.column(name).to_numpy(zero_copy_only=False)
        for name in ("checkpoint", "step", "n", "correct", "e_ms", "l_ms", "delta_ms")
    }
    phase_values = [str(v) for v in pc.unique(table.column("phase")).to_pylist()]
    bad_phase = sorted(set(phase_values) - set(PHASES))
    if bad_phase:
        raise TraceSchemaError(path, f"column 'phase' has unknown value(s) {bad_phase} (expected adapt or frozen)")

    n = col["n"].astype(np.int64)
    correct = col["correct"].astype(np.int64)
    if (n < 1).any():
        raise TraceSchemaError(path, f"column 'n' must be >= 1 (row {int(np.argmax(n < 1))})")
    if (correct < 0).any():
        raise TraceSchemaError(path, f"column 'correct' is negative (row {int(np.argmax(correct < 0))})")
    if (correct > n).any():
        row = int(np.argmax(correct > n))
        raise TraceSchemaError(path, f"correct > n on row {row} ({correct[row]} > {n[row]})")
    for name in ("e_ms", "l_ms", "delta_ms"):
        t = col[name].astype(np.float64)
        if np.isnan(t).any():
            raise TraceSchemaError(path, f"column '{name}' contains NaN (row {int(np.argmax(np.isnan(t)))})")
        if not np.isfinite(t).all():
            raise TraceSchemaError(path, f"column '{name}' contains an infinite time")
        if (t < 0).any():
            raise TraceSchemaError(path, f"column '{name}' contains a negative time (row {int(np.argmax(t < 0))})")
    e, l, d = (col[k].astype(np.float64) for k in ("e_ms", "l_ms", "delta_ms"))
    mismatch = np.abs(d - (e + l)) > 1e-6 * np.maximum(1.0, np.abs(d))
    if mismatch.any():
        row = int(np.argmax(mismatch))
        raise TraceSchemaError(path, f"delta_ms != e_ms + l_ms on row {row} ({d[row]} vs {e[row] + l[row]})")

    encoded = pc.dictionary_encode(table.column("episode").combine_chunks().cast(pa.string()))
    ep_code = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    ep_names = [str(v) for v in encoded.dictionary.to_pylist()]
    step = col["step"].astype(np.int64)
    checkpoint = col["checkpoint"].astype(np.int64)
    adapt = pc.equal(table.column("phase"), PHASE_ADAPT).to_numpy(zero_copy_only=False).astype(bool)
    if not adapt.any():
        raise TraceSchemaError(path, "trace has no adapt rows")
    if (checkpoint[adapt] != NO_CHECKPOINT).any():
        raise TraceSchemaError(path, f"adapt rows must have checkpoint = {NO_CHECKPOINT}")
    a_code, a_step = ep_code[adapt], step[adapt]
    order = np.lexsort((a_step, a_code))
    a_code, a_step = a_code[order], a_step[order]
    counts = np.bincount(a_code, minlength=len(ep_names))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    expected = np.arange(a_step.size) - np.repeat(starts, counts)
    if not np.array_equal(a_step, expected):
        where = int(np.argmax(a_step != expected))
        ep = ep_names[a_code[where]]
        if where > 0 and a_code[where - 1] == a_code[where] and a_step[where] == a_step[where - 1]:
            problem = f"step {int(a_step[where])} appears twice"
        else:
            problem = f"step {int(expected[where])} is missing"
        raise TraceSchemaError(path, f"episode '{ep}': adapt steps must be 0..N-1 without gaps ({problem})")

    frozen = ~adapt
    if frozen.any():
        f_code, f_step, f_ck = ep_code[frozen], step[frozen], checkpoint[frozen]
        no_adapt = sorted({ep_names[c] for c in np.unique(f_code) if counts[c] == 0})
        if no_adapt:
            raise TraceSchemaError(path, f"frozen rows for episode(s) without adapt rows: {no_adapt[:3]}")
        if (f_ck < 0).any():
            raise TraceSchemaError(path, "frozen rows must have checkpoint >= 0")
        if (f_step < f_ck).any():
            row = int(np.argmax(f_step < f_ck))
            raise TraceSchemaError(path, f"frozen row with step {int(f_step[row])} < checkpoint {int(f_ck[row])} (must evaluate later batches)")
        limit = counts[f_code]
        if (f_step >= limit).any():
            row = int(np.argmax(f_step >= limit))
            raise TraceSchemaError(
                path, f"frozen row step {int(f_step[row])} beyond episode '{ep_names[f_code[row]]}' ({int(limit[row])} adapt rows)"
            )
        key = (f_code * (int(limit.max()) + 1) + f_ck) * (int(limit.max()) + 1) + f_step
        if np.unique(key).size != key.size:
            raise TraceSchemaError(path, "duplicate frozen rows for the same (episode, checkpoint, step)")
