"""Live protocol runs: the runner's decisions against the replay kernel and the event-queue
reference, the amortised cut-off against the reference rule, the live-run schema, and
`tempora-sim validate` on recorded runs."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.cifar import tiny_config
from tempora_sim.commands.main import main as sim_main
from tempora_sim.engine import oracle as R
from tempora_sim.engine.kernels import discrete_served
from tempora_trace.config import TraceConfig
from tempora_trace.errors import ConfigError
from tempora_trace.live_runner import AmortisedHooks, play_amortised, play_discrete, run_live
from tempora_trace.timing import DeviceClock, now_ns, timed_event


def busy_wait_ms(ms: float) -> None:
    end = now_ns() + int(ms * 1e6)
    while now_ns() < end:
        pass


class BusyMethod:
    """The method interface's two phases, each taking exactly the time it is given."""

    def __init__(self, e_ms, l_ms):
        self.e_ms, self.l_ms = list(e_ms), list(l_ms)
        self.calls = 0
        self.last_updated = True

    def predict(self, x):
        busy_wait_ms(self.e_ms[self.calls])
        return x

    def adapt(self):
        busy_wait_ms(self.l_ms[self.calls])
        self.calls += 1


CLOCK = DeviceClock(torch.device("cpu"))
X = torch.zeros(1, 2)


def occupancy(outcome, gamma):
    """Event j occupies the pipeline from max(free_{j-1}, arrival of its batch) to free_j."""
    served = sorted(((s.event, i, s) for i, s in enumerate(outcome) if s is not None))
    free_prev, occ, frees = 0.0, [], []
    for _, i, s in served:
        start = max(free_prev, i * gamma)
        occ.append(s.free_ms - start)
        frees.append(s.free_ms)
        free_prev = s.free_ms
    return np.array(occ), np.array(frees)


def min_margin_ms(frees, gamma):
    k = np.floor(frees / gamma)
    return float(np.min(np.minimum(frees - k * gamma, (k + 1) * gamma - frees))) if frees.size else math.inf


@pytest.mark.parametrize("queue", [0, 1, 3])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_decisions_equal_the_replay_kernel(queue, data):
    n = data.draw(st.integers(2, 8), label="batches")
    gamma = data.draw(st.floats(1.0, 3.0), label="gamma_ms")
    e = data.draw(st.lists(st.floats(0.2, 2.5), min_size=n, max_size=n), label="e_ms")
    l = data.draw(st.lists(st.floats(0.0, 2.5), min_size=n, max_size=n), label="l_ms")
    method = BusyMethod(e, l)
    outcome = play_discrete(n, gamma, queue, lambda i: (timed_event(method, X, CLOCK), i % 2), spin_ns=200_000)
    live = np.array([s is not None for s in outcome])
    # the runner's own timing is faithful: every event took at least its δ, predict before free
    for s in outcome:
        if s is not None:
            assert s.ev.e_ms >= e[s.event] - 1e-3 and s.ev.l_ms >= l[s.event] - 1e-3
            assert s.pickup_ms <= s.predict_ms <= s.free_ms
    occ, frees = occupancy(outcome, gamma)
    if min_margin_ms(frees, gamma) < 1e-6:  # a decision within clock resolution of an arrival: a tie
        return
    padded = np.r_[occ, np.full(n - occ.size, gamma)]
    order = discrete_served(padded, gamma, queue, False)
    kernel = np.zeros(n, bool)
    kernel[order[order >= 0]] = True
    assert kernel.tolist() == live.tolist()
    # the independent event-queue simulation agrees batch for batch, in service order
    ref = R.discrete_reference([0.0] * n, padded.tolist(), gamma, queue)
    assert ref.served_batches == [i for _, i in sorted((s.event, i) for i, s in enumerate(outcome) if s is not None)]
    # and with the intended δ alone: the replay equals live unless the harness overhead could
    # have moved a decision across an arrival
    intended = np.array(e) + np.array(l)
    extra = float(np.sum(occ - intended[: occ.size]))
    k_int = discrete_served(intended, gamma, queue, False)
    f_int = []
    free = 0.0
    for j, b in enumerate(k_int[k_int >= 0]):
        free = max(free, b * gamma) + intended[j]
        f_int.append(free)
    if min_margin_ms(np.array(f_int), gamma) > extra + 0.05:
        replay = np.zeros(n, bool)
        replay[k_int[k_int >= 0]] = True
        assert replay.tolist() == live.tolist()


