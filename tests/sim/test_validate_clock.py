"""The clock check of ``tempora-sim validate``: the traced δ of the live run's batches, the
trace's idle effect applied at the idle time each live event waited, against the live δ."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from helpers.validation_files import write_validation_set
from tempora_sim.commands.main import main
from tempora_sim.sweeps import synthetic as syn
from tempora_sim.validation.live_runs import validate

EPISODES = ("gaussian_noise", "fog")
N = 30


def _setup(tmp: Path, variability, factor: float, rho: float, runs: int = 2, **trace_kw) -> tuple[Path, Path]:
    """Traces of standard and tent, and ``runs`` live runs of tent at ``rho`` whose every event
    takes ``factor`` × its traced time."""
    return write_validation_set(tmp, variability, [np.full(N * len(EPISODES), factor)] * runs, (rho,), EPISODES, N, **trace_kw)


QUIET = syn.SyntheticVariability(0.0, 0.0, gaps_ms=())


def test_live_events_at_the_traced_times_pass_and_a_ten_percent_slower_clock_fails(tmp_path):
    live, traces = _setup(tmp_path / "same", QUIET, 1.0, 0.25)
    row = validate([live], traces).settings.row(0, named=True)
    assert row["clock_gap_pct"] == pytest.approx(0.0, abs=1e-9) and row["clock_gap_idle_pct"] == pytest.approx(0.0, abs=1e-9)
    # no spread measured: the tolerance is --clock-tol-pct's default
    assert row["clock_tolerance_pct"] == pytest.approx(5.0) and row["clock_pass"]

    live, traces = _setup(tmp_path / "slow", QUIET, 1.10, 0.25)
    v = validate([live], traces)
    row = v.settings.row(0, named=True)
    # every live event 10 % slower: the trace is 1/1.1 − 1 = −9.1 % of the live clock
    assert row["clock_gap_idle_pct"] == pytest.approx(100 * (1 / 1.10 - 1), rel=1e-6)
    assert not row["clock_pass"] and not v.passed and v.checks_beyond_tolerance >= 1
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces)])
    assert res.exit_code == 1 and "clock: traced δ" in res.output.replace("\n", " ")
    # a wider tolerance lets it through
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces), "--clock-tol-pct", "10"])
    assert "beyond it" not in res.output.replace("\n", " ")


def test_the_trace_idle_effect_is_applied_at_each_live_event_idle_time(tmp_path):
    """The trace measured events after a wait 20 % slower (gaps 2 and 8 ms); at ρ = 25 % every
    live event but each episode's first waits longer than 8 ms. Live events 20 % slower are
    then what the trace says: the raw gap is −1/6, the idle-adjusted one only the first
    events' share."""
    idle = syn.SyntheticVariability(0.0, 0.0, per_episode=8, gaps_ms=(2.0, 8.0), idle_factor=(1.2, 1.2))
    live, traces = _setup(tmp_path, idle, 1.2, 0.25)
    v = validate([live], traces)
    row = v.settings.row(0, named=True)
    assert row["clock_gap_pct"] == pytest.approx(100 * (1 / 1.2 - 1), rel=1e-6)
    # every event but each episode's first waited beyond the largest measured gap
    (live_file,) = live.glob("*.parquet")
    lv = pq.read_table(live_file).to_pydict()
    for r in (0, 1):
        for ep in EPISODES:
            idx = [i for i in range(len(lv["run"])) if lv["run"][i] == r and lv["episode"][i] == ep]
            waits = [lv["pickup_ms"][b] - lv["free_ms"][a] for a, b in zip(idx, idx[1:])]
            assert all(lv["served"][i] for i in idx) and min(waits) > 8.0
    # by hand: each episode's first event waited 0 ms (factor 1), every other one > 80 ms (factor 1.2)
    t = pq.read_table(traces / "tent.parquet")
    adapt = t.filter(pc.equal(t.column("phase"), "adapt"))
    d = np.asarray(adapt.column("delta_ms").to_pylist())
    first = np.asarray(adapt.column("step").to_pylist()) == 0
    expected_trace = np.where(first, d, 1.2 * d).mean()
    assert row["delta_trace_idle_ms"] == pytest.approx(expected_trace, rel=1e-9)
    assert row["clock_gap_idle_pct"] == pytest.approx(100 * (expected_trace / (1.2 * d.mean()) - 1), rel=1e-9)
    assert abs(row["clock_gap_idle_pct"]) < 1.0 and row["clock_pass"]


