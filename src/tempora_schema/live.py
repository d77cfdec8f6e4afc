"""Live-run schema v1: what ``tempora-trace live`` writes and ``tempora-sim validate`` reads.

A live run plays a method against a real clock under one protocol setting (discrete: an
arrival every γ ms into a queue of b; amortised: an overhead budget B). One file holds every
run of one invocation (several ρ or B values, repeats); the Parquet key-value metadata key
``tempora_live`` holds the JSON metadata, with one entry per run in ``runs``. Like the trace
schema it is torch-free and the writer checks its own output with the reader's rules.

One row per batch of every (run, episode), served or not:

=================  =========  ==========================================================
column             type       meaning
=================  =========  ==========================================================
run                int32      index into metadata ``runs``
episode, domain    str        as in traces
severity           int8 null  corruption severity where one applies
step               int32      0-based batch index i in the episode (arrives at i·γ)
n                  int32      samples in the batch
served             bool       the pipeline predicted this batch (else skipped: evicted,
                              dropped or never picked up)
event              int32      j: 0-based index of the event that served it; −1 if skipped
mode               str        ``adapt`` | ``frozen`` (amortised after the cut-off) | ``skipped``
correct            int32 null correct predictions; null when skipped
arrival_ms         float null i·γ, the scheduled arrival (discrete; null for amortised)
pickup_ms          float null when the pipeline took the batch (the clock reading the
                              decision was made on; after a wait, the wake-up)
predict_ms         float null prediction emitted
free_ms            float null pipeline ready for the next batch (the next decision's reading)
e_ms, l_ms,        float null the tracer's own split of the event (same clock, same syncs)
delta_ms
charged_ms         float null amortised: overhead c = max(0, δ − λ) charged at this batch
spent_ms           float null amortised: overhead spent after this batch
peak_mem_bytes     int64 null null: not read live (it would hold the pipeline)
=================  =========  ==========================================================

Times are ms since the episode's start ``t0`` on the episode clock (monotonic; staging
pauses between chunks are excluded, see ``docs/guide/validation.md``).

Optional, in files that have them: each run's ``speed_probe_ms``, the machine-speed probe
timed before each of its episodes (outside every timed region), and ``speed_probe_kind``, the
probe's computation, which a trace's probe must share to be compared with it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from tempora_schema import METADATA_FIELDS, STREAMS, GroupKey, TraceSchemaError, _arrow_kind_ok, _is_int
from tempora_schema.policies import validate_policy_metadata
from tempora_schema.vocabulary import BUDGET_RULES, LIVE_PROTOCOLS

LIVE_SCHEMA_VERSION = 1
#: Parquet key-value metadata key of a live run (a trace uses ``tempora``).
LIVE_METADATA_KEY = "tempora_live"

MODES = ("adapt", "frozen", "skipped")

LIVE_COLUMNS: dict[str, pa.DataType] = {
    "run": pa.int32(),
    "episode": pa.string(),
    "domain": pa.string(),
    "severity": pa.int8(),
    "step": pa.int32(),
    "n": pa.int32(),
    "served": pa.bool_(),
    "event": pa.int32(),
    "mode": pa.string(),
    "correct": pa.int32(),
    "arrival_ms": pa.float64(),
    "pickup_ms": pa.float64(),
    "predict_ms": pa.float64(),
    "free_ms": pa.float64(),
    "e_ms": pa.float64(),
    "l_ms": pa.float64(),
    "delta_ms": pa.float64(),
    "charged_ms": pa.float64(),
    "spent_ms": pa.float64(),
    "peak_mem_bytes": pa.int64(),
}
#: Always populated; every other column may be null where the row's kind says so.
REQUIRED_COLUMNS = frozenset({"run", "episode", "domain", "step", "n", "served", "event", "mode"})
_SERVED_COLUMNS = ("correct", "pickup_ms", "predict_ms", "free_ms", "e_ms", "l_ms", "delta_ms")
_TIME_COLUMNS = ("arrival_ms", "pickup_ms", "predict_ms", "free_ms", "e_ms", "l_ms", "delta_ms", "charged_ms", "spent_ms")
#: Run metadata shared with traces (same meaning), minus what only a trace records.
SHARED_FIELDS = tuple(k for k in METADATA_FIELDS if k not in ("schema_version", "frozen_eval", "speed_probe", "speed_probe_kind"))
LIVE_METADATA_FIELDS = (
    "live_schema_version",
    *SHARED_FIELDS,
    "lambda_ms",
    "lambda_source",
    "clock",
    "clock_resolution_ns",
    "spin_us",
    "runs",
)
RUN_FIELDS = {
    "discrete": ("run", "protocol", "repeat", "rho", "gamma_ms", "queue"),
    "amortised": ("run", "protocol", "repeat", "budget_ms", "budget_rule"),
}
#: Slack for "this time is not before that one": rounding of ns → ms differences.
_EPS_MS = 1e-6


def comparable_group(key: GroupKey) -> GroupKey:
    """The part of a group a live run and the trace replayed beside it must share: everything
    but which domains and how many batches, because the trace is cut to the live run's
    episodes and first N batches (an episode's batch order depends only on seed and domain)."""
    return dataclasses.replace(key, domains=(), max_batches=None)


class LiveSchemaError(TraceSchemaError):
    """A live-run file breaks live schema v1; the message names the file and the rule."""


def live_arrow_schema(metadata: Mapping[str, Any] | None = None) -> pa.Schema:
    fields = [pa.field(name, typ, nullable=name not in REQUIRED_COLUMNS) for name, typ in LIVE_COLUMNS.items()]
    md = {LIVE_METADATA_KEY: json.dumps(dict(metadata), sort_keys=True, default=str)} if metadata is not None else None
    return pa.schema(fields, metadata=md)


def decode_live_metadata(schema: pa.Schema, path: object = "<live run>") -> dict[str, Any]:
    md = schema.metadata or {}
    raw = md.get(LIVE_METADATA_KEY.encode())
    if raw is None:
        hint = " (it is a trace: pass it with --traces)" if b"tempora" in md else ""
        raise LiveSchemaError(path, f"missing Parquet metadata key '{LIVE_METADATA_KEY}' (not a Tempora live run){hint}")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise LiveSchemaError(path, f"metadata '{LIVE_METADATA_KEY}' is not valid JSON ({exc.msg})") from None
    if not isinstance(meta, dict):
        raise LiveSchemaError(path, f"metadata '{LIVE_METADATA_KEY}' must be a JSON object")
    return meta


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) and x > 0


