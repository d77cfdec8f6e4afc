"""The reader's rules: a trace's metadata (version, keys, their types, the method source,
the speed probe), its rows (the layout of episodes, phases and checkpoints) and the two
checked against each other; schema-v1 metadata read as v2. Part of :mod:`tempora_schema`,
which re-exports every public name here."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from tempora_schema.columns import (
    COLUMN_KINDS,
    COLUMN_TYPES,
    COLUMNS,
    MAX_LABEL_CHARS,
    METADATA_FIELDS,
    METADATA_FIELDS_V1,
    METHOD_SOURCE_KEY,
    METHOD_SOURCE_KINDS,
    MIXED_DOMAIN,
    NO_CHECKPOINT,
    NULLABLE_COLUMNS,
    PHASE_ADAPT,
    PHASES,
    PROBE_NOT_MEASURED,
    READABLE_VERSIONS,
    TRACE_STREAMS,
    gradual_severities,
    is_stream,
    resets_per_episode,
    stream_base,
)
from tempora_schema.errors import TraceSchemaError
from tempora_schema.identity import WEIGHTS_RANDOM, WEIGHTS_UNKNOWN
from tempora_schema.policies import parse_policy, validate_policy_metadata
from tempora_schema.prediction import check_kind_rows, validate_kind
from tempora_schema.variability import VARIABILITY_KEY, check_variability_rows, validate_variability

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: A weights file's identity in the metadata (``weights``).
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


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


#: A change of the machine's speed inside one trace worth naming: the median of three
#: successive speed probes moving by more than this over the trace.
PROBE_DRIFT_LIMIT = 0.10


@dataclass(frozen=True)
class ProbeDrift:
    """How far the machine's speed moved inside one trace, by its own speed probes."""

    #: slowest / fastest − 1 of the medians of three successive probes
    change: float
    fast_ms: float
    slow_ms: float

    @property
    def moved(self) -> bool:
        return self.change > PROBE_DRIFT_LIMIT


def probe_drift(meta: Mapping[str, Any]) -> ProbeDrift | None:
    """The machine's sustained speed change inside one trace: the medians of three successive
    speed probes (in the order they ran), slowest over fastest − 1, so one slow probe does not
    count and a machine that changed speed halfway does. A trace's median probe, which every
    comparison between traces uses, hides such a change. ``None`` below three probes."""
    ms = [float(p["ms"]) for p in meta.get("speed_probe") or []]
    if len(ms) < 3:
        return None
    runs = [float(np.median(ms[i : i + 3])) for i in range(len(ms) - 2)]
    fast, slow = min(runs), max(runs)
    return ProbeDrift(slow / fast - 1.0, fast, slow)


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