def test_a_trace_whose_passes_spread_widely_gets_a_wider_tolerance(tmp_path):
    live, traces = _setup(tmp_path, syn.SyntheticVariability(0.08, 0.0, gaps_ms=()), 1.0, 0.25)
    row = validate([live], traces).settings.row(0, named=True)
    assert row["clock_tolerance_pct"] > 5.0
    # at the traced times: an agreement, not a pass on the spread
    assert row["clock_pass"] and not row["clock_pass_on_spread"]
    live2, traces2 = _setup(tmp_path / "b", syn.SyntheticVariability(0.08, 0.0, gaps_ms=()), 1.0 + row["clock_tolerance_pct"] / 200, 0.25)
    assert validate([live2], traces2).settings.row(0, named=True)["clock_pass"]


def _between(tolerance_pct: float) -> float:
    """The live/traced factor whose clock gap lies halfway between --clock-tol-pct's 5 % and
    ``tolerance_pct`` (live events slower: the gap is 100·(1/factor − 1), negative)."""
    gap = (5.0 + tolerance_pct) / 2
    return 1.0 / (1.0 - gap / 100)


def test_a_pass_on_the_trace_spread_alone_is_called_inconclusive(tmp_path):
    noisy = syn.SyntheticVariability(0.08, 0.0, gaps_ms=())
    live, traces = _setup(tmp_path / "a", noisy, 1.0, 0.25)
    spread = validate([live], traces).settings.row(0, named=True)["clock_tolerance_pct"]
    assert spread > 5.5
    live, traces = _setup(tmp_path / "b", noisy, _between(spread), 0.25)
    row = validate([live], traces).settings.row(0, named=True)
    # beyond --clock-tol-pct, within the spread: passed only because the trace is noisy
    assert 5.0 < abs(row["clock_gap_idle_pct"]) < spread
    assert row["clock_pass"] and row["clock_pass_on_spread"]
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces), "--out", str(tmp_path / "v")])
    # not an agreement, so not a pass: exit status 1, and the closing line says why
    assert res.exit_code == 1, res.output
    assert "1 clock check(s) inconclusive (their traces too noisy to tell the clocks apart)" in res.stderr
    flat = " ".join(res.output.split())
    assert "clock, inconclusive: 1 of them pass only on their trace's own spread" in flat
    assert "trace and play again while the machine holds its speed" in flat
    # with a tolerance that covers the gap, the check is an agreement and says nothing more
    res = CliRunner().invoke(
        main, ["validate", str(live), "--traces", str(traces), "--out", str(tmp_path / "w"), "--clock-tol-pct", str(spread)]
    )
    assert res.exit_code in (0, 1), res.output
    assert "inconclusive" not in res.output


def _traces_at(tmp: Path, scale: float, variability=QUIET) -> Path:
    """The traces `_setup` writes (the same draws), every time × ``scale``: the same
    configurations traced again on a machine ``scale`` times slower."""
    out = tmp / "after"
    out.mkdir(parents=True)
    for m in ("standard", "tent"):
        _, table = syn.make_trace(m, episodes=EPISODES, num_batches=N, variability=variability, time_scale=scale)
        pq.write_table(table, out / f"{m}.parquet")
    return out