def validate_live_metadata(meta: Mapping[str, Any], path: object = "<live run>") -> None:
    version = meta.get("live_schema_version")
    if version is None:
        raise LiveSchemaError(path, "metadata lacks 'live_schema_version'")
    if version != LIVE_SCHEMA_VERSION or isinstance(version, bool):
        raise LiveSchemaError(path, f"unknown live schema version {version!r} (this reader understands {LIVE_SCHEMA_VERSION})")
    missing = [k for k in LIVE_METADATA_FIELDS if k not in meta]
    if missing:
        raise LiveSchemaError(path, f"metadata lacks required key(s): {', '.join(missing)}")
    for key in ("method", "model", "dataset", "device"):
        if not isinstance(meta[key], str) or not meta[key]:
            raise LiveSchemaError(path, f"metadata '{key}' must be a non-empty string, got {meta[key]!r}")
    for key in ("batch_size", "num_classes"):
        if not _is_int(meta[key]) or meta[key] < 1:
            raise LiveSchemaError(path, f"metadata '{key}' must be a positive integer, got {meta[key]!r}")
    if not _is_int(meta["seed"]) or meta["seed"] < 0:
        raise LiveSchemaError(path, f"metadata 'seed' must be a non-negative integer, got {meta['seed']!r}")
    if meta["stream"] not in STREAMS:
        raise LiveSchemaError(path, f"metadata 'stream' must be one of {', '.join(STREAMS)}, got {meta['stream']!r}")
    if not _positive(meta["lambda_ms"]):
        raise LiveSchemaError(path, f"metadata 'lambda_ms' must be > 0, got {meta['lambda_ms']!r}")
    try:
        validate_policy_metadata(meta.get("policy"))
    except ValueError as exc:
        raise LiveSchemaError(path, str(exc)) from None
    runs = meta["runs"]
    if not isinstance(runs, list) or not runs:
        raise LiveSchemaError(path, "metadata 'runs' must be a non-empty list")
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise LiveSchemaError(path, f"run {i}: must be a JSON object")
        proto = run.get("protocol")
        if proto not in LIVE_PROTOCOLS:
            raise LiveSchemaError(path, f"run {i}: protocol must be one of {', '.join(LIVE_PROTOCOLS)}, got {proto!r}")
        lacking = [k for k in RUN_FIELDS[proto] if k not in run]
        if lacking:
            raise LiveSchemaError(path, f"run {i}: lacks {', '.join(lacking)}")
        if run["run"] != i:
            raise LiveSchemaError(path, f"run {i}: 'run' must equal its position, got {run['run']!r}")
        probes = run.get("speed_probe_ms")
        if probes is not None:
            if not isinstance(probes, list) or not all(_positive(x) for x in probes):
                raise LiveSchemaError(path, f"run {i}: speed_probe_ms must be a list of times > 0, got {probes!r}")
            if probes and not (isinstance(meta.get("speed_probe_kind"), str) and meta["speed_probe_kind"]):
                raise LiveSchemaError(path, f"run {i}: speed_probe_ms needs the metadata 'speed_probe_kind' that says what was timed")
        if proto == "discrete":
            if not _positive(run["gamma_ms"]) or not _positive(run["rho"]):
                raise LiveSchemaError(path, f"run {i}: rho and gamma_ms must be > 0")
            if not _is_int(run["queue"]) or run["queue"] < 0:
                raise LiveSchemaError(path, f"run {i}: queue must be an integer >= 0, got {run['queue']!r}")
        else:
            b = run["budget_ms"]
            if not isinstance(b, (int, float)) or isinstance(b, bool) or not np.isfinite(b) or b < 0:
                raise LiveSchemaError(path, f"run {i}: budget_ms must be >= 0, got {b!r}")
            if run["budget_rule"] not in BUDGET_RULES:
                raise LiveSchemaError(path, f"run {i}: budget_rule must be strict or overshoot, got {run['budget_rule']!r}")


