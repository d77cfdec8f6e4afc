"""Analyses on small hand-built utility tables whose answers are worked out by hand.

The tables follow docs/design/design.md §6 exactly (one group; pooled ``__all__`` rows where the analysis
reads them), built by tests/helpers/utility_tables.py, which also feeds the report tests.
"""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from helpers.ranks import average_ranks
from helpers.utility_tables import GROUP, WIN, grid, utility_frame
from tempora_sim import analyses as an


@pytest.fixture
def win_table() -> pl.DataFrame:
    return utility_frame(grid(WIN))


def test_winners_per_cell_with_a_tie(win_table):
    w = an.winners(win_table)
    got = {(r["episode"], r["scenario"]): r["winner"] for r in w.iter_rows(named=True)}
    assert got == {
        ("fog", "offline"): "slow",
        ("fog", "ρ=100%"): "fast",
        ("fog", "ρ=50%"): "fast = slow",
        ("fog", "T=50ms"): "standard",
        ("snow", "offline"): "slow",
        ("snow", "ρ=100%"): "fast",
        ("snow", "ρ=50%"): "slow",
        ("snow", "T=50ms"): "fast",
    }
    # columns in the paper's order: offline, then strict → relaxed
    assert w.filter(pl.col("episode") == "fog").get_column("scenario").to_list() == ["offline", "ρ=100%", "ρ=50%", "T=50ms"]
    tie = w.filter((pl.col("episode") == "fog") & (pl.col("scenario") == "ρ=50%")).row(0, named=True)
    assert tie["n_winners"] == 2 and tie["margin"] == pytest.approx(0.10)
    snow = w.filter((pl.col("episode") == "snow") & (pl.col("scenario") == "T=50ms")).row(0, named=True)
    assert snow["margin"] == pytest.approx(0.02)


def test_win_counts_credit_each_tied_method(win_table):
    wc = {r["method"]: r for r in an.win_counts(win_table).iter_rows(named=True)}
    assert wc["fast"]["wins"] == 4 and wc["slow"]["wins"] == 4 and wc["standard"]["wins"] == 1
    assert (wc["fast"]["offline"], wc["fast"]["discrete"], wc["fast"]["continuous"]) == (0, 3, 1)
    assert (wc["slow"]["offline"], wc["slow"]["discrete"]) == (2, 2)
    assert wc["fast"]["cells"] == 8 and wc["fast"]["share"] == pytest.approx(0.5)


def test_tolerance_decides_ties():
    t = utility_frame(grid({("a", "offline", None): {"x": 0.5, "y": 0.5 + 1e-13, "standard": 0.1}}))
    assert an.winners(t).item(0, "winner") == "x = y"
    assert an.winners(t, tol=0.0).item(0, "winner") == "y"


def test_deficits_match_hand_computation(win_table):
    d = {r["method"]: r for r in an.deficits(win_table).iter_rows(named=True)}
    # temporal cells: 6. fast loses fog T=50 (0.01) and snow ρ=50% (0.10)
    assert d["fast"]["cells"] == 6 and d["fast"]["losses"] == 2
    assert d["fast"]["mean_deficit"] == pytest.approx((0.01 + 0.10) / 2)
    assert d["fast"]["discrete_losses"] == 1 and d["fast"]["discrete_mean_deficit"] == pytest.approx(0.10)
    assert d["fast"]["continuous_losses"] == 1 and d["fast"]["continuous_mean_deficit"] == pytest.approx(0.01)
    # slow wins two (one tied) and loses four: 0.18, 0.24, 0.15, 0.32
    assert d["slow"]["losses"] == 4
    assert d["slow"]["mean_deficit"] == pytest.approx((0.18 + 0.24 + 0.15 + 0.32) / 4)
    # standard wins once; its deficits: fog ρ1 .08, fog ρ.5 .10, snow ρ1 .04, ρ.5 .15, T .02
    assert d["standard"]["losses"] == 5
    assert d["standard"]["mean_deficit"] == pytest.approx((0.08 + 0.10 + 0.04 + 0.15 + 0.02) / 5)
    # baseline first, then by α (absent here: by name)
    assert an.deficits(win_table).get_column("method").to_list() == ["standard", "fast", "slow"]


