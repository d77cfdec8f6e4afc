"""Schema v2: identity and groups, v1 reading, the speed probe and λ warnings, the λ rules,
migration, fast series building, and corrupt input always meeting one clean error."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tempora_schema as schema
from tempora_schema import TraceSchemaError, lambda_ms
from tempora_schema.provision import LAMBDA_ROBUST_LIMIT, inflated_lambda
from tempora_sim.commands.main import main
from tempora_sim.errors import GroupError, SimWarning, TraceFileError
from tempora_sim.sweeps.migrate import migrate_file
from tempora_sim.sweeps.replay import build_series, run_sweep, sweep
from tempora_sim.sweeps.synthetic import make_trace, write_trace
from tempora_sim.sweeps.traces import group_lambdas, group_warnings, load_traces, read_trace

ROOT = Path(__file__).resolve().parents[2]
EPISODES = ("fog", "snow")
SMALL = dict(num_batches=30, episodes=EPISODES, checkpoints=(0, 3, 10), frozen_eval=5)


def _write(path, method, **kw):
    return write_trace(path, method, **{**SMALL, **kw})


def _run(args):
    return CliRunner().invoke(main, args)


# ------------------------------------------------------------------------------ λ rules
def test_robust_lambda_hand_worked():
    d = [10.0, 11.0, 12.0, 13.0, 100.0]
    # median 12; |d - 12| = 2, 1, 0, 1, 88 -> MAD 1; λ = 12 + 6 · 1.4826 · 1
    assert lambda_ms(d, "robust") == pytest.approx(12 + 6 * 1.4826)
    # mean 29.2; population variance (19.2² + 18.2² + 17.2² + 16.2² + 70.8²) / 5 = 1254.16
    assert lambda_ms(d, "paper") == pytest.approx(29.2 + 6 * math.sqrt(1254.16))
    assert lambda_ms(d) == lambda_ms(d, "paper")
    with pytest.raises(ValueError, match="unknown λ rule"):
        lambda_ms(d, "mean")
    with pytest.raises(ValueError):
        lambda_ms([], "robust")


def test_inflated_lambda_flags_a_stall_not_a_wide_spread():
    """One stalled batch moves mean + 6σ far above median + 6·1.4826·MAD; a bell-shaped δ with
    σ/mean 11 % (λ 1.66× the median) keeps the two rules together and is not flagged."""
    d = [10.0, 11.0, 12.0, 13.0, 100.0]
    ratio, robust = inflated_lambda(lambda_ms(d), d)
    assert robust == pytest.approx(12 + 6 * 1.4826) and ratio == pytest.approx(lambda_ms(d) / robust)
    from statistics import NormalDist

    wide = [NormalDist(16.0, 1.76).inv_cdf((i + 0.5) / 400) for i in range(400)]
    assert lambda_ms(wide) > 1.5 * np.median(wide) and inflated_lambda(lambda_ms(wide), wide) is None
    stalled = [11.0 + 0.1 * (i % 5) for i in range(99)] + [30.0]
    assert inflated_lambda(lambda_ms(stalled), stalled)[0] > LAMBDA_ROBUST_LIMIT
    assert inflated_lambda(lambda_ms(stalled, "robust"), stalled) is None


def test_lambda_rule_is_used_and_recorded(tmp_path):
    _write(tmp_path / "standard.parquet", "standard")
    _write(tmp_path / "tent.parquet", "tent")
    traces = load_traces(tmp_path)
    std = next(t for t in traces.traces if t.method == "standard")
    for rule in ("paper", "robust"):
        df = sweep(traces, protocols="discrete", lambda_rule=rule)
        assert df["lambda_rule"].unique().to_list() == [rule]
        assert df["lambda_ms"].unique().to_list() == [pytest.approx(lambda_ms(std.adapt_delta, rule))]
    res = _run(["sweep", str(tmp_path), "--protocol", "offline", "--lambda-rule", "median", "--format", "json"])
    assert res.exit_code == 2 and "Traceback" not in res.output


# ------------------------------------------------------------------------------ identity and groups
@pytest.mark.parametrize("version", [1, 2])
def test_severity_splits_groups_instead_of_duplicate_method(tmp_path, version):
    for sev in (5, 3):
        suffix = "" if sev == 5 else f"-sev{sev}"
        for m in ("standard", "tent"):
            _write(tmp_path / f"{m}{suffix}.parquet", m, severity=sev, schema_version=version)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = load_traces(tmp_path)
    v1_lines = [w for w in caught if issubclass(w.category, SimWarning) and "schema v1" in str(w.message)]
    assert len(v1_lines) == (1 if version == 1 else 0)
    groups = traces.groups()
    assert sorted(k.severity for k in groups) == [3, 5]
    assert all(sorted(t.method for t in members) == ["standard", "tent"] for members in groups.values())
    df = sweep(traces, protocols="offline")
    assert df["group"].n_unique() == 2 and sorted(df["severity"].unique().to_list()) == [3, 5]


@pytest.mark.parametrize(
    "field,value",
    [
        ("threads", 4),
        ("weights", "sha256:" + "ab" * 32),
        ("max_batches", 30),
        ("domains_", None),
    ],
)
def test_every_identity_field_separates_groups(tmp_path, field, value):
    _write(tmp_path / "a" / "standard.parquet", "standard")
    _write(tmp_path / "a" / "tent.parquet", "tent")
    kw = {"episodes": ("fog", "frost")} if field == "domains_" else {field: value}
    _write(tmp_path / "b" / "standard.parquet", "standard", **kw)
    _write(tmp_path / "b" / "tent.parquet", "tent", **kw)
    assert len(load_traces(tmp_path).groups()) == 2


def test_same_identity_twice_is_still_an_error(tmp_path):
    _write(tmp_path / "a" / "tent.parquet", "tent")
    _write(tmp_path / "b" / "tent.parquet", "tent")
    with pytest.raises(GroupError, match="second trace of method 'tent'"):
        load_traces(tmp_path)


def test_identity_round_trips_through_metadata_and_names_files():
    meta, _ = make_trace(
        "tent", severity=3, seed=7, batch_size=32, **{k: v for k, v in SMALL.items() if k != "episodes"}, episodes=EPISODES
    )
    ident = schema.TraceIdentity.from_metadata(meta)
    assert schema.TraceIdentity.from_metadata({**meta, **ident.as_metadata()}) == ident
    assert ident.file_stem() == "tent-bs32-seed7-sev3"
    other = schema.TraceIdentity.from_metadata({**meta, "threads": 2, "weights": "random"})
    assert ident.differences(other) == ["threads"]
    assert "sev3" in ident.group.label() and "1thr" in ident.group.label()


def test_weights_identity_is_the_file_hash(tmp_path):
    import hashlib

    f = tmp_path / "w.pt"
    f.write_bytes(b"weights" * 1000)
    assert schema.weights_identity(f) == "sha256:" + hashlib.sha256(b"weights" * 1000).hexdigest()
    assert schema.weights_identity(None) == "random"


# ------------------------------------------------------------------------------ v1 files
def test_v1_file_is_read_with_one_warning_line(tmp_path):
    for m in ("standard", "tent"):
        _write(tmp_path / f"{m}.parquet", m, schema_version=1)
    trace = read_trace(tmp_path / "tent.parquet")
    assert trace.version == 1 and trace.meta["severity"] == 5 and trace.meta["domains"] == list(EPISODES)
    assert trace.meta["weights"] == "unknown" and trace.meta["threads"] is None and trace.meta["speed_probe"] == []
    res = _run(["sweep", str(tmp_path), "--protocol", "offline", "--format", "json"])
    assert res.exit_code == 0, res.output
    warn = [line for line in res.stderr.splitlines() if "warning" in line]
    assert len(warn) == 1 and "schema v1 traces" in warn[0] and "tempora-sim migrate" in warn[0]
    assert "Traceback" not in res.stderr


def test_v2_requires_the_new_keys(tmp_path):
    meta, table = make_trace("tent", **SMALL)
    for key in ("severity", "domains", "max_batches", "weights", "threads", "speed_probe", "speed_probe_kind"):
        bad = {k: v for k, v in meta.items() if k != key}
        with pytest.raises(TraceSchemaError, match=key):
            schema.validate_table(table, bad, "t.parquet")


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("severity", 7, "severity"),
        ("severity", 3, "rows have severity"),
        ("domains", [], "domains"),
        ("domains", ["fog"], "not listed"),
        ("domains", ["fog", "fog", "snow"], "twice"),
        ("max_batches", 0, "max_batches"),
        ("max_batches", 5, "max_batches allows"),
        ("weights", "imagenet", "weights"),
        ("weights", "sha256:xyz", "weights"),
        ("threads", 0, "threads"),
        ("threads", True, "threads"),
        ("speed_probe", {"a": 1}, "speed_probe"),
        ("speed_probe", [{"episode": "fog", "step": 0}], "speed_probe"),
        ("speed_probe", [{"episode": "fog", "step": -1, "ms": 1.0}], "step"),
        ("speed_probe", [{"episode": "rain", "step": 0, "ms": 1.0}], "rain"),
        ("speed_probe", [{"episode": "fog", "step": 31, "ms": 1.0}], "beyond"),
        ("speed_probe", [{"episode": "fog", "step": 0, "ms": 0.0}], "ms"),
        ("speed_probe_kind", "", "speed_probe_kind"),
    ],
)
def test_bad_v2_keys_are_rejected(key, value, needle):
    meta, table = make_trace("tent", probe_ms=1.0, **SMALL)
    if key == "speed_probe_kind":
        meta = {**meta, "speed_probe": []}
    with pytest.raises(TraceSchemaError, match=needle):
        schema.validate_table(table, {**meta, key: value}, "t.parquet")


def test_empty_probe_means_not_measured():
    meta, table = make_trace("tent", **SMALL)
    assert meta["speed_probe"] == [] and meta["speed_probe_kind"] == "none"
    schema.validate_table(table, meta, "t.parquet")
    with pytest.raises(TraceSchemaError, match="exactly when"):
        schema.validate_table(table, {**meta, "speed_probe_kind": "matmul"}, "t.parquet")


# ------------------------------------------------------------------------------ warnings
def _group(tmp_path, std_probe, tent_probe, **std_kw):
    _write(tmp_path / "standard.parquet", "standard", probe_ms=std_probe, **std_kw)
    _write(tmp_path / "tent.parquet", "tent", probe_ms=tent_probe)
    return load_traces(tmp_path)


def _warnings(traces):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_sweep(traces, protocols="offline")
    assert len(caught) == len(res.warnings)
    return res.warnings


def test_speed_spread_warns_once_per_group(tmp_path):
    assert _warnings(_group(tmp_path / "even", 1.0, 1.05)) == []
    lines = _warnings(_group(tmp_path / "uneven", 1.0, 1.3))
    assert len(lines) == 1 and "machine speeds 2" in lines[0] and "% apart" in lines[0] and "\n" not in lines[0]
    # not measured: nothing to compare
    assert _warnings(_group(tmp_path / "none", None, 1.3)) == []


def test_lambda_inflated_by_a_few_batches_warns(tmp_path):
    d = tmp_path / "noisy"
    _group(d, None, None)
    # a noisy standard trace: 3 of 60 batches took 20× longer
    table = pq.read_table(d / "standard.parquet")
    cols = table.to_pydict()
    adapt_idx = [i for i, p in enumerate(cols["phase"]) if p == "adapt"]
    for i in adapt_idx[:3]:
        cols["e_ms"][i] *= 20
        cols["delta_ms"][i] = cols["e_ms"][i] + cols["l_ms"][i]
    pq.write_table(pa.Table.from_pydict(cols, schema=table.schema), d / "standard.parquet")
    traces = load_traces(d)
    lines = _warnings(traces)
    assert len(lines) == 1 and "robust λ of standard" in lines[0]
    # the robust rule is not fooled by three outliers, and an explicit λ is the user's choice
    assert run_sweep(traces, protocols="offline", lambda_rule="robust").warnings == []
    assert run_sweep(traces, protocols="offline", lambda_ms=400).warnings == []
    both = _group(tmp_path / "both", 1.0, 1.5)
    lam = group_lambdas(both)
    assert len(_warnings(both)) <= 1 and lam


# ------------------------------------------------------------------------------ migration
def test_migration_round_trip(tmp_path):
    v1 = _write(tmp_path / "t" / "tent.parquet", "tent", schema_version=1)
    _write(tmp_path / "t" / "standard.parquet", "standard", schema_version=1)
    before_rows = pq.read_table(v1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = sweep(tmp_path / "t", protocols="all")
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"\x00" * 64)
    res = _run(["migrate", str(tmp_path / "t"), "--weights", str(weights), "--threads", "2"])
    assert res.exit_code == 0 and "2 of 2" in res.output, res.output
    after_rows = pq.read_table(v1)
    assert after_rows.equals(before_rows.cast(after_rows.schema))  # rows untouched
    trace = read_trace(v1)
    assert trace.version == 2 and trace.meta["threads"] == 2 and trace.meta["weights"] == schema.weights_identity(weights)
    assert trace.meta["domains"] == list(EPISODES) and trace.meta["severity"] == 5 and trace.meta["max_batches"] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no v1 warning any more
        after = sweep(tmp_path / "t", protocols="all")
    keep = [c for c in before.columns if c != "group"]
    assert after.select(keep).equals(before.select(keep))
    assert not migrate_file(v1, weights="random", threads=1)  # v2 already: left alone
    assert "0 of 2" in _run(["migrate", str(tmp_path / "t"), "--weights", "random", "--threads", "1"]).output
    (tmp_path / "bad.parquet").write_bytes(b"nope")
    res = _run(["migrate", str(tmp_path / "bad.parquet"), "--weights", "random", "--threads", "1"])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_committed_demo_traces_are_v2_with_their_identity():
    """traces/demo: the current tracer's set (80 batches per corruption, a speed probe and the
    timing-variability measurement in every trace)."""
    weights = ROOT / "src" / "tempora_trace" / "models" / "weights"
    traces = load_traces(ROOT / "traces" / "demo")
    assert len(traces) == 23
    for t in traces.traces:
        m = t.meta
        assert t.version == 2 and m["severity"] == 5 and len(m["domains"]) == 15 and m["threads"] == 1
        assert m["batch_size"] == 64 and m["seed"] == 2025 and m["frozen_eval"] == 8 and m["max_batches"] == 80
        assert m["weights"] == schema.weights_identity(weights / f"{m['model']}.pt")
        assert m["speed_probe"] and m["speed_probe_kind"] != "none"
        assert schema.VARIABILITY_KEY in m
    assert len(traces.groups()) == 2


def test_the_committed_demo_set_passes_its_own_checks_and_the_first_one_did_not():
    """traces/demo sweeps without a group warning; the first tracer's set (one stalled
    standard batch on the BN model: λ 48.1 ms against a robust 26.7 ms) still warns."""
    demo = load_traces(ROOT / "traces" / "demo")
    assert group_warnings(demo, group_lambdas(demo)) == []
    first = load_traces(ROOT / "tests" / "golden" / "demo-traces")
    lines = group_warnings(first, group_lambdas(first))
    assert len(lines) == 1 and "demo-resnet/" in lines[0] and "48.1 ms is 1.8× the robust λ" in lines[0]


def test_demo_traces_from_the_first_tracer_still_read():
    """The set the first tracer wrote (no speed probe, no timing data, whole corruptions): kept in
    tests/golden/demo-traces so that old traces stay readable."""
    weights = ROOT / "src" / "tempora_trace" / "models" / "weights"
    traces = load_traces(ROOT / "tests" / "golden" / "demo-traces")
    assert len(traces) == 23
    for t in traces.traces:
        m = t.meta
        assert t.version == 2 and len(m["domains"]) == 15 and m["max_batches"] is None
        assert m["weights"] == schema.weights_identity(weights / f"{m['model']}.pt")
        assert m["speed_probe"] == [] and m["speed_probe_kind"] == "none" and schema.VARIABILITY_KEY not in m
    assert len(traces.groups()) == 2


# ------------------------------------------------------------------------------ series building
def test_rows_in_any_order_give_the_same_sweep(tmp_path):
    path = _write(tmp_path / "a" / "tent.parquet", "tent")
    _write(tmp_path / "a" / "standard.parquet", "standard")
    table = pq.read_table(path)
    perm = np.random.default_rng(0).permutation(table.num_rows)
    (tmp_path / "b").mkdir()
    pq.write_table(table.take(perm), tmp_path / "b" / "tent.parquet")
    pq.write_table(pq.read_table(tmp_path / "a" / "standard.parquet"), tmp_path / "b" / "standard.parquet")
    a, b = load_traces(tmp_path / "a"), load_traces(tmp_path / "b")
    assert a.traces[1].layout.canonical and not b.traces[1].layout.canonical
    keys = ["method", "episode", "protocol", "value"]
    fa = sweep(a, protocols="all").drop("group").sort(keys)
    fb = sweep(b, protocols="all").drop("group").sort(keys)
    assert fa.equals(fb)


def test_series_frozen_tables_match_the_rows(tmp_path):
    """Independent oracle for the vectorised frozen tables: per (episode, checkpoint) the
    suffix sums over later steps equal sums taken straight from the rows."""
    _write(tmp_path / "standard.parquet", "standard")
    path = _write(tmp_path / "tent.parquet", "tent", checkpoints=(0, 1, 7, 29), frozen_eval="all")
    traces = load_traces(tmp_path)
    tent = next(t for t in traces.traces if t.method == "tent")
    s = build_series([tent], group_lambdas(traces))
    rows = pl.read_parquet(path).filter(pl.col("phase") == "frozen")
    for i, ep in enumerate(s.episode):
        for c in range(s.ck_offsets[i], s.ck_offsets[i + 1]):
            m = int(s.ck_values[c])
            r0, r1 = s.row_offsets[c], s.row_offsets[c + 1]
            mine = rows.filter((pl.col("episode") == ep) & (pl.col("checkpoint") == m)).sort("step")
            assert s.f_steps[r0:r1].tolist() == mine["step"].to_list()
            want = np.cumsum(mine["correct"].to_numpy()[::-1])[::-1]
            assert s.f_suf_correct[r0:r1].tolist() == want.astype(float).tolist()
        adapt = pl.read_parquet(path).filter((pl.col("phase") == "adapt") & (pl.col("episode") == ep)).sort("step")
        seg = slice(s.offsets[i], s.offsets[i + 1])
        assert s.a[seg].tolist() == (adapt["correct"] / adapt["n"]).to_list()


# ------------------------------------------------------------------------------ corrupt input
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_BASE = make_trace("tent", probe_ms=1.0, **SMALL)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    drop=st.sets(st.sampled_from(sorted(_BASE[0])), max_size=2),
    change=st.dictionaries(st.sampled_from(sorted(_BASE[0])), _JSON, max_size=3),
)
def test_corrupt_metadata_is_one_clean_error(tmp_path_factory, drop, change):
    meta, table = _BASE
    bad = {k: v for k, v in {**meta, **change}.items() if k not in drop}
    path = tmp_path_factory.mktemp("meta") / "t.parquet"
    pq.write_table(table.replace_schema_metadata({schema.METADATA_KEY: json.dumps(bad, default=str)}), path)
    try:
        read_trace(path)
    except TraceFileError as exc:
        msg = str(exc)
        assert msg.startswith(str(path)) and "\n" not in msg


_NUMERIC = ("checkpoint", "step", "n", "correct", "e_ms", "l_ms", "delta_ms")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(_NUMERIC + ("episode", "phase")),
            st.integers(0, 10**6),
            st.one_of(st.integers(-5, 40), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6)),
        ),
        min_size=1,
        max_size=4,
    ),
    drop_rows=st.integers(0, 3),
)
def test_corrupt_rows_are_one_clean_error(tmp_path_factory, edits, drop_rows):
    meta, table = _BASE
    cols = table.to_pydict()
    for name, row, value in edits:
        row %= table.num_rows
        if name in ("episode", "phase"):
            cols[name][row] = str(value)
        elif name in ("e_ms", "l_ms", "delta_ms"):
            cols[name][row] = float(value) if not isinstance(value, str) else 1.0
        else:
            cols[name][row] = int(value) if isinstance(value, int) else 0
    n = table.num_rows - drop_rows
    data = {k: v[:n] for k, v in cols.items()}
    path = tmp_path_factory.mktemp("rows") / "t.parquet"
    pq.write_table(pa.Table.from_pydict(data, schema=table.schema), path)
    try:
        trace = read_trace(path)
    except TraceFileError as exc:
        msg = str(exc)
        assert msg.startswith(str(path)) and "\n" not in msg
        return
    # accepted: then the Arrow validator agrees, and the rows satisfy the rules it checks
    schema.validate_table(pq.read_table(path), meta, path)
    assert (trace.arrays.correct <= trace.arrays.n).all()


def test_cli_reports_corrupt_metadata_in_one_line(tmp_path):
    meta, table = _BASE
    pq.write_table(table.replace_schema_metadata({schema.METADATA_KEY: json.dumps({**meta, "threads": "many"})}), tmp_path / "tent.parquet")
    res = _run(["sweep", str(tmp_path), "--lambda-ms", "40"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"tempora-sim: error: {tmp_path / 'tent.parquet'}: metadata 'threads' must be a positive integer, got 'many'"
    ]
