"""What ``tempora-sim sweep`` adds to the replay: the checked output folder, the intervals of
every term (``--intervals``), the warnings as lines, the atomic ``utility.parquet`` / ``.csv``
and the pooled rows as JSON.

The command line imports this module only when ``sweep`` runs: the intervals load the
analyses, which ``tempora-sim --help`` does not need.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tempora_sim.sweeps.options import SweepOptions
from tempora_sim.sweeps.replay import POOLED, SimWarning, SweepResult, run_sweep
from tempora_sim.sweeps.traces import check_out_outside
from tempora_sim.uncertainty import timing_replicates
from tempora_sim.uncertainty.bootstrap import BootstrapOptions
from tempora_sim.uncertainty.term_intervals import ALL_TERMS, interval_columns
from tempora_sim.uncertainty.timing_replicates import replicates_of
from tempora_toolkit.atomic_files import check_output_dir, staged_dir, to_bytes, write_file

#: Rows serialised at a time by :func:`json_row_chunks`.
JSON_CHUNK_ROWS = 100_000


@dataclass
class Sweep:
    """A sweep as the command prints it: the replay, the sentence on its timing replicates
    (``--intervals``) and the output folder it was written to."""

    result: SweepResult
    timing_text: str | None = None
    out: Path | None = None


def write_outputs(frame: pl.DataFrame, out: Path, traces: Iterable[str | os.PathLike] = ()) -> None:
    """Write utility.parquet/.csv into ``out`` atomically (never a partial or mixed directory):
    staged, fsynced, published by rename, under a lock (see :mod:`tempora_toolkit.atomic_files`)."""
    check_out_outside(traces, out)
    with staged_dir(out, what="sweep output", files=("utility.parquet", "utility.csv")) as stage:
        write_file(stage / "utility.parquet", to_bytes(frame.write_parquet))
        write_file(stage / "utility.csv", frame.write_csv().encode("utf-8"))


def sweep_into(
    traces: Iterable[str | os.PathLike],
    sweep_options: SweepOptions,
    boot: BootstrapOptions,
    intervals: bool = False,
    out: str | None = None,
    on_warning: Callable[[str], None] = lambda line: None,
) -> Sweep:
    """Replay ``traces`` under ``sweep_options``; with ``intervals`` add every term's bounds (and the
    traces' timing replicates), with ``out`` write the frame there (checked before anything is
    read or replayed). The replay's warnings go to ``on_warning`` as it ends, one line each."""
    traces = list(traces)
    folder = None
    if out is not None:
        folder = check_output_dir(out)
        check_out_outside(traces, folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SimWarning)
        result = run_sweep([str(p) for p in traces], sweep_options)
    for w in caught:
        if issubclass(w.category, SimWarning):
            on_warning(str(w.message))
    timing_text = None
    if intervals:
        timing = replicates_of(result, boot.timing_replicates, boot.seed, measures=ALL_TERMS)
        result.frame = interval_columns(result, boot, timing)
        timing_text = timing_replicates.describe(timing, boot.timing_replicates)
    if folder is not None:
        write_outputs(result.frame, folder, traces)
    return Sweep(result, timing_text, folder)


def json_row_chunks(frame: pl.DataFrame) -> Iterator[str]:
    """The rows pooled over episodes as one JSON array of row objects (polars' own writer,
    compact), a chunk of rows at a time: a 1,000,000-value grid never holds its rows as Python
    objects, nor their whole text, at once (``json.dumps(frame.to_dicts())`` needed 13 GB there)."""
    pooled = frame.filter(pl.col("episode") == POOLED)
    yield "["
    for start in range(0, pooled.height, JSON_CHUNK_ROWS):
        text = pooled.slice(start, JSON_CHUNK_ROWS).write_json()
        yield ("," if start else "") + text[1:-1]
    yield "]\n"
