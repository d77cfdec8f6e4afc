"""The inputs ``tempora-sim`` must refuse (sweep, report, show): each case is one stderr line,
exit status 2, and the workspace untouched (tests/product/hostile/test_hostile_sim.py); the
explore tests (tests/sim/test_explore.py) check that ``explore`` refuses the sweep's cases too.

A case runs in a workspace holding ``traces/`` (``standard`` and ``tent``, written with
:data:`SMALL`), an earlier sweep's ``results/`` and an earlier ``report/``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from tempora_schema import METADATA_KEY
from tempora_sim.sweeps.synthetic import make_trace

#: the synthetic traces of a workspace: two corruptions, twelve batches of eight
SMALL = dict(num_batches=12, episodes=("fog", "snow"), checkpoints=(0, 4), frozen_eval=4, batch_size=8, num_classes=10)


def _trace_with_meta(path: Path, change) -> Path:
    meta, table = make_trace("tent", **SMALL)
    raw = change(dict(meta))
    text = raw if isinstance(raw, str) else json.dumps(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: text}), path)
    return path


def _setup_symlink_loop(ws):
    os.symlink(ws / "loop-b", ws / "loop-a")
    os.symlink(ws / "loop-a", ws / "loop-b")


def _deep_json(_meta):
    return "[" * 200_000 + "]" * 200_000


# name -> (args with {ws} placeholders, needle, setup(ws) or None)
SWEEP = ["sweep", "{ws}/traces"]
CASES = {
    "unknown option": ([*SWEEP, "--bogus"], "no such option", None),
    "queue not a number": ([*SWEEP, "--queue", "abc"], "'--queue'", None),
    "queue beyond int32": ([*SWEEP, "--queue", "99999999999999999999"], "'--queue'", None),
    "negative queue": ([*SWEEP, "--queue", "-1"], "'--queue'", None),
    "unknown format": ([*SWEEP, "--format", "xml"], "'--format'", None),
    "missing argument": (["sweep"], "missing argument", None),
    "unknown command": (["swep", "{ws}/traces"], "no such command", None),
    "rho NaN": ([*SWEEP, "--rho", "nan"], "--rho", None),
    "rho inf": ([*SWEEP, "--rho", "inf"], "--rho", None),
    "rho overflow": ([*SWEEP, "--rho", "1e999"], "not a finite number", None),
    "T overflow": ([*SWEEP, "--T", "1e999s"], "not a finite number", None),
    "B negative": ([*SWEEP, "--B", "-1s"], "--B", None),
    "rho zero": ([*SWEEP, "--rho", "0"], "must be > 0", None),
    "rho empty item": ([*SWEEP, "--rho", "1,,0.5"], "empty item", None),
    "rho file missing": ([*SWEEP, "--rho", "@{ws}/nowhere.txt"], "cannot read", None),
    "rho file empty": ([*SWEEP, "--rho", "@{ws}/empty.txt"], "holds no values", lambda ws: (ws / "empty.txt").write_text("# nothing\n")),
    "rho file not text": (
        [*SWEEP, "--rho", "@{ws}/bin.txt"],
        "not a UTF-8 text file",
        lambda ws: (ws / "bin.txt").write_bytes(b"\xff\xfe\x00"),
    ),
    "rho range backwards": ([*SWEEP, "--rho", "1:0.5:0.1"], "ends before it starts", None),
    "rho range zero step": ([*SWEEP, "--rho", "0.1:1:0"], "step > 0", None),
    "rho range too long": ([*SWEEP, "--rho", "0.001:1:1e-9"], "more than 1,000,000", None),
    "lambda NaN": ([*SWEEP, "--lambda-ms", "nan"], "--lambda-ms", None),
    "lambda zero": ([*SWEEP, "--lambda-ms", "0"], "must be > 0", None),
    "unknown protocol": ([*SWEEP, "--protocol", "nope"], "unknown protocol 'nope'", None),
    "fallback with random": ([*SWEEP, "--fallback", "--skipped", "random"], "choose one", None),
    "explicit T below lambda": ([*SWEEP, "--protocol", "continuous", "--T", "0.001"], "must exceed λ", None),
    "out empty": ([*SWEEP, "--out", ""], "--out is empty", None),
    "out is a file": ([*SWEEP, "--out", "{ws}/results/notes.txt"], "is a file", None),
    "out below a file": ([*SWEEP, "--out", "{ws}/results/notes.txt/deeper"], "is a file, not a folder", None),
    "out symlink loop": ([*SWEEP, "--out", "{ws}/loop-a"], "symbolic links", _setup_symlink_loop),
    "out inside the traces": ([*SWEEP, "--out", "{ws}/traces/results"], "inside the trace directory", None),
    "no such traces": (["sweep", "{ws}/nowhere"], "no such file or directory", None),
    "empty trace folder": (["sweep", "{ws}/empty"], "no *.parquet", lambda ws: (ws / "empty").mkdir()),
    "dangling link among traces": (
        SWEEP,
        "dangling symbolic link",
        lambda ws: os.symlink(ws / "gone.parquet", ws / "traces" / "adabn.parquet"),
    ),
    "link loop among traces": (
        SWEEP,
        "symbolic link loop",
        lambda ws: (
            os.symlink(ws / "traces" / "x.parquet", ws / "traces" / "y.parquet"),
            os.symlink(ws / "traces" / "y.parquet", ws / "traces" / "x.parquet"),
        ),
    ),
    "truncated trace": (
        SWEEP,
        "not a readable Parquet file",
        lambda ws: (ws / "traces" / "cut.parquet").write_bytes((ws / "traces" / "tent.parquet").read_bytes()[:300]),
    ),
    "parquet that is not a trace": (
        SWEEP,
        "not a Tempora trace",
        lambda ws: pl.DataFrame({"a": [1]}).write_parquet(ws / "traces" / "other.parquet"),
    ),
    "metadata batch size 1e30": (
        [*SWEEP, "--lambda-ms", "10"],
        "outside 0..2^63-1",
        lambda ws: _trace_with_meta(ws / "traces" / "big" / "tent.parquet", lambda m: {**m, "batch_size": 10**30}),
    ),
    "metadata nested 200k deep": (
        SWEEP,
        "nested too deeply",
        lambda ws: _trace_with_meta(ws / "traces" / "deep" / "tent.parquet", _deep_json),
    ),
    "metadata NaN": (
        SWEEP,
        "NaN or Infinity",
        lambda ws: _trace_with_meta(
            ws / "traces" / "nan" / "tent.parquet", lambda m: json.dumps({**m, "method_params": {"lr": float("nan")}})
        ),
    ),
    "metadata not JSON": (SWEEP, "not valid JSON", lambda ws: _trace_with_meta(ws / "traces" / "bad" / "tent.parquet", lambda m: "{oops")),
    "two traces of one method": (
        SWEEP,
        "second trace of method 'tent'",
        lambda ws: _trace_with_meta(ws / "traces" / "again" / "tent.parquet", lambda m: m),
    ),
    "group without standard": (["sweep", "{ws}/traces/tent.parquet"], "no 'standard' trace", None),
    "report: no such source": (["report", "{ws}/nowhere", "--out", "{ws}/r2"], "no such file or directory", None),
    "report: missing --out": (["report", "{ws}/traces"], "missing option '--out'", None),
    "report: unknown budget rule": (["report", "{ws}/traces", "--out", "{ws}/r2", "--budget-rule", "bogus"], "'--budget-rule'", None),
    "report: bad episode, new folder": (
        ["report", "{ws}/traces", "--out", "{ws}/r2", "--episodes", "nowhere"],
        "episode(s) nowhere not in the results",
        None,
    ),
    "report: bad episode, existing report": (
        ["report", "{ws}/traces", "--out", "{ws}/report", "--episodes", "nowhere"],
        "episode(s) nowhere not in the results",
        None,
    ),
    "report: tables is a file": (
        ["report", "{ws}/traces", "--out", "{ws}/report2"],
        "a file is in the way",
        lambda ws: ((ws / "report2").mkdir(), (ws / "report2" / "tables").write_text("x")),
    ),
    "report: files, out inside their folder": (
        ["report", "{ws}/traces/standard.parquet", "{ws}/traces/tent.parquet", "--out", "{ws}/traces/r"],
        "inside the trace directory",
        None,
    ),
    "report: sweep option on results": (
        ["report", "{ws}/results2", "--out", "{ws}/r2", "--rho", "1"],
        "apply to traces",
        lambda ws: _results(ws / "results2"),
    ),
    "report: curve episodes without figures": (
        ["report", "{ws}/traces", "--out", "{ws}/r2", "--no-figures", "--episodes", "fog"],
        "--episodes chooses the episodes of the utility curves, and --no-figures draws no figures",
        None,
    ),
    "report: every episode's curves without figures": (
        ["report", "{ws}/traces", "--out", "{ws}/r2", "--all-episodes", "--no-figures"],
        "--all-episodes chooses the episodes",
        None,
    ),
    "report: results not readable": (["report", "{ws}/results", "--out", "{ws}/r2"], "not a readable utility table", None),
    "show: unknown table": (["show", "nonsense", "{ws}/traces"], "unknown table 'nonsense'", None),
}


def _results(folder: Path) -> None:
    from tempora_sim import sweep

    folder.mkdir()
    sweep(folder.parent / "traces", protocols="offline").write_parquet(folder / "utility.parquet")
