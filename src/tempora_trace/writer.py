"""Trace files: per-episode rows kept on disk while running, one atomic Parquet at the end.

Layout while a run is in progress (nothing here ends in ``.parquet``, so ``tempora-sim``
never picks up half a run)::

    <dir>/<stem>.partial/config.json        the run's identity (resume refuses a mismatch)
    <dir>/<stem>.partial/episode-0000.rows  Parquet rows of each completed episode, its
                                            machine-speed probes in the file's metadata

When the last episode lands, all rows are written to a temporary name, fsynced and renamed to
``<stem>.parquet`` (``os.replace`` is atomic), then the partial folder is removed. The whole run
holds ``<dir>/.<stem>.parquet.lock`` (with its PID), so a second run on the same output is refused.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import tempora_schema as schema
from tempora_schema.errors import output_error
from tempora_toolkit.atomic_files import check_output_dir, output_lock, to_bytes, write_file

from .errors import OutputError


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove ``folders`` (innermost first) while they are empty: what a run made and never used."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


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
    """Owns one run's output path: locks it against a second run, refuses silent overwrites,
    keeps completed episodes for ``--resume``, and publishes the finished trace atomically.

    Every write goes through :func:`tempora_toolkit.atomic_files.write_file` (temporary name, fsync,
    rename), so a crash or a full disk leaves complete episodes or nothing, and every
    ``OSError`` becomes a one-line :class:`OutputError` naming the path. Call :meth:`close`
    when the run ends, however it ends (the lock is released)."""

    def __init__(self, final_path: Path, identity: dict, resume: bool, force: bool, option: str = "--out"):
        self.final_path = final_path
        self.partial_dir = final_path.with_name(final_path.name[: -len(".parquet")] + ".partial")
        self.identity = json.loads(json.dumps(identity, default=str))
        self.completed: dict[int, Path] = {}
        self._lock = None
        check_output_dir(final_path.parent, option)  # `option`: the flag that named the folder, in messages
        if resume and not self.partial_dir.exists():
            raise OutputError(f"nothing to resume: no interrupted run at {self.partial_dir}")
        missing = [p for p in (final_path.parent, *final_path.parent.parents) if not p.exists()]
        #: folders this writer made for its output, innermost first (:meth:`discard` removes them)
        self.made_folders = missing
        try:
            final_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise output_error(exc, final_path.parent) from None
        try:
            # Held until close(): a second run on the same output is refused with the holder's
            # PID before it can look at (let alone delete) this run's partial folder.
            self._lock = output_lock(final_path, "trace")
            self._lock.__enter__()
            self._claim(resume, force)
        except BaseException:
            self.close()
            remove_empty_folders(missing)  # folders this run made for an output it never wrote
            raise

    def _claim(self, resume: bool, force: bool) -> None:
        final_path = self.final_path
        try:
            if final_path.exists() and not force:
                raise OutputError(
                    f"{final_path} already exists (a complete trace); pass --force to overwrite it or --name to write another file"
                )
            if self.partial_dir.exists():
                if resume:
                    self._load_partial()
                elif force:
                    shutil.rmtree(self.partial_dir)
                else:
                    raise OutputError(
                        f"an interrupted run exists at {self.partial_dir}; pass --resume to continue it or --force to start over"
                    )
            elif resume:
                raise OutputError(f"nothing to resume: no interrupted run at {self.partial_dir}")
            created = not self.partial_dir.exists()
            self.partial_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise output_error(exc, self.partial_dir) from None
        try:
            self._write_json(self.partial_dir / "config.json", self.identity)
        except OutputError:
            if created:  # nothing of this run may stay behind when it could not even start
                shutil.rmtree(self.partial_dir, ignore_errors=True)
            raise

    def discard(self) -> None:
        """Remove this run's partial folder (its completed episodes) and release the lock: for a
        run that can never be resumed (a trace taken alongside a live run), so an interrupted
        one leaves nothing behind. Only a writer that holds the lock removes anything."""
        if self._lock is None:
            return
        shutil.rmtree(self.partial_dir, ignore_errors=True)
        self.close()
        remove_empty_folders(self.made_folders)

    def close(self) -> None:
        """Release the output lock (idempotent)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.__exit__(None, None, None)

    def _load_partial(self) -> None:
        cfg_path = self.partial_dir / "config.json"
        try:
            saved = json.loads(cfg_path.read_text())
        except (OSError, ValueError, RecursionError):
            raise OutputError(f"cannot resume: {cfg_path} is missing or unreadable; pass --force to start over") from None
        if saved != self.identity:
            keys = set(saved) | set(self.identity) if isinstance(saved, dict) else set(self.identity)
            diff = sorted(k for k in keys if not isinstance(saved, dict) or saved.get(k) != self.identity.get(k))
            raise OutputError(
                f"cannot resume {self.partial_dir}: options differ from the interrupted run ({', '.join(diff)}); pass --force to start over"
            )
        for path in sorted(self.partial_dir.glob("episode-*.rows")):
            try:
                index = int(path.stem.split("-")[1])
            except (ValueError, IndexError):
                continue
            try:
                pq.read_metadata(path)  # a damaged file (e.g. truncated by a full disk) is run again
            except (pa.ArrowException, OSError, ValueError):
                warnings.warn(f"{path} is damaged (not a complete Parquet file); its episode is traced again", stacklevel=2)
                try:
                    path.unlink()
                except OSError as exc:
                    raise output_error(exc, path, "cannot remove") from None
                continue
            self.completed[index] = path

    @staticmethod
    def _write_json(path: Path, obj: Any) -> None:
        write_file(path, json.dumps(obj, indent=1, sort_keys=True, allow_nan=False).encode("utf-8"))

    def is_complete(self, episode_index: int) -> bool:
        return episode_index in self.completed

    def episode_rows(self, episode_index: int) -> pa.Table:
        return pq.read_table(self.completed[episode_index])

    def episode_probes(self, episode_index: int) -> list[dict]:
        """The speed-probe records saved with a completed episode ([] if none were)."""
        meta = pq.read_schema(self.completed[episode_index]).metadata or {}
        try:
            return json.loads(meta.get(_PROBE_KEY, b"[]"))
        except json.JSONDecodeError:
            return []

    def write_episode(self, episode_index: int, rows: RowBuffer, probes: list[dict] | None = None) -> None:
        """The episode's rows, with its speed probes (docs/design/timing.md) in the same file, so an
        episode is complete — rows and probes — exactly when its one file landed."""
        path = self.partial_dir / f"episode-{episode_index:04d}.rows"
        table = rows.table()
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), _PROBE_KEY: json.dumps(list(probes or []), allow_nan=False).encode("utf-8")}
        )
        write_file(path, to_bytes(lambda f: pq.write_table(table, f)))
        self.completed[episode_index] = path

    def finish(self, meta: dict) -> Path:
        tables = [pq.read_table(self.completed[i]) for i in sorted(self.completed)]
        table = pa.concat_tables(tables).cast(schema.arrow_schema(meta))
        # The simulator's own reader rules: the tracer can never publish a file it rejects.
        schema.validate_table(table, meta, self.final_path)
        write_file(self.final_path, to_bytes(lambda f: pq.write_table(table, f)))
        shutil.rmtree(self.partial_dir, ignore_errors=True)
        self.close()
        return self.final_path


