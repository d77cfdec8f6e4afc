"""Reading, validating and grouping traces (schema v2, v1 with a warning; polars, no torch).

A *group* is what makes traces comparable: the trace identity without the method
(``tempora_schema.GROUP_KEYS``: dataset, model, weights, device, threads, batch size, seed,
stream, severity, domains, max_batches). All traces of a group share one λ, taken from its
``standard`` trace; a group may hold at most one trace per method.

Files are read with polars' native Parquet reader and validated on numpy arrays: pyarrow is
never imported on this path (it costs a third of a warm sweep's start-up). :func:`load_traces`
reads the files on a thread per core, and a file whose exact bytes were validated before is
loaded from the trace cache (:mod:`tempora_sim.sweeps.trace_cache`) instead of being decoded again.
"""

from __future__ import annotations

import errno
import io
import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tempora_schema import (
    COLUMN_KINDS,
    COLUMN_TYPES,
    COLUMNS,
    METADATA_KEY,
    NULLABLE_COLUMNS,
    PHASE_ADAPT,
    PHASE_FROZEN,
    GroupKey,
    RowArrays,
    RowLayout,
    TraceSchemaError,
    check_metadata_matches_rows,
    check_policy_rows,
    lambda_ms,
    method_label,
    parse_metadata,
    probe_median_ms,
    upgrade_v1_metadata,
    v1_warning,
    validate_metadata,
    validate_rows,
)
from tempora_schema.prediction import check_kind_rows, is_profile
from tempora_schema.provision import LAMBDA_RULES, LAMBDA_SIGMAS, inflated_lambda, lambda_provision  # noqa: F401  (re-exported)
from tempora_schema.vocabulary import BASELINE_METHOD as STANDARD_METHOD  # noqa: F401  (re-exported)
from tempora_sim.errors import GridError, GroupError, SimError, SimWarning, TraceFileError
from tempora_sim.sweeps import trace_cache
from tempora_sim.sweeps.trace_cache import cache_dir

#: Name of the non-adaptive baseline whose trace defines λ.
#: Traces of a group whose median speed-probe times differ by more than this are flagged.
SPEED_SPREAD_LIMIT = 0.10


@dataclass
class ReplayArrays:
    """What the replay needs from one trace, as flat arrays (no per-row Python).

    Adapt rows sorted by (episode, step): per-batch accuracy ``a``, times ``e``, ``l``,
    ``delta`` and the batches per episode (``lengths``, episodes in ``episodes`` order). Frozen
    rows sorted by (episode, checkpoint, step): checkpoints per episode (``ck_counts``), their
    values (``ck_values``), rows per checkpoint (``row_counts``), the steps (``f_steps``) and
    the suffix sums of ``correct`` and ``n`` within each checkpoint (``f_suf_correct``,
    ``f_suf_n``). ``adapt_delta`` is δ of the adapt rows in file order (what λ is taken from).
    It is also what the trace cache stores (:mod:`tempora_sim.sweeps.trace_cache`).
    """

    episodes: list[str]
    a: np.ndarray
    e: np.ndarray
    l: np.ndarray
    delta: np.ndarray
    lengths: np.ndarray
    ck_counts: np.ndarray
    ck_values: np.ndarray
    row_counts: np.ndarray
    f_steps: np.ndarray
    f_suf_correct: np.ndarray
    f_suf_n: np.ndarray
    has_frozen: np.ndarray
    adapt_delta: np.ndarray
    #: some adapt row changed the model (``updated``)
    updates_parameters: bool

    @property
    def from_adapt(self) -> bool:
        """No frozen rows and a model that never changed: frozen accuracy is adapt accuracy."""
        return not self.updates_parameters and not bool(self.has_frozen.any())