def test_never_losing_method_has_null_deficit():
    t = utility_frame(grid({("a", "offline", None): {"x": 0.5, "standard": 0.1}, ("a", "discrete", 1.0): {"x": 0.5, "standard": 0.1}}))
    d = {r["method"]: r for r in an.deficits(t).iter_rows(named=True)}
    assert d["x"]["losses"] == 0 and d["x"]["mean_deficit"] is None


def test_below_standard_counts_and_protocol_split(win_table):
    b = {r["method"]: r for r in an.below_standard(win_table).iter_rows(named=True)}
    assert "standard" not in b
    # fast is below standard only at fog T=50 (0.19 < 0.20)
    assert b["fast"]["below"] == 1 and b["fast"]["continuous_share"] == pytest.approx(1.0)
    assert b["fast"]["discrete_share"] == pytest.approx(0.0)
    # slow: fog ρ1, snow ρ1, fog T, snow T → 2 discrete, 2 continuous; fog ρ.5 (0.30 > 0.20) is not
    assert b["slow"]["below"] == 4 and b["slow"]["discrete_below"] == 2
    assert b["slow"]["discrete_share"] == pytest.approx(0.5) and b["slow"]["continuous_share"] == pytest.approx(0.5)
    assert b["slow"]["cells"] == 6


def test_equal_to_standard_is_not_below():
    t = utility_frame(grid({("a", "discrete", 1.0): {"x": 0.3, "standard": 0.3}}))
    assert an.below_standard(t).item(0, "below") == 0


def test_below_standard_needs_the_baseline():
    t = utility_frame(grid({("a", "discrete", 1.0): {"x": 0.3, "y": 0.2}}))
    with pytest.raises(an.AnalysisError, match="standard"):
        an.below_standard(t)


# ----------------------------------------------------------------------------- Spearman
def _spearman(x: list[float], y: list[float]) -> float | None:
    rx, ry = average_ranks(x), average_ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def test_perfectly_inverted_ranking_is_minus_one():
    off = {"standard": 0.1, "a": 0.2, "b": 0.3, "c": 0.4}
    inv = {"standard": 0.4, "a": 0.3, "b": 0.2, "c": 0.1}
    t = utility_frame(
        grid(
            {
                ("e1", "offline", None): off,
                ("e1", "discrete", 1.0): inv,
                ("e1", "discrete", 0.25): off,
                ("e2", "offline", None): off,
                ("e2", "discrete", 1.0): inv,
                ("e2", "discrete", 0.25): inv,
            }
        )
    )
    cells = {(r["episode"], r["scenario"]): r["spearman"] for r in an.rank_correlation_cells(t).iter_rows(named=True)}
    assert cells[("e1", "ρ=100%")] == pytest.approx(-1.0)
    assert cells[("e1", "ρ=25%")] == pytest.approx(1.0)
    s = {r["scenario"]: r for r in an.rank_correlation(t).iter_rows(named=True)}
    assert s["ρ=100%"]["mean"] == pytest.approx(-1.0) and s["ρ=100%"]["std"] == pytest.approx(0.0)
    # one +1 and one −1: mean 0, sample std √2
    assert s["ρ=25%"]["mean"] == pytest.approx(0.0) and s["ρ=25%"]["std"] == pytest.approx(math.sqrt(2))
    assert s["ρ=25%"]["episodes"] == 2 and s["ρ=25%"]["undefined"] == 0


def test_spearman_with_ties_and_constant_ranking():
    off = {"standard": 0.1, "a": 0.2, "b": 0.3, "c": 0.4}
    tied = {"standard": 0.1, "a": 0.1, "b": 0.2, "c": 0.3}
    flat = {"standard": 0.2, "a": 0.2, "b": 0.2, "c": 0.2}
    t = utility_frame(grid({("e1", "offline", None): off, ("e1", "continuous", 50.0): tied, ("e1", "continuous", 100.0): flat}))
    cells = {r["scenario"]: r["spearman"] for r in an.rank_correlation_cells(t).iter_rows(named=True)}
    # ranks (1.5, 1.5, 3, 4) vs (1, 2, 3, 4): r = 4.5 / sqrt(4.5 * 5)
    assert cells["T=50ms"] == pytest.approx(4.5 / math.sqrt(4.5 * 5.0))
    assert cells["T=100ms"] is None
    s = {r["scenario"]: r for r in an.rank_correlation(t).iter_rows(named=True)}
    assert s["T=100ms"]["mean"] is None and s["T=100ms"]["undefined"] == 1
    assert s["T=50ms"]["std"] is None  # one episode: the sample std is undefined


