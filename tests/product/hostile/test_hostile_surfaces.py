"""Hostile input to the newer ``tempora-sim`` surfaces: grids, arrival processes, ``validate``
and its live files, ``advise``, ``migrate``, the report's staging folder and the environment
the tools run in. Every refused case is one stderr line, exit status 2, no traceback and the
workspace byte for byte as it was (tests/helpers/hostile.py); the rest check that nothing is lost or
left behind. In-process on tiny synthetic traces, except the environment cases (a process
whose standard streams are set up hostile)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers.hostile import assert_refused, inject_errno, invoke, snapshot
from helpers.processes import child_env
from tempora_schema import METADATA_KEY, SCHEMA_VERSION
from tempora_schema.live import LIVE_COLUMNS, LIVE_METADATA_KEY, SHARED_FIELDS, live_arrow_schema, validate_live_table
from tempora_sim.commands.main import main
from tempora_sim.sweeps.synthetic import make_trace, write_trace_set

PROG = "tempora-sim"
ROOT = Path(__file__).resolve().parents[3]
SMALL = dict(num_batches=6, episodes=("fog", "snow"), checkpoints=(0, 2), frozen_eval=2, batch_size=8, num_classes=10)
LAMBDA_MS = 400.0  # above every synthetic δ: a discrete run at ρ = 0.5 serves every batch at its arrival


# ------------------------------------------------------------------------ a live file, by hand
def live_table(change_rows=None, change_meta=None) -> pa.Table:
    """A valid live file of the synthetic ``tent`` trace: a discrete run (ρ = 0.5, every batch
    served as it arrives) and an amortised run (B large, every batch adapted back to back),
    built from the trace's own rows as the live runner would record them."""
    meta, trace = make_trace("tent", **SMALL)
    rows = [r for r in trace.to_pylist() if r["phase"] == "adapt"]
    gamma = LAMBDA_MS / 0.5
    runs = [
        {"run": 0, "protocol": "discrete", "repeat": 1, "rho": 0.5, "gamma_ms": gamma, "queue": 1},
        {"run": 1, "protocol": "amortised", "repeat": 1, "budget_ms": 1e6, "budget_rule": "overshoot"},
    ]
    cols: dict[str, list] = {name: [] for name in LIVE_COLUMNS}
    for run in runs:
        clock, episode, event = 0.0, None, 0
        for r in rows:
            if r["episode"] != episode:
                clock, episode, event = 0.0, r["episode"], 0
            arrival = r["step"] * gamma if run["protocol"] == "discrete" else None
            pickup = arrival if arrival is not None else clock
            delta = r["e_ms"] + r["l_ms"]
            row = dict(
                run=run["run"],
                episode=r["episode"],
                domain=r["domain"],
                severity=r["severity"],
                step=r["step"],
                n=r["n"],
                served=True,
                event=event,
                mode="adapt",
                correct=r["correct"],
                arrival_ms=arrival,
                pickup_ms=pickup,
                predict_ms=pickup + r["e_ms"],
                free_ms=pickup + delta,
                e_ms=r["e_ms"],
                l_ms=r["l_ms"],
                delta_ms=delta,
                charged_ms=max(0.0, delta - LAMBDA_MS) if run["protocol"] == "amortised" else None,
                spent_ms=0.0 if run["protocol"] == "amortised" else None,
                peak_mem_bytes=None,
            )
            clock, event = pickup + delta, event + 1
            for k, v in row.items():
                cols[k].append(v)
    live_meta = {
        "live_schema_version": 1,
        **{k: meta[k] for k in SHARED_FIELDS},
        "lambda_ms": LAMBDA_MS,
        "lambda_source": "--lambda-ms",
        "clock": "time.perf_counter_ns",
        "clock_resolution_ns": 1,
        "spin_us": 500.0,
        "runs": runs,
    }
    if change_rows is not None:
        change_rows(cols)
    if change_meta is not None:
        change_meta(live_meta)
    return pa.table(cols, schema=live_arrow_schema(live_meta))


