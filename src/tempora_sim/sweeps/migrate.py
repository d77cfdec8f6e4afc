"""Rewrite schema-v1 trace files as v2, filling what v1 did not record from what is known.

A v1 file shows its domains and severity in its rows, but not the weights, the thread count,
``max_batches`` or the machine speed. :func:`migrate_file` takes the first three from the
caller (who knows how the traces were made), leaves the speed probe empty ("not measured"),
checks the result against the v2 rules and replaces the file atomically. The rows are kept
exactly. Command line: ``tempora-sim migrate`` (docs/reference/trace-schema.md, "Migrating v1 files").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tempora_schema import (
    _SHA256,
    SCHEMA_VERSION,
    WEIGHTS_RANDOM,
    TraceSchemaError,
    arrow_schema,
    decode_metadata,
    metadata_version,
    upgrade_v1_metadata,
    validate_table,
    weights_identity,
)
from tempora_schema.errors import output_error
from tempora_toolkit.atomic_files import to_bytes, write_file


def resolve_weights(weights: str) -> str:
    """``random``, ``sha256:<hex>`` as given, or a weights file's hash."""
    if weights == WEIGHTS_RANDOM or _SHA256.fullmatch(weights):
        return weights
    path = Path(weights).expanduser()
    if not path.is_file():
        raise TraceSchemaError(weights, "--weights must be 'random', 'sha256:<64 hex digits>' or a weights file")
    return weights_identity(path)


def migrate_metadata(
    meta: dict[str, Any], severities, domains, *, weights: str, threads: int, max_batches: int | None = None
) -> dict[str, Any]:
    """v2 metadata for a v1 trace: the rows' domains and severity, the given identity fields,
    an empty speed probe (not measured)."""
    out = upgrade_v1_metadata(meta, severities, domains)
    out.update(schema_version=SCHEMA_VERSION, weights=weights, threads=threads, max_batches=max_batches)
    return out


def migrate_file(path: str | os.PathLike, *, weights: str, threads: int, max_batches: int | None = None) -> bool:
    """Rewrite one v1 file as v2 in place; return False (and leave it alone) if it is v2 already."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TraceSchemaError(path, f"not a readable Parquet file ({first[:200]})") from None
    meta = decode_metadata(table.schema, path)
    if metadata_version(meta, path) == SCHEMA_VERSION:
        return False
    validate_table(table, meta, path)  # a broken v1 file is not silently carried over
    domains = pc.unique(table.column("domain")).to_pylist()  # unique() keeps first-appearance order
    severities = pc.unique(table.column("severity")).to_pylist()
    new_meta = migrate_metadata(meta, severities, domains, weights=resolve_weights(weights), threads=threads, max_batches=max_batches)
    new_table = table.cast(arrow_schema(new_meta))
    validate_table(new_table, new_meta, path)
    # in place means the file itself: a symbolic link's target is rewritten (the link stays a
    # link), and the file keeps its permissions (a read-only trace stays read-only)
    target = path.resolve()
    mode = stat.S_IMODE(os.stat(target).st_mode)
    write_file(target, to_bytes(lambda f: pq.write_table(new_table, f)), mode=mode)  # atomic, fsynced, one-line errors
    return True


def migrate_files(
    paths: Iterable[str | os.PathLike],
    *,
    weights: str,
    threads: int,
    max_batches: int | None = None,
    on_migrated: Callable[[str | os.PathLike], None] = lambda path: None,
) -> int:
    """:func:`migrate_file` on each of ``paths``; ``on_migrated`` hears of each file rewritten.
    Returns how many were; a file that cannot be rewritten is one OutputError line."""
    changed = 0
    for path in paths:
        try:
            done = migrate_file(path, weights=weights, threads=threads, max_batches=max_batches)
        except OSError as exc:
            raise output_error(exc, path, "cannot rewrite") from None
        if done:
            changed += 1
            on_migrated(path)
    return changed
