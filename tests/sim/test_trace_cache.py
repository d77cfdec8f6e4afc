"""The trace cache (tempora_sim.sweeps.trace_cache): a hit replays exactly what a fresh read does, an
edited file never meets its old entry, a damaged entry is ignored and written again, and a cache
that cannot be written or is turned off changes nothing but speed."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from tempora_sim.commands.main import main
from tempora_sim.errors import TraceFileError
from tempora_sim.sweeps import trace_cache, traces
from tempora_sim.sweeps.replay import sweep
from tempora_sim.sweeps.synthetic import make_trace, write_trace_set
from tempora_sim.sweeps.traces import load_traces

METHODS = ("standard", "tent", "eta")


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    write_trace_set(d, METHODS, num_batches=40, episodes=("fog", "snow"), checkpoints=(0, 2, 5, 10, 20), frozen_eval="all")
    return d


@pytest.fixture
def reads(monkeypatch) -> list[Path]:
    """The files read from Parquet (cache misses), in call order."""
    calls: list[Path] = []
    real = traces.read_trace

    def spy(path):
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(traces, "read_trace", spy)
    return calls


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{trace_cache.SUFFIX}"))


def test_hit_replays_exactly_what_a_fresh_read_does(trace_dir, tmp_path, reads):
    cache = tmp_path / "cache"
    uncached = sweep(load_traces(trace_dir, cache=False), protocols="all")
    assert len(reads) == 3
    first = load_traces(trace_dir, cache=cache)
    assert len(reads) == 6 and len(_entries(cache)) == 3
    second = load_traces(trace_dir, cache=cache)
    assert len(reads) == 6  # every file came from its entry
    assert_frame_equal(sweep(first, protocols="all"), uncached)
    assert_frame_equal(sweep(second, protocols="all"), uncached)
    for hit, fresh in zip(second.traces, first.traces):
        assert hit.path == fresh.path and hit.meta == fresh.meta and hit.version == fresh.version
        assert hit.layout.canonical == fresh.layout.canonical
        np.testing.assert_array_equal(hit.adapt_delta, fresh.adapt_delta)
        # what other commands read from the rows is still there, read from the file on demand
        assert_frame_equal(hit.rows, fresh.rows)
        assert_frame_equal(hit.frozen, fresh.frozen)
        assert hit.episodes == fresh.episodes and hit.updates_parameters == fresh.updates_parameters


def test_rows_out_of_tracer_order_hit_too(tmp_path, reads):
    """A file whose rows are shuffled is sorted by the reader; its entry holds the sorted arrays."""
    _, table = make_trace("tent", num_batches=30, episodes=("fog", "snow"), checkpoints=(0, 3, 9), frozen_eval="all")
    order = np.random.default_rng(1).permutation(table.num_rows)
    d = tmp_path / "shuffled"
    d.mkdir()
    pq.write_table(table.take(order), d / "tent.parquet")
    pq.write_table(
        make_trace("standard", num_batches=30, episodes=("fog", "snow"), checkpoints=(0, 3, 9), frozen_eval="all")[1],
        d / "standard.parquet",
    )
    cache = tmp_path / "cache"
    fresh = load_traces(d, cache=cache)
    hit = load_traces(d, cache=cache)
    shuffled = _trace_of(hit, d / "tent.parquet")
    assert len(reads) == 2 and not shuffled.layout.canonical
    assert_frame_equal(sweep(hit, protocols="all"), sweep(fresh, protocols="all"))
    np.testing.assert_array_equal(shuffled.adapt_delta, _trace_of(fresh, d / "tent.parquet").adapt_delta)


def _rewrite_same_size(path: Path, factor: float) -> None:
    """Scale one row's e_ms/delta_ms: an uncompressed, plain-encoded file keeps its size."""
    table = pq.read_table(path)
    df = pl.from_arrow(table)
    df = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 3).then(pl.col("e_ms") * factor).otherwise(pl.col("e_ms")).alias("e_ms"),
    ).with_columns((pl.col("e_ms") + pl.col("l_ms")).alias("delta_ms"))
    out = df.to_arrow().replace_schema_metadata(table.schema.metadata)
    pq.write_table(out.cast(table.schema), path, compression="none", use_dictionary=False, write_statistics=False)


def _trace_of(traceset, path: Path):
    return next(t for t in traceset.traces if t.path == path)


