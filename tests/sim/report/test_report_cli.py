"""``tempora-sim report`` / ``show`` end to end: from traces (swept on the fly), from sweep
results alone, and from the committed demo traces once they exist."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from helpers.utility_tables import WIN, grid, utility_frame
from tempora_sim import analyses as an
from tempora_sim import reporting as rp
from tempora_sim.commands.main import main

ROOT = Path(__file__).resolve().parents[3]
DEMO_TRACES = ROOT / "traces" / "demo"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EPISODES = ("gaussian_noise", "defocus_blur", "snow", "contrast", "fog")
METHODS = ("standard", "neo", "adabn", "tent", "eta", "shot-im", "sar")


@pytest.fixture(scope="module")
def synthetic_traces(tmp_path_factory) -> Path:
    """A deterministic synthetic trace set (one group, 7 methods, 5 episodes of 60 batches),
    from the simulator's generator: paper-shaped timings, fixed RNG seeds."""
    from tempora_sim.sweeps.synthetic import write_trace_set

    d = tmp_path_factory.mktemp("traces")
    write_trace_set(d, methods=METHODS, episodes=EPISODES, num_batches=60, batch_size=32, checkpoints=(0, 2, 4, 8, 16, 32), frozen_eval=8)
    return d


@pytest.fixture(scope="module")
def report_from_traces(synthetic_traces, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("report")
    res = CliRunner().invoke(main, ["report", str(synthetic_traces), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, res.output


def _check_report(out: Path, expect_latency: bool, groups: tuple[str, ...] = ("",)) -> str:
    """Every table and figure is there; ``groups`` are the figure-name prefixes (one per
    comparison group when there are several, e.g. ``1-demo-resnet-``)."""
    md = (out / "report.md").read_text(encoding="utf-8")
    for spec in rp.TABLES.values():
        assert f"# {spec.title}" in md
        csv = out / "tables" / f"{spec.name}.csv"
        if spec.needs_traces and not expect_latency:
            assert not csv.exists() and "needs the traces" in md
        elif spec.name == "seed_stability" and not csv.exists():
            assert "one seed per group" in md  # the table needs several seeds and says so
        elif spec.name == "policies" and not csv.exists():
            assert "no trace under a sparse-adaptation policy" in md  # and says what it needs
        else:
            assert csv.is_file() and pl.read_csv(csv).height > 0, spec.name
    figures = ["winners", "curves", "pareto"] + (["latency"] if expect_latency else [])
    for name in (prefix + fig for prefix in groups for fig in figures):
        png, pdf = out / "figures" / f"{name}.png", out / "figures" / f"{name}.pdf"
        assert png.read_bytes()[:8] == PNG_MAGIC and pdf.read_bytes()[:5] == b"%PDF-"
        assert f"](figures/{name}.png)" in md
    # every embedded link resolves
    for link in re.findall(r"\]\(([^)]+)\)", md):
        assert (out / link).is_file(), link
    return md


def test_report_from_traces_has_every_table_and_figure(report_from_traces):
    out, stdout = report_from_traces
    md = _check_report(out, expect_latency=True)
    assert "wrote" in stdout and "sweep" in stdout
    # the sweep's results and the traces' times are kept beside the report
    assert (out / rp.RESULTS_FILE).is_file() and (out / rp.TRACE_TIMES_FILE).is_file()
    assert "## Summary" in md and "λ =" in md and "**Strictest discrete pressure" in md


def test_report_tables_agree_with_the_analyses(report_from_traces):
    out, _ = report_from_traces
    utility = pl.read_parquet(out / rp.RESULTS_FILE)
    wc = pl.read_csv(out / "tables" / "win_counts.csv")
    assert wc.sort("method").select("method", "wins").rows() == an.win_counts(utility).sort("method").select("method", "wins").rows()
    n_cells = len(EPISODES) * utility.filter(pl.col("episode") != an.POOLED).select("protocol", "value").n_unique()
    assert wc.get_column("cells").unique().to_list() == [n_cells]
    lat = pl.read_csv(out / "tables" / "latency.csv")
    assert set(lat.get_column("method")) == set(METHODS)
    assert (lat.get_column("batches") == len(EPISODES) * 60).all()
    # the synthetic SAR profile is ~4.9× slower than standard inference (paper Table 2)
    sar = lat.filter(pl.col("method") == "sar").row(0, named=True)
    assert 4.0 < sar["slowdown"] < 5.5 and sar["update_rate"] == 1.0
    # Pareto x-axis is the overhead actually spent, never more than the budget
    par = pl.read_csv(out / "tables" / "pareto.csv")
    assert par.get_column("spent_ms").is_not_null().all()
    assert (par.get_column("spent_ms") <= par.get_column("B_ms") + 1e-9).all()


def test_show_reads_the_report_directory(report_from_traces):
    out, _ = report_from_traces
    runner = CliRunner()
    res = runner.invoke(main, ["show", "latency", str(out)])
    assert res.exit_code == 0, res.output
    assert "Per-batch latency breakdown" in res.output and "sar" in res.output
    res = runner.invoke(main, ["show", "deficits", str(out)])
    assert res.exit_code == 0 and "Table 23" in res.output


def test_report_from_results_only(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    utility_frame(
        grid(WIN)
        + grid(
            {
                (an.POOLED, "offline", None): {"standard": 0.3, "fast": 0.375, "slow": 0.55},
                (an.POOLED, "discrete", 1.0): {"standard": 0.3, "fast": 0.36, "slow": 0.15},
                (an.POOLED, "discrete", 0.5): {"standard": 0.3, "fast": 0.375, "slow": 0.425},
                (an.POOLED, "continuous", 50.0): {"standard": 0.3, "fast": 0.305, "slow": 0.075},
            }
        )
    ).write_parquet(results / "utility.parquet")
    out = tmp_path / "r"
    res = CliRunner().invoke(main, ["report", str(results), "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "needs the traces" in md and not (out / "tables" / "latency.csv").exists()
    # no amortised rows in this sweep: those tables say so instead of failing
    assert not (out / "tables" / "amortised_decomposition.csv").exists()
    assert "no pooled ('__all__') amortised rows in the results" in md
    # the hand-built winners appear in the pivoted winners table, tie included
    assert "| fog | slow | fast | fast = slow | standard |" in md
    wc = pl.read_csv(out / "tables" / "win_counts.csv")
    assert dict(wc.select("method", "wins").rows()) == {"fast": 4, "slow": 4, "standard": 1}


def test_show_lists_tables_and_reports_bad_input_in_one_line(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["show"])
    assert res.exit_code == 0
    for name in rp.TABLES:
        assert name[:20] in res.output
    res = runner.invoke(main, ["show", "nonsense", str(tmp_path)])
    assert res.exit_code == 2 and "unknown table 'nonsense'" in res.output
    bad = tmp_path / "junk.parquet"
    bad.write_bytes(b"not parquet")
    res = runner.invoke(main, ["report", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output.startswith("tempora-sim: error: ") and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_report_on_results_rejects_sweep_options(report_from_traces, tmp_path):
    out, _ = report_from_traces
    res = CliRunner().invoke(main, ["report", str(out), "--out", str(tmp_path / "x"), "--rho", "1"])
    assert res.exit_code == 2 and "apply to traces" in res.output


@pytest.mark.slow
def test_committed_demo_traces_are_complete_and_report(tmp_path):
    """traces/demo/ is part of the repository: every method that fits each demo model (the
    field's methods aside, as `make demo` leaves them out), all 15
    corruptions at severity 5, readable on a fresh clone and turned into a full report."""
    from tempora_sim.sweeps.traces import load_traces
    from tempora_trace.data.demo import DEMO_CORRUPTIONS
    from tempora_trace.methods import FIELD_METHODS
    from tempora_trace.methods import methods_for_model as methods_for

    traces = load_traces(DEMO_TRACES).traces
    found = {(t.meta["model"], t.method) for t in traces}
    expected = {(model, m) for model in ("demo-resnet", "demo-resnet-gn") for m in methods_for(model) if m not in FIELD_METHODS}
    assert found == expected
    for t in traces:
        adapt = t.rows.filter(t.rows["phase"] == "adapt")
        assert sorted(set(adapt["episode"].to_list())) == sorted(DEMO_CORRUPTIONS), t.path
        assert t.meta["dataset"] == "demo" and t.meta["batch_size"] == 64 and t.meta["seed"] == 2025
        assert set(adapt["severity"].to_list()) == {5}
    # the demo set's explore page is built and opened by tests/sim/test_explore_browser.py
    res = CliRunner().invoke(main, ["report", str(DEMO_TRACES), "--out", str(tmp_path), "--no-explore"])
    assert res.exit_code == 0, res.output
    _check_report(tmp_path, expect_latency=True, groups=("1-demo-resnet-", "2-demo-resnet-gn-"))


def test_episode_selection_for_the_utility_curves(report_from_traces, tmp_path):
    out, _ = report_from_traces
    runner = CliRunner()
    res = runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "one"), "--episodes", "fog", "--no-explore"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "bad"), "--episodes", "fog,nowhere"])
    assert res.exit_code == 2 and "nowhere" in res.output and "Traceback" not in res.output
    res = runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "all"), "--all-episodes", "--no-explore"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "all" / "figures" / "curves.png").is_file()


def test_report_refuses_to_write_inside_the_trace_directory(synthetic_traces):
    res = CliRunner().invoke(main, ["report", str(synthetic_traces), "--out", str(synthetic_traces / "report")])
    assert res.exit_code == 2 and "inside the trace directory" in res.output
    assert not (synthetic_traces / "report").exists()