def _segment_starts(*keys: np.ndarray) -> np.ndarray:
    """Indices where any of the (equal-length) key arrays changes value, starting with 0."""
    size = keys[0].shape[0]
    change = np.zeros(size, bool)
    if size:
        change[0] = True
        for k in keys:
            change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def replay_arrays(arr: RowArrays, canonical: bool, updates_parameters: bool) -> ReplayArrays:
    """One trace's adapt series and frozen tables as flat arrays.

    Rows already in the tracer's order (validation says so: ``canonical``) are taken as they
    are; any other order is sorted once with ``np.lexsort``."""
    code, adapt = arr.episode_code, arr.adapt
    a_idx = np.flatnonzero(adapt)
    f_idx = np.flatnonzero(~adapt)
    adapt_delta = arr.delta_ms[a_idx]
    if not canonical:
        a_idx = a_idx[np.lexsort((arr.step[a_idx], code[a_idx]))]
        f_idx = f_idx[np.lexsort((arr.step[f_idx], arr.checkpoint[f_idx], code[f_idx]))]
    n_ep = len(arr.episode_names)
    a_code = code[a_idx]
    f_code, f_ck, f_step = code[f_idx], arr.checkpoint[f_idx], arr.step[f_idx]
    seg = _segment_starts(f_code, f_ck)  # one segment per (episode, checkpoint)
    seg_end = np.append(seg[1:], f_idx.size).astype(np.int64) if seg.size else seg.astype(np.int64)
    # suffix sums of correct / n within each segment: reverse cumulative sums minus the tail
    corr = arr.correct[f_idx]
    nn = arr.n[f_idx]
    rc = np.cumsum(corr[::-1])[::-1]
    rn = np.cumsum(nn[::-1])[::-1]
    rc_ext, rn_ext = np.r_[rc, 0], np.r_[rn, 0]
    seg_len = seg_end - seg
    tail = np.repeat(seg_end, seg_len)
    return ReplayArrays(
        episodes=list(arr.episode_names),
        a=arr.correct[a_idx] / arr.n[a_idx],
        e=arr.e_ms[a_idx],
        l=arr.l_ms[a_idx],
        delta=arr.delta_ms[a_idx],
        lengths=np.bincount(a_code, minlength=n_ep),
        ck_counts=np.bincount(f_code[seg], minlength=n_ep) if seg.size else np.zeros(n_ep, np.int64),
        ck_values=f_ck[seg],
        row_counts=seg_len,
        f_steps=f_step,
        f_suf_correct=(rc - rc_ext[tail]).astype(np.float64),
        f_suf_n=(rn - rn_ext[tail]).astype(np.float64),
        has_frozen=np.bincount(f_code, minlength=n_ep) > 0 if f_idx.size else np.zeros(n_ep, bool),
        adapt_delta=adapt_delta,
        updates_parameters=bool(updates_parameters),
    )


class Trace:
    """One trace file: its metadata (v2 keys, filled in for v1 files), rows and row arrays.

    ``rows`` (the polars frame) is read from the file on first use when the trace came from
    the trace cache (:mod:`tempora_sim.sweeps.trace_cache`), which holds only what a sweep needs."""

    def __init__(
        self,
        path: Path,
        meta: dict,
        rows: pl.DataFrame | None = None,
        arrays: RowArrays | None = None,
        layout: RowLayout | None = None,
        version: int = 2,
        replay: ReplayArrays | None = None,
    ):
        self.path = Path(path)
        self.meta = meta
        self._rows = rows
        self.arrays = arrays
        self.layout = layout
        #: schema version of the file (1 for a v1 file read with its metadata upgraded in memory)
        self.version = version
        self._replay = replay

    def __repr__(self) -> str:
        return f"Trace(path={str(self.path)!r}, method={self.method!r}, version={self.version})"

    @property
    def rows(self) -> pl.DataFrame:
        if self._rows is None:
            self._rows = self._read_rows_again()
        return self._rows

    def _read_rows_again(self) -> pl.DataFrame:
        """The rows of a trace that came from the trace cache, from its file; a file removed or
        rewritten since it was loaded is a one-line error, never rows that disagree with it."""
        expected = None
        if self._replay is not None:
            expected = int(self._replay.lengths.sum()) + int(self._replay.row_counts.sum())
        try:
            rows = pl.read_parquet(_parquet_source(self.path), parallel="none")
        except BaseException as exc:  # noqa: BLE001 - polars reports corrupt files as panics, too
            raise TraceFileError(
                self.path, f"removed or rewritten while in use: its rows cannot be read again ({_read_failure(exc)})"
            ) from None
        if expected is not None and rows.height != expected:
            raise TraceFileError(self.path, f"rewritten while in use: it had {expected:,} rows, it now has {rows.height:,}")
        return rows

    @property
    def method(self) -> str:
        """The method's name, with ``-paper`` for a paper-profile trace and ``@<policy>`` for a
        trace under a sparse-adaptation policy (tempora_schema.method_label)."""
        return method_label(str(self.meta["method"]), self.meta.get("method_params"), self.meta.get("policy"))

    @cached_property
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
            rows.with_columns(pl.col("episode").replace_strict(order, return_dtype=pl.Int64).alias("_ep")).sort(["_ep", "step"]).drop("_ep")
        )

    @cached_property
    def frozen(self) -> pl.DataFrame:
        """Frozen rows sorted by (episode, checkpoint, step)."""
        return self.rows.filter(pl.col("phase") == PHASE_FROZEN).sort(["episode", "checkpoint", "step"])

    @property
    def episodes(self) -> list[str]:
        return self.adapt["episode"].unique(maintain_order=True).to_list()

    @property
    def adapt_delta(self) -> np.ndarray:
        """δ of the adapt rows (file order): what λ and the latency summaries need."""
        return self.replay_arrays.adapt_delta

    @cached_property
    def updates_parameters(self) -> bool:
        """True if any adapt row changed the model (frozen ≠ source model)."""
        if self._replay is not None:
            return self._replay.updates_parameters
        arr = self._arrays()
        return bool(self.rows["updated"].to_numpy()[arr.adapt].any())

    @property
    def replay_arrays(self) -> ReplayArrays:
        """The trace as the replay reads it (:class:`ReplayArrays`), built once."""
        if self._replay is None:
            canonical = self.layout.canonical if self.layout is not None else False
            self._replay = replay_arrays(self._arrays(), canonical, self.updates_parameters)
        return self._replay

    def _arrays(self) -> RowArrays:
        if self.arrays is None:
            self.arrays = rows_from_polars(self.rows, self.path)
        return self.arrays


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
                    f"(first: {twin.path}); the two have the same identity (method, data, severity, domains, "
                    "weights, device, threads, batch size, seed, stream): keep one"
                )
            members.append(trace)
        return out

    def __len__(self) -> int:
        return len(self.traces)


