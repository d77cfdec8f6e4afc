"""``tempora-sim explore``: the page's data against the library it comes from, the page file,
and bad input (refused as ``sweep`` refuses it: one line, exit 2, nothing written).

The browser half (the page opened and driven in headless Chromium) is tests/sim/test_explore_browser.py.
"""

from __future__ import annotations

import base64
import errno
import gzip
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.hostile import assert_refused, inject_errno, invoke, snapshot
from helpers.sim_cases import CASES as SWEEP_CASES
from tempora_sim import analyses as an
from tempora_sim.commands.main import main
from tempora_sim.sweeps.synthetic import write_trace_set

PROG = "tempora-sim"
SMALL = dict(num_batches=12, episodes=("fog", "snow"), checkpoints=(0, 4), frozen_eval=4, batch_size=8, num_classes=10)
METHODS = ("standard", "tent", "cmf")


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory) -> Path:
    """Two comparison groups (two models) in one folder, three methods each."""
    root = tmp_path_factory.mktemp("explore-traces")
    write_trace_set(root / "a", METHODS, **SMALL)
    write_trace_set(root / "b", METHODS, model="vit_base_patch16_224", **SMALL)
    return root


@pytest.fixture(scope="module")
def built(two_groups, tmp_path_factory):
    from tempora_sim.exploration.data import build_data
    from tempora_sim.sweeps.options import SweepOptions
    from tempora_sim.sweeps.traces import load_traces

    ts = load_traces(str(two_groups))
    opts = SweepOptions.build(protocols="all,discrete-continuous,discrete-amortised")
    data = build_data(ts, opts, ("periodic", "burst:1,4"), progress=False)
    return ts, data


def _decode(html: str) -> dict:
    m = re.search(r'<script id="tempora-data" type="application/octet-stream">([^<]*)</script>', html)
    return json.loads(gzip.decompress(base64.b64decode(m.group(1))))


# ------------------------------------------------------------------------ the data
def test_grids_are_dense_and_hold_every_checkpoint_budget(built):
    ts, data = built
    from tempora_sim.exploration.dense_grids import checkpoint_budgets

    assert len(data["groups"]) == 2
    for g in data["groups"]:
        lam = max(g["lambda_ms"])
        rho = g["views"]["discrete|periodic"]["axes"][0]
        T = g["views"]["continuous"]["axes"][0]
        B = g["views"]["amortised"]["axes"][0]
        assert len(rho) >= 100 and len(T) >= 100 and len(B) >= 100
        assert min(T) > lam, "continuous utility needs T > λ"
        members = [t for t in ts.traces if t.group.label(seed=False) == g["label"]]
        for b in checkpoint_budgets(members, lam):
            assert any(abs(b - x) <= 1e-9 * max(1.0, b) for x in B), b
        x, y = g["views"]["discrete-amortised|periodic"]["axes"]
        assert len(x) >= 20 and len(y) >= 20


def test_checkpoint_budget_is_the_costliest_episodes_overhead_before_the_checkpoint():
    """Hand-worked: λ = 10 ms, δ = 12, 15, 10, 30 → overheads 2, 5, 0, 20; checkpoint 2 is
    reached after 2 + 5 = 7 ms in that episode and 4 ms in one with overheads 1, 3."""
    from types import SimpleNamespace

    from tempora_sim.exploration.dense_grids import checkpoint_budgets

    adapt = pl.DataFrame({"episode": ["a"] * 4 + ["b"] * 4, "delta_ms": [12.0, 15.0, 10.0, 30.0, 11.0, 13.0, 10.0, 10.0]})
    frozen = pl.DataFrame({"checkpoint": [0, 2, 2]})
    assert checkpoint_budgets([SimpleNamespace(adapt=adapt, frozen=frozen)], 10.0) == [7.0]