def test_spearman_matches_plain_python_oracle_on_random_tables():
    rng = random.Random(7)
    methods = ["standard", "a", "b", "c", "d", "e"]
    table = {}
    for ep in ("e1", "e2", "e3"):
        table[(ep, "offline", None)] = {m: rng.choice([0.1, 0.2, 0.3, rng.random()]) for m in methods}
        for v in (1.0, 0.5):
            table[(ep, "discrete", v)] = {m: rng.choice([0.1, 0.2, rng.random()]) for m in methods}
    t = utility_frame(grid(table))
    for r in an.rank_correlation_cells(t).iter_rows(named=True):
        off = table[(r["episode"], "offline", None)]
        scen = table[(r["episode"], "discrete", r["value"])]
        want = _spearman([off[m] for m in methods], [scen[m] for m in methods])
        assert (r["spearman"] is None) == (want is None)
        if want is not None:
            assert r["spearman"] == pytest.approx(want, abs=1e-12)


# ----------------------------------------------------------------------------- decompositions
def _pooled_rows() -> list[dict]:
    p = an.POOLED
    return [
        # discrete ρ=1 (strictest) and ρ=0.5
        {
            "method": "standard",
            "episode": p,
            "protocol": "discrete",
            "value": 1.0,
            "utility": 0.20,
            "alpha": 1.0,
            "served": 100,
            "served_acc": 0.20,
        },
        {
            "method": "adabn",
            "episode": p,
            "protocol": "discrete",
            "value": 1.0,
            "utility": 0.27,
            "alpha": 0.9,
            "served": 90,
            "served_acc": 0.30,
        },
        {
            "method": "sar",
            "episode": p,
            "protocol": "discrete",
            "value": 1.0,
            "utility": 0.05,
            "alpha": 0.1,
            "served": 10,
            "served_acc": 0.50,
        },
        {
            "method": "standard",
            "episode": p,
            "protocol": "discrete",
            "value": 0.5,
            "utility": 0.20,
            "alpha": 1.0,
            "served": 100,
            "served_acc": 0.20,
        },
        {
            "method": "adabn",
            "episode": p,
            "protocol": "discrete",
            "value": 0.5,
            "utility": 0.30,
            "alpha": 1.0,
            "served": 100,
            "served_acc": 0.30,
        },
        {
            "method": "sar",
            "episode": p,
            "protocol": "discrete",
            "value": 0.5,
            "utility": 0.25,
            "alpha": 0.5,
            "served": 50,
            "served_acc": 0.50,
        },
        # continuous T=50 (strictest)
        {
            "method": "standard",
            "episode": p,
            "protocol": "continuous",
            "value": 50.0,
            "utility": 0.20,
            "acc": 0.20,
            "kappa": 1.0,
            "cov": 0.0,
        },
        {"method": "adabn", "episode": p, "protocol": "continuous", "value": 50.0, "utility": 0.27, "acc": 0.30, "kappa": 0.9, "cov": 0.0},
        {"method": "sar", "episode": p, "protocol": "continuous", "value": 50.0, "utility": 0.10, "acc": 0.50, "kappa": 0.2, "cov": 0.0},
        # amortised B=1 s
        {
            "method": "standard",
            "episode": p,
            "protocol": "amortised",
            "value": 1000.0,
            "utility": 0.20,
            "m": 100,
            "beta": 1.0,
            "acc_adapt": 0.20,
        },
        {
            "method": "sar",
            "episode": p,
            "protocol": "amortised",
            "value": 1000.0,
            "utility": 0.01,
            "m": 5,
            "beta": 0.05,
            "acc_adapt": 0.40,
            "acc_frozen": 0.0,
            "frozen_gap": 0,
        },
    ]