@pytest.mark.parametrize("rule", ["strict", "overshoot"])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_live_amortised_cutoff_is_the_reference_rule(rule, data):
    n = data.draw(st.integers(1, 8), label="batches")
    lam = 1.0
    delta = data.draw(st.lists(st.floats(0.2, 3.0), min_size=n, max_size=n), label="delta_ms")
    budget = data.draw(st.floats(0.0, 6.0), label="budget_ms")
    adapt = BusyMethod([d / 2 for d in delta], [d / 2 for d in delta])
    frozen = BusyMethod([0.1] * n, [0.0] * n)
    state = {"frozen": False, "undone": 0}

    def serve_frozen(i):
        frozen.calls = i
        return timed_event(frozen, X, CLOCK, adapt=False), 1

    def serve_adapt(i):
        adapt.calls = i
        return timed_event(adapt, X, CLOCK), 0

    hooks = AmortisedHooks(
        serve_adapt,
        serve_frozen,
        lambda: "saved",
        lambda saved: state.__setitem__("undone", state["undone"] + 1),
        lambda: state.__setitem__("frozen", True),
    )
    rows, m = play_amortised(n, lam, budget, rule, hooks)
    assert len(rows) == n and [r.mode for r in rows] == ["adapt"] * m + ["frozen"] * (n - m)
    # the measured overheads of every adapting attempt (the undone strict step included)
    attempts = [r.ev.e_ms + r.ev.l_ms for r in rows[:m]]
    if rule == "strict" and m < n:
        attempts.append(rows[m].charged_ms + lam)
        assert state["undone"] == 1
    assert R.amortised_cutoff(attempts + [0.0] * (n - len(attempts)), lam, budget, rule) == m
    assert rows[-1].spent_ms == pytest.approx(sum(max(0.0, d - lam) for d in attempts))


# ------------------------------------------------------------------------ end to end, tiny


def tiny_cfg(root, out, method="tent", **kw) -> TraceConfig:
    return tiny_config(root, out, method=method, **{"frozen_sample": None, **kw})


@pytest.fixture
def recorded(cifar_c_root, tmp_path, one_thread, tiny_models):
    """Traces of standard and tent, and a live file of tent (discrete ρ 1 and 50 %, amortised)."""
    from tempora_trace.runner import trace_run

    traces = tmp_path / "traces"
    for m in ("standard", "tent"):
        trace_run(tiny_cfg(cifar_c_root, traces, m))
    # stage_mb below one batch: every batch is its own chunk, so the episode clock pauses at
    # each pickup of an unstaged batch — the live decisions must not notice
    live = run_live(
        tiny_cfg(cifar_c_root, tmp_path / "live", stage_mb=0.05),
        protocols="discrete,amortised",
        rho=[1.0, 0.5],
        queue=1,
        budgets_ms=[0.0, 1e6],
        standard=str(traces),
        repeats=2,
    )
    return traces, live