def _is_hidden(path: Path, root: Path) -> bool:
    """Staging folders and temporary files of an interrupted writer start with a dot."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _check_link(path: Path) -> None:
    """A ``*.parquet`` entry that cannot be followed is refused by name, never skipped."""
    try:
        os.stat(path)
    except FileNotFoundError:
        target = os.readlink(path) if path.is_symlink() else "?"
        raise TraceFileError(path, f"dangling symbolic link (its target {target} does not exist); fix or remove the link") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TraceFileError(path, "symbolic link loop; fix or remove the link") from None
        raise TraceFileError(path, f"cannot read ({exc.strerror or exc})") from None


def find_trace_files(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """Expand files and directories (recursively, ``*.parquet``, hidden entries skipped) into a
    sorted file list. A link among them that leads nowhere is an error, not a silent skip."""
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not items:
        raise SimError("no trace paths given")
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = []
            for p in sorted(path.rglob("*.parquet")):
                if _is_hidden(p, path):
                    continue
                _check_link(p)
                if p.is_file():
                    found.append(p)
            if not found:
                raise TraceFileError(path, "no *.parquet trace files found in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            if path.is_symlink():
                _check_link(path)
            raise TraceFileError(path, "no such file or directory")
    return list(dict.fromkeys(files))


def check_out_outside(
    sources: Iterable[str | os.PathLike], out: str | os.PathLike, what: str = "trace directory", reads: str = "traces"
) -> None:
    """An output folder inside a trace folder would be read as traces by the next sweep: refuse
    it. The trace folder of a file argument is the folder holding it. ``what``/``reads`` name
    other inputs of the kind (``live-run folder``, ``live runs``)."""
    try:
        dest = Path(out).expanduser().resolve()
    except (OSError, RuntimeError):
        return  # an unusable --out is reported by the writer with its reason
    for item in sources:
        src = Path(item)
        try:
            folder = (src if src.is_dir() else src.parent).resolve()
        except (OSError, RuntimeError):
            continue
        if dest == folder or folder in dest.parents:
            raise SimError(
                f"--out {out} is inside the {what} {folder}; its Parquet files would be read as {reads} next time: write it elsewhere"
            )


#: Integer metadata that must fit the simulator's int64 columns.
_INT_FIELDS = ("batch_size", "seed", "num_classes", "warmup_batches")


def _check_metadata_values(meta: dict, path: Path) -> None:
    """Metadata values the sweep turns into columns must be in range, and nothing may be NaN/∞."""
    for key in _INT_FIELDS:
        value = meta.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < 2**63:
            raise TraceFileError(path, f"metadata '{key}' = {value} is outside 0..2^63-1")
    stack = [meta]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise TraceFileError(path, "metadata holds NaN or Infinity (not valid JSON for strict readers)")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _dtype_kind(dtype: pl.DataType) -> str:
    if dtype == pl.String or isinstance(dtype, (pl.Categorical, pl.Enum)):
        return "string"
    if dtype == pl.Boolean:
        return "boolean"
    if dtype.is_integer():
        return "integer"
    if dtype.is_float():
        return "floating"
    return str(dtype)


def _type_name(dtype: pl.DataType) -> str:
    """A polars dtype spelt as Arrow spells it (so messages read the same from either reader)."""
    return {pl.Float64: "double", pl.Float32: "float", pl.Boolean: "bool"}.get(dtype, str(dtype).lower())


def _run_starts(ids: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if ids.size else np.zeros(0, np.int64)


def rows_from_polars(df: pl.DataFrame, path: object = "<trace>") -> RowArrays:
    """Check columns, kinds and nulls of a trace read by polars; return its :class:`RowArrays`.

    Strings are never materialised per row: episodes and phases are numbered by run (rows
    of a trace come in long runs), and only the run starts are looked at as strings.
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise TraceSchemaError(path, f"missing column(s): {', '.join(missing)}")
    for name in COLUMNS:
        dtype = df.schema[name]
        if _dtype_kind(dtype) != COLUMN_KINDS[name]:
            raise TraceSchemaError(path, f"column '{name}' has type {_type_name(dtype)}, expected {COLUMN_TYPES[name]}")
    for name in COLUMNS:
        nulls = df[name].null_count()
        if nulls and name not in NULLABLE_COLUMNS:
            raise TraceSchemaError(path, f"column '{name}' has {nulls} null value(s)")
    runs = df.select(pl.col("episode").rle_id().alias("ep"), pl.col("phase").rle_id().alias("ph"))
    ep_run = runs["ep"].to_numpy()
    ep_starts = _run_starts(ep_run)
    run_names = df["episode"].cast(pl.String).gather(ep_starts)
    names = run_names.unique(maintain_order=True)
    run_code = run_names.replace_strict(names, pl.int_range(names.len(), eager=True), return_dtype=pl.Int64).to_numpy()
    ph_starts = _run_starts(runs["ph"].to_numpy())
    phase_values = df["phase"].cast(pl.String).gather(ph_starts).unique().to_list()

    def num(name, dtype):
        # integers keep their file width (int32): comparisons need no int64 copies
        arr = df[name].to_numpy()
        return arr if arr.dtype.kind == dtype else arr.astype(np.int64 if dtype == "i" else np.float64)

    return RowArrays(
        episode_names=names.to_list(),
        episode_code=run_code[ep_run] if ep_run.size else np.zeros(0, np.int64),
        phase_values=[str(v) for v in phase_values],
        adapt=(df["phase"].cast(pl.String) == PHASE_ADAPT).to_numpy(),
        checkpoint=num("checkpoint", "i"),
        step=num("step", "i"),
        n=num("n", "i"),
        correct=num("correct", "i"),
        e_ms=num("e_ms", "f"),
        l_ms=num("l_ms", "f"),
        delta_ms=num("delta_ms", "f"),
    )