def test_utilities_winners_and_intervals_are_the_librarys(built):
    """Every stored number against tempora_sim.sweep and the analyses on the same grid."""
    from tempora_sim import sweep
    from tempora_sim.sweeps.traces import TraceSet

    ts, data = built
    g = data["groups"][0]
    members = TraceSet([t for t in ts.traces if t.group.label(seed=False) == g["label"]])
    view = g["views"]["discrete|periodic"]
    x = view["axes"][0]
    frame = sweep(members, protocols="discrete", rho=x)
    pooled = an.pool_seeds(frame.filter(pl.col("episode") == an.POOLED))
    scale = data["scale"]
    for mi, m in enumerate(g["methods"]):
        got = np.asarray(view["u"][0][mi], dtype=float) / scale
        want = pooled.filter(pl.col("method") == m).sort("value").get_column("utility").to_numpy()
        assert np.allclose(got, want, atol=0.5 / scale)
        alpha = np.asarray(view["terms"]["alpha"][0][mi], dtype=float) / scale
        assert np.allclose(alpha, pooled.filter(pl.col("method") == m).sort("value").get_column("alpha").to_numpy(), atol=0.5 / scale)
    intervals = an.utility_intervals(frame, None)
    pw = an.pooled_winners(frame, intervals).sort("value")
    for k, r in enumerate(pw.iter_rows(named=True)):
        assert g["methods"][view["win"][0][k]] in r["winners"]
        if r["certain"] is not None:
            assert view["cert"][0][k] == int(r["certain"]), (x[k], r)
            if r["n_winners"] == 1:
                assert abs(view["lead_lo"][0][k] / scale - r["lead_lo"]) <= 0.5 / scale
    lohi = an.attach_intervals(pooled.select(an.group_columns(pooled) + ["method", "protocol", "value"]), intervals, an.POOLED)
    for mi, m in enumerate(g["methods"]):
        part = lohi.filter(pl.col("method") == m).sort("value")
        assert np.allclose(np.asarray(view["lo"][0][mi], float) / scale, part.get_column("lo").to_numpy(), atol=0.5 / scale)


def test_per_corruption_certainty_is_the_reports(built):
    """Per-corruption cells: the report's rule (batches resampled) for winner vs runner-up."""
    from tempora_sim import sweep
    from tempora_sim.sweeps.traces import TraceSet

    ts, data = built
    g = data["groups"][0]
    members = TraceSet([t for t in ts.traces if t.group.label(seed=False) == g["label"]])
    view = g["views"]["continuous"]
    x = view["axes"][0][::10]
    frame = sweep(members, protocols="continuous", T_ms=x)
    rows = an.align_group_dtypes(an.trace_rows(members.traces), frame)
    w = an.winners(frame, intervals=an.utility_intervals(frame, rows))
    full = view["axes"][0]
    checked = 0
    for r in w.iter_rows(named=True):
        e = g["episodes"].index(r["episode"])
        k = full.index(r["value"])
        assert g["methods"][view["win"][e][k]] in r["winners"]
        if r["certain"] is not None:
            assert view["cert"][e][k] == int(r["certain"])
            checked += 1
    assert checked >= len(x)


def test_switch_points_hand_worked():
    """Winner a until x = 3, b from 4 on: from a's side the change is up at 4 (b wins), from
    b's side down at 3 (a wins); refined between the grid values when a refiner is given."""
    from tempora_sim.exploration.data import _switches

    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    U = np.array([[0.5, 0.1], [0.5, 0.2], [0.5, 0.3], [0.4, 0.6], [0.3, 0.7]])
    win = np.array([0, 0, 0, 1, 1])
    below, below_m, above, above_m = _switches(x, U, win, None)
    assert below[:3] == [None] * 3 and above[:3] == [4.0] * 3 and above_m[:3] == [1] * 3
    assert below[3:] == [3.0, 3.0] and below_m[3:] == [0, 0] and above[3:] == [None, None]

    def refine(values):  # b overtakes a at 3.5 exactly
        return np.array([[0.5, 0.5 + (v - 3.5)] for v in values])

    _, _, above, _ = _switches(x, U, win, refine)
    assert 3.5 < above[0] <= 3.5 + (4.0 - 3.0) / 48 + 1e-9


def test_arrival_processes_are_a_selector(built):
    _, data = built
    assert data["arrivals"] == ["periodic", "burst:1,4"]
    g = data["groups"][0]
    assert {"discrete|periodic", "discrete|burst:1,4", "discrete-continuous|burst:1,4", "continuous", "amortised"} <= set(g["views"])
    assert g["views"]["discrete|burst:1,4"]["arrivals"] == "burst:1,4"


