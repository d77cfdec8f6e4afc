"""Hypothesis-generated corrupt traces: whatever the bytes, the metadata or the rows, the reader
either accepts the file (and the sweep then replays it) or refuses it with one line naming the
file; it never raises anything else."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempora_schema import METADATA_FIELDS, METADATA_KEY
from tempora_sim import sweep
from tempora_sim.errors import SimError, TraceFileError
from tempora_sim.sweeps.synthetic import make_trace
from tempora_sim.sweeps.traces import load_traces, read_trace

SMALL = dict(num_batches=6, episodes=("fog",), checkpoints=(0, 3), frozen_eval=3, batch_size=8, num_classes=10)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[dict, pa.Table, bytes, Path]:
    meta, table = make_trace("tent", **SMALL)
    folder = tmp_path_factory.mktemp("good")
    pq.write_table(make_trace("standard", **SMALL)[1], folder / "standard.parquet")
    pq.write_table(table, folder / "tent.parquet")
    return meta, table, (folder / "tent.parquet").read_bytes(), folder


def _check(path: Path, standard: Path) -> None:
    """Accepted → the sweep replays it or refuses in one line; refused → one line naming the file."""
    try:
        read_trace(path)
    except TraceFileError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        return
    try:
        sweep([standard, path], protocols="offline,discrete,amortised", rho="1", B_ms="0,1s")
    except SimError as exc:
        assert "\n" not in str(exc)


@SETTINGS
@given(data=st.data())
def test_damaged_bytes(good, tmp_path, data):
    _, _, raw, folder = good
    cut = data.draw(st.integers(0, len(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(1, 255)), max_size=4))
    damaged = bytearray(raw[:cut] if data.draw(st.booleans()) else raw)
    for pos, xor in flips:
        if pos < len(damaged):
            damaged[pos] ^= xor
    path = tmp_path / "x" / "tent.parquet"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(bytes(damaged))
    _check(path, folder / "standard.parquet")


@SETTINGS
@given(key=st.sampled_from(METADATA_FIELDS + ("extra",)), value=json_values, drop=st.booleans())
def test_corrupt_metadata(good, tmp_path, key, value, drop):
    meta, table, _, folder = good
    changed = {k: v for k, v in meta.items() if not (drop and k == key)}
    if not drop:
        changed[key] = value
    path = tmp_path / "m" / "tent.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(changed)}), path)
    _check(path, folder / "standard.parquet")


NUMERIC = {
    "severity": st.integers(-128, 127),
    "checkpoint": st.integers(-(2**31), 2**31 - 1),
    "step": st.integers(-(2**31), 2**31 - 1),
    "n": st.integers(-(2**31), 2**31 - 1),
    "correct": st.integers(-(2**31), 2**31 - 1),
    "e_ms": st.floats(),
    "l_ms": st.floats(),
    "delta_ms": st.floats(),
    "peak_mem_bytes": st.integers(-(2**63), 2**63 - 1),
}


@SETTINGS
@given(data=st.data())
def test_corrupt_rows(good, tmp_path, data):
    meta, table, _, folder = good
    column = data.draw(st.sampled_from(sorted(NUMERIC) + ["phase", "episode", "updated"]))
    rows = data.draw(st.lists(st.integers(0, table.num_rows - 1), min_size=1, max_size=3, unique=True))
    values = table.column(column).to_pylist()
    for r in rows:
        if column in NUMERIC:
            values[r] = data.draw(NUMERIC[column])
        elif column == "updated":
            values[r] = not values[r]
        else:
            values[r] = data.draw(st.text(max_size=6))
    idx = table.schema.get_field_index(column)
    field = table.schema.field(column)
    path = tmp_path / "r" / "tent.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(table.set_column(idx, field, pa.array(values, field.type)), path)
    _check(path, folder / "standard.parquet")


def test_the_uncorrupted_pair_is_accepted_and_replayed(good):
    *_, folder = good
    frame = sweep(load_traces(folder), protocols="offline")
    assert frame.height > 0 and all(math.isfinite(u) for u in frame["utility"].to_list())


def _with_text_that_is_not_utf8(table: pa.Table) -> pa.Table:
    """``table`` with the first string column's first value cut inside a UTF-8 sequence: bytes a
    damaged page can hold, which pyarrow reads as they are and polars panics on."""
    i = next(k for k, f in enumerate(table.schema) if pa.types.is_string(f.type))
    values = [v.encode() for v in table.column(i).to_pylist()]
    data = bytearray(b"".join(values))
    data[0] = 0xE2  # the lead byte of a three-byte sequence, followed by ASCII
    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + len(v))
    column = pa.Array.from_buffers(
        pa.string(), len(values), [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]), pa.py_buffer(bytes(data))]
    )
    return table.set_column(i, table.field(i), pa.chunked_array([column]))


def test_text_that_is_not_utf8_is_refused_in_one_line(good, tmp_path):
    meta, table, _, _ = good
    path = tmp_path / "tent.parquet"
    pq.write_table(_with_text_that_is_not_utf8(table), path)
    with pytest.raises(TraceFileError) as caught:
        read_trace(path)
    assert str(caught.value).startswith(f"{path}: not a readable Parquet file") and "UTF8" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_live_file_whose_text_is_not_utf8_is_refused_in_one_line(tmp_path):
    from helpers.validation_files import write_validation_set
    from tempora_sim.validation.live_runs import read_live

    live, _ = write_validation_set(
        tmp_path, None, [np.ones(6)], [1.0], ("fog",), 6, **{k: v for k, v in SMALL.items() if k != "episodes" and k != "num_batches"}
    )
    path = live / "tent-1.parquet"
    pq.write_table(_with_text_that_is_not_utf8(pq.read_table(path)), path)
    with pytest.raises(TraceFileError) as caught:
        read_live(path)
    assert str(caught.value).startswith(f"{path}: not a readable Parquet file") and "\n" not in str(caught.value)
