"""Hostile input to ``tempora-trace live``: one stderr line, exit status 2, no traceback, the
workspace exactly as it was (tests/helpers/hostile.py); an interrupted run with a trace alongside
leaves nothing behind and can simply be run again. In-process on the tiny CIFAR-C layout and
the tiny BN model (4 batches of 8 per domain)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from helpers.cifar import tiny_cifar_args
from helpers.hostile import assert_refused, inject_errno, invoke, snapshot, user_workspace
from tempora_sim.sweeps.synthetic import write_trace
from tempora_trace.cli import cli

PROG = "tempora-trace"

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_models")


def live(ws: Path, *extra, out: str | None = None) -> list[str]:
    return ["live", "--method", "tent", *tiny_cifar_args(ws / "cifar-c", out if out is not None else str(ws / "live"), *extra)]


@pytest.fixture
def ws(cifar_c_root: Path, monkeypatch) -> Path:
    ws = user_workspace(cifar_c_root, monkeypatch)
    write_trace(ws / "traces" / "tent.parquet", "tent", num_batches=4, episodes=("fog",), batch_size=8, num_classes=10)
    return ws


CASES = {
    "lambda 1e308": (["--rho", "1", "--lambda-ms", "1e308"], "--lambda-ms 1e+308 is longer than a live run allows"),
    "rho 1e-300": (["--rho", "1e-300", "--lambda-ms", "10"], "--rho 1e-300: arrivals"),
    "gamma 1e12 ms (31 years)": (["--gamma-ms", "1e12", "--lambda-ms", "10"], "--gamma-ms 1e+12: arrivals"),
    "gamma one hour and a millisecond": (["--gamma-ms", "3600001", "--lambda-ms", "10"], "longer than a live run allows"),
    "rho 0": (["--rho", "0", "--lambda-ms", "10"], "--rho"),
    "out is a trace folder": (["--rho", "1", "--lambda-ms", "10"], "is inside the trace folder"),
    "out inside a trace folder": (["--rho", "1", "--lambda-ms", "10"], "is inside the trace folder"),
    "out is the trace-alongside folder": (
        ["--rho", "1", "--lambda-ms", "10", "--trace-alongside", "{ws}/along"],
        "--trace-alongside folder",
    ),
    "trace-alongside below a file": (["--rho", "1", "--lambda-ms", "10", "--trace-alongside", "{ws}/notes.txt/x"], "--trace-alongside"),
    "resume": (["--rho", "1", "--lambda-ms", "10", "--resume"], "cannot be resumed"),
}
OUTS = {
    "out is a trace folder": "{ws}/traces",
    "out inside a trace folder": "{ws}/traces/live",
    "out is the trace-alongside folder": "{ws}/along",
}


#: Cases this module adds to the hostile-input suite (docs/reference/errors.md counts them): the table,
#: a read-only --trace-alongside folder and Ctrl-C with a trace alongside.
CASE_COUNT = len(CASES) + 2


@pytest.mark.parametrize("case", list(CASES))
def test_refused_in_one_line_and_nothing_changes(case, ws):
    extra, needle = CASES[case]
    out = OUTS.get(case, "{ws}/live").replace("{ws}", str(ws))
    before = snapshot(ws)
    args = live(ws, *[a.replace("{ws}", str(ws)) for a in extra], out=out)
    assert_refused(invoke(cli, args), PROG, needle, before, ws)


def test_a_read_only_trace_alongside_folder_is_named_as_such(ws, monkeypatch):
    (ws / "along").mkdir()
    before = snapshot(ws)
    inject_errno(monkeypatch, ws / "along", errno.EACCES)
    line = assert_refused(
        invoke(cli, live(ws, "--rho", "1", "--lambda-ms", "10", "--trace-alongside", str(ws / "along"))),
        PROG,
        "permission denied",
        before,
        ws,
    )
    assert "--trace-alongside" in line and "--out" not in line.split("permission denied")[0]


def test_ctrl_c_with_a_trace_alongside_leaves_nothing_and_a_rerun_works(ws, monkeypatch):
    """Interrupted after the first episode's trace pass landed in <along>/tent….partial/: the
    partial trace goes (a live run cannot be resumed, so neither can its trace), the folders
    the run made go, and the same command then runs to the end."""
    from tempora_trace import live_runner as live_module

    args = live(ws, "--rho", "1", "--lambda-ms", "10", "--trace-alongside", str(ws / "along" / "deeper"), "--domains", "fog,gaussian_noise")
    before = snapshot(ws)
    real = live_module.LiveRun.play_episode

    def interrupted(self, plan, index, episode, tally):
        assert list((ws / "along" / "deeper").glob("*.partial/episode-0000.rows")), "the trace pass did not land first"
        raise KeyboardInterrupt

    monkeypatch.setattr(live_module.LiveRun, "play_episode", interrupted)
    res = invoke(cli, args)
    assert res.exit_code == 130, res.output + res.stderr
    assert res.stderr.strip() == "tempora-trace: interrupted: nothing written (a live run is written whole or not at all)"
    assert snapshot(ws) == before, "the interrupted run left something behind"
    monkeypatch.setattr(live_module.LiveRun, "play_episode", real)
    res = invoke(cli, args)
    assert res.exit_code == 0, res.stderr
    assert len(list((ws / "live").glob("*.live.parquet"))) == 1
    assert len(list((ws / "along" / "deeper").glob("*.parquet"))) == 1
    assert not [p for p in ws.rglob("*") if p.name.endswith(".partial") or p.name.startswith(".")], "left behind"


def test_an_out_beside_unrelated_parquet_files_is_accepted(ws):
    """Only a Tempora trace makes a folder a trace folder: other Parquet files do not."""
    import polars as pl

    (ws / "mixed").mkdir()
    pl.DataFrame({"a": [1]}).write_parquet(ws / "mixed" / "other.parquet")
    res = invoke(cli, live(ws, "--rho", "1", "--lambda-ms", "10", out=str(ws / "mixed")))
    assert res.exit_code == 0, res.stderr
    assert len(list((ws / "mixed").glob("*.live.parquet"))) == 1
    assert os.path.exists(ws / "mixed" / "other.parquet")