def test_discrete_decomposition_flags_the_insolvent_method():
    t = utility_frame(_pooled_rows())
    d = {r["method"]: r for r in an.decomposition(t, "discrete").iter_rows(named=True)}
    assert set(d) == {"standard", "adabn", "sar"} and d["sar"]["value"] == 1.0
    # sar must match adabn's 0.27 with α = 0.1: 270 % served accuracy → insolvent
    assert d["sar"]["best_other_method"] == "adabn"
    assert d["sar"]["required_served_acc"] == pytest.approx(2.7) and d["sar"]["insolvent"] is True
    # the winner's best competitor is the runner-up (standard, 0.20 / 0.9)
    assert d["adabn"]["best_other_method"] == "standard"
    assert d["adabn"]["required_served_acc"] == pytest.approx(0.20 / 0.9) and d["adabn"]["insolvent"] is False
    assert an.decomposition(t, "discrete").get_column("method").to_list() == ["standard", "adabn", "sar"]
    # an explicit, relaxed ρ: sar needs 0.30 / 0.5 = 60 % → solvent
    d5 = {r["method"]: r for r in an.decomposition(t, "discrete", 0.5).iter_rows(named=True)}
    assert d5["sar"]["required_served_acc"] == pytest.approx(0.6) and d5["sar"]["insolvent"] is False
    with pytest.raises(an.AnalysisError, match="ρ=70%"):
        an.decomposition(t, "discrete", 0.7)


def test_continuous_decomposition_and_insolvency_by_multiplication():
    t = utility_frame(_pooled_rows())
    d = {r["method"]: r for r in an.decomposition(t, "continuous").iter_rows(named=True)}
    assert d["sar"]["required_acc"] == pytest.approx(0.27 / 0.2) and d["sar"]["insolvent"] is True
    assert d["standard"]["required_acc"] == pytest.approx(0.27) and d["standard"]["insolvent"] is False


def test_zero_availability_is_insolvent_unless_nobody_scores():
    p = an.POOLED
    t = utility_frame(
        [
            {"method": "x", "episode": p, "protocol": "discrete", "value": 1.0, "utility": 0.0, "alpha": 0.0},
            {"method": "y", "episode": p, "protocol": "discrete", "value": 1.0, "utility": 0.1, "alpha": 1.0},
        ]
    )
    d = {r["method"]: r for r in an.decomposition(t, "discrete").iter_rows(named=True)}
    assert d["x"]["required_served_acc"] == math.inf and d["x"]["insolvent"] is True


def test_amortised_decomposition_and_strict_terms():
    rows = _pooled_rows()
    # per-episode amortised rows for m (two episodes)
    for ep, m_sar in (("e1", 4), ("e2", 6)):
        rows += [
            {"method": "standard", "episode": ep, "protocol": "amortised", "value": 1000.0, "utility": 0.2, "m": 50, "beta": 1.0},
            {"method": "sar", "episode": ep, "protocol": "amortised", "value": 1000.0, "utility": 0.01, "m": m_sar, "beta": m_sar / 50},
        ]
    t = utility_frame(rows)
    a = {r["method"]: r for r in an.decomposition(t, "amortised").iter_rows(named=True)}
    assert a["sar"]["below_standard"] is True and a["standard"]["below_standard"] is False
    assert a["sar"]["acc_frozen"] == 0.0 and a["sar"]["beta"] == 0.05
    st = {r["method"]: r for r in an.strict_terms(t).iter_rows(named=True)}
    assert st["sar"]["alpha"] == 0.1 and st["sar"]["kappa"] == 0.2
    assert st["sar"]["m_mean"] == 5.0 and (st["sar"]["m_min"], st["sar"]["m_max"]) == (4, 6)
    assert st["sar"]["exhausted"] is True and st["standard"]["exhausted"] is False
    assert st["adabn"]["m_mean"] is None  # adabn has no amortised rows in this table


def test_insolvency_counts_over_cells():
    rows = []
    for ep in ("e1", "e2"):
        rows += [
            {"method": "standard", "episode": ep, "protocol": "discrete", "value": 1.0, "utility": 0.2, "alpha": 1.0},
            {"method": "slow", "episode": ep, "protocol": "discrete", "value": 1.0, "utility": 0.1, "alpha": 0.15},
            {"method": "standard", "episode": ep, "protocol": "continuous", "value": 50.0, "utility": 0.2, "kappa": 1.0},
            {
                "method": "slow",
                "episode": ep,
                "protocol": "continuous",
                "value": 50.0,
                "utility": 0.1,
                "kappa": 0.25 if ep == "e1" else 0.1,
            },
        ]
    ins = {r["method"]: r for r in an.insolvency(utility_frame(rows)).iter_rows(named=True)}
    # discrete: 0.2/0.15 = 1.33 twice; continuous: 0.2/0.25 = 0.8 (solvent), 0.2/0.1 = 2 (insolvent)
    assert ins["slow"]["insolvent"] == 3 and ins["slow"]["cells"] == 4
    assert ins["slow"]["discrete_insolvent"] == 2 and ins["slow"]["continuous_insolvent"] == 1
    assert ins["slow"]["max_required"] == pytest.approx(2.0)
    assert ins["standard"]["insolvent"] == 0


