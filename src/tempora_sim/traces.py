"""Reading, validating and grouping schema-v1 traces (polars + pyarrow, no torch).

A *group* is what makes traces comparable (docs/design.md §3 ``GROUP_KEYS``: dataset, model, device,
batch size, seed, stream). All traces of a group share one λ, taken from its ``standard``
trace; a group may hold at most one trace per method.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tempora_schema import (
    PHASE_ADAPT,
    PHASE_FROZEN,
    GroupKey,
    TraceSchemaError,
    decode_metadata,
    validate_table,
)

from tempora_schema.provision import LAMBDA_SIGMAS, lambda_provision  # noqa: F401  (re-exported)

from .errors import GroupError, SimError, TraceFileError

#: Name of the non-adaptive baseline whose trace defines λ.
STANDARD_METHOD = "standard"


@dataclass
class Trace:
    """One trace file: its metadata and its rows (validated, in file order)."""

    path: Path
    meta: dict
    rows: pl.DataFrame

    @property
    def method(self) -> str:
        return str(self.meta["method"])

    @property
    def group(self) -> GroupKey:
        return GroupKey.from_metadata(self.meta)

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @cached_property
    def adapt(self) -> pl.DataFrame:
        """Adapt rows sorted by (episode order of first appearance, step)."""
        rows = self.rows.filter(pl.col("phase") == PHASE_ADAPT)
        order = {ep: i for i, ep in enumerate(rows["episode"].unique(maintain_order=True).to_list())}
        return (
            rows.with_columns(pl.col("episode").replace_strict(order, return_dtype=pl.Int64).alias("_ep"))
            .sort(["_ep", "step"])
            .drop("_ep")
        )

    @cached_property
    def frozen(self) -> pl.DataFrame:
        """Frozen rows sorted by (episode, checkpoint, step)."""
        return self.rows.filter(pl.col("phase") == PHASE_FROZEN).sort(["episode", "checkpoint", "step"])

    @property
    def episodes(self) -> list[str]:
        return self.adapt["episode"].unique(maintain_order=True).to_list()

    @property
    def updates_parameters(self) -> bool:
        """True if any adapt row changed the model (frozen ≠ source model)."""
        return bool(self.adapt["updated"].any())


@dataclass
class TraceSet:
    """A validated collection of traces, grouped by :class:`GroupKey` on demand."""

    traces: list[Trace] = field(default_factory=list)

    def groups(self) -> dict[GroupKey, list[Trace]]:
        """Traces per group, in first-seen order; two traces of one method in a group is an error."""
        out: dict[GroupKey, list[Trace]] = {}
        for trace in self.traces:
            members = out.setdefault(trace.group, [])
            twin = next((t for t in members if t.method == trace.method), None)
            if twin is not None:
                raise GroupError(
                    f"{trace.path}: second trace of method '{trace.method}' in group {trace.group.label()} "
                    f"(first: {twin.path}); keep one per method, seed or device"
                )
            members.append(trace)
        return out

    def __len__(self) -> int:
        return len(self.traces)


def find_trace_files(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """Expand files and directories (recursively, ``*.parquet``) into a sorted file list."""
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not items:
        raise SimError("no trace paths given")
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.parquet") if p.is_file())
            if not found:
                raise TraceFileError(path, "no *.parquet trace files found in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise TraceFileError(path, "no such file or directory")
    return list(dict.fromkeys(files))


def read_trace(path: str | os.PathLike) -> Trace:
    """Read and validate one trace file; any problem becomes a one-line TraceFileError."""
    path = Path(path)
    try:
        table = pq.read_table(path, use_threads=False)  # per-file thread pools cost more than they save here
    except (pa.ArrowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceFileError(path, f"not a readable Parquet file ({first})") from None
    try:
        meta = decode_metadata(table.schema, path)
        validate_table(table, meta, path)
    except TraceSchemaError as exc:
        raise TraceFileError.from_schema_error(exc) from None
    return Trace(path=path, meta=meta, rows=pl.from_arrow(table))


def load_traces(path_or_paths: str | os.PathLike | Iterable[str | os.PathLike]) -> TraceSet:
    """Load every trace under the given file(s)/directory(ies) into a validated TraceSet."""
    if not isinstance(path_or_paths, (str, os.PathLike)):
        path_or_paths = list(path_or_paths)
    traces = TraceSet([read_trace(p) for p in find_trace_files(path_or_paths)])
    traces.groups()  # reject duplicate methods early, at load time
    return traces


def lambda_from_standard(trace: Trace) -> float:
    """λ = mean(δ) + 6·std(δ) over all adapt rows of a ``standard`` trace, in ms.

    ``std`` is the population standard deviation (ddof = 0): the reference implementation's
    recorders summarise per-batch timings with ``numpy.std`` (ddof = 0), and the paper's
    λ = 39.9 ms is that provision over the standard run's batches. With 781+ batches the
    ddof choice changes λ by < 0.1 %.
    """
    return lambda_provision(trace.adapt["delta_ms"].to_numpy())[0]


def group_lambdas(traceset: TraceSet, lambda_ms: float | None = None) -> dict[GroupKey, float]:
    """λ per group: ``lambda_ms`` for all groups if given, else from each group's standard trace."""
    out = {}
    for key, members in traceset.groups().items():
        if lambda_ms is not None:
            out[key] = float(lambda_ms)
            continue
        std = next((t for t in members if t.method == STANDARD_METHOD), None)
        if std is None:
            raise GroupError(
                f"group {key.label()} ({members[0].path.parent}) has no '{STANDARD_METHOD}' trace to take λ from; "
                "trace the standard method too or pass --lambda-ms"
            )
        out[key] = lambda_from_standard(std)
    return out
