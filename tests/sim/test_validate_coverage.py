"""`tempora-sim validate`'s timing coverage: the share of live runs inside the replay's timing
interval (tempora_sim.coverage), on synthetic live files (tempora_sim.synthetic.make_live)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tempora_schema.live import decode_live_metadata, validate_live_table
from tempora_sim import synthetic as syn
from tempora_sim.cli import main
from tempora_sim.coverage import describe, overall
from tempora_sim.validation import validate

EPISODES = ("gaussian_noise", "fog")
N = 40


def setup(tmp: Path, variability, live_factors, rhos=(1.0, 0.7)) -> tuple[Path, Path]:
    (tmp / "t").mkdir(parents=True)
    (tmp / "l").mkdir()
    tables = {}
    for m in ("standard", "tent"):
        meta, table = syn.make_trace(m, episodes=EPISODES, num_batches=N, variability=variability)
        pq.write_table(table, tmp / "t" / f"{m}.parquet")
        tables[m] = (meta, table)
    delta = np.asarray(tables["standard"][1].filter(pq_adapt(tables["standard"][1])).column("delta_ms").to_pylist())
    lam = float(delta.mean() + 6 * delta.std())
    for rho in rhos:
        _, live = syn.make_live(*tables["tent"], rho, live_factors, queue=1, lambda_ms=lam)
        pq.write_table(live, tmp / "l" / f"tent-{rho:g}.parquet")
    return tmp / "l", tmp / "t"


def pq_adapt(table):
    import pyarrow.compute as pc

    return pc.equal(table.column("phase"), "adapt")


def draws(n_runs: int, pass_sd: float, event_sd: float, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.exp(rng.normal(0, pass_sd) + rng.normal(0, event_sd, N * len(EPISODES))) for _ in range(n_runs)]


def test_synthetic_live_files_are_valid_and_replay_exactly(tmp_path):
    """A live run at the trace's own times (factors 1) is the replay, decision for decision."""
    live_dir, traces = setup(tmp_path, None, [np.ones(N * len(EPISODES))] * 2)
    for f in live_dir.glob("*.parquet"):
        table = pq.read_table(f)
        validate_live_table(table, decode_live_metadata(table.schema, f), f)
    v = validate([live_dir], traces)
    s = v.settings
    assert (s["alpha_live"] == s["alpha_replay"]).all() and (s["utility_live"] == s["utility_replay"]).all()
    assert (v.runs["agreement_pct"] == 100.0).all()
    # no measurement: coverage unknown
    assert s["timing_uncertainty"].to_list() == ["unknown"] * s.height
    assert s["coverage_alpha_pct"].null_count() == s.height
    assert describe(overall(s)) == "timing coverage: unknown (no trace measured its timing variability)"


def test_coverage_counts_the_live_runs_inside_the_timing_interval(tmp_path):
    live_dir, traces = setup(tmp_path, syn.SyntheticVariability(0.05, 0.03), draws(12, 0.05, 0.03))
    v = validate([live_dir], traces)
    s = v.settings
    assert s["timing_uncertainty"].to_list() == ["measured"] * s.height
    for row in s.iter_rows(named=True):
        mine = v.runs.filter((pl.col("rho") - row["rho"]).abs() < 1e-12)
        assert row["alpha_timing_lo"] <= row["alpha_timing_hi"] and row["utility_timing_lo"] <= row["utility_timing_hi"]
        inside_a = ((mine["alpha"] >= row["alpha_timing_lo"] - 1e-12) & (mine["alpha"] <= row["alpha_timing_hi"] + 1e-12)).sum()
        inside_u = ((mine["utility"] >= row["utility_timing_lo"] - 1e-12) & (mine["utility"] <= row["utility_timing_hi"] + 1e-12)).sum()
        assert row["covered_alpha"] == inside_a and row["covered_utility"] == inside_u
        assert row["coverage_alpha_pct"] == pytest.approx(100 * inside_a / mine.height)
        assert row["width_alpha_pp"] == pytest.approx(100 * (row["alpha_timing_hi"] - row["alpha_timing_lo"]))
    summary = overall(s)
    assert summary["runs"] == 24 and summary["covered_alpha"] == int(s["covered_alpha"].sum())
    assert summary["coverage_alpha_pct"] == pytest.approx(100 * summary["covered_alpha"] / 24)
    assert summary["median_width_alpha_pp"] == pytest.approx(float(s["width_alpha_pp"].median()))
    res = CliRunner().invoke(main, ["validate", str(live_dir), "--traces", str(traces)])
    assert "timing coverage (2 settings, 24 live runs" in res.output.replace("\n", " ")


def test_no_variability_measured_as_none_gives_a_zero_width_interval(tmp_path):
    """A device that measured no variability (every repeat time equal to the main one) gives a
    zero-width interval at the replay's value: live runs at the trace's times are inside it."""
    live_dir, traces = setup(tmp_path, syn.SyntheticVariability(0.0, 0.0, gaps_ms=()), [np.ones(N * len(EPISODES))] * 3)
    s = validate([live_dir], traces).settings
    assert (s["width_alpha_pp"] == 0).all() and (s["alpha_timing_lo"] == s["alpha_replay"]).all()
    assert (s["coverage_alpha_pct"] == 100).all() and (s["coverage_utility_pct"] == 100).all()