def test_an_edited_file_of_the_same_size_and_time_misses(trace_dir, tmp_path, reads):
    target = trace_dir / "tent.parquet"
    _rewrite_same_size(target, 1.0)
    cache = tmp_path / "cache"
    before = _trace_of(load_traces(trace_dir, cache=cache), target)
    stat = target.stat()
    _rewrite_same_size(target, 3.0)
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert target.stat().st_size == stat.st_size
    reads.clear()
    after = _trace_of(load_traces(trace_dir, cache=cache), target)
    assert reads == [target]
    assert after.adapt_delta[3] == pl.read_parquet(target)["delta_ms"][3] != before.adapt_delta[3]
    assert len(_entries(cache)) == 4  # both versions have an entry; each file meets only its own


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "empty"])
def test_a_damaged_entry_is_ignored_and_written_again(trace_dir, tmp_path, reads, damage):
    cache = tmp_path / "cache"
    expected = sweep(load_traces(trace_dir, cache=cache), protocols="all")
    for entry in _entries(cache):
        data = entry.read_bytes()
        if damage == "garbage":
            data = b"not an entry" * 10
        elif damage == "truncated":
            data = data[: len(data) // 2]
        elif damage == "flipped":  # one bit in the arrays: the checksum sees it
            data = data[:-100] + bytes([data[-100] ^ 1]) + data[-99:]
        else:
            data = b""
        entry.write_bytes(data)
    reads.clear()
    assert_frame_equal(sweep(load_traces(trace_dir, cache=cache), protocols="all"), expected)
    assert len(reads) == 3
    assert all(trace_cache.load(e, 0) is not None for e in _entries(cache))  # rewritten whole
    reads.clear()
    load_traces(trace_dir, cache=cache)
    assert reads == []


def test_an_unwritable_cache_folder_reads_the_files(trace_dir, tmp_path, reads):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    expected = sweep(load_traces(trace_dir, cache=False), protocols="all")
    for _ in range(2):
        assert_frame_equal(sweep(load_traces(trace_dir, cache=blocker / "cache"), protocols="all"), expected)
    assert len(reads) == 9 and not (blocker.parent / "cache").exists()


def test_the_environment_variable_chooses_or_turns_off_the_cache(trace_dir, tmp_path, monkeypatch, reads):
    folder = tmp_path / "env-cache"
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(folder))
    assert trace_cache.cache_dir() == folder
    load_traces(trace_dir)
    assert len(_entries(folder)) == 3
    monkeypatch.setenv(trace_cache.CACHE_ENV, "off")
    assert trace_cache.cache_dir() is None
    reads.clear()
    load_traces(trace_dir)
    assert len(reads) == 3
    monkeypatch.delenv(trace_cache.CACHE_ENV)
    monkeypatch.setenv("TEMPORA_HOME", str(tmp_path / "home"))
    assert trace_cache.cache_dir() == tmp_path / "home" / "trace-cache"


def test_a_bad_file_gets_no_entry_and_the_same_error(trace_dir, tmp_path):
    cache = tmp_path / "cache"
    bad = trace_dir / "broken.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    messages = []
    for setting in (False, cache, cache):
        with pytest.raises(TraceFileError) as err:
            load_traces(trace_dir, cache=setting)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == messages[2] and "broken.parquet" in messages[0]
    # the good files beside it were validated and kept; the broken one has no entry
    assert sorted(trace_cache.load(e, 0)[0]["method"] for e in _entries(cache)) == sorted(METHODS)


def test_cli_sweep_output_is_the_same_from_the_cache(trace_dir, tmp_path, monkeypatch):
    outputs = []
    for setting in ("off", str(tmp_path / "cli-cache"), str(tmp_path / "cli-cache")):
        monkeypatch.setenv(trace_cache.CACHE_ENV, setting)
        out = tmp_path / f"out{len(outputs)}"
        result = CliRunner().invoke(main, ["sweep", str(trace_dir), "--protocol", "all", "--out", str(out)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        outputs.append(((out / "utility.parquet").read_bytes(), (out / "utility.csv").read_bytes()))
    assert outputs[0] == outputs[1] == outputs[2]


def test_rows_of_a_file_removed_after_loading_are_a_one_line_error(trace_dir, tmp_path):
    cache = tmp_path / "cache"
    load_traces(trace_dir, cache=cache)
    hit = load_traces(trace_dir, cache=cache).traces
    (trace_dir / "eta.parquet").unlink()
    with pytest.raises(TraceFileError, match="eta.parquet: removed or rewritten while in use"):
        _ = hit[0].rows
    write_trace_set(trace_dir, ("tent",), num_batches=20, episodes=("fog", "snow"), checkpoints=(0, 2), frozen_eval="all")
    with pytest.raises(TraceFileError, match="tent.parquet: rewritten while in use"):
        _ = hit[2].rows