def write_live(path: Path, change_rows=None, change_meta=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(live_table(change_rows, change_meta), path)
    return path


def _set(column: str, row: int, value):
    return lambda cols: cols[column].__setitem__(row, value)


def _meta_runs(key: str, run: int, value):
    return lambda meta: meta["runs"][run].__setitem__(key, value)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    write_trace_set(tmp_path / "traces", ("standard", "tent"), **SMALL)
    write_live(tmp_path / "live" / "tent.live.parquet")
    (tmp_path / "notes.txt").write_text("the user's own notes")
    report = tmp_path / "report"
    (report / "tables").mkdir(parents=True)
    (report / "report.md").write_text("# an earlier report\n")
    return tmp_path


def test_the_hand_made_live_file_is_valid_and_validates(ws):
    """The corrupt files below differ from this one in one value each."""
    table = pq.read_table(ws / "live" / "tent.live.parquet")
    meta = json.loads(table.schema.metadata[LIVE_METADATA_KEY.encode()])
    validate_live_table(table, meta, "hand-made")
    res = invoke(main, ["validate", ws / "live", "--traces", ws / "traces"])
    assert res.exit_code == 0, res.output + res.stderr
    assert "every check within tolerance" in res.output


SWEEP = ["sweep", "{ws}/traces"]
VALIDATE = ["validate", "{ws}/bad/tent.live.parquet", "--traces", "{ws}/traces"]


def _sandwich_of(ws: Path, without: str | None = None) -> None:
    """``ws/after``: the workspace's traces again, as if traced after the live runs, less the
    traces of method ``without``."""
    shutil.copytree(ws / "traces", ws / "after")
    if without is not None:
        for path in (ws / "after").glob(f"{without}*.parquet"):
            path.unlink()


CASES = {
    # grids
    "rho range with a subnormal step": ([*SWEEP, "--rho", "0.05:1:5e-324"], "more than 1,000,000 values", None),
    "T range with a subnormal step": ([*SWEEP, "--protocol", "continuous", "--T", "1:1000:5e-324"], "more than 1,000,000", None),
    "rho file /dev/zero": ([*SWEEP, "--rho", "@/dev/zero"], "larger than 64 MiB", None),
    "rho file /dev/urandom": ([*SWEEP, "--rho", "@/dev/urandom"], "larger than 64 MiB", None),
    # arrival processes
    "burst ON beyond float": ([*SWEEP, "--protocol", "discrete", "--arrivals", "burst:1e308,1"], "must be from 1e-06 to 1e+06", None),
    "burst OFF beyond float": ([*SWEEP, "--protocol", "discrete", "--arrivals", "burst:1,1e308"], "must be from 1e-06 to 1e+06", None),
    "burst ON subnormal": ([*SWEEP, "--protocol", "discrete", "--arrivals", "burst:5e-324,1"], "must be from 1e-06 to 1e+06", None),
    "arrival seeds beyond int64": (
        [*SWEEP, "--protocol", "discrete", "--arrivals", "poisson:9223372036854775807", "--arrival-seeds", "2"],
        "go beyond 2^63-1",
        None,
    ),
    # advise
    "advise: ci-seed beyond int64": (
        ["advise", "{ws}/traces", "--rho", "0.5", "--ci-seed", "99999999999999999999999"],
        "--ci-seed",
        None,
    ),
    "advise: ci-seed 2^63": (["advise", "{ws}/traces", "--rho", "0.5", "--ci-seed", str(2**63)], "0..2^63-1", None),
    "report: ci-seed 2^63": (["report", "{ws}/traces", "--out", "{ws}/r2", "--ci-seed", str(2**63)], "0..2^63-1", None),
    # validate: corrupt live files
    "validate: NaN free_ms": (
        VALIDATE,
        "column 'free_ms' holds NaN",
        lambda ws: write_live(ws / "bad" / "tent.live.parquet", _set("free_ms", 3, float("nan"))),
    ),
    "validate: NaN pickup_ms": (
        VALIDATE,
        "column 'pickup_ms' holds NaN",
        lambda ws: write_live(ws / "bad" / "tent.live.parquet", _set("pickup_ms", 2, float("nan"))),
    ),
    "validate: delta is not e + l": (
        VALIDATE,
        "is not e_ms + l_ms",
        lambda ws: write_live(ws / "bad" / "tent.live.parquet", lambda c: c["delta_ms"].__setitem__(4, c["delta_ms"][4] + 1.0)),
    ),
    "validate: rho contradicts lambda and gamma": (
        VALIDATE,
        "is not lambda_ms",
        lambda ws: write_live(ws / "bad" / "tent.live.parquet", change_meta=_meta_runs("rho", 0, 0.25)),
    ),
    "validate: lambda contradicts the runs": (
        VALIDATE,
        "is not lambda_ms",
        lambda ws: write_live(ws / "bad" / "tent.live.parquet", change_meta=lambda m: m.__setitem__("lambda_ms", 200.0)),
    ),
    "validate: gamma contradicts the arrivals": (
        VALIDATE,
        "arrival_ms contradicts gamma_ms",
        lambda ws: write_live(
            ws / "bad" / "tent.live.parquet",
            change_meta=lambda m: (m["runs"][0].__setitem__("gamma_ms", 1600.0), m["runs"][0].__setitem__("rho", 0.25)),
        ),
    ),
    "validate: out inside the traces": (
        ["validate", "{ws}/live", "--traces", "{ws}/traces", "--out", "{ws}/traces/val"],
        "inside the trace directory",
        None,
    ),
    "validate: out is the live folder": (
        ["validate", "{ws}/live", "--traces", "{ws}/traces", "--out", "{ws}/live"],
        "inside the live-run folder",
        None,
    ),
    "validate: out inside the live file's folder": (
        ["validate", "{ws}/live/tent.live.parquet", "--traces", "{ws}/traces", "--out", "{ws}/live/val"],
        "inside the live-run folder",
        None,
    ),
    "validate: out inside the sandwich's traces": (
        ["validate", "{ws}/live", "--traces", "{ws}/traces", "--sandwich", "{ws}/after", "--out", "{ws}/after/val"],
        "inside the trace directory",
        _sandwich_of,
    ),
    "validate: sandwich folder missing": (
        ["validate", "{ws}/live", "--traces", "{ws}/traces", "--sandwich", "{ws}/nowhere"],
        "nowhere",
        None,
    ),
    "validate: sandwich without the live run's method": (
        ["validate", "{ws}/live", "--traces", "{ws}/traces", "--sandwich", "{ws}/after"],
        "under --sandwich",
        lambda ws: _sandwich_of(ws, without="tent"),
    ),
}


def _args(args, ws):
    return [a.replace("{ws}", str(ws)) for a in args]


@pytest.mark.parametrize("case", list(CASES))
def test_refused_in_one_line_and_nothing_changes(case, ws):
    args, needle, setup = CASES[case]
    if setup is not None:
        setup(ws)
    before = snapshot(ws)
    assert_refused(invoke(main, _args(args, ws)), PROG, needle, before, ws)


# ------------------------------------------------------------------------ names from the data
#: Names in a trace and its live file that a terminal would obey: validate shows them as text.
#: name -> (metadata key renamed in the live file and its traces, the name, how it is shown)
VALIDATE_NAMES = {
    "validate: model named with escape sequences and markup": (
        "model",
        "\x1b[2J\x1b]0;title\x07[bold red]m[/]",
        "\\x1b[2J\\x1b]0;title\\x07[bold red]m[/]",
    ),
    # the table's method column holds ten characters: one name for each
    "validate: method named with rich markup": ("method", "[i]m[/]", "[i]m[/]"),
    "validate: method named with an escape sequence": ("method", "\x1b[7mm", "\\x1b[7mm"),
}


def _renamed(path: Path, key: str, name: str) -> None:
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY.encode()])
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta | {key: name})}), path)