def _distinct_in_order(series: pl.Series) -> list:
    starts = _run_starts(series.rle_id().to_numpy())
    return series.gather(starts).unique(maintain_order=True).to_list()


def _panic(exc: BaseException) -> bool:
    return type(exc).__name__ == "PanicException"


def _read_failure(exc: BaseException) -> str:
    """The first line of why a file could not be read (at most 200 characters); anything
    that is neither an error nor one of polars' panics (Ctrl-C, exit) is raised again."""
    if not isinstance(exc, Exception) and not _panic(exc):
        raise exc
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


#: pyarrow 16 added string views; older releases (the floor is 14) have no such type to check
_is_string_view = getattr(pa.types, "is_string_view", lambda _type: False)


def check_text_columns(table: pa.Table) -> None:
    """Raise (pyarrow's ArrowInvalid) where a text column holds bytes that are not UTF-8: pyarrow
    reads a damaged page's bytes as they are, and polars panics on them later, mid-computation."""
    for column in table.itercolumns():
        kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind) or _is_string_view(kind):
            column.validate(full=True)


def _parquet_source(path: Path):
    """What polars opens: the path, or the file's bytes when its name is not UTF-8 (polars
    cannot open such a file by name)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return io.BytesIO(path.read_bytes())
    return path


def read_trace(path: str | os.PathLike) -> Trace:
    """Read and validate one trace file; any problem becomes a one-line TraceFileError.

    A v1 file is accepted with its metadata upgraded in memory (:func:`tempora_schema.
    upgrade_v1_metadata`); the returned trace has ``version == 1`` so callers can warn.
    """
    path = Path(path)
    try:
        # pyarrow decodes and checks every page and raises on damage; polars' own reader can
        # abort the whole process on some damaged files, so it only receives decoded columns
        parquet = pq.ParquetFile(_parquet_source(path))
        kv = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (parquet.schema_arrow.metadata or {}).items()}
        table = parquet.read(use_threads=False)  # per-file thread pools cost more than they save here
        check_text_columns(table)
        df = pl.from_arrow(table)
    except BaseException as exc:  # noqa: BLE001 - polars reports some failures as panics, too
        raise TraceFileError(path, f"not a readable Parquet file ({_read_failure(exc)})") from None
    try:
        meta = parse_metadata(kv.get(METADATA_KEY), path)
    except TraceSchemaError as exc:
        raise TraceFileError.from_schema_error(exc) from None
    except RecursionError:
        raise TraceFileError(path, "metadata is nested too deeply to be a Tempora trace") from None
    return trace_from_frame(path, meta, df)


def trace_from_frame(path: str | os.PathLike, meta: dict, df: pl.DataFrame) -> Trace:
    """A :class:`Trace` of rows and metadata held in memory (a predicted trace before it is
    written), validated exactly as :func:`read_trace` validates a file."""
    path = Path(path)
    try:
        _check_metadata_values(meta, path)
        version = validate_metadata(meta, path)
        arrays = rows_from_polars(df, path)
        layout = validate_rows(arrays, path)
        domains = _distinct_in_order(df["domain"].cast(pl.String))
        severities = _distinct_in_order(df["severity"])
        if version == 1:
            meta = upgrade_v1_metadata(meta, severities, domains)
        else:
            check_metadata_matches_rows(meta, arrays.episode_names, layout.adapt_counts, domains, severities, path)
            check_policy_rows(meta, arrays, path)
            check_kind_rows(meta, layout.adapt_counts, bool((~arrays.adapt).any()), path)
    except TraceSchemaError as exc:
        raise TraceFileError.from_schema_error(exc) from None
    except RecursionError:
        raise TraceFileError(path, "metadata is nested too deeply to be a Tempora trace") from None
    return Trace(path, meta, df, arrays, layout, version)


def _read_cached(path: Path, folder: Path | None) -> Trace:
    """:func:`read_trace` through the trace cache (:mod:`tempora_sim.sweeps.trace_cache`): an entry
    for these exact bytes (and this reader) is loaded instead of decoding and validating the
    file again; after a miss, the validated trace is stored. Without ``folder``, or whenever the
    cache cannot help, the file is read as :func:`read_trace` reads it (same errors)."""
    if folder is None:
        return read_trace(path)
    try:
        digest, before = trace_cache.file_digest(path)
        entry = trace_cache.entry_path(folder, digest)
    except OSError:
        return read_trace(path)  # reports the file's problem in its own words
    hit = trace_cache.load(entry, before.st_size)
    if hit is not None:
        meta, version, canonical, fields = hit
        replay = ReplayArrays(**fields)
        return Trace(path, meta, None, None, RowLayout(canonical, replay.lengths), version, replay)
    trace = read_trace(path)
    try:
        after = os.stat(path)
    except OSError:
        return trace
    if (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino):
        canonical = trace.layout.canonical if trace.layout is not None else False
        trace_cache.store(entry, trace_cache.encode(trace.meta, trace.version, canonical, trace.replay_arrays))
    return trace


def _read_all(files: list[Path], folder: Path | None) -> list[Trace]:
    """Read files on a thread per core (polars, numpy and hashlib release the GIL); the first
    failing file in list order is the error, as if they had been read one after another."""
    workers = min(len(files), os.cpu_count() or 1)
    if workers < 2:
        return [_read_cached(p, folder) for p in files]
    with ThreadPoolExecutor(workers, thread_name_prefix="tempora-read") as pool:
        futures = [pool.submit(_read_cached, p, folder) for p in files]
        return [f.result() for f in futures]


def load_traces(
    path_or_paths: str | os.PathLike | Iterable[str | os.PathLike], cache: str | os.PathLike | bool | None = None, profiles: bool = False
) -> TraceSet:
    """Load every trace under the given file(s)/directory(ies) into a validated TraceSet.

    ``cache``: the trace cache folder (:mod:`tempora_sim.sweeps.trace_cache`), ``False`` to read every
    file afresh, ``None`` for ``$TEMPORA_TRACE_CACHE`` or the default folder. Schema-v1 files
    are read with one :class:`SimWarning` line for the whole call. A profile
    (``tempora-trace profile``) among traces is refused by name; ``profiles=True`` loads
    profiles instead and refuses a trace among them."""
    if not isinstance(path_or_paths, (str, os.PathLike)):
        path_or_paths = list(path_or_paths)
    files = find_trace_files(path_or_paths)
    traces = TraceSet(_read_all(files, cache_dir(cache)))
    for t in traces.traces:
        if is_profile(t.meta) != profiles:
            if profiles:
                raise TraceFileError(t.path, "a trace, not a profile (profiles are written by `tempora-trace profile`)")
            raise TraceFileError(
                t.path, "a profile (`tempora-trace profile`), not a trace: give its folder to `tempora-sim predict --profiles`"
            )
    old = [t.path for t in traces.traces if t.version == 1]
    if len(old) == 1:
        warnings.warn(v1_warning(old[0]), SimWarning, stacklevel=2)
    elif old:
        shown = ", ".join(str(p) for p in old[:3]) + (", …" if len(old) > 3 else "")
        warnings.warn(v1_warning(f"{len(old)} files ({shown})").replace("schema v1 trace:", "schema v1 traces:"), SimWarning, stacklevel=2)
    traces.groups()  # reject duplicate identities early, at load time
    return traces


def lambda_from_standard(trace: Trace, rule: str = "paper") -> float:
    """λ of a ``standard`` trace's adapt-row δ under ``rule`` (:func:`tempora_schema.lambda_ms`)."""
    return lambda_ms(trace.adapt_delta, rule)