def test_the_sandwich_takes_a_steady_drift_out_of_the_clock_check(tmp_path):
    """The machine sped up steadily: the trace before ran 7.5 % slower than the live runs, the
    trace after 7.5 % faster. Each side alone is beyond 5 %; their geometric mean is the clock
    at the live runs' moment, √0.86 / 0.93 − 1 = −0.3 %, and the sandwich passes."""
    live, traces = _setup(tmp_path, QUIET, 0.93, 0.25)
    after = _traces_at(tmp_path, 0.86)
    alone = validate([live], traces).settings.row(0, named=True)
    assert alone["clock_gap_idle_pct"] == pytest.approx(100 * (1 / 0.93 - 1), rel=1e-6) and not alone["clock_pass"]
    v = validate([live], traces, sandwich_source=after)
    row = v.settings.row(0, named=True)
    assert row["clock_gap_idle_pct"] == pytest.approx(alone["clock_gap_idle_pct"], rel=1e-12)
    assert row["clock_gap_idle_other_pct"] == pytest.approx(100 * (0.86 / 0.93 - 1), rel=1e-6)
    assert row["clock_gap_sandwich_pct"] == pytest.approx(100 * (0.86**0.5 / 0.93 - 1), rel=1e-6)
    assert row["clock_pass"] and not row["clock_pass_on_spread"] and v.passed
    assert row["trace_other"].endswith("tent.parquet") and "after" in row["trace_other"]
    # the replay is the traces before's: the same α and U as without the traces after
    for col in ("alpha_replay", "utility_replay", "alpha_timing_lo", "alpha_timing_hi", "covered_alpha"):
        assert row[col] == alone[col], col
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces), "--sandwich", str(after), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "δ Δ% sandwich" in flat or "sandwich" in flat
    assert "the geometric mean of the traces on both sides of the live runs" in flat
    assert "each side alone: --traces +7.5 to +7.5 %, --sandwich -7.5 to -7.5 %" in flat
    written = pq.read_table(tmp_path / "v" / "validation.parquet").to_pylist()[0]
    assert written["clock_gap_sandwich_pct"] == pytest.approx(row["clock_gap_sandwich_pct"])
    # without the traces after, the same runs fail on the trace before alone
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces)])
    assert res.exit_code == 1


def test_a_gap_both_sides_share_is_the_clocks_and_fails_the_sandwich(tmp_path):
    """Both traces 10 % faster than the live events: no drift to take out, the clocks differ."""
    live, traces = _setup(tmp_path, QUIET, 1.10, 0.25)
    row = validate([live], traces, sandwich_source=_traces_at(tmp_path, 1.0)).settings.row(0, named=True)
    assert row["clock_gap_sandwich_pct"] == pytest.approx(100 * (1 / 1.10 - 1), rel=1e-6)
    assert not row["clock_pass"]


def test_the_sandwich_tolerance_is_the_spread_of_a_mean_of_two_passes(tmp_path):
    """Each trace alone carries the tolerance of one pass; the mean of two independent passes
    spreads √2 less (log scale), and never below --clock-tol-pct."""
    noisy = syn.SyntheticVariability(0.08, 0.0, gaps_ms=())
    live, traces = _setup(tmp_path, noisy, 1.0, 0.25)
    one = validate([live], traces).settings.row(0, named=True)["clock_tolerance_pct"]
    row = validate([live], traces, sandwich_source=_traces_at(tmp_path, 1.0, noisy)).settings.row(0, named=True)
    expected = 100 * (math.exp(math.log(1 + one / 100) / math.sqrt(2)) - 1)
    assert row["clock_tolerance_pct"] == pytest.approx(max(5.0, expected), rel=1e-9)
    # noisier traces, a gap beyond 5 % within their mean's spread: inconclusive, and said of the two
    noisier = syn.SyntheticVariability(0.2, 0.0, gaps_ms=())
    live_a, traces_a = _setup(tmp_path / "a", noisier, 1.0, 0.25)
    wide = validate([live_a], traces_a, sandwich_source=_traces_at(tmp_path / "a", 1.0, noisier)).settings
    assert wide.row(0, named=True)["clock_tolerance_pct"] > 6.0
    live_b, traces_b = _setup(tmp_path / "b", noisier, _between(wide.row(0, named=True)["clock_tolerance_pct"]), 0.25)
    after_b = _traces_at(tmp_path / "b", 1.0, noisier)
    assert validate([live_b], traces_b, sandwich_source=after_b).settings.row(0, named=True)["clock_pass_on_spread"]
    res = CliRunner().invoke(main, ["validate", str(live_b), "--traces", str(traces_b), "--sandwich", str(after_b)])
    assert res.exit_code == 1 and "clock, inconclusive: 1 of them pass only on their two traces' spread" in " ".join(res.output.split())
    quiet_live, quiet_traces = _setup(tmp_path / "q", QUIET, 1.0, 0.25)
    row = validate([quiet_live], quiet_traces, sandwich_source=_traces_at(tmp_path / "q", 1.0)).settings.row(0, named=True)
    assert row["clock_tolerance_pct"] == pytest.approx(5.0)