@pytest.mark.parametrize("case", list(VALIDATE_NAMES))
def test_validate_shows_names_from_the_data_as_text(case, ws):
    """The live run and its trace renamed alike (the method only on tent's trace): validate
    pairs them as before and prints the name with its control characters visible and its
    markup as written, never applied; it writes nothing."""
    key, name, shown = VALIDATE_NAMES[case]
    for trace in ("tent", "standard") if key != "method" else ("tent",):
        _renamed(ws / "traces" / f"{trace}.parquet", key, name)
    write_live(ws / "live" / "tent.live.parquet", change_meta=lambda meta: meta.__setitem__(key, name))
    before = snapshot(ws)
    res = invoke(main, ["validate", ws / "live", "--traces", ws / "traces"])
    assert res.exit_code == 0 and "every check within tolerance" in res.output, res.output + res.stderr
    everything = res.output + res.stderr
    assert "\x1b" not in everything and "\x07" not in everything and "Traceback" not in everything
    assert shown in res.output, res.output
    assert snapshot(ws) == before


#: Cases this module adds to the hostile-input suite (docs/reference/errors.md counts them): the table
#: of refusals, a failed write, a full and a closed standard output (the closed one for each tool), and
#: validate's names from the data.
SIM_CASE_COUNT = len(CASES) + 3 + len(VALIDATE_NAMES)
TRACE_CASE_COUNT = 1


# ------------------------------------------------------------------------ nothing lost
def _v1_trace(path: Path) -> Path:
    meta, table = make_trace("tent", **SMALL)
    v1 = {
        k: v
        for k, v in meta.items()
        if k not in ("severity", "domains", "max_batches", "weights", "threads", "speed_probe", "speed_probe_kind")
    }
    v1["schema_version"] = 1
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(v1)}), path)
    return path


def _version(path: Path) -> int:
    return json.loads(pq.read_schema(path).metadata[METADATA_KEY.encode()])["schema_version"]


def test_migrate_keeps_a_read_only_file_read_only_and_a_link_a_link(tmp_path):
    folder = tmp_path / "v1"
    locked = _v1_trace(folder / "tent.parquet")
    os.chmod(locked, 0o444)
    target = _v1_trace(tmp_path / "elsewhere" / "standard.parquet")
    os.chmod(target, 0o640)
    link = folder / "standard.parquet"
    os.symlink(target, link)
    res = invoke(main, ["migrate", folder, "--weights", "random", "--threads", "1"])
    assert res.exit_code == 0, res.stderr
    assert "2 of 2 file(s) rewritten" in res.stdout
    assert stat.S_IMODE(locked.stat().st_mode) == 0o444 and _version(locked) == SCHEMA_VERSION
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert _version(target) == SCHEMA_VERSION and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not [p for p in tmp_path.rglob(".*")], "temporary files left behind"