@pytest.mark.slow
def test_live_file_is_valid_and_validate_agrees_with_itself(recorded, tmp_path):
    """One recorded run (slow part: building it) checked every way: schema, self-consistency,
    the comparison with the replay, the CLI's outputs, exit statuses."""
    from tempora_schema.live import decode_live_metadata, validate_live_table
    from tempora_sim.validation.live_runs import validate

    traces, live = recorded
    table = pq.read_table(live)
    meta = decode_live_metadata(table.schema, live)
    validate_live_table(table, meta, live)
    assert meta["lambda_source"].endswith("standard-bs8.parquet") and meta["stage_pauses"] > 0
    assert [r["protocol"] for r in meta["runs"]] == ["discrete", "discrete", "amortised", "amortised"] * 2
    # the machine's speed, probed before each run's every episode with the trace's probe
    trace_meta = pq.read_table(next(traces.glob("tent*.parquet"))).schema.metadata
    assert meta["speed_probe_kind"] == json.loads(trace_meta[b"tempora"])["speed_probe_kind"]
    assert all(len(r["speed_probe_ms"]) == 2 and min(r["speed_probe_ms"]) > 0 for r in meta["runs"])
    rows = table.to_pydict()
    assert len(rows["step"]) == 8 * 8  # 8 runs × 2 episodes × 4 batches
    result = validate([live], [traces])
    runs = result.runs
    disc = runs.filter(runs["protocol"] == "discrete")
    assert disc.height == 4 and (disc["agreement_pct"] == 100.0).all()
    # occupancy beyond δ, split by how each event started: the overall mean lies between the parts
    for r in disc.iter_rows(named=True):
        parts = [v for v in (r["overhead_back_to_back_us"], r["overhead_after_wait_us"]) if v is not None]
        assert parts and min(parts) - 1e-6 <= r["overhead_us"] <= max(parts) + 1e-6
    amort = result.settings.filter(result.settings["protocol"] == "amortised").sort("budget_ms")
    # B = 10^6 ms is never reached: live and replay adapt on every batch
    assert amort["m_live"].to_list()[1] == 4.0 and amort["m_replay"].to_list()[1] == 4.0
    assert result.settings.filter(result.settings["protocol"] == "discrete")["runs"].to_list() == [2, 2]
    # scoring waits for the clock to stand still (here: a staging pause before every batch);
    # the runs that adapt on every batch saw the trace's sequence, so score what it scored
    traced = pl.read_parquet(next(traces.glob("tent*.parquet"))).filter(pl.col("phase") == "adapt")
    expected = dict(zip(zip(traced["episode"], traced["step"]), traced["correct"]))
    unbounded = [r["run"] for r in meta["runs"] if r["protocol"] == "amortised" and r["budget_ms"] == 1e6]
    frame = pl.from_arrow(table).filter(pl.col("run").is_in(unbounded))
    assert frame.height == 16 and (frame["mode"] == "adapt").all()
    assert [expected[(e, s)] for e, s in zip(frame["episode"], frame["step"])] == frame["correct"].to_list()
    assert sum(frame["correct"]) > 0
    out = tmp_path / "val"
    res = CliRunner().invoke(sim_main, ["validate", str(live), "--traces", str(traces), "--out", str(out)])
    assert res.exit_code in (0, 1), res.output
    assert "Live runs vs replay" in res.output
    # the resolution a tolerance must be read against: 2 episodes × 4 batches per run
    assert "one batch is 12.50 pp of α at 8 batches per run" in " ".join(res.output.split())
    assert (out / "validation.csv").exists() and (out / "validation-runs.parquet").exists()
    # tolerances that nothing can meet → exit 1 (a verdict, not bad input)
    res = CliRunner().invoke(
        sim_main,
        [
            "validate",
            str(live),
            "--traces",
            str(traces),
            "--tol-pp",
            "0",
            "--amortised-tol-pp",
            "0",
            "--min-agreement",
            "100",
            "--spread-slack-pp",
            "0",
        ],
    )
    assert res.exit_code in (0, 1)

    # bad input is one line and exit status 2: a trace given as a live run ...
    trace_file = next(traces.glob("tent*.parquet"))
    res = CliRunner().invoke(sim_main, ["validate", str(trace_file), "--traces", str(traces)])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "not a Tempora live run" in res.stderr and "it is a trace" in res.stderr
    # ... and a live file whose column has the wrong kind
    import pyarrow as pa

    table = pq.read_table(live)
    bad = table.set_column(table.column_names.index("correct"), "correct", table.column("correct").cast(pa.float64()))
    pq.write_table(bad.replace_schema_metadata(table.schema.metadata), tmp_path / "bad.parquet")
    res = CliRunner().invoke(sim_main, ["validate", str(tmp_path / "bad.parquet"), "--traces", str(traces)])
    assert res.exit_code == 2 and "column 'correct'" in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.usefixtures("tiny_models")