def _close(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    """Equal up to float rounding (ms values, relative 1e-9, absolute 1 ns)."""
    return np.abs(np.asarray(a) - np.asarray(b)) <= _EPS_MS + 1e-9 * np.abs(np.asarray(b))


def _check_runs_match_rows(meta: Mapping[str, Any], run: np.ndarray, step: np.ndarray, times: dict, served, mode, path: object) -> None:
    """The run metadata must say what the rows did: a discrete run's ρ·γ = λ and its batch i
    arrived at i·γ; an amortised run charged c = max(0, δ − λ) at each adapting batch."""
    lam = float(meta["lambda_ms"])
    for r, spec in enumerate(meta["runs"]):
        rows = run == r
        if spec["protocol"] == "discrete":
            if not _close(float(spec["rho"]) * float(spec["gamma_ms"]), lam):
                raise LiveSchemaError(
                    path, f"run {r}: rho {spec['rho']!r} × gamma_ms {spec['gamma_ms']!r} is not lambda_ms {lam!r} (ρ = λ/γ)"
                )
            arrival = times["arrival_ms"][rows]
            bad = ~np.isnan(arrival) & ~_close(arrival, step[rows] * float(spec["gamma_ms"]))
            if bad.any():
                raise LiveSchemaError(path, f"run {r}: arrival_ms contradicts gamma_ms {spec['gamma_ms']!r} (batch i arrives at i·γ)")
        else:
            adapting = rows & served & (mode == "adapt") & ~np.isnan(times["charged_ms"])
            expected = np.maximum(0.0, times["delta_ms"][adapting] - lam)
            if not _close(times["charged_ms"][adapting], expected).all():
                raise LiveSchemaError(path, f"run {r}: charged_ms contradicts lambda_ms {lam!r} (c = max(0, δ − λ))")


def _kind_of(typ: pa.DataType) -> str:
    if pa.types.is_string(typ):
        return "string"
    if pa.types.is_integer(typ):
        return "integer"
    if pa.types.is_floating(typ):
        return "floating"
    return "boolean"


def validate_live_table(table: pa.Table, meta: Mapping[str, Any], path: object = "<live run>") -> None:
    """Raise :class:`LiveSchemaError` unless ``table`` + ``meta`` form a valid v1 live run.

    Rules: known version and complete metadata; every column present with the right kind;
    required columns without nulls; per (run, episode) steps 0..N−1 once each; served rows
    carry ``correct`` and all event times, skipped rows none; ``0 <= correct <= n``; served
    events numbered 0..|Q|−1 in step order (FIFO); times finite and non-negative, each event
    ``arrival <= pickup <= predict <= free`` and the next pickup not before this free.
    """
    validate_live_metadata(meta, path)
    names = set(table.column_names)
    missing = [c for c in LIVE_COLUMNS if c not in names]
    if missing:
        raise LiveSchemaError(path, f"missing column(s): {', '.join(missing)}")
    for name, typ in LIVE_COLUMNS.items():
        actual = table.schema.field(name).type
        if not _arrow_kind_ok(actual, _kind_of(typ)):
            raise LiveSchemaError(path, f"column '{name}' has type {actual}, expected {typ}")
    for name in REQUIRED_COLUMNS:
        if table.column(name).null_count:
            raise LiveSchemaError(path, f"column '{name}' has {table.column(name).null_count} null value(s)")
    if table.num_rows == 0:
        raise LiveSchemaError(path, "live run has no rows")

    col = {name: table.column(name).to_numpy(zero_copy_only=False) for name in ("run", "step", "n", "event")}
    run = col["run"].astype(np.int64)
    if (run < 0).any() or (run >= len(meta["runs"])).any():
        raise LiveSchemaError(path, f"column 'run' refers to a run not in metadata 'runs' ({len(meta['runs'])} run(s))")
    served = np.asarray(table.column("served").to_pylist(), dtype=bool)
    mode = np.asarray(table.column("mode").cast(pa.string()).to_pylist(), dtype=object)
    bad_mode = sorted(set(mode.tolist()) - set(MODES))
    if bad_mode:
        raise LiveSchemaError(path, f"column 'mode' has unknown value(s) {bad_mode} (expected {', '.join(MODES)})")
    if ((mode == "skipped") == served).any():
        row = int(np.argmax((mode == "skipped") == served))
        raise LiveSchemaError(path, f"row {row}: mode '{mode[row]}' contradicts served = {bool(served[row])}")

    def floats(name: str) -> np.ndarray:
        return np.asarray(table.column(name).cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)

    nulls = {name: np.asarray(table.column(name).is_null().to_numpy(zero_copy_only=False), dtype=bool) for name in _SERVED_COLUMNS}
    for name in _SERVED_COLUMNS:
        if (served & nulls[name]).any():
            raise LiveSchemaError(path, f"served row {int(np.argmax(served & nulls[name]))} has no '{name}'")
    if (~served & ~nulls["correct"]).any():
        raise LiveSchemaError(path, f"skipped row {int(np.argmax(~served & ~nulls['correct']))} has a 'correct' count")
    n = col["n"].astype(np.int64)
    if (n < 1).any():
        raise LiveSchemaError(path, f"column 'n' must be >= 1 (row {int(np.argmax(n < 1))})")
    correct = np.nan_to_num(floats("correct"), nan=0.0)
    if (correct < 0).any() or (correct > n).any():
        row = int(np.argmax((correct < 0) | (correct > n)))
        raise LiveSchemaError(path, f"correct must be within 0..n (row {row})")
    times = {name: floats(name) for name in _TIME_COLUMNS}
    for name, t in times.items():
        valued = ~np.asarray(table.column(name).is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if (valued & np.isnan(t)).any():
            raise LiveSchemaError(
                path, f"column '{name}' holds NaN (row {int(np.argmax(valued & np.isnan(t)))}); a time is a number or null"
            )
        finite = t[~np.isnan(t)]
        if not np.isfinite(finite).all():
            raise LiveSchemaError(path, f"column '{name}' contains an infinite time")
        if (finite < 0).any():
            raise LiveSchemaError(path, f"column '{name}' contains a negative time")

    e, ell, delta = times["e_ms"], times["l_ms"], times["delta_ms"]
    off = served & ~(np.abs(delta - (e + ell)) <= _EPS_MS + 1e-9 * np.abs(delta))
    if off.any():
        row = int(np.argmax(off))
        raise LiveSchemaError(path, f"row {row}: delta_ms {delta[row]!r} is not e_ms + l_ms ({e[row]!r} + {ell[row]!r})")
    _check_runs_match_rows(meta, run, col["step"].astype(np.int64), times, served, mode, path)

    episode = np.asarray(table.column("episode").cast(pa.string()).to_pylist(), dtype=object)
    event = col["event"].astype(np.int64)
    step = col["step"].astype(np.int64)
    if (event[~served] != -1).any():
        raise LiveSchemaError(path, "skipped rows must have event = -1")
    order = np.lexsort((step, episode, run))
    keys = list(zip(run[order].tolist(), episode[order].tolist()))
    start = 0
    while start < len(order):
        end = start
        while end < len(order) and keys[end] == keys[start]:
            end += 1
        rows = order[start:end]
        r, ep = keys[start]
        if not np.array_equal(step[rows], np.arange(end - start)):
            raise LiveSchemaError(path, f"run {r}, episode '{ep}': steps must be 0..N-1 once each")
        s = rows[served[rows]]
        if not np.array_equal(event[s], np.arange(s.size)):
            raise LiveSchemaError(path, f"run {r}, episode '{ep}': served events must be numbered 0..|Q|-1 in step order")
        pick, pred, free, arr = (times[k][s] for k in ("pickup_ms", "predict_ms", "free_ms", "arrival_ms"))
        if meta["runs"][r]["protocol"] == "discrete":
            if np.isnan(times["arrival_ms"][rows]).any():
                raise LiveSchemaError(path, f"run {r}, episode '{ep}': discrete rows need arrival_ms")
            if (arr > pick + _EPS_MS).any():
                raise LiveSchemaError(path, f"run {r}, episode '{ep}': a batch was picked up before it arrived")
        if (pick > pred + _EPS_MS).any() or (pred > free + _EPS_MS).any():
            raise LiveSchemaError(path, f"run {r}, episode '{ep}': event times must satisfy pickup <= predict <= free")
        if (pick[1:] < free[:-1] - _EPS_MS).any():
            raise LiveSchemaError(path, f"run {r}, episode '{ep}': an event started before the previous one freed the pipeline")
        start = end
