"""The protocol registry: the built-in protocols are the vocabulary's words, and a protocol
registered from outside the product (a toy, here in the test) reaches grid parsing, the replay
with both engines, the output rows, the analyses' labels and orders, the win counts and the
terminal tables without an edit anywhere else."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from rich.console import Console

from tempora_schema.vocabulary import COMBINED_PROTOCOLS, LIVE_PROTOCOLS, PROTOCOLS
from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.engine import kernels as K
from tempora_sim.engine.grids import Grid, parse_rho
from tempora_sim.engine.replay_options import ReplayOptions
from tempora_sim.errors import GridError
from tempora_sim.protocols.base import Protocol, Rows, div, series_slices
from tempora_sim.protocols.discrete_amortised import distinct_cells
from tempora_sim.reporting.terminal import print_report
from tempora_sim.sweeps.options import SweepOptions
from tempora_sim.sweeps.replay import POOLED, run_sweep
from tempora_sim.sweeps.synthetic import write_trace_set
from tempora_sim.sweeps.traces import load_traces

#: The toy's own grid parameter: it has no sweep option, so its default grid is replayed.
EVERY = Grid(
    "every",
    "--every",
    (1.0, 2.0, 4.0),
    parse_rho,
    lambda v: f"k={v:g}",
    lambda v: f"k={v:g}",
    axis_label="k",
    axis=lambda v: v,
)


class EveryKth(Protocol):
    """Only every k-th batch is served (k = 1 serves all): U = α · ā_served."""

    name = "every-kth"
    grids = (EVERY,)
    strictest = "max"
    terms = ("alpha", "served", "served_acc")
    title = "Every-k-th utility (%) across k"

    def _sums(self, series, values) -> dict:
        sl = series_slices(series)
        served = np.zeros((len(sl), len(values)), np.int64)
        ssum = np.zeros((len(sl), len(values)))
        for i, x in enumerate(sl):
            a = series.a[x]
            for k, v in enumerate(values):
                pick = a[:: int(v)]
                served[i, k], ssum[i, k] = pick.size, pick.sum()
        return {"served": served, "served_sum": ssum}

    def replay_numba(self, series, values, replay):
        return self._sums(series, values)

    def replay_python(self, series, values, replay):
        return self._sums(series, values)

    def batch_scores(self, row, a, j, delays):
        return np.where(j % int(row["value"]) == 0, a, 0.0)

    def columns(self, rows: Rows, stats: dict) -> dict:
        served = rows.reduce(stats["served"])
        ssum = rows.reduce(stats["served_sum"])
        return {"served": served, "alpha": served / rows.NN, "served_acc": div(ssum, served), "utility": ssum / rows.NN}


@pytest.fixture(scope="module")
def traceset(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    write_trace_set(d, ("standard", "tent", "adabn"), num_batches=12, episodes=("fog", "snow"))
    return load_traces(d)


@pytest.fixture
def toy():
    with P.registered(EveryKth()) as proto:
        yield proto
    assert proto.name not in P.names()


def test_the_built_in_protocols_are_the_vocabulary_words():
    assert P.single() == PROTOCOLS and P.combined() == COMBINED_PROTOCOLS
    assert P.temporal() == PROTOCOLS[1:]
    assert [P.get(p).param for p in PROTOCOLS] == [None, "rho", "T_ms", "B_ms"]
    assert [P.get(p).param2 for p in COMBINED_PROTOCOLS] == ["T_ms", "B_ms"]
    assert P.with_grids(("rho", "B_ms")) == COMBINED_PROTOCOLS[1]


def test_what_the_protocol_objects_say_in_place_of_their_names():
    assert P.reference() == "offline" and not P.get(P.reference()).grids
    assert P.live() == LIVE_PROTOCOLS
    assert [p for p in P.names() if P.get(p).has_idle_effect] == ["discrete"]
    assert [p for p in P.live() if P.get(p).serves_subset] == ["discrete"]
    # one column per setting value, the discrete protocol's first (the validation's column order)
    assert P.live_setting_columns() == ("rho", "gamma_ms", "queue", "budget_ms", "budget_rule")
    # a live run at λ = 10 ms, γ = 20 ms is ρ = 50 %; its replay is the sweep at that one value
    disc = {"protocol": "discrete", "rho": 0.5, "gamma_ms": 20.0, "queue": 2}
    assert P.get("discrete").live_replay(disc, 10.0) == {"protocols": "discrete", "rho": [0.5], "queue": 2}
    assert P.get("discrete").live_setting_values(disc) == {"rho": 0.5, "gamma_ms": 20.0, "queue": 2}
    amort = {"protocol": "amortised", "budget_ms": 500, "budget_rule": "overshoot"}
    assert P.get("amortised").live_replay(amort, 10.0) == {"protocols": "amortised", "B_ms": [500.0], "budget_rule": "overshoot"}
    assert P.get("amortised").live_key(amort) == (500.0, "overshoot")
    with pytest.raises(NotImplementedError, match="not played live"):
        P.get("continuous").live_replay({}, 10.0)


def test_the_replay_options_are_typed_and_resolved_once():
    resolved = SweepOptions(queue=3, sync="strict", fallback=True, budget_rule="overshoot").resolve()
    replay = resolved.replay
    assert replay == ReplayOptions(queue=3, sync="strict", skipped="null", fallback=True, budget_rule="overshoot")
    assert replay.strict_sync and replay.overshoot and replay.skip_mode(K) == K.SKIP_FALLBACK
    plain = SweepOptions(skipped="random").resolve().replay
    assert not plain.strict_sync and not plain.overshoot and plain.skip_mode(K) == K.SKIP_RANDOM
    assert SweepOptions().resolve().replay.skip_mode(K) == K.SKIP_NULL


def test_resolved_options_are_replayed_as_they_are(traceset):
    options = SweepOptions(protocols="discrete,amortised", rho="1,0.5", B_ms="100ms")
    once = run_sweep(traceset, options.resolve())
    assert once.frame.equals(run_sweep(traceset, options).frame)
    with pytest.raises(TypeError, match="resolved options take no changes"):
        run_sweep(traceset, options.resolve(), queue=2)


def test_a_registered_protocol_is_parsed_and_listed(toy):
    assert P.parse_protocols("offline,every-kth") == ("offline", "every-kth")
    assert "every-kth" in P.parse_protocols("all")
    with pytest.raises(GridError, match="every-kth"):
        P.parse_protocols("nope")
    with pytest.raises(ValueError):
        P.register(EveryKth())  # one name, one protocol


def test_a_protocol_fills_only_columns_the_sweep_has():
    class Stray(EveryKth):
        name = "stray"
        terms = ("alpha", "latency_budget")

    with pytest.raises(ValueError, match="latency_budget"):
        P.register(Stray())
    assert "stray" not in P.names()


@pytest.mark.parametrize("engine", ["numba", "python"])
def test_a_registered_protocol_is_replayed_and_framed(toy, traceset, engine):
    result = run_sweep(traceset, protocols="offline,every-kth", engine=engine)
    rows = result.frame.filter(pl.col("protocol") == "every-kth")
    assert set(rows.get_column("param").to_list()) == {"every"}
    assert sorted(set(rows.get_column("value").to_list())) == [1.0, 2.0, 4.0]
    # k = 1 serves every batch: the offline utility, α = 1
    off = result.frame.filter(pl.col("protocol") == "offline").select("method", "episode", pl.col("utility").alias("off"))
    k1 = rows.filter(pl.col("value") == 1.0).join(off, on=["method", "episode"])
    assert k1.height == 9 and np.allclose(k1["utility"], k1["off"]) and (k1["alpha"] == 1.0).all()
    # k = 2 serves 6 of 12 batches per episode (12 of 24 pooled)
    k2 = rows.filter(pl.col("value") == 2.0)
    assert (k2.filter(pl.col("episode") != POOLED)["served"] == 6).all()
    assert (k2.filter(pl.col("episode") == POOLED)["served"] == 12).all()


def test_a_registered_protocol_reaches_the_analyses_and_the_tables(toy, traceset):
    result = run_sweep(traceset, protocols="offline,every-kth")
    u = result.frame
    an.check_utility_table(u)
    labelled = an.with_scenario(u).filter(pl.col("protocol") == "every-kth").sort("scenario_order")
    # the strictest first: the largest k (strictest = "max")
    assert labelled.get_column("scenario").unique(maintain_order=True).to_list() == ["k=4", "k=2", "k=1"]
    counts = an.win_counts(an.pool_seeds(u))
    assert "every-kth" in counts.columns and counts.get_column("every-kth").sum() >= 1
    console = Console(record=True, width=200)
    print_report(result, console)
    text = console.export_text()
    assert "Every-k-th utility (%) across k" in text and "k=4" in text


class Decomposed(EveryKth):
    """The toy with a decomposition at its strictest k: its utility is capped by α like discrete's."""

    decomposition_terms = ("alpha", "served", "served_acc")
    insolvency_factor = "alpha"
    insolvency_accuracy = "served_acc"