# ----------------------------------------------------------------------------- Pareto
def _amortised(per_method: dict[str, dict[float, float]]) -> pl.DataFrame:
    return utility_frame(
        [
            {"method": m, "episode": an.POOLED, "protocol": "amortised", "value": b, "utility": u, "m": 1, "beta": 0.1}
            for m, pts in per_method.items()
            for b, u in pts.items()
        ]
    )


def test_pareto_frontier_over_budget():
    t = _amortised(
        {
            "standard": {1000.0: 0.2, 2000.0: 0.2, 4000.0: 0.2},
            "eta": {1000.0: 0.01, 2000.0: 0.01, 4000.0: 0.3},
            "shot": {1000.0: 0.3, 2000.0: 0.35, 4000.0: 0.34},
        }
    )
    p = {(r["method"], r["B_ms"]): r for r in an.pareto(t).iter_rows(named=True)}
    assert [p[("eta", b)]["efficient"] for b in (1000.0, 2000.0, 4000.0)] == [True, False, True]
    assert [p[("shot", b)]["efficient"] for b in (1000.0, 2000.0, 4000.0)] == [True, True, False]
    assert [p[("standard", b)]["efficient"] for b in (1000.0, 2000.0, 4000.0)] == [True, False, False]
    # eta: +29 pp over 3 extra seconds; shot: +5 pp over 1 s
    assert p[("eta", 4000.0)]["gain_pp_per_s"] == pytest.approx(29 / 3)
    assert p[("shot", 2000.0)]["gain_pp_per_s"] == pytest.approx(5.0)
    assert p[("eta", 1000.0)]["gain_pp_per_s"] is None
    assert p[("shot", 1000.0)]["best_at_B"] and p[("eta", 4000.0)]["best_at_B"] is False
    assert p[("shot", 2000.0)]["spent_ms"] is None  # no traces: x is the budget itself


def test_budget_spent_from_trace_rows():
    # λ = 10; δ = 13, 9, 15, 14 → c = 3, 0, 5, 4; cumulative 3, 3, 8, 12
    rows = pl.DataFrame(
        {
            **{k: [v] * 4 for k, v in GROUP.items()},
            "method": ["eta"] * 4,
            "episode": ["e1"] * 4,
            "phase": ["adapt"] * 4,
            "step": [0, 1, 2, 3],
            "delta_ms": [13.0, 9.0, 15.0, 14.0],
        }
    )
    t = utility_frame(
        [
            {"method": "eta", "episode": "e1", "protocol": "amortised", "value": v, "utility": 0.1, "m": m, "beta": m / 4}
            for v, m in ((0.0, 0), (3.0, 2), (8.0, 3), (100.0, 4))
        ]
        + [
            {"method": "eta", "episode": an.POOLED, "protocol": "amortised", "value": v, "utility": 0.1 + v / 1000, "m": m, "beta": m / 4}
            for v, m in ((0.0, 0), (3.0, 2), (8.0, 3), (100.0, 4))
        ]
    )
    spent = an.budget_spent(rows, t)
    per = {(r["episode"], r["value"]): r["spent_ms"] for r in spent.iter_rows(named=True)}
    assert per[("e1", 0.0)] == 0.0 and per[("e1", 3.0)] == 3.0 and per[("e1", 8.0)] == 8.0
    assert per[("e1", 100.0)] == 12.0 and per[(an.POOLED, 100.0)] == 12.0
    p = an.pareto(t, spent)
    assert p.filter(pl.col("B_ms") == 100.0).item(0, "spent_ms") == 12.0