def test_a_sandwich_without_the_live_runs_method_is_one_line(tmp_path):
    live, traces = _setup(tmp_path, QUIET, 1.0, 0.25)
    after = _traces_at(tmp_path, 1.0)
    (after / "tent.parquet").unlink()
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces), "--sandwich", str(after)])
    assert res.exit_code == 2 and "under --sandwich" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces), "--sandwich", str(tmp_path / "nowhere")])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_names_from_the_data_are_shown_as_text_in_validate(tmp_path):
    """A model named with an escape sequence and rich markup is printed as text, never applied."""
    name = "\x1b[2J[bold red]m[/]"
    write_validation_set(tmp_path, QUIET, [np.ones(N * len(EPISODES))], (0.5,), EPISODES, N, model=name)
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "l"), "--traces", str(tmp_path / "t"), "--clock-tol-pct", "100"])
    assert res.exit_code in (0, 1), res.output
    assert "\x1b" not in res.output and "\\x1b[2J" in res.output and "[bold red]m[/]" in res.output


def _probe_live(live: Path, probes_ms, kind: str = "synthetic") -> Path:
    """The live file under ``live`` with every run's speed probe set to ``probes_ms`` (what
    ``tempora-trace live`` records before each episode) and the probe's kind."""
    import json

    (path,) = live.glob("*.parquet")
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"tempora_live"])
    meta["speed_probe_kind"] = kind
    for run in meta["runs"]:
        run["speed_probe_ms"] = probes_ms
    pq.write_table(table.replace_schema_metadata({b"tempora_live": json.dumps(meta).encode()}), path)
    return live


def test_the_speed_probe_separates_the_machine_from_the_tracer(tmp_path):
    """Live events 10 % slower than traced, and the probe 10 % slower during the live runs
    than during the trace: the machine slowed, the clocks agree at one speed."""
    from tempora_schema import probe_median_ms
    from tempora_sim.sweeps.traces import read_trace

    live, traces = _setup(tmp_path, QUIET, 1.10, 0.25, probe_ms=2.0)
    traced_probe = probe_median_ms(read_trace(traces / "tent.parquet").meta)
    _probe_live(live, [1.10 * traced_probe] * 3)
    v = validate([live], traces)
    row = v.settings.row(0, named=True)
    assert row["probe_trace_ms"] == pytest.approx(traced_probe) and row["probe_live_ms"] == pytest.approx(1.10 * traced_probe)
    assert row["speed_gap_pct"] == pytest.approx(100 * (1 / 1.10 - 1), rel=1e-9)
    assert row["clock_gap_speed_pct"] == pytest.approx(0.0, abs=1e-9)
    # the check itself still judges the clocks as traced: the probe explains, it does not excuse
    assert row["clock_gap_idle_pct"] == pytest.approx(100 * (1 / 1.10 - 1), rel=1e-6) and not row["clock_pass"]
    out = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces)]).output.replace("\n", " ")
    assert "machine speed" in out and "in 1 of 1 setting(s) it moved by more than the tolerance" in out
    # a machine that held its speed is named without the warning
    _probe_live(live, [traced_probe] * 3)
    out = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces)]).output.replace("\n", " ")
    assert "machine speed" in out and "moved by more than" not in out


def test_no_speed_comparison_without_a_probe_on_both_sides_of_the_same_kind(tmp_path):
    live, traces = _setup(tmp_path / "a", QUIET, 1.0, 0.25, probe_ms=2.0)
    row = validate([live], traces).settings.row(0, named=True)  # a live file without probes
    assert row["speed_gap_pct"] is None and row["clock_gap_speed_pct"] is None
    _probe_live(live, [2.0], kind="matmul-256-fp32x8")  # the trace timed another computation
    row = validate([live], traces).settings.row(0, named=True)
    assert row["speed_gap_pct"] is None and row["clock_gap_speed_pct"] is None
    live, traces = _setup(tmp_path / "b", QUIET, 1.0, 0.25)  # a trace without probes
    _probe_live(live, [2.0])
    assert validate([live], traces).settings.row(0, named=True)["clock_gap_speed_pct"] is None