def check_lambda_rule(rule: str) -> str:
    if rule not in LAMBDA_RULES:
        raise GridError(f"--lambda-rule: '{rule}' is not one of {', '.join(LAMBDA_RULES)}")
    return rule


def group_lambdas(traceset: TraceSet, lambda_ms: float | None = None, rule: str = "paper") -> dict[GroupKey, float]:
    """λ per group: ``lambda_ms`` for all groups if given, else from each group's standard trace."""
    check_lambda_rule(rule)
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
        out[key] = lambda_from_standard(std, rule)
    return out


def group_warnings(traceset: TraceSet, lambdas: dict[GroupKey, float]) -> list[str]:
    """One line per group whose measurements look unfair (docs/reference/trace-schema.md, "Speed probe"):
    traces taken at machine speeds more than 10 % apart (median probe time per trace), or λ
    inflated by a few slow batches of ``standard`` (:func:`tempora_schema.provision.inflated_lambda`)."""
    lines = []
    for key, members in traceset.groups().items():
        problems = []
        probed = [(t.method, t.meta.get("speed_probe_kind"), probe_median_ms(t.meta)) for t in members]
        probed = [p for p in probed if p[2] is not None]
        kinds = sorted({p[1] for p in probed})
        if len(kinds) > 1:
            problems.append(f"speed probes of different kinds ({', '.join(kinds)}) cannot be compared")
        elif len(probed) > 1:
            fast = min(probed, key=lambda p: p[2])
            slow = max(probed, key=lambda p: p[2])
            spread = slow[2] / fast[2] - 1.0
            if spread > SPEED_SPREAD_LIMIT:
                problems.append(
                    f"traces taken at machine speeds {spread:.0%} apart (median probe {fast[0]} {fast[2]:.3g} ms, "
                    f"{slow[0]} {slow[2]:.3g} ms): their δ are not comparable; re-trace on a quiet machine"
                )
        std = next((t for t in members if t.method == STANDARD_METHOD), None)
        lam = lambdas.get(key)
        if std is not None and lam is not None and (inflated := inflated_lambda(lam, std.adapt_delta)) is not None:
            problems.append(
                f"λ = {lam:.3g} ms is {inflated[0]:.1f}× the robust λ of standard ({inflated[1]:.3g} ms, median + 6·1.4826·MAD): "
                "a few slow batches of standard inflate it (consider --lambda-rule robust or re-tracing)"
            )
        if problems:
            lines.append(f"group {key.label()}: " + "; ".join(problems))
    return lines