#: Parquet metadata key of an episode file's speed-probe records (dropped from the final trace,
#: whose metadata carries all of them under ``speed_probe``).
_PROBE_KEY = b"tempora_speed_probe"

#: Metadata that must match for an existing trace to stand in for a fresh run of ``cfg``.
_REUSE_KEYS = ("method", "dataset", "model", "batch_size", "seed", "stream", "severity", "domains", "max_batches", "threads")


def identity_differences(meta: dict, cfg, params: bool = False) -> list[str]:
    """Where a trace's metadata ``meta`` differs from what ``cfg``'s run would write, one
    ``key found ≠ wanted`` item each: method, data, model, batch size, seed, stream, severity,
    domains, batch limit, threads; with ``params`` also the frozen-evaluation sample and every
    method parameter ``cfg`` sets."""
    wanted = {
        "method": cfg.method,
        "dataset": cfg.dataset_label(),
        "model": cfg.model_label(),
        "batch_size": cfg.batch_size,
        "seed": cfg.seed,
        "stream": cfg.stream,
        "severity": cfg._severity(),
        "domains": list(cfg.domains or ()),
        "max_batches": cfg.max_batches,
        "threads": cfg.threads,
    }
    differ = [f"{k} {meta.get(k)!r} ≠ {wanted[k]!r}" for k in _REUSE_KEYS if meta.get(k) != wanted[k]]
    if params:
        frozen = "all" if cfg.frozen_sample is None else int(cfg.frozen_sample)
        if meta.get("frozen_eval") != frozen:
            differ.append(f"frozen_eval {meta.get('frozen_eval')!r} ≠ {frozen!r}")
        found = meta.get("method_params") if isinstance(meta.get("method_params"), dict) else {}
        differ += [f"param {k} {found.get(k)!r} ≠ {v!r}" for k, v in sorted(cfg.method_params.items()) if found.get(k) != v]
    return differ


def check_reusable(path: Path, cfg) -> dict:
    """Refuse to reuse ``path`` unless it is a valid trace of exactly ``cfg``'s run (method,
    data, model, batch size, seed, stream, severity, domains, batch limit, threads; weights and
    device are fixed by the folder). Returns its metadata."""
    try:
        table = pq.read_table(path)
        meta = schema.decode_metadata(table.schema, path)
        schema.validate_table(table, meta, path)
    except schema.TraceSchemaError as exc:
        raise OutputError(f"{path} is not a valid trace ({exc.rule}); pass --force to re-measure it") from None
    except (pa.ArrowException, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OutputError(f"{path} is not a readable trace ({first}); pass --force to re-measure it") from None
    differ = identity_differences(meta, cfg)
    if differ:
        raise OutputError(
            f"{path} is not the trace this run would write ({'; '.join(differ)}); "
            "pass --force to re-measure it or --name/--out to write elsewhere"
        )
    return meta