# ----------------------------------------------------------------------------- latency
def test_latency_breakdown_matches_hand_computation():
    rows = pl.DataFrame(
        {
            **{k: [v] * 6 for k, v in GROUP.items()},
            "method": ["standard"] * 3 + ["tent"] * 3,
            "phase": ["adapt"] * 3 + ["adapt", "adapt", "frozen"],
            "episode": ["e"] * 6,
            "step": [0, 1, 2, 0, 1, 1],
            "e_ms": [9.0, 10.0, 11.0, 11.0, 12.0, 99.0],
            "l_ms": [0.0, 0.0, 0.0, 20.0, 10.0, 0.0],
            "delta_ms": [9.0, 10.0, 11.0, 31.0, 22.0, 99.0],
            "updated": [False, False, False, True, False, False],
            "peak_mem_bytes": [None, None, None, 2**20, 3 * 2**20, 9 * 2**20],
        },
        schema_overrides={"peak_mem_bytes": pl.Int64},
    )
    lam = pl.DataFrame({**{k: [v] for k, v in GROUP.items()}, "lambda_ms": [12.0]})
    lat = {r["method"]: r for r in an.latency_breakdown(rows, lam).iter_rows(named=True)}
    tent = lat["tent"]
    assert tent["batches"] == 2  # the frozen row is not part of the online stream
    assert tent["delta_mean"] == pytest.approx(26.5) and tent["e_mean"] == pytest.approx(11.5)
    assert tent["e_minus_lambda"] == pytest.approx(-0.5) and tent["l_mean"] == pytest.approx(15.0)
    assert tent["slowdown"] == pytest.approx(26.5 / 12) and tent["update_rate"] == pytest.approx(0.5)
    assert tent["peak_mem_mib"] == pytest.approx(3.0)
    assert lat["standard"]["peak_mem_mib"] is None
    assert an.latency_breakdown(rows, lam).get_column("method").to_list() == ["standard", "tent"]


def test_offline_and_sweep_tables():
    t = utility_frame(
        grid(WIN)
        + grid(
            {
                (an.POOLED, "offline", None): {"standard": 0.3, "fast": 0.375, "slow": 0.55},
                (an.POOLED, "discrete", 1.0): {"standard": 0.3, "fast": 0.36, "slow": 0.15},
            }
        )
    )
    off = an.offline_table(t).filter(pl.col("episode") == "fog")
    assert dict(zip(off.get_column("method"), off.get_column("rank"))) == {"standard": 3, "fast": 2, "slow": 1}
    sw = an.sweep_table(t)
    best = sw.filter(pl.col("best")).select("scenario", "method").rows()
    assert sorted(best) == [("offline", "slow"), ("ρ=100%", "fast")]


def test_malformed_table_is_a_clear_error():
    with pytest.raises(an.AnalysisError, match="utility"):
        an.winners(pl.DataFrame({"method": ["x"]}))


# ----------------------------------------------------------------------------- random oracle
def test_cell_analyses_match_a_plain_python_oracle_with_ties():
    """Winners, win counts, deficits and below-standard on random tables whose utilities come
    from a small set (so ties are frequent), against a direct re-computation in plain Python."""
    rng = random.Random(11)
    methods = ["standard", "a", "b", "c"]
    values = {"discrete": [1.0, 0.5], "continuous": [50.0, 200.0], "amortised": [1000.0]}
    table = {}
    for ep in ("e1", "e2", "e3", "e4"):
        table[(ep, "offline", None)] = {m: rng.choice([0.1, 0.2, 0.3]) for m in methods}
        for proto, vs in values.items():
            for v in vs:
                table[(ep, proto, v)] = {m: rng.choice([0.1, 0.2, 0.3]) for m in methods}
    t = utility_frame(grid(table))

    def winners_of(cell):
        best = max(cell.values())
        return sorted(m for m, u in cell.items() if u == best)

    got = {(r["episode"], r["protocol"], r["value"]): r["winners"] for r in an.winners(t).iter_rows(named=True)}
    assert got == {k: winners_of(c) for k, c in table.items()}

    wins = {m: sum(m in winners_of(c) for c in table.values()) for m in methods}
    assert dict(an.win_counts(t).select("method", "wins").rows()) == wins

    temporal = {k: c for k, c in table.items() if k[1] != "offline"}
    d = {r["method"]: r for r in an.deficits(t).iter_rows(named=True)}
    b = {r["method"]: r for r in an.below_standard(t).iter_rows(named=True)}
    for m in methods:
        lost = [max(c.values()) - c[m] for c in temporal.values() if m not in winners_of(c)]
        assert d[m]["losses"] == len(lost)
        if lost:
            assert d[m]["mean_deficit"] == pytest.approx(sum(lost) / len(lost))
        else:
            assert d[m]["mean_deficit"] is None
        if m == "standard":
            continue
        misses = [k[1] for k, c in temporal.items() if c[m] < c["standard"]]
        assert b[m]["below"] == len(misses)
        for proto in values:
            share = b[m][f"{proto}_share"]
            assert (share is None) if not misses else share == pytest.approx(misses.count(proto) / len(misses))