def test_a_report_killed_mid_way_leaves_a_stage_the_next_run_removes(ws):
    """SIGKILL cannot be caught: the staging folder inside the old report stays until the next
    report into that folder, which holds the lock and so knows no live run owns it."""
    code = (
        "import os, signal\n"
        "import tempora_toolkit.atomic_files as o\n"
        "real = o._publish\n"
        "def die(*a, **k): os.kill(os.getpid(), signal.SIGKILL)\n"
        "o._publish = die\n"
        "from tempora_sim.commands.main import main\n"
        f"main.main(['report', {str(ws / 'traces')!r}, '--out', {str(ws / 'report')!r}, '--protocol', 'offline'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [p.name for p in (ws / "report").iterdir() if p.name.startswith(".staging")], "the kill left no stage to clean"
    res = invoke(main, ["report", ws / "traces", "--out", ws / "report", "--protocol", "offline"])
    assert res.exit_code == 0, res.stderr
    assert not [p for p in ws.rglob(".*")], "a staging folder or lock was left behind"
    assert "# Tempora report" in (ws / "report" / "report.md").read_text()


def test_a_failed_write_names_the_out_folder_not_the_hidden_stage(ws, monkeypatch):
    before = snapshot(ws)
    real_write = os.write

    def write(fd, data):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.startswith(str(ws / "report")) and "utility.csv" in target:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    line = assert_refused(
        invoke(main, ["sweep", ws / "traces", "--out", ws / "report", "--protocol", "offline"]), PROG, "no space left", before, ws
    )
    assert f"{ws / 'report' / 'utility.csv'}:" in line and ".staging" not in line and ".tmp-" not in line


def test_full_standard_output_is_one_line_naming_it(ws, monkeypatch):
    inject_errno(monkeypatch, Path("/dev/full"), errno.ENOSPC, ("write",))  # nothing below ws fails
    before = snapshot(ws)
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "tempora_sim.commands.main", "sweep", str(ws / "traces"), "--protocol", "offline"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            timeout=300,
        )
    _one_error_line(proc, "cannot write to standard output: no space left on device")
    assert snapshot(ws) == before


# ------------------------------------------------------------------------ the environment
def _one_error_line(proc, needle: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "warning:" not in ln]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)


ENVIRONMENTS = {
    "ascii output encoding": dict(env={"PYTHONIOENCODING": "ascii"}),
    "one column": dict(env={"COLUMNS": "1"}),
    "columns not a number": dict(env={"COLUMNS": "wide"}),
}


@pytest.mark.parametrize("case", list(ENVIRONMENTS))
@pytest.mark.parametrize("module", ["tempora_sim.commands.main", "tempora_trace.cli"])
def test_a_hostile_environment_still_prints(case, module, ws):
    args = ["sweep", str(ws / "traces"), "--protocol", "offline,discrete"] if module == "tempora_sim.commands.main" else ["list"]
    proc = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=child_env(**ENVIRONMENTS[case]["env"]), timeout=300
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip()


@pytest.mark.parametrize("module,args", [("tempora_sim.commands.main", ["sweep", "{ws}/traces"]), ("tempora_trace.cli", ["list"])])
def test_closed_standard_output_is_one_line(module, args, ws):
    before = snapshot(ws)
    proc = subprocess.run(
        [sys.executable, "-m", module, *_args(args, ws)],
        stdout=None,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        timeout=300,
        preexec_fn=lambda: os.close(1),
    )
    _one_error_line(proc, "standard output is closed")
    assert snapshot(ws) == before


def test_a_report_interrupted_while_staging_keeps_the_old_report(ws):
    """Ctrl-C (not SIGKILL) in the middle of writing: the handler removes the stage at once."""
    code = (
        "import time\n"
        "import tempora_toolkit.atomic_files as o\n"
        "def slow(*a, **k): time.sleep(60)\n"
        "o._publish = slow\n"
        "from tempora_sim.commands.main import run\n"
        "import sys\n"
        f"sys.argv = ['tempora-sim', 'report', {str(ws / 'traces')!r}, '--out', {str(ws / 'report')!r}, '--protocol', 'offline']\n"
        "run()\n"
    )
    before = snapshot(ws)
    proc = subprocess.Popen([sys.executable, "-c", code], env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not [p for p in (ws / "report").iterdir() if p.name.startswith(".staging")]:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip() == "tempora-sim: interrupted", err
    assert snapshot(ws) == before
