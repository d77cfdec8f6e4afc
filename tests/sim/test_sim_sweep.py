"""The sweep API and CLI: kernels vs the reference end to end, pooling, outputs, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tempora_sim
from helpers.processes import child_env
from tempora_schema import METADATA_KEY
from tempora_sim.commands.main import main
from tempora_sim.errors import GridError, GroupError, ProtocolError, TraceFileError
from tempora_sim.sweeps.replay import COLUMNS, POOLED, run_sweep, sweep
from tempora_sim.sweeps.synthetic import make_trace, write_trace, write_trace_set
from tempora_sim.sweeps.traces import lambda_from_standard, load_traces

METHODS = ("standard", "adabn", "tent", "shot-im")


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("traces")
    write_trace_set(d / "g1", METHODS, num_batches=60, episodes=("fog", "snow", "frost"), checkpoints=(0, 2, 5, 10, 20, 40), frozen_eval=8)
    return d


@pytest.fixture(scope="module")
def traceset(trace_dir):
    return load_traces(trace_dir)


GRID = dict(rho="1,70%,0.3", T_ms="50,100ms,1s", B_ms="0,200,1s,5s")


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"queue": 0},
        {"queue": 3, "sync": "strict"},
        {"skipped": "random", "budget_rule": "overshoot"},
        {"fallback": True, "queue": 2},
    ],
)
def test_kernels_equal_reference_engine_end_to_end(traceset, opts):
    fast = sweep(traceset, **GRID, **opts)
    slow = sweep(traceset, engine="python", **GRID, **opts)
    assert fast.columns == slow.columns == list(COLUMNS)
    assert fast.height == slow.height
    keys = ["method", "episode", "protocol", "value"]
    fast, slow = fast.sort(keys, nulls_last=True), slow.sort(keys, nulls_last=True)
    for col in COLUMNS:
        a, b = fast[col].to_list(), slow[col].to_list()
        if fast.schema[col] == pl.Float64:
            assert np.allclose(np.array(a, dtype=float), np.array(b, dtype=float), atol=1e-10, equal_nan=True), col
        else:
            assert a == b, col


def test_output_columns_and_invariants(traceset):
    df = sweep(traceset, **GRID)
    assert df.columns == list(COLUMNS)
    assert set(df["protocol"].unique()) == {"offline", "discrete", "continuous", "amortised"}
    n_eval = 4 * 3  # traces × episodes
    assert df.filter(pl.col("episode") != POOLED).height == n_eval * (1 + 3 + 3 + 4)
    disc = df.filter(pl.col("protocol") == "discrete")
    assert disc["alpha"].is_between(0, 1).all()
    assert np.allclose(disc["utility"], disc["alpha"] * disc["served_acc"], atol=1e-12)
    cont = df.filter(pl.col("protocol") == "continuous")
    assert cont["kappa"].is_between(0, 1, closed="right").all()
    assert np.allclose(cont["utility"], cont["acc"] * cont["kappa"] + cont["cov"], atol=1e-12, rtol=0)
    amo = df.filter(pl.col("protocol") == "amortised")
    assert amo["beta"].is_between(0, 1).all()
    for col in ("utility", "served_acc", "acc", "acc_adapt", "acc_frozen"):
        vals = df[col].drop_nulls()
        assert ((vals >= 0) & (vals <= 1)).all(), col


def test_pooled_rows_are_means_over_equal_length_episodes(traceset):
    df = sweep(traceset, **GRID)
    per_ep = df.filter(pl.col("episode") != POOLED)
    pooled = df.filter(pl.col("episode") == POOLED)
    mean = per_ep.group_by(["method", "protocol", "value"]).agg(pl.col("utility").mean().alias("mean_u"))
    joined = pooled.join(mean, on=["method", "protocol", "value"], nulls_equal=True)
    assert joined.height == pooled.height
    assert np.allclose(joined["utility"], joined["mean_u"], atol=1e-12)
    disc = pooled.filter(pl.col("protocol") == "discrete")
    total = per_ep.filter(pl.col("protocol") == "discrete").group_by(["method", "value"]).agg(pl.col("served").sum())
    assert disc.join(total, on=["method", "value"]).select((pl.col("served") == pl.col("served_right")).all()).item()


def test_limits_recover_offline(traceset):
    df = sweep(traceset, rho="1e-9", T_ms="1e12", B_ms="1e15")
    pooled = df.filter(pl.col("episode") == POOLED)
    offline = dict(pooled.filter(pl.col("protocol") == "offline").select("method", "utility").iter_rows())
    for proto in ("discrete", "continuous", "amortised"):
        got = dict(pooled.filter(pl.col("protocol") == proto).select("method", "utility").iter_rows())
        for method, u in offline.items():
            assert got[method] == pytest.approx(u, abs=1e-9), (proto, method)


def test_zero_budget_freezes_slow_methods_at_step_zero(traceset):
    df = sweep(traceset, protocols="amortised", B_ms="0")
    tent = df.filter((pl.col("method") == "tent") & (pl.col("episode") != POOLED))
    assert (tent["m"] == 0).all() and (tent["frozen_gap"] == 0).all()


def test_lambda_is_mean_plus_six_population_std(traceset):
    std = next(t for t in traceset.traces if t.method == "standard")
    delta = std.adapt["delta_ms"].to_numpy()
    assert lambda_from_standard(std) == pytest.approx(delta.mean() + 6 * delta.std(ddof=0))
    df = sweep(traceset, protocols="offline")
    assert df["lambda_ms"].unique().to_list() == [pytest.approx(lambda_from_standard(std))]


def test_python_api_is_the_package_attribute(trace_dir):
    assert tempora_sim.sweep is sweep and tempora_sim.run_sweep is run_sweep
    df = tempora_sim.sweep(trace_dir, protocols="offline")
    assert df.height == sweep(trace_dir, protocols="offline").height == 4 * 4


def test_default_T_at_or_below_lambda_is_skipped_with_warning(trace_dir):
    with pytest.warns(UserWarning, match="T = 50 ms skipped"):
        res = run_sweep(trace_dir, protocols="continuous", lambda_ms=60.0)
    assert 50.0 not in res.frame["value"].to_list()
    with pytest.raises(GridError, match="must exceed λ"):
        run_sweep(trace_dir, protocols="continuous", T_ms="50,100", lambda_ms=60.0)


def test_grid_parsing_units(trace_dir):
    res = run_sweep(trace_dir, protocols="offline", rho="100%,0.5", T_ms="0.5s,200", B_ms="1s,250ms")
    assert res.grids == {"rho": (1.0, 0.5), "T_ms": (500.0, 200.0), "B_ms": (1000.0, 250.0)}
    for bad in (
        {"rho": "0"},
        {"rho": "fast"},
        {"T_ms": "-3"},
        {"B_ms": "1h"},
        {"queue": -1},
        {"fallback": True, "skipped": "random"},
        {"protocols": "weekly"},
    ):
        with pytest.raises(GridError):
            run_sweep(trace_dir, **bad)


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def _run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_cli_writes_files_and_prints_tables(trace_dir, tmp_path):
    out = tmp_path / "out"
    res = _run(["sweep", str(trace_dir), "--out", str(out), "--rho", "1,0.5", "--T", "100,1s", "--B", "1s"])
    assert res.exit_code == 0, res.output
    assert "Discrete utility (%)" in res.output and "Amortised decomposition at B=1s" in res.output
    assert "Continuous decomposition at T=100ms" in res.output
    last = res.output.strip().splitlines()[-1]
    assert "evaluations" in last and "batch events replayed" in last and "kernels" in last
    frame = pl.read_parquet(out / "utility.parquet")
    assert frame.columns == list(COLUMNS)
    assert pl.read_csv(out / "utility.csv").height == frame.height
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # temp dir renamed away


def test_cli_json(trace_dir):
    res = _run(["sweep", str(trace_dir), "--protocol", "discrete", "--rho", "1", "--format", "json"])
    assert res.exit_code == 0
    rows = json.loads(res.stdout)
    assert {r["method"] for r in rows} == set(METHODS)
    assert all(r["episode"] == POOLED and r["protocol"] == "discrete" for r in rows)


def _bad_file(tmp_path, mutate, name="bad.parquet"):
    meta, table = make_trace("tent", num_batches=8, episodes=("fog",), checkpoints=(0,), frozen_eval=2)
    meta, table = mutate(meta, table)
    path = tmp_path / "traces" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, path)
    return path


def _set(table, name, fn):
    values = table.column(name).to_pylist()
    fn(values)
    idx = table.schema.get_field_index(name)
    return table.set_column(idx, table.schema.field(name), pa.array(values, table.schema.field(name).type))


BAD = {
    "version": (lambda m, t: ({**m, "schema_version": 7}, t), "unknown schema version 7"),
    "missing": (lambda m, t: (m, t.drop_columns(["n"])), "missing column(s): n"),
    "mistyped": (
        lambda m, t: (m, t.set_column(t.schema.get_field_index("step"), "step", t.column("step").cast(pa.string()))),
        "column 'step' has type string",
    ),
    "gap": (lambda m, t: (m, _set(t, "step", lambda v: v.__setitem__(3, 30))), "without gaps"),
    "correct": (lambda m, t: (m, _set(t, "correct", lambda v: v.__setitem__(0, 1000))), "correct > n"),
    "nan": (lambda m, t: (m, _set(t, "l_ms", lambda v: v.__setitem__(2, float("nan")))), "NaN"),
    "negative": (lambda m, t: (m, _set(t, "e_ms", lambda v: v.__setitem__(2, -4.0))), "negative time"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_cli_rejects_bad_trace_in_one_line(tmp_path, case):
    mutate, needle = BAD[case]
    path = _bad_file(tmp_path, mutate)
    out = tmp_path / "out"
    res = _run(["sweep", str(path.parent), "--out", str(out), "--lambda-ms", "40"])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(path) in lines[0] and needle in lines[0]
    assert "Traceback" not in res.output
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_cli_one_line_errors_for_groups_and_files(tmp_path):
    d = tmp_path / "t"
    write_trace(d / "a.parquet", "tent", num_batches=6, episodes=("fog",))
    write_trace(d / "b.parquet", "tent", num_batches=6, episodes=("fog",))
    res = _run(["sweep", str(d)])
    assert res.exit_code == 2 and "second trace of method 'tent'" in res.stderr
    (d / "b.parquet").unlink()
    res = _run(["sweep", str(d)])
    assert res.exit_code == 2 and "no 'standard' trace" in res.stderr and "--lambda-ms" in res.stderr
    (d / "junk.parquet").write_bytes(b"definitely not parquet")
    res = _run(["sweep", str(d), "--lambda-ms", "40"])
    assert res.exit_code == 2 and "junk.parquet: not a readable Parquet file" in res.stderr
    res = _run(["sweep", str(tmp_path / "nowhere")])
    assert res.exit_code == 2 and "no such file or directory" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run(["sweep", str(empty)])
    assert res.exit_code == 2 and "no *.parquet" in res.stderr
    res = _run(["sweep", str(d / "a.parquet"), "--lambda-ms", "40", "--T", "30"])
    assert res.exit_code == 2 and "must exceed λ" in res.stderr
    for res in (_run(["sweep", str(d / "a.parquet"), "--rho", "-1", "--lambda-ms", "40"]),):
        assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1


def test_amortised_without_frozen_rows(tmp_path):
    d = tmp_path / "t"
    write_trace(d / "standard.parquet", "standard", num_batches=20, episodes=("fog",), checkpoints=None)
    write_trace(d / "tent.parquet", "tent", num_batches=20, episodes=("fog",), checkpoints=None)
    # a model that never changes can be read frozen from its adapt rows; an adapting one cannot
    df = sweep(d, protocols="discrete,continuous")  # fine without frozen rows
    assert df.height > 0
    with pytest.raises(ProtocolError, match="tent.parquet: amortised utility needs frozen-mode rows"):
        sweep(d, protocols="amortised", B_ms="100")
    res = _run(["sweep", str(d), "--protocol", "amortised", "--B", "100"])
    assert res.exit_code == 2 and "frozen-mode rows" in res.stderr


def test_loader_errors_are_sim_errors(tmp_path):
    with pytest.raises(TraceFileError):
        load_traces(tmp_path / "missing")
    d = tmp_path / "t"
    write_trace(d / "tent.parquet", "tent", num_batches=5, episodes=("fog",))
    with pytest.raises(GroupError, match="no 'standard' trace"):
        sweep(d)


def test_simulator_never_imports_torch():
    code = (
        "import sys, tempora_sim, tempora_sim.sweeps.replay, tempora_sim.sweeps.traces, tempora_sim.engine.kernels, "
        "tempora_sim.reporting.terminal, tempora_sim.commands.main, tempora_sim.sweeps.synthetic, tempora_sim.engine.oracle, tempora_schema; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=child_env())


def test_the_program_starts_numba_without_scipy_and_leaves_scipy_importable(trace_dir):
    """In the ``tempora-sim`` program (tempora_sim.process.IN_PROGRAM) Numba's first dispatch runs with
    SciPy hidden: no SciPy module is loaded by the sweep, the rows are the library's, and SciPy
    imports afterwards as ever (Numba's own BLAS check included). A library caller's process
    (IN_PROGRAM False) is left as Numba would leave it."""
    code = (
        "import sys; from tempora_sim import process; process.IN_PROGRAM = {flag}\n"
        "from tempora_sim.sweeps.replay import run_sweep\n"
        f"res = run_sweep({str(trace_dir)!r})\n"
        "loaded = sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.'))\n"
        "import scipy.linalg.cython_blas\n"
        "from numba.np.linalg import ensure_blas; ensure_blas()\n"
        "print(len(loaded), res.frame.get_column('utility').sum())\n"
    )
    out = {}
    for flag in (True, False):
        done = subprocess.run([sys.executable, "-c", code.format(flag=flag)], check=True, env=child_env(), capture_output=True, text=True)
        out[flag] = done.stdout.split()
    assert out[True][0] == "0" and out[False][0] != "0"  # the library's start loads SciPy, the program's does not
    assert out[True][1] == out[False][1]


def test_every_subcommand_is_listed_with_its_module():
    """The command group imports a subcommand's module on demand (tempora_sim.commands.main): a
    command missing from SUBCOMMAND_MODULES would vanish from --help and the reference."""
    import importlib

    from tempora_sim.commands import main as cli

    for module in set(cli.SUBCOMMAND_MODULES.values()):
        importlib.import_module(module)
    assert set(cli.main.commands) == set(cli.SUBCOMMAND_MODULES)
    for name, module in cli.SUBCOMMAND_MODULES.items():
        assert cli.main.commands[name].callback.__module__ == module
