"""`tempora-sim validate`'s timing coverage: the share of live runs inside the replay's timing
interval (tempora_sim.uncertainty.coverage), on synthetic live files (tempora_sim.sweeps.synthetic.make_live)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from helpers.validation_files import write_validation_set
from tempora_schema.live import decode_live_metadata, validate_live_table
from tempora_sim.commands.main import main
from tempora_sim.sweeps import synthetic as syn
from tempora_sim.uncertainty.coverage import batch_variance, coverage_row, describe, overall, served_set_sd
from tempora_sim.validation.live_runs import validate

EPISODES = ("gaussian_noise", "fog")
N = 40


def setup(tmp: Path, variability, live_factors, rhos=(1.0, 0.7)) -> tuple[Path, Path]:
    return write_validation_set(tmp, variability, live_factors, rhos, EPISODES, N)


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


@pytest.mark.parametrize("rho", [1.0, 0.5])
def test_the_interval_from_light_replicates_is_the_one_from_full_frames(tmp_path, rho):
    """Oracle: the interval read from light replicates (three measures in the base's row order)
    is the one read from full replicate frames, row by row by episode name."""
    from tempora_sim.sweeps.replay import POOLED, run_sweep
    from tempora_sim.sweeps.traces import TraceSet, read_trace
    from tempora_sim.sweeps.variability import timing_models
    from tempora_sim.uncertainty.coverage import timing_interval
    from tempora_sim.uncertainty.timing_replicates import replicates_of

    _, traces = setup(tmp_path, syn.SyntheticVariability(0.05, 0.03), draws(2, 0.05, 0.03))
    trace = read_trace(traces / "tent.parquet")
    model = timing_models([trace])[0]
    lam = float(trace.adapt_delta.mean()) / 2
    run = {"protocol": "discrete", "gamma_ms": lam / rho, "queue": 1}
    got = timing_interval(model, trace, run, lam, replicates=40, seed=3)

    res = run_sweep(TraceSet([trace]), lambda_ms=lam, protocols="discrete", rho=[rho], queue=1)
    full = replicates_of(res, 40, 3, models=[model]).reps
    pooled = [r.filter(pl.col("episode") == POOLED).row(0, named=True) for r in full]
    utilities = np.array([p["utility"] for p in pooled])
    sd = served_set_sd(batch_variance(trace), full)
    q = [0.025, 0.975]
    u_lo, u_hi = np.quantile(utilities + sd * np.random.default_rng(3).standard_normal(len(pooled)), q)
    a_lo, a_hi = np.quantile([p["alpha"] for p in pooled], q)
    assert got == pytest.approx((a_lo, a_hi, u_lo, u_hi), abs=0, rel=1e-12)
    assert a_hi > a_lo or rho < 1.0  # the replicates moved something at saturation


def test_no_variability_measured_as_none_gives_a_zero_width_interval(tmp_path):
    """A device that measured no variability (every repeat time equal to the main one) gives a
    zero-width α interval at the replay's value; U's holds the replay's value and is wider only
    by the served-set term, which vanishes where every batch is served (ρ = 25 % here)."""
    live_dir, traces = setup(tmp_path, syn.SyntheticVariability(0.0, 0.0, gaps_ms=()), [np.ones(N * len(EPISODES))] * 3, rhos=(1.0, 0.25))
    s = validate([live_dir], traces).settings
    assert (s["width_alpha_pp"] == 0).all() and (s["alpha_timing_lo"] == s["alpha_replay"]).all()
    assert (s["coverage_alpha_pct"] == 100).all() and (s["coverage_utility_pct"] == 100).all()
    assert ((s["utility_timing_lo"] <= s["utility_replay"]) & (s["utility_replay"] <= s["utility_timing_hi"])).all()
    light = s.filter(pl.col("alpha_replay") == 1.0)
    assert light.height == 1 and light["width_utility_pp"].item() == 0.0
    assert s.filter(pl.col("alpha_replay") < 1.0)["width_utility_pp"].item() > 0.0


def test_batch_variance_is_half_the_mean_squared_successive_difference():
    """Hand-worked: accuracies 0.5, 0.7, 0.6 → differences 0.2, −0.1 → (0.04 + 0.01)/2/2 =
    0.0125; 0.1, 0.2, 0.3 → 0.005; 0.4, 0.4, 0.4 → 0; one batch gives 0."""
    from tempora_sim.sweeps.traces import Trace

    meta, table = syn.make_trace("tent", episodes=("gaussian_noise", "fog", "snow"), num_batches=3, checkpoints=())
    correct = {"gaussian_noise": [5, 7, 6], "fog": [1, 2, 3], "snow": [4, 4, 4]}
    rows = pl.from_arrow(table).with_columns(
        pl.lit(10, dtype=pl.Int64).alias("n"),
        pl.struct("episode", "step").map_elements(lambda r: correct[r["episode"]][r["step"]], return_dtype=pl.Int64).alias("correct"),
    )
    v = batch_variance(Trace("t", meta, rows.filter(pl.col("phase") == "adapt")))
    assert v["gaussian_noise"] == pytest.approx(0.0125) and v["fog"] == pytest.approx(0.005) and v["snow"] == 0.0
    one = Trace("t", meta, rows.filter((pl.col("phase") == "adapt") & (pl.col("step") == 0)))
    assert batch_variance(one) == {"gaussian_noise": 0.0, "fog": 0.0, "snow": 0.0}


def test_served_set_sd_hand_worked_and_zero_when_every_batch_is_served():
    """Two episodes of N = 4: 2 served of the first (σ² 0.0125), 4 of the second → variance
    2 · 0.0125 · 2 · (1 − 1/2) = 0.025 for the first, 0 for the second, over (Σ N)² = 64."""
    rep = pl.DataFrame({"episode": ["a", "b", "__all__"], "served": [2, 4, 6], "num_batches": [4, 4, 8]})
    sd = served_set_sd({"a": 0.0125, "b": 0.02}, [rep, rep])
    assert sd == pytest.approx([np.sqrt(0.025) / 8] * 2)
    every = pl.DataFrame({"episode": ["a", "b", "__all__"], "served": [4, 4, 8], "num_batches": [4, 4, 8]})
    assert served_set_sd({"a": 0.0125, "b": 0.02}, [every])[0] == 0.0


@pytest.mark.parametrize("every", [2, 3, 4])
def test_served_set_variance_matches_a_simulation_of_the_two_served_sets(every):
    """Oracle for the term's derivation: i.i.d. batch accuracies; the replay scores the first
    |Q| batches, a live pass every ``every``-th batch (|Q| = N/every, α = 1/every). The
    variance of (live sum − replay sum) over many streams is 2σ²|Q|(1 − α)."""
    rng = np.random.default_rng(7)
    n, sigma = 60, 0.08
    q = n // every
    a = rng.normal(0.5, sigma, (40_000, n))
    diff = a[:, ::every].sum(axis=1) - a[:, :q].sum(axis=1)
    assert diff.var() == pytest.approx(2 * sigma**2 * q * (1 - q / n), rel=0.03)


def _setting(covered_a, covered_u, runs, width_a, width_u):
    return {
        "timing_uncertainty": "measured",
        "runs": runs,
        "covered_alpha": covered_a,
        "covered_utility": covered_u,
        "coverage_alpha_pct": None if covered_a is None else 100.0 * covered_a / runs,
        "coverage_utility_pct": 100.0 * covered_u / runs,
        "width_alpha_pp": width_a,
        "width_utility_pp": width_u,
    }


def test_zero_width_settings_are_counted_apart_so_trivial_coverage_cannot_pad_the_rate():
    """Worked example: a light-load setting where every replicate and every run serve every
    batch (zero width, 10/10), a discrete setting with a width (α 9/10, U 10/10) and an
    amortised one (no α; U 7/10). Over all three: α (10 + 9)/20, U 27/30; over the two with a
    width: α 9/10, U 17/20, the lowest setting 70 % of U, median widths 4 pp (α) and 3 pp (U)."""
    s = pl.DataFrame(
        [_setting(10, 10, 10, 0.0, 0.0), _setting(9, 10, 10, 4.0, 2.0), _setting(None, 7, 10, None, 4.0)],
        schema_overrides={"coverage_alpha_pct": pl.Float64, "width_alpha_pp": pl.Float64, "covered_alpha": pl.Int64},
    )
    summary = overall(s)
    assert (summary["covered_alpha"], summary["alpha_runs"]) == (19, 20)
    assert (summary["covered_utility"], summary["runs"]) == (27, 30)
    assert summary["zero_width_settings"] == 1
    inf = summary["informative"]
    assert (inf["settings"], inf["covered_alpha"], inf["alpha_runs"]) == (2, 9, 10)
    assert (inf["covered_utility"], inf["runs"]) == (17, 20)
    assert inf["lowest_setting_utility_pct"] == pytest.approx(70.0)
    assert (inf["median_width_alpha_pp"], inf["median_width_utility_pp"]) == (4.0, 3.0)
    text = describe(summary)
    assert "1 of 3 settings have an interval of zero width" in text
    assert "over the other 2 (20 live runs): α 9/10 = 90 %" in text and "U 17/20 = 85 % (lowest setting 70 %" in text


def test_u_misses_with_alpha_inside_are_counted_apart():
    """Interval α [0.5, 0.7], U [0.2, 0.3]; runs (α, U): (0.6, 0.25) inside both, (0.6, 0.35)
    U outside with α inside, (0.8, 0.35) both outside → 1 of the 2 U misses had α inside."""
    row = coverage_row((0.5, 0.7, 0.2, 0.3), [0.6, 0.6, 0.8], [0.25, 0.35, 0.35])
    assert (row["covered_alpha"], row["covered_utility"], row["utility_outside_alpha_inside"]) == (2, 1, 1)
    assert coverage_row((None, None, 0.2, 0.3), [None], [0.35])["utility_outside_alpha_inside"] is None
    summary = overall(pl.DataFrame([row | {"runs": 3}]))
    assert (summary["utility_outside_alpha_inside"], summary["utility_misses_discrete"]) == (1, 2)
    assert "1 of the 2 discrete runs with U outside had α inside" in describe(summary)


def test_a_setting_of_two_runs_does_not_set_the_lowest_rate():
    """With two runs a setting's coverage is 0, 50 or 100 %: the lowest setting is taken over
    the settings of ten runs or more (90 % here), and the line says so; the 1-of-2 setting
    still counts in the overall rate, (9 + 1)/12."""
    s = pl.DataFrame([_setting(9, 9, 10, 4.0, 2.0), _setting(1, 1, 2, 4.0, 2.0)])
    summary = overall(s)
    assert summary["lowest_setting_utility_pct"] == pytest.approx(90.0) and summary["lowest_setting_alpha_pct"] == pytest.approx(90.0)
    assert (summary["covered_utility"], summary["runs"]) == (10, 12)
    assert "lowest setting of ≥ 10 runs 90 %" in describe(summary)
    only_two = overall(pl.DataFrame([_setting(1, 1, 2, 4.0, 2.0)]))
    assert only_two["lowest_setting_utility_pct"] == pytest.approx(50.0) and "lowest setting 50 %" in describe(only_two)


def test_every_setting_zero_width_says_no_setting_tests_the_interval():
    s = pl.DataFrame([_setting(10, 10, 10, 0.0, 0.0)] * 2)
    summary = overall(s)
    assert summary["informative"] is None and summary["zero_width_settings"] == 2
    assert "no setting tests the interval" in describe(summary)


def test_coverage_of_several_validate_runs_adds_them_up_per_setting(tmp_path):
    """tools/coverage_runs.py (the docs' coverage tables): two runs of two settings, added up."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("coverage_runs", Path(__file__).resolve().parents[2] / "tools" / "coverage_runs.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    base = {"method": "tent", "timing_uncertainty": "measured", "budget_ms": None}
    for i, (a1, u1, a2, u2) in enumerate(((10, 10, None, 9), (8, 9, None, 10)), 1):
        (tmp_path / f"v{i}" / "report").mkdir(parents=True)
        pl.DataFrame(
            [
                {
                    **base,
                    "protocol": "discrete",
                    "rho": 0.5,
                    "runs": 10,
                    "covered_alpha": a1,
                    "covered_utility": u1,
                    "width_alpha_pp": 4.0,
                    "width_utility_pp": 2.0,
                },
                {
                    **base,
                    "protocol": "amortised",
                    "rho": None,
                    "budget_ms": 1000.0,
                    "runs": 10,
                    "covered_alpha": a2,
                    "covered_utility": u2,
                    "width_alpha_pp": None,
                    "width_utility_pp": 0.0,
                },
            ],
            schema_overrides={"covered_alpha": pl.Int64, "width_alpha_pp": pl.Float64, "budget_ms": pl.Float64, "rho": pl.Float64},
        ).write_csv(tmp_path / f"v{i}" / "report" / "validation.csv")
    text = tool.markdown([tmp_path / "v1", tmp_path / "v2"])
    assert "| tent | ρ = 50 % | 20 | 18/20 = 90.0 % | 19/20 = 95.0 % | 4.0 / 2.0 |" in text
    assert "| tent | B = 1000 ms | 20 | – | 19/20 = 95.0 % | – / 0.0 |" in text
    assert "every setting (2 settings, 2 runs): α 18/20 = 90.0 %" in text and "U 38/40 = 95.0 %" in text
    assert "settings whose interval has a width (1 settings, 2 runs): α 18/20 = 90.0 %" in text