# ------------------------------------------------------------------------ the page file
def test_command_writes_one_self_contained_page(two_groups, tmp_path):
    out = tmp_path / "page.html"
    res = invoke(
        main, ["explore", str(two_groups), "--out", str(out), "--quiet", "--protocol", "discrete,continuous", "--resamples", "200"]
    )
    assert res.exit_code == 0, res.output + res.stderr
    html = out.read_text(encoding="utf-8")
    data = _decode(html)
    assert len(data["groups"]) == 2 and data["resamples"] == 200
    assert set(data["groups"][0]["views"]) == {"discrete|periodic", "continuous"}
    vendor = json.loads((Path(__import__("tempora_sim").__file__).parent / "exploration" / "assets" / "vendor" / "VENDOR.json").read_text())
    assert vendor["integrity"] in html  # the library inlined, as recorded
    # an existing page is replaced whole
    before = out.stat().st_ino
    res = invoke(main, ["explore", str(two_groups), "--out", str(out), "--quiet", "--protocol", "amortised", "--resamples", "200"])
    assert res.exit_code == 0, res.stderr
    assert set(_decode(out.read_text(encoding="utf-8"))["groups"][0]["views"]) == {"amortised"}
    assert out.stat().st_ino != before, "replaced by rename, not rewritten in place"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_vendored_library_matches_its_record():
    root = Path(__import__("tempora_sim").__file__).parent / "exploration" / "assets" / "vendor"
    rec = json.loads((root / "VENDOR.json").read_text())
    data = (root / rec["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == rec["sha256"] and len(data) == rec["bytes"]
    assert rec["licence"] == "Apache-2.0" and (root / "LICENSE").is_file() and (root / "NOTICE").is_file()
    assert b"</script" not in data.lower(), "inlined in a <script> element"


def test_report_writes_and_links_the_page(two_groups, tmp_path):
    out = tmp_path / "report"
    res = invoke(
        main, ["report", str(two_groups / "a"), "--out", str(out), "--protocol", "offline,discrete", "--resamples", "100", "--no-figures"]
    )
    assert res.exit_code == 0, res.output + res.stderr
    assert "[explore.html](explore.html)" in (out / "report.md").read_text()
    data = _decode((out / "explore.html").read_text(encoding="utf-8"))
    assert set(data["groups"][0]["views"]) == {"discrete|periodic"}
    res = invoke(
        main,
        ["report", str(two_groups / "a"), "--out", str(tmp_path / "r2"), "--protocol", "offline,discrete", "--no-explore", "--no-figures"],
    )
    assert res.exit_code == 0, res.stderr
    assert not (tmp_path / "r2" / "explore.html").exists()


# ------------------------------------------------------------------------ bad input
@pytest.fixture
def ws(tmp_path: Path) -> Path:
    write_trace_set(tmp_path / "traces", ("standard", "tent"), **SMALL)
    results = tmp_path / "results"
    results.mkdir()
    (results / "notes.txt").write_text("the user's own notes")
    (tmp_path / "page.html").write_text("an earlier page")
    return tmp_path


#: sweep's refusals that concern its own --out folder or --format (explore writes one file)
NOT_EXPLORE = {
    "unknown format",
    "out empty",
    "out is a file",
    "out below a file",
    "out symlink loop",
    "out inside the traces",
    "unknown command",
}
AS_SWEEP = {k: v for k, v in SWEEP_CASES.items() if v[0] and v[0][0] == "sweep" and k not in NOT_EXPLORE}


def _explore_args(args, ws):
    args = ["explore", *args[1:]]
    if "--out" not in args:
        args += ["--out", "{ws}/page.html"]
    return [a.replace("{ws}", str(ws)) for a in args]


@pytest.mark.parametrize("case", sorted(AS_SWEEP))
def test_refuses_what_sweep_refuses(case, ws):
    args, needle, setup = AS_SWEEP[case]
    if setup is not None:
        setup(ws)
    before = snapshot(ws)
    assert_refused(invoke(main, _explore_args(args, ws)), PROG, needle, before, ws)


OWN = {
    "out is a folder": (["--out", "{ws}/results"], "is a folder"),
    "out's folder missing": (["--out", "{ws}/nowhere/page.html"], "does not exist"),
    "out below a file": (["--out", "{ws}/results/notes.txt/page.html"], "is a file, not a folder"),
    "out empty": (["--out", ""], "--out is empty"),
    "offline only": (["--out", "{ws}/new.html", "--protocol", "offline"], "moves a temporal constraint"),
    "second arrival process bad": (["--out", "{ws}/new.html", "--arrivals", "periodic", "--arrivals", "burst:0,1"], "--arrivals"),
    "unknown arrival process": (["--out", "{ws}/new.html", "--arrivals", "sometimes"], "--arrivals"),
    "resamples zero": (["--out", "{ws}/new.html", "--resamples", "0"], "--resamples"),
    "a million values of rho": (["--out", "{ws}/new.html", "--rho", "0.000001:1:0.000001"], "at most 1,000 given values"),
}


@pytest.mark.parametrize("case", sorted(OWN))
def test_refuses_its_own_bad_input(case, ws):
    extra, needle = OWN[case]
    before = snapshot(ws)
    args = ["explore", f"{ws}/traces", *[a.replace("{ws}", str(ws)) for a in extra]]
    assert_refused(invoke(main, args), PROG, needle, before, ws)


@pytest.mark.parametrize(
    "code, needle", [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only file system"), (errno.ENOSPC, "no space left")]
)
def test_failed_write_keeps_the_earlier_page(code, needle, ws, monkeypatch):
    before = snapshot(ws)
    calls = ("write",) if code == errno.ENOSPC else ("open", "mkdir", "rename", "replace")
    inject_errno(monkeypatch, ws / "page.html" if code != errno.ENOSPC else ws, code, calls)
    if code != errno.ENOSPC:
        inject_errno(monkeypatch, ws, code, calls)
    args = ["explore", str(ws / "traces"), "--out", str(ws / "page.html"), "--quiet", "--protocol", "discrete", "--resamples", "100"]
    assert_refused(invoke(main, args), PROG, needle, before, ws)
    assert (ws / "page.html").read_text() == "an earlier page"


def _discrete_view(root: Path, timing_replicates: int) -> dict:
    from tempora_sim.exploration.data import build_data
    from tempora_sim.sweeps.options import SweepOptions
    from tempora_sim.sweeps.traces import load_traces
    from tempora_sim.uncertainty.bootstrap import BootstrapOptions

    opts = SweepOptions.build(protocols="discrete")
    data = build_data(load_traces(str(root)), opts, bootstrap=BootstrapOptions(timing_replicates=timing_replicates), progress=False)
    return data["groups"][0]["views"]["discrete|periodic"]


def test_intervals_include_the_measured_timing_variability(tmp_path):
    """As report and advise: the page's intervals and certainty replay the traces' measured
    timing variability, and say so; with none measured (zero spread) they are the intervals
    without timing exactly, and with a spread they differ."""
    from tempora_sim.sweeps.synthetic import SyntheticVariability

    flat = SyntheticVariability(0.0, 0.0, gaps_ms=())
    moving = SyntheticVariability(pass_sd=0.08, event_sd=0.05, gaps_ms=())
    write_trace_set(tmp_path / "flat", ("standard", "tent"), variability=flat, **SMALL)
    write_trace_set(tmp_path / "moving", ("standard", "tent"), variability=moving, **SMALL)
    with_t, without = _discrete_view(tmp_path / "flat", 20), _discrete_view(tmp_path / "flat", 0)
    assert "included (20 timing replicates" in with_t["timing"] and "not included" in without["timing"]
    for k in ("lo", "hi", "lead_lo", "lead_hi", "cert"):
        assert np.array_equal(np.asarray(with_t[k], float), np.asarray(without[k], float), equal_nan=True), k
    with_t, without = _discrete_view(tmp_path / "moving", 20), _discrete_view(tmp_path / "moving", 0)
    assert not np.array_equal(np.asarray(with_t["lo"], float), np.asarray(without["lo"], float), equal_nan=True)