def test_a_declared_decomposition_reaches_the_analyses(traceset):
    with P.registered(Decomposed()):
        u = run_sweep(traceset, protocols="offline,every-kth").frame
        d = an.decomposition(u, "every-kth")
        with pytest.raises(an.AnalysisError, match="no decomposition"):
            an.decomposition(u, P.reference())
    assert P.reference() == "offline"
    assert d.get_column("value").unique().to_list() == [4.0]  # the strictest: the largest k
    insolvency = ["best_other_method", "best_other", "required_served_acc", "insolvent"]
    assert d.columns[-8:] == ["alpha", "served", "served_acc", "utility"] + insolvency
    pooled = u.filter((pl.col("protocol") == "every-kth") & (pl.col("episode") == POOLED) & (pl.col("value") == 4.0))
    utility = dict(zip(pooled.get_column("method"), pooled.get_column("utility")))
    alpha = dict(zip(pooled.get_column("method"), pooled.get_column("alpha")))
    assert sorted(d.get_column("method").to_list()) == sorted(utility)
    for r in d.iter_rows(named=True):
        best_other = max(x for m, x in utility.items() if m != r["method"])
        assert r["best_other"] == pytest.approx(best_other)
        assert r["required_served_acc"] == pytest.approx(best_other / alpha[r["method"]])
        assert r["insolvent"] == (best_other / alpha[r["method"]] > 1)


