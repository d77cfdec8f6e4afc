"""Trace schema v1: the only contract shared by ``tempora_trace`` and ``tempora_sim``.

Defined in ``shared/DESIGN.md`` §3. It lives in its own tiny package so the simulator can
import it without pulling in torch, and the tracer can check what it writes against the
same definition the reader enforces. Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

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

#: Keys every trace's metadata must carry (DESIGN §3).
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
