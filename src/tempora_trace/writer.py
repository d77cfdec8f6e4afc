"""Trace files: per-episode rows kept on disk while running, one atomic Parquet at the end.

Layout while a run is in progress (nothing here ends in ``.parquet``, so ``tempora-sim``
never picks up half a run)::

    <dir>/<stem>.partial/config.json        the run's identity (resume refuses a mismatch)
    <dir>/<stem>.partial/episode-0000.rows  Parquet rows of each completed episode

When the last episode lands, all rows are written to ``<stem>.parquet.tmp-<pid>`` and renamed
to ``<stem>.parquet`` (``os.replace`` is atomic), then the partial folder is removed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import tempora_schema as schema

from .errors import OutputError


class RowBuffer:
    """Column lists for one episode's rows (adapt and frozen)."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in schema.COLUMNS}

    def add(self, **row: Any) -> None:
        for name in schema.COLUMNS:
            self.columns[name].append(row[name])

    def __len__(self) -> int:
        return len(self.columns["step"])

    def table(self) -> pa.Table:
        """Adapt rows by step, then frozen rows by (checkpoint, step)."""
        table = pa.table(self.columns, schema=schema.arrow_schema(None))
        return table.sort_by([("phase", "ascending"), ("checkpoint", "ascending"), ("step", "ascending")])


class TraceWriter:
    """Owns one run's output path: refuses silent overwrites, keeps completed episodes for
    ``--resume``, and publishes the finished trace atomically."""

    def __init__(self, final_path: Path, identity: dict, resume: bool, force: bool):
        self.final_path = final_path
        self.partial_dir = final_path.with_name(final_path.name[: -len(".parquet")] + ".partial")
        self.identity = json.loads(json.dumps(identity, default=str))
        self.completed: dict[int, Path] = {}
        if final_path.exists() and not force:
            raise OutputError(f"{final_path} already exists (a complete trace); pass --force to overwrite it or --name to write another file")
        if self.partial_dir.exists():
            if resume:
                self._load_partial()
            elif force:
                shutil.rmtree(self.partial_dir)
            else:
                raise OutputError(f"an interrupted run exists at {self.partial_dir}; pass --resume to continue it or --force to start over")
        elif resume:
            raise OutputError(f"nothing to resume: no interrupted run at {self.partial_dir}")
        self.partial_dir.mkdir(parents=True, exist_ok=True)
        self._write_json(self.partial_dir / "config.json", self.identity)

    def _load_partial(self) -> None:
        cfg_path = self.partial_dir / "config.json"
        try:
            saved = json.loads(cfg_path.read_text())
        except (OSError, json.JSONDecodeError):
            raise OutputError(f"cannot resume: {cfg_path} is missing or unreadable; pass --force to start over") from None
        if saved != self.identity:
            diff = sorted(k for k in set(saved) | set(self.identity) if saved.get(k) != self.identity.get(k))
            raise OutputError(f"cannot resume {self.partial_dir}: options differ from the interrupted run ({', '.join(diff)}); pass --force to start over")
        for path in sorted(self.partial_dir.glob("episode-*.rows")):
            self.completed[int(path.stem.split("-")[1])] = path

    @staticmethod
    def _write_json(path: Path, obj: Any) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
        os.replace(tmp, path)

    def is_complete(self, episode_index: int) -> bool:
        return episode_index in self.completed

    def episode_rows(self, episode_index: int) -> pa.Table:
        return pq.read_table(self.completed[episode_index])

    def write_episode(self, episode_index: int, rows: RowBuffer) -> None:
        path = self.partial_dir / f"episode-{episode_index:04d}.rows"
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(rows.table(), tmp)
        os.replace(tmp, path)
        self.completed[episode_index] = path

    def finish(self, meta: dict) -> Path:
        tables = [pq.read_table(self.completed[i]) for i in sorted(self.completed)]
        table = pa.concat_tables(tables).cast(schema.arrow_schema(meta))
        # The simulator's own reader rules: the tracer can never publish a file it rejects.
        schema.validate_table(table, meta, self.final_path)
        tmp = self.final_path.with_name(f"{self.final_path.name}.tmp-{os.getpid()}")
        pq.write_table(table, tmp)
        os.replace(tmp, self.final_path)
        shutil.rmtree(self.partial_dir, ignore_errors=True)
        return self.final_path


#: Metadata that must match for an existing trace to stand in for a fresh run of ``cfg``.
_REUSE_KEYS = ("method", "dataset", "model", "batch_size", "seed", "stream")


def check_reusable(path: Path, cfg) -> dict:
    """Refuse to reuse ``path`` unless it is a valid trace of exactly ``cfg``'s run (method,
    data, model, batch size, seed, stream). Returns its metadata."""
    try:
        table = pq.read_table(path)
        meta = schema.decode_metadata(table.schema, path)
        schema.validate_table(table, meta, path)
    except schema.TraceSchemaError as exc:
        raise OutputError(f"{path} is not a valid trace ({exc.rule}); pass --force to re-measure it") from None
    except (pa.ArrowException, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OutputError(f"{path} is not a readable trace ({first}); pass --force to re-measure it") from None
    wanted = {"method": cfg.method, "dataset": cfg.dataset, "model": cfg.model, "batch_size": cfg.batch_size,
              "seed": cfg.seed, "stream": cfg.stream}
    differ = [f"{k} {meta.get(k)!r} ≠ {wanted[k]!r}" for k in _REUSE_KEYS if meta.get(k) != wanted[k]]
    if differ:
        raise OutputError(f"{path} is not the trace this run would write ({'; '.join(differ)}); "
                          "pass --force to re-measure it or --name/--out to write elsewhere")
    return meta