@pytest.mark.parametrize(
    ("probes", "kind", "message"),
    [
        ([1.0, -2.0], "synthetic", "speed_probe_ms must be a list of times > 0"),
        ("fast", "synthetic", "speed_probe_ms must be a list of times > 0"),
        ([1.0], "", "needs the metadata 'speed_probe_kind'"),
    ],
)
def test_a_live_file_with_a_bad_speed_probe_is_refused_in_one_line(tmp_path, probes, kind, message):
    live, traces = _setup(tmp_path, QUIET, 1.0, 0.25)
    _probe_live(live, probes, kind)
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces)])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


def _probe_trace(path: Path, probes_ms) -> Path:
    """The trace at ``path`` with its speed probes replaced by ``probes_ms``, in the order they ran."""
    import json

    from tempora_schema import METADATA_KEY

    table = pq.read_table(path)
    key = METADATA_KEY.encode()
    meta = json.loads(table.schema.metadata[key])
    meta["speed_probe"] = [{"episode": EPISODES[0], "step": 5 * i, "ms": float(ms)} for i, ms in enumerate(probes_ms)]
    meta["speed_probe_kind"] = "synthetic"
    pq.write_table(table.replace_schema_metadata({key: json.dumps(meta).encode()}), path)
    return path


def test_a_machine_that_changed_speed_inside_a_trace_or_the_live_runs_is_named(tmp_path):
    """The trace before's probes read 2 ms three times, then 1.5 ms three times (the machine a
    third faster halfway, by the medians of three successive probes); the trace after's hold
    2 ms; the live runs' probes, run after run, move 20 %. Each is a column, and one line names
    the trace before and the live runs, never the steady trace after or a single slow probe."""
    live, traces = _setup(tmp_path, QUIET, 1.0, 0.25, probe_ms=2.0)
    after = _traces_at(tmp_path, 1.0)
    _probe_trace(traces / "tent.parquet", [2.0, 2.0, 2.0, 1.5, 1.5, 1.5])
    _probe_trace(after / "tent.parquet", [2.0, 2.0, 3.0, 2.0, 2.0])
    import json

    (path,) = live.glob("*.parquet")
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"tempora_live"])
    meta["speed_probe_kind"] = "synthetic"  # the traces' kind: what the live runs timed
    for i, run in enumerate(sorted(meta["runs"], key=lambda r: r["run"])):
        run["speed_probe_ms"] = [2.0, 2.0] if i == 0 else [2.4, 2.4]
    pq.write_table(table.replace_schema_metadata({b"tempora_live": json.dumps(meta).encode()}), path)
    row = validate([live], traces, sandwich_source=after).settings.row(0, named=True)
    assert row["trace_speed_moved_pct"] == pytest.approx(100 * (2.0 / 1.5 - 1))
    assert row["trace_other_speed_moved_pct"] == pytest.approx(0.0)
    # run 0: 2.0, 2.0; run 1: 2.4, 2.4 → medians of three 2.0 and 2.4
    assert row["live_speed_moved_pct"] == pytest.approx(20.0)
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces), "--sandwich", str(after)])
    flat = " ".join(res.output.split())
    assert (
        "inside a run: the machine's speed moved by more than 10 % (medians of three successive speed probes) within 2 of 3 checked" in flat
    )
    assert "tent --traces trace 33 %, tent live runs 20 %" in flat and "--sandwich trace" not in flat
    # traces with fewer than three probes are not checked, and nothing moved is not named
    _probe_trace(traces / "tent.parquet", [2.0, 1.5])
    row = validate([live], traces).settings.row(0, named=True)
    assert row["trace_speed_moved_pct"] is None and "trace_other_speed_moved_pct" not in row
    for run in meta["runs"]:
        run["speed_probe_ms"] = [2.0]
    pq.write_table(table.replace_schema_metadata({b"tempora_live": json.dumps(meta).encode()}), path)
    res = CliRunner().invoke(main, ["validate", str(live), "--traces", str(traces)])
    assert "inside a run" not in res.output
