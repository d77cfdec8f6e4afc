"""The explore page in a real browser (headless Chromium, the distribution's package).

The page is built by ``tempora-sim explore`` from the committed demo traces, opened from disk
(``file://``, no server, no network) and driven like a user: moving each slider must change the
displayed winner exactly where ``tempora-sim sweep`` on the same grid changes it (checked on
both sides of every change, at least five points per protocol, against the sweep's Parquet),
and the displayed recommendation must be ``tempora-sim advise``'s at those points. A
screenshot of every protocol view is written (into ``$TEMPORA_SCREENSHOTS`` when set: the
docs' images come from there).

These tests are never skipped: without Chromium they fail, saying how to install it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.headless import INSTALL_HINT, Browser, find_chromium

# the demo set's page built by the command line, then driven in headless Chromium
pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "traces" / "demo"
SIM = [sys.executable, "-m", "tempora_sim.commands.main"]
ONE_D = ("discrete", "continuous", "amortised")
TWO_D = ("discrete-continuous", "discrete-amortised")
MIN_POINTS = 5


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The page for the whole committed demo set, built by the command line."""
    out = tmp_path_factory.mktemp("explore") / "explore.html"
    run = subprocess.run(
        [*SIM, "explore", str(DEMO.relative_to(ROOT)), "--out", str(out), "--quiet"], capture_output=True, text=True, timeout=900, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    return out


@pytest.fixture(scope="module")
def browser():
    exe = find_chromium()
    if exe is None:
        pytest.fail(INSTALL_HINT)
    with Browser(exe) as b:
        yield b


@pytest.fixture(scope="module")
def page(built, browser):
    p = browser.page()
    p.open(built.as_uri())
    yield p
    p.close()


@pytest.fixture(scope="module")
def data(page):
    return page.evaluate("tempora.data")


@pytest.fixture(scope="module")
def demo_traces():
    from tempora_sim.sweeps.traces import load_traces

    return load_traces(str(DEMO))


def _shots() -> Path | None:
    d = os.environ.get("TEMPORA_SCREENSHOTS")
    return Path(d) if d else None


def _select(page, g: int, protocol: str, episode: str = "__all__") -> None:
    page.evaluate(
        f"(() => {{ const s = document.getElementById('group'); s.value = '{g}'; s.dispatchEvent(new Event('change')); }})()",
        await_promise=False,
    )
    page.evaluate(f"document.querySelector('#protocols button[data-p=\"{protocol}\"]').click()", await_promise=False)
    idx = page.evaluate(f"tempora.data.groups[{g}].episodes.indexOf('{episode}')")
    page.evaluate(f"(() => {{ const s = document.getElementById('episode'); s.value = '{idx}'; s.dispatchEvent(new Event('change')); }})()")


def _slide(page, which: int, index: int) -> None:
    page.evaluate(
        f"(() => {{ const s = document.getElementById('slider{which}'); s.value = '{index}'; s.dispatchEvent(new Event('input')); }})()"
    )


def _shown(page) -> dict:
    return page.evaluate(
        """(() => {
        const r = document.getElementById('recommended'), l = document.getElementById('lead');
        const moves = [...document.querySelectorAll('#advice .moves')].map(m => ({
            axis: m.dataset.axis,
            down: m.querySelector('.sw-down').dataset.value, up: m.querySelector('.sw-up').dataset.value}));
        return {method: r && r.dataset.method, certain: l ? l.dataset.certain : null,
                runner_up: l ? l.dataset.runnerUp : null, text: document.getElementById('advice').innerText, moves,
                winner: document.getElementById('winner').dataset.method};
    })()"""
    )


def _group_dir(label_model: str) -> Path:
    return DEMO / label_model


def _sweep_winners(tmp: Path, traces: Path, protocol: str, grids: dict) -> pl.DataFrame:
    """``tempora-sim sweep`` on the page's grid: the pooled winners (every tied best method)."""
    args = [*SIM, "sweep", str(traces), "--protocol", protocol, "--out", str(tmp)]
    for flag, values in grids.items():
        f = tmp.with_name(tmp.name + flag.strip("-") + ".txt")
        f.write_text("\n".join(repr(float(v)) for v in values))
        args += [flag, f"@{f}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    frame = pl.read_parquet(tmp / "utility.parquet").filter(pl.col("episode") == "__all__")
    keys = ["value"] + (["value2"] if "value2" in frame.columns and frame["value2"].is_not_null().any() else [])
    best = frame.group_by(keys).agg(pl.col("utility").max().alias("best"))
    frame = frame.join(best, on=keys).filter(pl.col("utility") >= pl.col("best") - 1e-12)
    return frame.group_by(keys).agg(pl.col("method").sort().alias("winners")).sort(keys)


def _points(winners: list[frozenset]) -> list[int]:
    """Both sides of every change of the winner, topped up to MIN_POINTS with even spacing."""
    pts = set()
    for k in range(1, len(winners)):
        if winners[k] != winners[k - 1]:
            pts.update((k - 1, k))
    extra = np.linspace(0, len(winners) - 1, MIN_POINTS + 2).round().astype(int).tolist()
    for k in extra:
        if len(pts) >= MIN_POINTS + 2:
            break
        pts.add(int(k))
    return sorted(pts)


def _advise(traceset, label: str, **constraint):
    """``advise`` at the constraint, for the group ``label`` (its traces only)."""
    from tempora_sim.analyses.advice import advise, parse_constraint
    from tempora_sim.sweeps.traces import TraceSet

    c = parse_constraint(constraint.get("rho"), None, constraint.get("T"), constraint.get("B"))
    members = TraceSet([t for t in traceset.traces if t.group.label(seed=False) == label])
    for a in advise(members, c):
        if a["group"]["group"] == label:
            return {**a, "_traces": members, "_constraint": c}
    raise AssertionError(f"advise gave no answer for {label}")


def _advise_grid_misses(a: dict, side: str, page_v: float) -> bool:
    """Is the page's change at ``page_v`` a region too narrow for advise's own search grid?
    True when it lies strictly between two neighbouring values of that grid (the constraint to
    the far end of the search range, :func:`tempora_sim.analyses.advice._span`) at both of
    which the sweep still gives the recommendation: advise cannot see it, the page's denser
    grid can (the mirror of the page missing a change that advise finds)."""
    from tempora_sim.analyses import advice as adv

    c = a["_constraint"]
    v0 = c.axes[0].value
    lo, hi = a["search_range"]
    grid = np.sort(np.concatenate(([v0], adv._span(v0, lo if side == "down" else hi, adv.GRID_POINTS))))
    i = int(np.searchsorted(grid, page_v))
    if i == 0 or i == grid.size or page_v in (grid[i - 1], grid[i]):
        return False
    methods = [a["recommended"], *sorted({t.method for t in a["_traces"].traces} - {a["recommended"]})]
    vals, U = adv._pooled_utilities(adv._sweep(a["_traces"], c, [float(grid[i - 1]), float(grid[i])], {}), methods)
    return vals.size == 2 and bool(adv._holds(U, 0).all())


def test_page_opens_offline_without_console_errors(page, data, built):
    assert page.errors() == []
    # self-contained: the page asked for nothing but itself (no server, no network)
    page.pump(0.2)
    asked = page.requests()
    assert asked and all(u.startswith(("file:", "data:", "blob:")) for u in asked), asked
    assert not any(u.startswith("file:") and u != built.as_uri() for u in asked), asked
    assert len(data["groups"]) == 2, "the demo set's two groups share one page, with a group selector"
    assert page.evaluate("document.getElementById('group').options.length") == 2


@pytest.mark.parametrize("protocol", ONE_D)
def test_slider_changes_winner_where_sweep_does(page, data, tmp_path, protocol, demo_traces):
    for g, group in enumerate(data["groups"]):
        if g and protocol != "discrete":
            continue  # the second group once: the selector is what differs
        view = group["views"].get(f"{protocol}|periodic") or group["views"][protocol]
        x = view["axes"][0]
        assert len(x) >= 100
        model = group["title"].split(" · ")[1]
        param = {"discrete": "--rho", "continuous": "--T", "amortised": "--B"}[protocol]
        sw = _sweep_winners(tmp_path / f"{protocol}-{g}", _group_dir(model), protocol, {param: x})
        assert sw.height == len(x)
        winners = [frozenset(w) for w in sw["winners"].to_list()]
        assert np.allclose(sw["value"].to_numpy(), np.asarray(x), rtol=1e-6)
        _select(page, g, protocol)
        pts = _points(winners)
        assert len(pts) >= MIN_POINTS
        for k in pts:
            _slide(page, 1, k)
            shown = _shown(page)
            assert shown["method"] in winners[k], (protocol, x[k], shown["method"], winners[k])
            if g == 0:
                kw = {"discrete": "rho", "continuous": "T", "amortised": "B"}[protocol]
                a = _advise(demo_traces, group["label"], **{kw: str(x[k]) + ("" if kw == "rho" else "ms")})
                _same_advice(shown, a, view, k)
        if _shots() and g == 0:
            _slide(page, 1, pts[len(pts) // 2])
            page.screenshot(_shots() / f"explore-{protocol}.png")
    assert page.errors() == []


def _same_advice(shown: dict, a: dict, view: dict, k: int) -> None:
    assert shown["method"] == a["recommended"] or shown["method"] in a["tied_with"], (shown, a["recommended"])
    want_certain = "" if a["certain"] is None else str(int(bool(a["certain"])))
    assert shown["certain"] == want_certain, (shown["text"], a)
    if a["runner_up"] is not None and not a["tied_with"]:
        assert shown["runner_up"] == a["runner_up"]
        lead = a["lead"] * 100
        assert f"{lead:+.2f} pp" in shown["text"], (shown["text"], lead)
    u = a["utility"] * 100
    assert f"U = {u:.2f}%" in shown["text"], (shown["text"], u)
    # where the recommendation changes: advise searches a geometric grid from the constraint
    # and refines it; the page stores the change found on its dense grid, refined the same way.
    # They agree within the spacing of the grids around the change, unless the change one of
    # them found lies strictly between two neighbouring values of the other's grid that both
    # keep the recommendation (a region too narrow for that grid to see; amortised utility is a
    # step function with a step at every batch any method adapts on).
    moves = shown["moves"][0]
    x = np.asarray(view["axes"][0])
    win = np.asarray(view["win"][0])
    rec = win[k]
    for side, key in (("down", "holds_from"), ("up", "holds_to")):
        page_v = float(moves[side]) if moves[side] else None
        adv_v = a[key]
        if page_v is None and adv_v is None:
            continue  # both: no change on this side
        if page_v is not None and adv_v is not None and abs(page_v - adv_v) <= _spacing(x, adv_v) * 1.0001 + 1e-9:
            continue
        if (
            page_v is not None
            and (adv_v is None or (page_v < adv_v if side == "up" else page_v > adv_v))
            and _advise_grid_misses(a, side, page_v)
        ):
            continue  # the page found a change inside one step of advise's grid: advise's is further out
        if adv_v is not None and _between_kept(x, win, rec, adv_v):
            # advise found a change inside one step of the page's grid: the page's change is further out
            assert page_v is None or (page_v > adv_v if side == "up" else page_v < adv_v), (side, page_v, adv_v)
            continue
        lo, hi = a["search_range"]
        if adv_v is None and page_v is not None:
            assert page_v < lo or page_v > hi, (side, page_v, "advise saw no change within", lo, hi)
            continue
        if page_v is None and adv_v is not None:
            assert adv_v < x[0] or adv_v > x[-1], (side, adv_v, "beyond the page's grid")
            continue
        raise AssertionError((side, page_v, adv_v))


def _between_kept(x: np.ndarray, win: np.ndarray, rec: int, v: float) -> bool:
    """Does ``v`` lie strictly between two neighbouring grid values that both keep winner ``rec``?"""
    i = int(np.searchsorted(x, v))
    return 0 < i < len(x) and x[i - 1] < v < x[i] and win[i - 1] == rec and win[i] == rec


def _spacing(x: np.ndarray, v: float) -> float:
    i = int(np.clip(np.searchsorted(x, v), 1, len(x) - 1))
    return float(max(x[i] - x[i - 1], x[min(i + 1, len(x) - 1)] - x[i], abs(v) * 0.05))


@pytest.mark.parametrize("protocol", TWO_D)
def test_both_sliders_of_combined_protocols(page, data, tmp_path, protocol, demo_traces):
    group = data["groups"][0]
    view = group["views"][f"{protocol}|periodic"]
    x, y = view["axes"]
    second = {"discrete-continuous": ("--T", "T"), "discrete-amortised": ("--B", "B")}[protocol]
    model = group["title"].split(" · ")[1]
    sw = _sweep_winners(tmp_path / protocol, _group_dir(model), protocol, {"--rho": x, second[0]: y})
    assert sw.height == len(x) * len(y)
    table = {(round(r["value"], 9), round(r["value2"], 9)): frozenset(r["winners"]) for r in sw.iter_rows(named=True)}
    _select(page, 0, protocol)
    # along ρ with the second held at its middle, and along the second with ρ held
    j_mid = len(y) // 2
    along_rho = [table[(round(a, 9), round(y[j_mid], 9))] for a in x]
    pts = [(i, j_mid) for i in _points(along_rho)]
    i_mid = len(x) // 2
    along_2 = [table[(round(x[i_mid], 9), round(b, 9))] for b in y]
    pts += [(i_mid, j) for j in _points(along_2)]
    assert len(pts) >= 2 * MIN_POINTS
    for n, (i, j) in enumerate(pts):
        _slide(page, 1, i)
        _slide(page, 2, j)
        shown = _shown(page)
        assert shown["method"] in table[(round(x[i], 9), round(y[j], 9))], (protocol, x[i], y[j], shown["method"])
        if n % 3 == 0:  # advise on every third point (each answer replays its boundary search)
            a = _advise(demo_traces, group["label"], rho=str(x[i]), **{second[1]: f"{y[j]}ms"})
            assert shown["method"] == a["recommended"] or shown["method"] in a["tied_with"]
            want = "" if a["certain"] is None else str(int(bool(a["certain"])))
            assert shown["certain"] == want, (shown["text"], a)
            assert f"U = {a['utility'] * 100:.2f}%" in shown["text"]
    if _shots():
        _slide(page, 1, i_mid)
        _slide(page, 2, j_mid)
        page.screenshot(_shots() / f"explore-{protocol}.png")
    assert page.errors() == []


def test_per_corruption_view_and_shared_link(page, data, browser, built):
    group = data["groups"][0]
    view = group["views"]["discrete|periodic"]
    _select(page, 0, "discrete", "fog")
    e = group["episodes"].index("fog")
    for k in (0, len(view["axes"][0]) // 2, len(view["axes"][0]) - 1):
        _slide(page, 1, k)
        shown = _shown(page)
        assert shown["winner"] == group["methods"][view["win"][e][k]]
    # the link encodes the view: a fresh tab opened on it shows the same
    url = page.evaluate("location.href")
    assert "e=fog" in url and "p=discrete" in url
    other = browser.page()
    try:
        other.open(url)
        assert other.evaluate("document.getElementById('episode').selectedOptions[0].textContent") == "fog"
        assert other.evaluate("document.getElementById('slider1').value") == str(len(view["axes"][0]) - 1)
        assert other.errors() == []
    finally:
        other.close()