def test_combined_protocols_are_replayed_under_arrivals_only():
    with pytest.raises(NotImplementedError, match="arrivals"):
        P.get(COMBINED_PROTOCOLS[0]).replay_python(None, (), {})


def test_distinct_budget_cells_hand_worked():
    """discrete-amortised replays each series' distinct freeze settings once: budgets 0 and 1
    freeze at m = 0, 2 and 3 at m = 3 with the same checkpoint, 4 adapts throughout (NaN
    latency and accuracy alike); the second series has two settings, padded to the first's three."""
    nan = float("nan")
    m = np.array([[0, 0, 3, 3, 5], [2, 2, 2, 2, 4]], np.int64)
    fdelta = np.array([[9.0, 9.0, 7.5, 7.5, nan], [8.0, 8.0, 8.0, 8.0, 6.0]])
    facc = np.array([[0.4, 0.4, 0.6, 0.6, nan], [0.5, 0.5, 0.5, 0.5, 0.7]])
    cells, pick = distinct_cells(m, fdelta, facc)
    assert cells.tolist() == [[0, 2, 4], [0, 4, 4]]
    assert pick.tolist() == [[0, 0, 1, 1, 2], [0, 0, 0, 0, 1]]
    # every budget reads a cell with its own settings, bit for bit
    for x in (m, fdelta, facc):
        replayed = np.take_along_axis(np.take_along_axis(x, cells, axis=1), pick, axis=1)
        np.testing.assert_array_equal(replayed, x)
    # a setting that differs only in the frozen accuracy is its own cell
    facc[0, 1] = 0.45
    assert distinct_cells(m, fdelta, facc)[0].tolist()[0] == [0, 1, 2, 4]
