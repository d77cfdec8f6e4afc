"""Schema validation: every docs/reference/trace-schema.md row and metadata rule is enforced with a message naming file and rule."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tempora_schema import METADATA_KEY, TraceSchemaError, decode_metadata, validate_metadata, validate_table
from tempora_sim.sweeps.synthetic import make_trace


@pytest.fixture(scope="module")
def trace():
    return make_trace("tent", num_batches=12, episodes=("fog", "snow"), checkpoints=(0, 4), frozen_eval=4)


def _set(table: pa.Table, name: str, values) -> pa.Table:
    idx = table.schema.get_field_index(name)
    return table.set_column(idx, table.schema.field(name), pa.array(values, table.schema.field(name).type))


def _reject(table, meta, needle):
    with pytest.raises(TraceSchemaError) as info:
        validate_table(table, meta, "runs/x.parquet")
    msg = str(info.value)
    assert msg.startswith("runs/x.parquet: "), msg
    assert needle in msg, msg
    assert "\n" not in msg


def test_synthetic_trace_is_valid(trace):
    meta, table = trace
    validate_table(table, meta, "ok.parquet")
    assert decode_metadata(table.schema) == json.loads(json.dumps(meta))


def test_unknown_schema_version(trace):
    meta, table = trace
    _reject(table, {**meta, "schema_version": 3}, "unknown schema version 3")


def test_missing_metadata_key(trace):
    meta, table = trace
    bad = {k: v for k, v in meta.items() if k != "num_classes"}
    _reject(table, bad, "num_classes")


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("batch_size", "64", "batch_size"),
        ("stream", "sometimes", "stream"),
        ("frozen_eval", "most", "frozen_eval"),
        ("method", "", "method"),
    ],
)
def test_mistyped_metadata(trace, key, value, needle):
    meta, table = trace
    with pytest.raises(TraceSchemaError, match=needle):
        validate_metadata({**meta, key: value}, "m.parquet")


def test_missing_column(trace):
    meta, table = trace
    _reject(table.drop_columns(["l_ms"]), meta, "missing column(s): l_ms")


def test_mistyped_column(trace):
    meta, table = trace
    idx = table.schema.get_field_index("correct")
    bad = table.set_column(idx, "correct", table.column("correct").cast(pa.float64()))
    _reject(bad, meta, "column 'correct' has type double")


def test_null_in_required_column(trace):
    meta, table = trace
    values = table.column("e_ms").to_pylist()
    values[3] = None
    _reject(_set(table, "e_ms", values), meta, "null")


def test_step_gap(trace):
    meta, table = trace
    steps = table.column("step").to_pylist()
    steps[5] = 99  # adapt row of episode 'fog' (rows 0..11)
    _reject(_set(table, "step", steps), meta, "episode 'fog': adapt steps must be 0..N-1 without gaps")


def test_step_repeated(trace):
    meta, table = trace
    steps = table.column("step").to_pylist()
    steps[5] = 4
    _reject(_set(table, "step", steps), meta, "step 4 appears twice")


def test_correct_greater_than_n(trace):
    meta, table = trace
    correct = table.column("correct").to_pylist()
    correct[2] = 65
    _reject(_set(table, "correct", correct), meta, "correct > n on row 2")


@pytest.mark.parametrize("value,needle", [(float("nan"), "NaN"), (-1.0, "negative time")])
def test_bad_times(trace, value, needle):
    meta, table = trace
    e = table.column("e_ms").to_pylist()
    e[1] = value
    _reject(_set(table, "e_ms", e), meta, needle)


def test_delta_must_be_e_plus_l(trace):
    meta, table = trace
    d = table.column("delta_ms").to_pylist()
    d[0] += 5.0
    _reject(_set(table, "delta_ms", d), meta, "delta_ms != e_ms + l_ms")


def test_unknown_phase(trace):
    meta, table = trace
    phase = table.column("phase").to_pylist()
    phase[0] = "warmup"
    _reject(_set(table, "phase", phase), meta, "unknown value(s) ['warmup']")


def test_frozen_row_before_its_checkpoint(trace):
    meta, table = trace
    ck = np.array(table.column("checkpoint").to_pylist())
    steps = np.array(table.column("step").to_pylist())
    row = int(np.flatnonzero(ck == 4)[0])
    steps[row] = 2
    _reject(_set(table, "step", steps.tolist()), meta, "step 2 < checkpoint 4")


def test_frozen_row_beyond_episode(trace):
    meta, table = trace
    ck = np.array(table.column("checkpoint").to_pylist())
    steps = np.array(table.column("step").to_pylist())
    steps[int(np.flatnonzero(ck == 0)[0])] = 12
    _reject(_set(table, "step", steps.tolist()), meta, "beyond episode")


def test_metadata_must_be_json():
    schema = pa.schema([("a", pa.int32())], metadata={METADATA_KEY: "{not json"})
    with pytest.raises(TraceSchemaError, match="not valid JSON"):
        decode_metadata(schema, "f.parquet")
