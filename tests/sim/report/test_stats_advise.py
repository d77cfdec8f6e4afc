"""Uncertainty: the bootstrap against scipy, the winner-certainty rule on hand-worked cells,
seeds pooled as replicates, the report's summary honesty, and ``tempora-sim advise`` on
synthetic traces (recommendation, boundary search, one-line errors)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from scipy import stats as sps

from helpers.utility_tables import utility_frame
from tempora_sim import analyses as an
from tempora_sim import reporting as rp
from tempora_sim.commands.main import main
from tempora_sim.reporting.sentences import root_cause_sentence
from tempora_sim.uncertainty import bootstrap as st


# ----------------------------------------------------------------------------- bootstrap vs scipy
@pytest.mark.parametrize("n, seed", [(5, 0), (12, 7), (30, 123)])
def test_mean_interval_equals_scipy_percentile_bootstrap(n, seed):
    x = np.random.default_rng(seed + 1).normal(size=n)
    opts = st.BootstrapOptions(level=0.9, resamples=500, seed=seed)
    ref = sps.bootstrap(
        (x,), np.mean, n_resamples=500, confidence_level=0.9, method="percentile", rng=np.random.default_rng(seed), vectorized=True
    )
    lo, hi = st.mean_interval(x, opts)
    assert lo == pytest.approx(ref.confidence_interval.low, abs=1e-12)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=1e-12)


def test_paired_difference_and_weighted_mean_equal_scipy_paired_bootstrap():
    rng = np.random.default_rng(3)
    a, b, w = rng.random(9), rng.random(9), rng.integers(1, 5, 9).astype(float)
    opts = st.BootstrapOptions(level=0.95, resamples=400, seed=11)
    counts = st.resample_counts(9, 400, 11)
    boot = st.bootstrap_means(np.stack([a, b]), counts)
    lo, hi = st.percentile_interval(boot[0] - boot[1], opts.level)
    ref = sps.bootstrap(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        paired=True,
        n_resamples=400,
        method="percentile",
        rng=np.random.default_rng(11),
        vectorized=True,
    )
    assert (lo, hi) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    lo, hi = st.mean_interval(a, opts, weights=w)
    ref = sps.bootstrap(
        (a, w),
        lambda x, y, axis: np.sum(x * y, axis=axis) / np.sum(y, axis=axis),
        paired=True,
        n_resamples=400,
        method="percentile",
        rng=np.random.default_rng(11),
        vectorized=True,
    )
    assert (lo, hi) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)


@pytest.mark.parametrize("kw", [{"level": 1.0}, {"level": 0.2}, {"resamples": 5}, {"resamples": True}, {"seed": -1}])
def test_bad_bootstrap_options_are_refused(kw):
    with pytest.raises(st.StatsError):
        st.BootstrapOptions(**kw)


# ----------------------------------------------------------------------------- winner certainty
def _offline_cell(scores: dict[str, list[int]]):
    """One offline cell: per-method per-batch correct counts (n = 1) → utility table + rows."""
    util = utility_frame(
        [{"method": m, "episode": "fog", "protocol": "offline", "value": None, "utility": sum(s) / len(s)} for m, s in scores.items()]
    )
    util = util.with_columns(pl.lit(len(next(iter(scores.values())))).cast(pl.Int64).alias("num_batches"))
    rows = pl.DataFrame(
        [
            {
                "method": m,
                "episode": "fog",
                "phase": "adapt",
                "step": i,
                "correct": c,
                "n": 1,
                "e_ms": 1.0,
                "l_ms": 0.0,
                "delta_ms": 1.0,
                **{k: util[k][0] for k in an.group_columns(util)},
                "seed": util["seed"][0],
            }
            for m, s in scores.items()
            for i, c in enumerate(s)
        ]
    )
    return util, rows


@pytest.mark.parametrize(
    "a, certain",
    [
        # lead = [1,1,1,0]: a resample's mean lead is 0 only if all 4 draws hit the last batch,
        # (1/4)^4 = 0.4 %; ≤ 0.25 with 0.4 % + 4·(1/4)^3·(3/4) = 5.1 % > 2.5 %: lower end 0.25 →
        # certain; upper end 1 (no draw of the last batch: (3/4)^4 = 31.6 %)
        ([1, 1, 1, 0], True),
        # lead = [1,0,0,0]: (3/4)^4 = 31.6 % of resamples miss batch 0 → lower end 0 → uncertain;
        # P(lead ≥ 0.75) = 4·(1/4)^3·(3/4) + (1/4)^4 = 5.1 %, P(lead = 1) = 0.4 %: upper end 0.75
        ([1, 0, 0, 0], False),
    ],
)
def test_winner_is_certain_only_when_its_paired_lead_excludes_zero(a, certain):
    util, rows = _offline_cell({"a": a, "b": [0, 0, 0, 0], "c": [0, 0, 0, 0]})
    iv = an.utility_intervals(util, rows, st.BootstrapOptions(resamples=4000, seed=1))
    w = an.winners(util, intervals=iv).row(0, named=True)
    assert w["winner"] == "a" and w["runner_up"] in ("b", "c")
    assert w["certain"] is certain
    assert (w["lead_lo"], w["lead_hi"]) == ((0.25, 1.0) if certain else (0.0, 0.75))
    wc = an.win_counts(util, intervals=iv)
    r = wc.filter(pl.col("method") == "a").row(0, named=True)
    assert (r["wins"], r["certain"], r["uncertain"]) == (1, int(certain), int(not certain))


def test_ties_are_uncertain_and_results_without_batches_are_not_assessed():
    util, rows = _offline_cell({"a": [1, 1, 0, 0], "b": [0, 0, 1, 1]})
    w = an.winners(util, intervals=an.utility_intervals(util, rows)).row(0, named=True)
    assert w["n_winners"] == 2 and w["certain"] is False
    util, rows = _offline_cell({"a": [1, 1, 1, 0], "b": [0, 0, 0, 0]})
    w = an.winners(util, intervals=an.utility_intervals(util)).row(0, named=True)  # no per-batch rows
    assert w["winner"] == "a" and w["certain"] is None


def test_paired_lead_is_tighter_than_overlapping_marginal_intervals():
    # b = a with 6 of its 40 correct batches wrong: on common batches the lead (0.15) is
    # certain, while the two marginal intervals (±0.15 each) overlap: comparing overlapping
    # intervals would call this cell a coin toss
    a = [1] * 20 + [0] * 20
    b = [0] * 6 + [1] * 14 + [0] * 20
    util, rows = _offline_cell({"a": a, "b": b})
    iv = an.utility_intervals(util, rows)
    w = an.winners(util, intervals=iv).row(0, named=True)
    assert w["certain"] is True and 0 < w["lead_lo"] < 0.15 < w["lead_hi"]
    cell = iv.index.filter(pl.col("episode") == "fog").sort("method")
    (lo_a, hi_a), (lo_b, hi_b) = cell.select("lo", "hi").rows()
    assert lo_a < hi_b  # the marginal intervals overlap


# ----------------------------------------------------------------------------- seeds
def _synthetic(tmp_path, methods, seeds=(2025,), **kw):
    from tempora_sim.sweeps.synthetic import write_trace

    kw = {
        "episodes": ("fog", "snow", "contrast"),
        "num_batches": 40,
        "batch_size": 16,
        "checkpoints": (0, 4, 8, 16, 32),
        "frozen_eval": 4,
        **kw,
    }
    for s in seeds:
        for m in methods:
            write_trace(tmp_path / f"{m}-seed{s}.parquet", m, seed=s, **kw)
    return tmp_path


def test_seeds_pool_like_episodes_and_never_split_the_comparison(tmp_path):
    from tempora_sim import sweep
    from tempora_sim.sweeps.traces import load_traces

    ts = load_traces(_synthetic(tmp_path, ("standard", "adabn", "tent"), seeds=(2025, 2026)))
    u = sweep(ts, protocols="offline,discrete", rho="1,0.5")
    assert set(u.get_column("seed").to_list()) == {2025, 2026}  # per-seed rows kept
    pooled = an.pool_seeds(u)
    assert "seed" not in pooled.columns and set(pooled.get_column("seeds").to_list()) == {"2025, 2026"}
    # oracle: the seed-pooled offline accuracy is the mean over both seeds' batches
    for t in ts.traces:
        if t.method == "tent":
            break
    a = np.concatenate(
        [
            (x.adapt.filter(pl.col("episode") == "fog")["correct"] / x.adapt.filter(pl.col("episode") == "fog")["n"]).to_numpy()
            for x in ts.traces
            if x.method == "tent"
        ]
    )
    row = pooled.filter((pl.col("method") == "tent") & (pl.col("episode") == "fog") & (pl.col("protocol") == "offline"))
    assert row["utility"][0] == pytest.approx(a.mean(), abs=1e-12) and row["num_batches"][0] == 80
    # one cell per (episode, scenario), not per seed
    w = an.winners(u)
    assert w.height == 3 * 3 and w.filter(pl.col("n_winners") >= 1).height == 9
    iv = an.utility_intervals(u, an.align_group_dtypes(an.trace_rows(ts.traces), u))
    cell = iv.index.filter((pl.col("method") == "tent") & (pl.col("episode") == "fog") & (pl.col("protocol") == "offline"))
    assert cell.height == 1 and cell["lo"][0] <= a.mean() <= cell["hi"][0]


# ----------------------------------------------------------------------------- summary honesty
def _report_inputs(util: pl.DataFrame, trace_rows=None) -> rp.ReportInputs:
    return rp.ReportInputs(utility=util, trace_rows=trace_rows)


def test_summary_never_claims_winners_change_when_they_do_not():
    rows = []
    for ep in ("fog", "snow"):
        for proto, v in (("offline", None), ("discrete", 1.0), ("discrete", 0.5), ("continuous", 50.0)):
            for m, u in (("standard", 0.2), ("fast", 0.3), ("slow", 0.25)):
                rows.append(
                    {
                        "method": m,
                        "episode": ep,
                        "protocol": proto,
                        "value": v,
                        "utility": u,
                        "alpha": 1.0,
                        "served": 10,
                        "served_acc": u,
                        "acc": u,
                        "kappa": 1.0,
                        "cov": 0.0,
                    }
                )
    util = utility_frame(rows)
    pooled = util.filter(pl.col("episode") == "fog").with_columns(pl.lit(an.POOLED).alias("episode"))
    util = pl.concat([util, pooled])
    text = " ".join(rp.summary_lines(_report_inputs(util), rp.groups_of(util)[0]))
    assert "winners do not change" in text
    assert "winners change" not in text and "differs" not in text


def test_summary_counts_the_cells_where_winners_do_change():
    util = utility_frame(
        [
            {"method": m, "episode": "fog", "protocol": p, "value": v, "utility": u}
            for p, v, us in (
                ("offline", None, {"standard": 0.2, "slow": 0.5}),
                ("discrete", 1.0, {"standard": 0.2, "slow": 0.1}),
                ("discrete", 0.5, {"standard": 0.2, "slow": 0.4}),
            )
            for m, u in us.items()
        ]
    )
    text = " ".join(rp.summary_lines(_report_inputs(util), rp.groups_of(util)[0]))
    assert "differs from the episode's offline winner in 1 of 2 temporal cells" in text


def _latency(e_minus, slowdown, l_mean=20.0):
    return pl.DataFrame(
        [
            {
                "method": "standard",
                "lambda_ms": 40.0,
                "delta_mean": 19.0,
                "e_mean": 19.0,
                "e_minus_lambda": -21.0,
                "l_mean": 0.0,
                "slowdown": 0.48,
            },
            {
                "method": "sar",
                "lambda_ms": 40.0,
                "delta_mean": 40.0 * slowdown,
                "e_mean": 40.0 + e_minus,
                "e_minus_lambda": e_minus,
                "l_mean": l_mean,
                "slowdown": slowdown,
            },
        ]
    )


def test_root_cause_never_reports_a_negative_overhead():
    s = root_cause_sentence(_latency(-138.4, 1.86, 70.0))
    assert "-138" not in s and "−138" not in s and "no intrinsic overhead" in s and "70.0 ms" in s
    s = root_cause_sentence(_latency(-5.0, 0.9, 1.0))
    assert "no method takes longer than λ" in s and "-5" not in s
    s = root_cause_sentence(_latency(12.0, 2.5))
    assert "12.0 ms before it (intrinsic ē − λ)" in s


# ----------------------------------------------------------------------------- advise
@pytest.fixture(scope="module")
def advise_traces(tmp_path_factory):
    return _synthetic(tmp_path_factory.mktemp("advise"), ("standard", "adabn", "tent", "eta"))


def test_advise_recommends_the_pooled_best_and_finds_where_that_changes(advise_traces):
    from tempora_sim import sweep
    from tempora_sim.analyses.advice import Constraint, advise

    c = Constraint("discrete", "rho", 0.3)
    a = advise(str(advise_traces), c)[0]

    def best(rho):
        p = an.pool_seeds(sweep(str(advise_traces), protocols="discrete", rho=[rho])).filter(pl.col("episode") == an.POOLED)
        return p.sort("utility", descending=True)["method"][0]

    assert a["recommended"] == best(0.3) == "eta"  # eta keeps up at low utilisation
    assert a["utility_ci"][0] <= a["utility"] <= a["utility_ci"][1]
    assert a["lead_ci"][0] <= a["lead"] <= a["lead_ci"][1]
    assert set(a["mechanism"]) == {"eta", a["runner_up"]} and 0 <= a["mechanism"]["eta"]["alpha"] <= 1
    # as ρ rises the gradient-based method falls behind: the switch point is where an
    # independent sweep says another method is best, and eta still wins just below it
    up = a["holds_to"]
    assert up is not None and 0.3 < up <= 1.0
    assert best(up) == a["above_winner"] != "eta"
    for rho in np.geomspace(0.3, up / 1.05, 6):
        assert best(float(rho)) == "eta"


def test_advise_json_and_each_constraint_kind(advise_traces):
    runner = CliRunner()
    for args in (["--rho", "60%"], ["--gamma-ms", "80"], ["--T", "300ms"], ["--B", "1s"]):
        res = runner.invoke(main, ["advise", str(advise_traces), *args, "--format", "json", "--resamples", "200"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert len(out) == 1 and out[0]["recommended"] in ("standard", "adabn", "tent", "eta")
    res = runner.invoke(main, ["advise", str(advise_traces), "--rho", "0.6"])
    assert res.exit_code == 0 and "use " in res.output and "stays best while the constraint moves" in res.output


def test_advise_on_a_combined_protocol_moves_each_pressure_alone(advise_traces):
    from tempora_sim import sweep

    res = CliRunner().invoke(main, ["advise", str(advise_traces), "--rho", "0.3", "--T", "300ms", "--format", "json", "--resamples", "200"])
    assert res.exit_code == 0, res.output
    a = json.loads(res.output)[0]
    assert a["constraint"] == {"protocol": "discrete-continuous", "rho": 0.3, "T_ms": 300.0}
    assert [m["moves"] for m in a["moves"]] == ["rho", "T_ms"]
    p = an.pool_seeds(sweep(str(advise_traces), protocols="discrete-continuous", rho=[0.3], T_ms=[300.0]))
    p = p.filter(pl.col("episode") == an.POOLED).sort("utility", descending=True)
    assert a["recommended"] == p["method"][0] and a["utility"] == pytest.approx(p["utility"][0])


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--rho", "1.5"], "--rho: utilisation must be in (0, 100%]"),
        (["--rho", "0"], "--rho: utilisation must be in (0, 100%]"),
        (["--rho", "fast"], "cannot read 'fast'"),
        ([], "give one constraint"),
        (["--T", "100", "--B", "1s"], "give one constraint"),
        (["--gamma-ms", "80", "--T", "100"], "or a combined one (--rho with --T"),
        (["--T", "5ms"], "must exceed λ"),
        (["--B", "-1s"], "--B: budget must be >= 0"),
        (["--gamma-ms", "0"], "--gamma-ms: inter-arrival time must be > 0"),
        (["--rho", "0.5", "--resamples", "3"], "--resamples"),
    ],
)
def test_advise_bad_constraints_are_one_line_and_exit_2(advise_traces, args, msg):
    res = CliRunner().invoke(main, ["advise", str(advise_traces), *args])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tempora-sim: error:") and msg in lines[0]


def test_advise_on_a_missing_path_is_one_line(tmp_path):
    res = CliRunner().invoke(main, ["advise", str(tmp_path / "nope"), "--rho", "0.5"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1


def test_report_on_several_seeds_pools_them_and_measures_winner_stability(tmp_path):
    traces = _synthetic(tmp_path / "t", ("standard", "adabn", "tent"), seeds=(2025, 2026, 2027))
    out = tmp_path / "r"
    res = CliRunner().invoke(
        main,
        [
            "report",
            str(traces),
            "--out",
            str(out),
            "--protocol",
            "offline,discrete",
            "--rho",
            "1,0.5",
            "--resamples",
            "200",
            "--no-figures",
        ],
    )
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "seeds 2025, 2026, 2027 (pooled)" in md and "## Group" not in md  # one comparison group
    stab = pl.read_csv(out / "tables" / "seed_stability.csv")
    pooled = stab.filter(pl.col("kind") == "pooled").sort("k")
    assert pooled["k"].to_list() == [1, 2, 3] and pooled["share"][-1] == 1.0
    assert stab.filter(pl.col("kind") == "single").height == 3
    assert (pooled["cells"] == 3 * 3).all()
    u = pl.read_parquet(out / "utility.parquet")
    assert sorted(set(u["seed"].to_list())) == [2025, 2026, 2027]  # per-seed rows kept


def test_summary_says_when_pooled_seeds_were_timed_under_different_conditions(tmp_path):
    from tempora_sim import sweep
    from tempora_sim.sweeps.traces import load_traces

    d = tmp_path / "t"
    for s, scale in ((2025, 1.0), (2026, 1.6)):  # the second seed ran on a slower (busier) machine
        _synthetic(d, ("standard", "adabn"), seeds=(s,), time_scale=scale)
    ts = load_traces(d)
    u = sweep(ts, protocols="offline,discrete", rho="1,0.5")
    inp = rp.ReportInputs(utility=u, trace_rows=an.align_group_dtypes(an.trace_rows(ts.traces), u))
    text = " ".join(rp.summary_lines(inp, rp.groups_of(u)[0]))
    assert "λ per seed 2025:" in text and "not timed under the same conditions" in text


def test_committed_seed_study_pools_into_one_group_of_five_seeds():
    from pathlib import Path

    from tempora_sim import sweep
    from tempora_sim.sweeps.traces import load_traces

    root = Path(__file__).resolve().parents[3] / "traces" / "demo-seeds"
    ts = load_traces(root)
    assert len(ts) == 20 and {t.method for t in ts.traces} == {"standard", "adabn", "tent", "eta"}
    u = sweep(ts, protocols="offline,discrete", rho="1,0.5")
    stab = an.seed_stability(u)
    pooled = stab.filter(pl.col("kind") == "pooled").sort("k")
    assert pooled["k"].to_list() == [1, 2, 3, 4, 5] and pooled["share"][-1] == 1.0
    assert an.pool_seeds(u)["seeds"].unique().to_list() == ["2025, 2026, 2027, 2028, 2029"]