def test_bad_live_input_is_a_config_error(cifar_c_root, tmp_path):
    cfg = tiny_cfg(cifar_c_root, tmp_path / "live")
    with pytest.raises(ConfigError, match="no λ"):
        run_live(cfg, rho=[1.0], standard=str(tmp_path))
    with pytest.raises(ConfigError, match="> 0"):
        run_live(cfg, rho=[0.0], lambda_ms=5.0)
    with pytest.raises(ConfigError, match="> 0"):
        run_live(cfg, rho=[-1.0], lambda_ms=5.0)
    with pytest.raises(ConfigError, match="exactly one of"):
        run_live(cfg, lambda_ms=5.0)
    with pytest.raises(ConfigError, match="--B"):
        run_live(cfg, protocols="amortised", lambda_ms=5.0)
    assert not (tmp_path / "live").exists()  # nothing written on bad input


def test_tracer_cli_live_bad_input_exits_2(tmp_path, capsys, monkeypatch):
    from tempora_trace.cli import main

    assert main(["live", "--method", "tent", "--rho", "0", "--lambda-ms", "10", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--rho" in err
    # a missing λ is refused as soon as the group is known, before the stream is staged: with an
    # empty cache, the default demo stream (15 corruptions) would first be generated, for minutes
    home = tmp_path / "home"
    monkeypatch.setenv("TEMPORA_HOME", str(home))
    assert main(["live", "--method", "tent", "--rho", "1", "--standard", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "no λ" in capsys.readouterr().err
    assert not home.exists()
    # exact budget checkpoints belong to a trace taken alongside, under the amortised protocol
    assert main(["live", "--method", "tent", "--rho", "1", "--lambda-ms", "10", "--budget-checkpoints", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--budget-checkpoints" in err and "--trace-alongside" in err


@pytest.mark.usefixtures("tiny_models")
def test_lambda_rule_and_the_warning_on_an_inflated_lambda(cifar_c_root, tmp_path, capsys):
    """λ from a standard trace with one stalled batch: the paper rule (mean + 6σ) is inflated
    and the live run says so in one line; --lambda-rule robust is not, and is recorded."""
    import pyarrow as pa

    from tempora_schema.live import decode_live_metadata
    from tempora_schema.provision import lambda_ms
    from tempora_trace.runner import trace_run

    traces = tmp_path / "traces"
    path = trace_run(tiny_cfg(cifar_c_root, traces, "standard"))
    table = pq.read_table(path)
    rows = table.to_pydict()
    adapt = [i for i, p in enumerate(rows["phase"]) if p == "adapt"]
    # δ of a quiet machine (1.00-1.02 ms), but one batch stalled for 50 ms in its forward
    for k, i in enumerate(adapt):
        rows["delta_ms"][i] = 1.0 + 0.01 * (k % 3) + (50.0 if k == len(adapt) // 2 else 0.0)
        rows["e_ms"][i] = rows["delta_ms"][i] - rows["l_ms"][i]
    median = 1.01
    for col in ("e_ms", "delta_ms"):
        table = table.set_column(table.column_names.index(col), col, pa.array(rows[col], table.schema.field(col).type))
    pq.write_table(table, path)
    delta = [rows["delta_ms"][i] for i in adapt]
    capsys.readouterr()
    for rule in ("paper", "robust"):
        live = run_live(tiny_cfg(cifar_c_root, tmp_path / rule), rho=[1.0], standard=str(traces), lambda_rule=rule)
        meta = decode_live_metadata(pq.read_schema(live), live)
        assert meta["lambda_ms"] == pytest.approx(lambda_ms(delta, rule)) and meta["lambda_rule"] == rule
        err = capsys.readouterr().err
        if rule == "paper":
            assert meta["lambda_ms"] > 1.5 * median
            assert err.count("\n") == 1 and "× the robust λ" in err and "--lambda-rule robust" in err
        else:
            assert meta["lambda_ms"] < 1.5 * median and err == ""
    with pytest.raises(ConfigError, match="--lambda-rule"):
        run_live(tiny_cfg(cifar_c_root, tmp_path / "bad"), rho=[1.0], standard=str(traces), lambda_rule="median")


@pytest.mark.usefixtures("tiny_models")
@pytest.mark.slow
def test_trace_alongside_holds_the_exact_budget_checkpoints(cifar_c_root, tmp_path):
    """--budget-checkpoints: the trace taken alongside holds a checkpoint at each budget's
    cut-off under both rules, recomputed here from its own δ with the reference rule, and
    nothing else (default checkpoints off); its amortised replay freezes exactly there."""
    from tempora_sim.validation.live_runs import validate

    paired = tmp_path / "paired"
    lam, budgets = 1e-3, [0.5, 2.0, 4.0, 8.0, 1e9]  # λ below every δ: each step is charged almost δ
    live = run_live(
        tiny_cfg(cifar_c_root, tmp_path / "live", default_checkpoints=False),
        protocols="amortised",
        budgets_ms=budgets,
        lambda_ms=lam,
        trace_alongside=str(paired),
        budget_checkpoints=True,
    )
    trace = pl.read_parquet(next(paired.glob("tent*.parquet")))
    for episode in trace["episode"].unique():
        mine = trace.filter(pl.col("episode") == episode)
        delta = mine.filter(pl.col("phase") == "adapt").sort("step")["delta_ms"].to_list()
        expected = {R.amortised_cutoff(delta, lam, b, rule) for b in budgets for rule in ("strict", "overshoot")} - {
            len(delta)
        }  # a budget never reached needs no checkpoint
        assert set(mine.filter(pl.col("phase") == "frozen")["checkpoint"].unique().to_list()) == expected
        assert expected  # the tiny budgets are reached
    settings = validate([live], [paired]).settings
    assert (settings["frozen_gap_replay"].drop_nulls() == 0).all()


@pytest.mark.usefixtures("tiny_models")
@pytest.mark.slow
def test_trace_alongside_writes_the_trace_a_separate_run_writes(recorded, cifar_c_root, tmp_path, monkeypatch):
    """A trace taken episode by episode between live runs holds the same rows (timings aside)
    as a trace run on its own, and validate knows it was taken alongside; its metadata goes
    through the tracer's check of the machine's speed, as a trace run's does."""
    from tempora_schema.live import decode_live_metadata
    from tempora_sim.sweeps.traces import load_traces
    from tempora_sim.validation.live_runs import validate
    from tempora_trace import live_runner

    checked: list[dict] = []
    monkeypatch.setattr(live_runner, "warn_if_the_machine_moved", checked.append)
    traces, _ = recorded
    paired = tmp_path / "paired"
    live = run_live(
        tiny_cfg(cifar_c_root, tmp_path / "live2"),
        protocols="discrete,amortised",
        rho=[1.0],
        queue=1,
        budgets_ms=[0.0, 1e6],
        standard=str(traces),
        trace_alongside=str(paired),
    )
    alone = pq.read_table(next(traces.glob("tent*.parquet")))
    together_path = next(paired.glob("tent*.parquet"))
    together = pq.read_table(together_path)
    untimed = ["episode", "domain", "phase", "checkpoint", "step", "n", "correct", "updated"]
    assert together.select(untimed).equals(alone.select(untimed))
    meta = decode_live_metadata(pq.read_schema(live), live)
    assert meta["trace_alongside"] == together_path.name
    (written,) = checked
    assert written["speed_probe"] == load_traces(together_path).traces[0].meta["speed_probe"] and written["speed_probe"]
    # each episode fits in one chunk: staged once, played by all three runs from the same
    # tensors; the last run (adapting on every batch, as the trace does) scores what it scored
    assert meta["stage_pauses"] == 0
    traced = pl.from_arrow(together).filter(pl.col("phase") == "adapt")
    expected = dict(zip(zip(traced["episode"], traced["step"]), traced["correct"]))
    last = pl.read_parquet(live).filter(pl.col("run") == 2)
    assert last.height == 8 and (last["mode"] == "adapt").all()
    assert [expected[(e, s)] for e, s in zip(last["episode"], last["step"])] == last["correct"].to_list()
    settings = validate([live], [paired]).settings
    assert settings["trace_alongside"].all()
    assert settings["clock_gap_pct"].is_finite().all() and (settings["delta_live_ms"] > 0).all()
    # the separate trace is found too, and is not taken for one taken alongside
    assert not validate([live], [traces]).settings["trace_alongside"].any()

    # a trace alongside may not overwrite the standard trace λ comes from; nothing is written
    before = sorted(p.name for p in traces.iterdir())
    with pytest.raises(ConfigError, match="λ comes from"):
        run_live(
            tiny_cfg(cifar_c_root, tmp_path / "live3", method="standard"), rho=[1.0], standard=str(traces), trace_alongside=str(traces)
        )
    assert sorted(p.name for p in traces.iterdir()) == before and not (tmp_path / "live3").exists()


# ------------------------------------------------------------------------ replay at the live speed
@pytest.fixture(scope="module")
def synthetic_trace(tmp_path_factory):
    from tempora_sim.sweeps.synthetic import write_trace
    from tempora_sim.sweeps.traces import load_traces

    folder = tmp_path_factory.mktemp("speed")
    write_trace(folder / "tent.parquet", "tent", num_batches=60, episodes=("fog", "snow"), checkpoints=(0, 5, 10, 20, 40), frozen_eval=8)
    return load_traces(folder).traces[0]


@settings(max_examples=25, deadline=None)
@given(factor=st.floats(0.5, 2.0), rho=st.floats(0.2, 2.0), queue=st.sampled_from([0, 1, 3]), budget=st.floats(0.0, 3000.0))
def test_replay_at_another_speed_is_the_replay_at_scaled_rates(synthetic_trace, factor, rho, queue, budget):
    """Event times × f at arrival rate ρ are the original times at ρ·f (γ/f against δ), and
    under a budget the charges max(0, f·δ − λ) are f·max(0, δ − λ/f): the original at λ/f and
    B/f. validate's "at live speed" replay is therefore the replay of a faster or slower
    machine, nothing else."""
    from tempora_sim.sweeps.replay import POOLED, run_sweep
    from tempora_sim.sweeps.traces import TraceSet
    from tempora_sim.validation.live_runs import at_speed

    lam = 40.0
    scaled = TraceSet([at_speed(synthetic_trace, factor)])
    plain = TraceSet([synthetic_trace])

    def pooled(ts, **kw):
        return run_sweep(ts, lambda_ms=kw.pop("lam"), **kw).frame.filter(pl.col("episode") == POOLED).row(0, named=True)

    a = pooled(scaled, protocols="discrete", rho=[rho], queue=queue, lam=lam)
    b = pooled(plain, protocols="discrete", rho=[rho * factor], queue=queue, lam=lam)
    assert (a["served"], a["utility"]) == (b["served"], pytest.approx(b["utility"], abs=1e-12))
    a = pooled(scaled, protocols="amortised", B_ms=[budget], lam=lam)
    b = pooled(plain, protocols="amortised", B_ms=[budget / factor], lam=lam / factor)
    assert a["m"] == b["m"] and a["utility"] == pytest.approx(b["utility"], abs=1e-12)
