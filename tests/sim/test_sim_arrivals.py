"""General arrival processes and combined pressures: kernels against the event simulation.

The oracle is :func:`tempora_sim.engine.oracle.discrete_reference`, an explicit event-queue
simulation; the kernels find the next batch from the arrival array directly. Every arrival
kind, queue capacity, synchronisation and skip scoring is compared on random inputs, ties
included (arrival times and latencies on a coarse grid make exact ties common).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempora_sim.engine import kernels as K
from tempora_sim.engine.arrivals import ArrivalSpec, arrival_times, parse_arrivals
from tempora_sim.engine.oracle import discrete_reference
from tempora_sim.errors import GridError

EMPTY_H = np.zeros(0)


def run_kernel(a, e, delta, t, queue, strict, skip_mode=K.SKIP_NULL, skip_value=0.1, lam=1.0, T=(), n_adapt=None, f_delta=0.0, f_acc=0.0):
    n = len(a)
    h = np.array([x - lam for x in T], np.float64)
    ak = np.zeros(len(T))
    out = K.discrete_general_one(
        np.asarray(a, float),
        np.asarray(e, float),
        np.asarray(delta, float),
        np.asarray(t, float),
        queue,
        strict,
        skip_mode,
        skip_value,
        lam,
        h,
        n if n_adapt is None else n_adapt,
        f_delta,
        f_acc,
        ak,
    )
    return out, ak


# coarse grids make ties between arrivals and completions frequent
times_ = st.lists(st.integers(0, 6), min_size=1, max_size=25).map(lambda g: np.cumsum([0] + g[:-1]).astype(float))
lat_ = st.integers(1, 12).map(float)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), queue=st.sampled_from([0, 1, 2, 3]), strict=st.booleans(), mode=st.sampled_from(["null", "random", "fallback"]))
def test_general_kernel_matches_event_simulation(data, queue, strict, mode):
    t = data.draw(times_)
    n = len(t)
    delta = data.draw(st.lists(lat_, min_size=n, max_size=n))
    a = data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=n, max_size=n))
    skip_mode = {"null": K.SKIP_NULL, "random": K.SKIP_RANDOM, "fallback": K.SKIP_FALLBACK}[mode]
    (served, ssum, skip, _), _ = run_kernel(a, delta, delta, t, queue, strict, skip_mode, 0.1)
    ref = discrete_reference(
        a,
        delta,
        None,
        queue,
        "strict" if strict else "buffered",
        "random" if mode == "random" else "null",
        10,
        mode == "fallback",
        arrivals=list(t),
    )
    assert served == ref.served
    assert ssum == pytest.approx(ref.served_sum, abs=1e-12)
    assert ssum + skip == pytest.approx(ref.score_sum, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), queue=st.sampled_from([0, 1, 3]), strict=st.booleans())
def test_combined_pressures_match_event_simulation(data, queue, strict):
    t = data.draw(times_)
    n = len(t)
    e = data.draw(st.lists(lat_, min_size=n, max_size=n))
    extra = data.draw(st.lists(st.integers(0, 5).map(float), min_size=n, max_size=n))
    delta = [x + y for x, y in zip(e, extra)]
    a = data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n))
    n_adapt = data.draw(st.integers(0, n))
    f_delta = data.draw(lat_)
    lam, T = 2.0, (3.0, 10.0, 50.0)
    (served, ssum, skip, frozen), ak = run_kernel(a, e, delta, t, queue, strict, lam=lam, T=T, n_adapt=n_adapt, f_delta=f_delta, f_acc=0.75)
    ref = discrete_reference(
        a,
        delta,
        None,
        queue,
        "strict" if strict else "buffered",
        arrivals=list(t),
        e=e,
        lam=lam,
        T=T,
        n_adapt=n_adapt,
        f_delta=f_delta,
        f_acc=0.75,
    )
    assert (served, frozen) == (ref.served, ref.frozen_served)
    assert ssum == pytest.approx(ref.served_sum, abs=1e-12)
    assert list(ak) == pytest.approx(ref.ak_sums, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    delta=st.lists(st.floats(0.1, 30.0), min_size=1, max_size=40),
    gamma=st.floats(0.5, 20.0),
    queue=st.sampled_from([0, 1, 2]),
    strict=st.booleans(),
)
def test_periodic_arrays_reproduce_the_periodic_kernel(delta, gamma, queue, strict):
    n = len(delta)
    a = [((i * 7) % 5) / 4 for i in range(n)]
    t = arrival_times(ArrivalSpec(), n, gamma, "ep")
    (served, ssum, _, _), _ = run_kernel(a, delta, delta, t, queue, strict)
    ref = K.discrete_one(np.asarray(a), np.asarray(delta), gamma, queue, strict, K.SKIP_NULL, 0.0)
    assert (served, ssum) == (ref[0], pytest.approx(ref[1], abs=1e-12))


def test_hand_worked_deadline_and_patience():
    # λ = 1, T = 3 (h = 2); arrivals at 0, 1, 2; every event takes 2.5 (e = 1.5), queue 1.
    # event 0: batch 0 at 0, r = 1.5 → κ = 2/(2 + 0.5) = 0.8, ends 2.5 (batches 1, 2 arrived: 2 kept, 1 evicted)
    # event 1: batch 2 picked at 2.5, waited 0.5, r = 2.0 → κ = 2/3
    (served, ssum, _, _), ak = run_kernel([1.0, 1.0, 0.5], [1.5] * 3, [2.5] * 3, [0.0, 1.0, 2.0], 1, False, lam=1.0, T=(3.0,))
    assert served == 2
    assert ssum == pytest.approx(2.0)  # step-indexed: events score a_0, a_1
    assert ak[0] == pytest.approx(1.0 * 0.8 + 1.0 * 2 / 3)


def test_hand_worked_budget_freeze():
    # events 0,1 adapt (δ = 3), then the frozen model (δ = 0.5, acc 0.9) keeps up with γ = 1.
    (served, ssum, _, frozen), _ = run_kernel([0.5] * 6, [1.0] * 6, [3.0] * 6, np.arange(6.0), 1, False, n_adapt=2, f_delta=0.5, f_acc=0.9)
    # event 0: batch 0, ends 3 → batch 3 (1, 2 skipped); event 1: batch 3, ends 6 → batch 5 (4 skipped)
    # event 2 (frozen): batch 5 at 6, ends 6.5; no batches left
    assert (served, frozen) == (3, 1)
    assert ssum == pytest.approx(0.5 + 0.5 + 0.9)


def test_generated_processes_keep_the_mean_load():
    n, gamma = 40_000, 10.0
    for spec in (parse_arrivals("poisson:3"), parse_arrivals("burst:2,8:5")):
        t = arrival_times(spec, n, gamma, "fog")
        assert t[0] == 0.0 and np.all(np.diff(t) >= 0)
        assert np.diff(t).mean() == pytest.approx(gamma, rel=0.05)
    # common random numbers: same episode and seed → same arrivals; another episode differs
    p = parse_arrivals("poisson:3")
    assert np.array_equal(arrival_times(p, 50, 2.0, "fog"), arrival_times(p, 50, 2.0, "fog"))
    assert not np.array_equal(arrival_times(p, 50, 2.0, "fog"), arrival_times(p, 50, 2.0, "snow"))


def test_bursts_are_burstier_than_poisson():
    gamma = 10.0
    cv = {}
    for name in ("poisson:1", "burst:1,9:1"):
        g = np.diff(arrival_times(parse_arrivals(name), 20_000, gamma, "x"))
        cv[name] = g.std() / g.mean()
    assert cv["poisson:1"] == pytest.approx(1.0, abs=0.05)
    assert cv["burst:1,9:1"] > 2.0


def test_file_arrivals_rescale_and_rotate(tmp_path):
    path = tmp_path / "cam.csv"
    path.write_text("t_s\n0\n0.1\n0.3\n0.35\n")
    spec = parse_arrivals(f"file:{path}")
    assert spec.gaps == pytest.approx((100.0, 200.0, 50.0))
    t = arrival_times(spec, 7, 10.0, "ep")
    assert np.diff(t) == pytest.approx(np.array([100, 200, 50, 100, 200, 50]) * 10.0 / (350 / 3))
    assert np.diff(arrival_times(spec, 4, 10.0, "ep", absolute=True)) == pytest.approx([100, 200, 50])
    rotated = arrival_times(spec.with_seed(1), 4, 10.0, "ep", absolute=True)
    assert np.diff(rotated) == pytest.approx([200, 50, 100])


@pytest.mark.parametrize("bad", ["poisson:x", "burst:1", "burst:0,3", "burst:1,nan", "gamma", "file:", "poisson:-1"])
def test_bad_arrival_specs_are_one_line_errors(bad):
    with pytest.raises(GridError) as info:
        parse_arrivals(bad)
    assert "\n" not in str(info.value)


def test_missing_or_bad_arrival_file(tmp_path):
    with pytest.raises(GridError, match="no such file"):
        parse_arrivals(f"file:{tmp_path / 'nope.csv'}")
    bad = tmp_path / "bad.csv"
    bad.write_text("t_ms\n5\n3\n")
    with pytest.raises(GridError, match="must not decrease"):
        parse_arrivals(f"file:{bad}")


def test_rho_to_zero_gives_mean_a_kappa_of_e():
    # with arrivals far apart nothing waits: U → mean(a·κ(e)) (not the continuous protocol,
    # whose closed loop also charges the previous batch's ℓ)
    e = [0.5, 3.0, 1.2, 8.0]
    a = [1.0, 0.5, 0.25, 1.0]
    lam, T = 1.0, 4.0
    t = np.arange(4) * 1e6
    (_, _, _, _), ak = run_kernel(a, e, [x + 2 for x in e], t, 1, False, lam=lam, T=(T,))
    expect = sum(x / (1 + max(0.0, y - lam) / (T - lam)) for x, y in zip(a, e))
    assert ak[0] == pytest.approx(expect)
    assert math.isfinite(ak[0])


# ------------------------------------------------------------------ through the sweep
import polars as pl  # noqa: E402

from tempora_sim.sweeps.replay import POOLED, run_sweep  # noqa: E402
from tempora_sim.sweeps.synthetic import write_trace_set  # noqa: E402

METHODS = ("standard", "tent", "eta", "shot-im", "neo")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("scen")
    write_trace_set(d, METHODS, num_batches=60, frozen_eval="all", checkpoints=range(0, 60, 3))
    return d


def _pooled(frame, protocol):
    return frame.filter((pl.col("episode") == POOLED) & (pl.col("protocol") == protocol)).sort("method", "value", "value2", nulls_last=True)


def test_huge_patience_reduces_to_discrete(traces):
    f = run_sweep(traces, protocols="discrete,discrete-continuous", rho="1,0.5", T_ms="1e12").frame
    d, dc = _pooled(f, "discrete"), _pooled(f, "discrete-continuous")
    assert d["utility"].to_list() == pytest.approx(dc["utility"].to_list(), rel=1e-9)
    assert d["alpha"].to_list() == dc["alpha"].to_list()
    assert dc["param2"].unique().to_list() == ["T_ms"]


def test_unlimited_budget_reduces_to_discrete_and_zero_budget_to_the_frozen_model(traces):
    f = run_sweep(traces, protocols="discrete,discrete-amortised", rho="1,0.5", B_ms="0,1e15", budget_rule="strict").frame
    d = _pooled(f, "discrete")
    da = _pooled(f, "discrete-amortised")
    inf = da.filter(pl.col("value2") == 1e15)
    assert inf["utility"].to_list() == pytest.approx(d["utility"].to_list(), rel=1e-12)
    assert (inf["m"] == inf["served"]).all()
    # B = 0: a gradient method whose every step costs more than λ freezes at once, so the
    # frozen model serves the whole stream under the same arrivals
    zero = f.filter(
        (pl.col("protocol") == "discrete-amortised")
        & (pl.col("value2") == 0)
        & (pl.col("method") == "tent")
        & (pl.col("episode") != POOLED)
    )
    am = run_sweep(traces, protocols="amortised", B_ms="0", budget_rule="strict").frame.filter(
        (pl.col("method") == "tent") & (pl.col("episode") != POOLED)
    )
    assert (am["m"] == 0).all()
    from tempora_sim.sweeps.traces import load_traces

    ts = load_traces(traces)
    tent = next(t for t in ts.traces if t.method == "tent")
    lam = float(zero["lambda_ms"][0])
    for row in zero.iter_rows(named=True):
        fr = tent.frozen.filter((pl.col("episode") == row["episode"]) & (pl.col("checkpoint") == 0))
        f_delta = float(fr["delta_ms"].mean())
        f_acc = float(fr["correct"].sum() / fr["n"].sum())
        n = row["num_batches"]
        ref = discrete_reference([f_acc] * n, [f_delta] * n, lam / row["value"], 1)
        assert row["served"] == ref.served and row["m"] == 0
        assert row["utility"] == pytest.approx(ref.score_sum / n, rel=1e-9)


def test_scenarios_agree_with_the_python_engine(traces):
    kw = dict(
        protocols="discrete,discrete-continuous,discrete-amortised",
        rho="1,0.35",
        T_ms="150,400",
        B_ms="500,4000",
        arrivals="burst:2,6:4",
        arrival_seeds=2,
        queue=2,
        fallback=True,
    )
    a = run_sweep(traces, **kw).frame.sort("method", "episode", "protocol", "value", "value2", "arrival_seed")
    b = run_sweep(traces, engine="python", **kw).frame.sort("method", "episode", "protocol", "value", "value2", "arrival_seed")
    assert a.height == b.height > 0
    for col in ("served", "m", "arrival_seed"):
        assert a[col].to_list() == b[col].to_list()
    for col in ("utility", "served_acc", "kappa", "acc_frozen"):
        assert a[col].fill_null(-1).to_list() == pytest.approx(b[col].fill_null(-1).to_list(), rel=1e-9)


def test_arrival_seeds_pool_like_episodes(traces):
    f = run_sweep(traces, protocols="discrete", rho="0.7", arrivals="poisson:5", arrival_seeds=3).frame
    tent = f.filter(pl.col("method") == "tent")
    per = tent.filter(pl.col("episode") != POOLED)
    assert sorted(per["arrival_seed"].unique().to_list()) == [5, 6, 7]
    pooled = tent.filter(pl.col("episode") == POOLED)
    assert pooled["arrival_seed"].is_null().all() and pooled["arrivals"].to_list() == ["poisson"]
    assert pooled["served"][0] == per["served"].sum()
    expect = (per["utility"] * per["num_batches"]).sum() / per["num_batches"].sum()
    assert pooled["utility"][0] == pytest.approx(expect)


def test_recorded_periodic_file_equals_periodic(traces, tmp_path):
    path = tmp_path / "even.csv"
    path.write_text("t_ms\n" + "\n".join(str(i * 7) for i in range(200)) + "\n")
    a = _pooled(run_sweep(traces, protocols="discrete", rho="1,0.6").frame, "discrete")
    b = _pooled(run_sweep(traces, protocols="discrete", rho="1,0.6", arrivals=f"file:{path}").frame, "discrete")
    assert a["served"].to_list() == b["served"].to_list()
    assert a["utility"].to_list() == pytest.approx(b["utility"].to_list(), rel=1e-12)


def test_absolute_recorded_times_report_the_effective_load(traces, tmp_path):
    path = tmp_path / "cam.csv"
    path.write_text("t_ms\n" + "\n".join(str(i * 50.0) for i in range(100)) + "\n")
    f = run_sweep(traces, protocols="discrete", arrivals=f"file:{path}", arrivals_absolute=True).frame
    row = _pooled(f, "discrete").row(0, named=True)
    assert row["value"] == pytest.approx(row["lambda_ms"] / 50.0)
    with pytest.raises(GridError, match="no effect"):
        run_sweep(traces, protocols="discrete", rho="0.5", arrivals=f"file:{path}", arrivals_absolute=True)
    with pytest.raises(GridError, match="random arrival process"):
        run_sweep(traces, protocols="discrete", arrival_seeds=3)


def test_defaults_unchanged_by_the_scenario_columns(traces):
    f = run_sweep(traces, protocols="all", rho="1", T_ms="400", B_ms="1s").frame
    assert set(f["protocol"].unique()) == {"offline", "discrete", "continuous", "amortised"}
    assert f.filter(pl.col("protocol") == "discrete")["arrivals"].unique().to_list() == ["periodic"]
    assert f["param2"].is_null().all() and f["arrival_seed"].is_null().all()


def test_cli_sweeps_scenarios_and_prints_winners_maps(traces, tmp_path):
    from click.testing import CliRunner

    from tempora_sim.commands.main import main

    out = tmp_path / "res"
    r = CliRunner().invoke(
        main,
        [
            "sweep",
            str(traces),
            "--protocol",
            "discrete-continuous,discrete-amortised",
            "--rho",
            "1,0.5",
            "--T",
            "200ms,1s",
            "--B",
            "1s",
            "--arrivals",
            "poisson:2",
            "--arrival-seeds",
            "2",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "Deadline + patience: winner" in r.output and "Deadline + budget: winner" in r.output
    frame = pl.read_parquet(out / "utility.parquet")
    assert set(frame["protocol"].unique()) == {"discrete-continuous", "discrete-amortised"}
    assert set(frame["arrival_seed"].drop_nulls().unique()) == {2, 3}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--arrivals", "weibull"], "--arrivals"),
        (["--arrivals", "burst:1"], "burst:ON,OFF"),
        (["--arrival-seeds", "3"], "random arrival process"),
        (["--arrivals-absolute"], "file:PATH"),
    ],
)
def test_cli_bad_scenario_options_are_one_line(traces, args, message):
    from click.testing import CliRunner

    from tempora_sim.commands.main import main

    r = CliRunner().invoke(main, ["sweep", str(traces), "--protocol", "discrete", *args])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], r.output


def test_report_scenarios_section(traces, tmp_path):
    """`report --scenarios` adds the bursty-vs-periodic table and both 2-D winners maps, keeps the
    paper's analyses on periodic single-pressure rows, and writes the scenario rows."""
    from click.testing import CliRunner

    from tempora_sim.commands.main import main
    from tempora_sim.reporting.scenarios import burst_comparison, split

    out = tmp_path / "rep"
    r = CliRunner().invoke(
        main,
        [
            "report",
            str(traces),
            "--out",
            str(out),
            "--scenarios",
            "--rho",
            "1,0.5",
            "--T",
            "200ms,1s",
            "--B",
            "1s,4s",
            "--resamples",
            "200",
        ],
    )
    assert r.exit_code == 0, r.output
    text = (out / "report.md").read_text()
    assert "Beyond the paper's scenarios" in text and "Bursty vs periodic arrivals" in text
    assert "Deadline + patience" in text and "Deadline + budget" in text
    scen = pl.read_parquet(out / "scenarios.parquet")
    assert set(scen["protocol"].unique()) == {"discrete", "discrete-continuous", "discrete-amortised"}
    paper = pl.read_parquet(out / "utility.parquet")
    assert split(paper)[1].height == 0  # the paper's tables never see scenario rows
    comp = burst_comparison(paper, scen)
    assert comp.height == 2 and set(comp["arrivals"]) == {"burst:1,4"}
