"""Timing variability in the replay (tempora_sim.sweeps.variability, stats.with_timing,
term_intervals): the model from a measurement, the idle-aware discrete replay against a
plain-Python event simulation, common random numbers, reductions and hand-worked intervals."""

from __future__ import annotations

import itertools
import math
import statistics
import zlib
from collections import deque
from pathlib import Path
from statistics import NormalDist

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

import tempora_schema as schema
from helpers.ranks import average_ranks
from tempora_sim import analyses as an
from tempora_sim import run_sweep
from tempora_sim.commands.main import main
from tempora_sim.sweeps import synthetic as syn
from tempora_sim.sweeps import variability
from tempora_sim.sweeps.traces import load_traces
from tempora_sim.uncertainty import bootstrap as st
from tempora_sim.uncertainty import timing_replicates
from tempora_sim.uncertainty.term_intervals import interval_columns, pooled_bounds
from tempora_sim.uncertainty.timing_replicates import replicates_of

EPISODES = ("gaussian_noise", "fog")


def write(directory: Path, methods=("standard", "adabn", "tent"), variability=None, **kw) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    num_batches = kw.pop("num_batches", 40)
    probes = kw.pop("probes", {})  # method -> probe_ms (none: no speed probe)
    for m in methods:
        syn.write_trace(
            directory / f"{m}.parquet",
            m,
            episodes=EPISODES,
            num_batches=num_batches,
            variability=variability,
            probe_ms=probes.get(m),
            **kw,
        )
    return directory


# ----------------------------------------------------------------------------- the model
def test_model_from_a_hand_worked_measurement():
    main = np.full(12, 10.0)
    tv = {
        "sample": [{"episode": "a", "steps": list(range(12))}],
        "passes_ms": [[11.0] * 12, [9.0] * 12],
        "idle_gaps_ms": [0, 5.0, 0, 5.0, 0, 5.0, 0, 50.0, 0, 5.0, 0, 50.0],
        "idle_ms": [10.0, 13.0, 10.5, 13.0, 9.5, 13.0, 10.0, 10.4, 10.2, 13.0, 9.8, 12.0],
        "seconds": 1.0,
    }
    m = variability.model_from_measurement(tv, main)
    # pass shifts: log 1.1, log 0.9, and the idle pass's controls (median of log 1, 1.05, 0.95, 1, 1.02, 0.98) = 0
    assert m.shifts == pytest.approx(sorted([math.log(0.9), 0.0, math.log(1.1)]))
    controls = np.log([1.0, 1.05, 0.95, 1.0, 1.02, 0.98])
    assert m.residuals == pytest.approx(np.sort(np.concatenate([np.zeros(24), controls])))
    # against the 24 repeat-pass events (twelve at 9 ms, twelve at 11 ms) the six after-wait
    # events rank above in 132 of 144 pairs (only 10.4 is below the 11s): systematic. The
    # reference is the repeat passes' median, between log 0.9 and log 1.1: log √0.99. 5 ms:
    # four events at 13 ms → factor 1.3 / √0.99; 50 ms: two events, too few for a factor → 1
    assert variability.rank_sum_p(np.log([1.3] * 4 + [1.04, 1.2]), np.log([0.9] * 12 + [1.1] * 12))[0] < 0.025
    assert m.idle_gaps_ms.tolist() == [5.0, 50.0]
    assert m.idle_factors == pytest.approx([1.3 / math.sqrt(0.99), 1.0])
    assert m.has_idle_effect and m.events == 12


def test_the_reference_is_the_repeat_passes_not_the_controls_between_waits():
    """Waiting slows the idle pass's back-to-back events too (here 11 ms against the repeat
    passes' 10): the after-wait events at 11.5 ms are compared with the repeat passes, as the
    main pass ran back to back, and carry the whole 15 %."""
    main = np.full(16, 10.0)
    repeat = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.02, 9.98] * 2
    tv = {
        "sample": [{"episode": "a", "steps": list(range(16))}],
        "passes_ms": [repeat, repeat[::-1]],
        "idle_gaps_ms": [0, 20.0] * 8,
        "idle_ms": [
            v
            for c, a in zip([11.0, 11.1, 10.9, 11.0, 11.05, 10.95, 11.0, 11.0], [11.5, 11.6, 11.4, 11.5, 11.5, 11.55, 11.45, 11.5])
            for v in (c, a)
        ],
        "seconds": 0.0,
    }
    m = variability.model_from_measurement(tv, main)
    assert m.idle_gaps_ms.tolist() == [20.0]
    assert m.idle_factors == pytest.approx([1.15], rel=1e-3)


def test_a_gap_on_the_other_side_of_a_systematic_effect_keeps_factor_one():
    """Events after 5 ms waits are systematically slower; the three after 50 ms sit below the
    controls' median: the effect is one-sided, so that gap is not sped up."""
    controls = [10.0, 10.1, 9.9, 10.2, 9.8, 10.05, 9.97, 10.02, 10.03, 9.93]
    after = [(5.0, v) for v in (14.0, 14.2, 14.1, 14.3, 14.0, 14.1, 14.2)] + [(50.0, v) for v in (9.95, 9.96, 9.94)]
    tv = {
        "sample": [{"episode": "a", "steps": list(range(20))}],
        "passes_ms": [controls * 2],
        "idle_gaps_ms": [g for (gap, _) in after for g in (0, gap)],
        "idle_ms": [v for c, (_, a) in zip(controls, after) for v in (c, a)],
        "seconds": 0.0,
    }
    m = variability.model_from_measurement(tv, np.full(20, 10.0))
    assert m.idle_gaps_ms.tolist() == [5.0, 50.0]
    # the repeat passes' median on the log scale (the controls' values twice): between 10.0 and
    # 10.02, geometrically
    assert m.idle_factors == pytest.approx([14.1 / math.sqrt(10.0 * 10.02), 1.0])


def test_repeat_passes_in_a_slower_moment_do_not_pass_for_an_idle_effect():
    """The shape of an H200 trace: the repeat passes ran 18 % slower than the main pass, the idle
    pass as fast as it again. Against the repeat passes the after-wait events look 15 % faster,
    but they are faster than neither the main pass's times (which a factor would scale) nor the
    idle pass's own back-to-back events: no factor."""
    main = np.full(8, 9.67)
    tv = {
        "sample": [{"episode": "a", "steps": list(range(8))}],
        "passes_ms": [[11.5, 11.3, 11.6, 11.4, 11.6, 11.5, 11.7, 11.4], [11.8, 11.6, 11.5, 11.7, 11.4, 11.6, 11.5, 11.6]],
        "idle_gaps_ms": [0, 11.6] * 4,
        "idle_ms": [9.72, 9.72, 9.62, 9.84, 9.67, 9.75, 9.67, 9.79],
        "seconds": 0.0,
    }
    m = variability.model_from_measurement(tv, main)
    assert m.idle_gaps_ms.tolist() == [11.6]
    assert m.idle_factors.tolist() == [1.0] and not m.has_idle_effect
    # the same after-wait events 15 % below the main pass too: then the effect is real
    tv["idle_ms"] = [9.72, 8.2, 9.62, 8.3, 9.67, 8.25, 9.67, 8.22]
    m = variability.model_from_measurement(tv, main)
    assert m.has_idle_effect and m.idle_factors[0] < 0.75


def test_an_effect_beside_the_idle_pass_own_controls_holds_when_the_main_pass_ran_slower():
    """The shape of a CPU trace: the main pass ran 9 % slower than the repeat passes; the
    after-wait events are level with the main pass but 7 % above the back-to-back events run
    between them in the idle pass. The wait's cost is seen in the idle pass itself, so the
    factor (against the repeat passes) applies."""
    main = np.full(8, 11.0)
    tv = {
        "sample": [{"episode": "a", "steps": list(range(8))}],
        "passes_ms": [[10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.1, 9.9]] * 2,
        "idle_gaps_ms": [0, 12.5] * 4,
        "idle_ms": [10.2, 10.9, 10.3, 11.0, 10.1, 10.95, 10.25, 10.85],
        "seconds": 0.0,
    }
    m = variability.model_from_measurement(tv, main)
    assert m.has_idle_effect and m.idle_factors[0] == pytest.approx(10.925 / 10.0, rel=2e-3)


def test_a_faster_after_wait_is_systematic_too():
    main = np.full(8, 10.0)
    tv = {
        "sample": [{"episode": "a", "steps": list(range(8))}],
        "passes_ms": [[10.0, 10.2, 9.9, 10.1, 10.0, 10.2, 9.9, 10.1]],
        "idle_gaps_ms": [0, 5.0] * 4,
        "idle_ms": [10.0, 8.0, 10.2, 8.1, 9.9, 8.0, 10.1, 7.9],
        "seconds": 0.0,
    }
    m = variability.model_from_measurement(tv, main)
    # log scale, as the model works: the repeat pass's median log ratio is the mean of log 1.0 and log 1.01
    assert m.idle_factors == pytest.approx([0.8 / math.sqrt(1.0 * 1.01)])


# ----------------------------------------------------------------------------- the idle blocks
def _blocks_tv(main_n: int, blocks: list[tuple[float, list[float]]], passes=None) -> dict:
    return {
        "sample": [{"episode": "a", "steps": list(range(main_n))}],
        "passes_ms": passes or [[10.0] * main_n],
        "idle_gaps_ms": [],
        "idle_ms": [],
        "idle_blocks": [{"gap_ms": g, "settle_s": 1.5, "ms": ms} for g, ms in blocks],
        "seconds": 1.0,
    }


def test_idle_blocks_hand_worked():
    """B W B W B, each waited event against the same event in the blocks either side. The
    machine ran 10 % slower from the second back-to-back block on. The 5 ms block (12 ms) is
    above both neighbours in all 8 events (two-sided p = 2/256 each side): factor
    12 / √(10 · 11), against their geometric mean. The 50 ms block (10.89 ms) is below both
    (11 ms): faster, factor 0.99."""
    tv = _blocks_tv(8, [(0, [10.0] * 8), (5.0, [12.0] * 8), (0, [11.0] * 8), (50.0, [10.89] * 8), (0, [11.0] * 8)])
    m = variability.model_from_measurement(tv, np.full(8, 10.0))
    assert m.idle_gaps_ms.tolist() == [5.0, 50.0]
    assert m.idle_factors == pytest.approx([12.0 / math.sqrt(110.0), 0.99])
    # the back-to-back blocks are more passes: shifts log 1 (the repeat pass), log 1, log 1.1, log 1.1
    assert m.shifts == pytest.approx(sorted([0.0, 0.0, math.log(1.1), math.log(1.1)]))
    assert m.residuals == pytest.approx(np.zeros(32))


def test_a_waited_block_between_its_neighbours_has_no_factor():
    """The machine stepped from 10 to 12 ms around the 5 ms block (11.5 ms): above the block
    before, below the block after, so the step cannot be told from a wait's cost: factor 1. A
    block above both neighbours in only 6 of 8 events (two-sided p = 0.29) has none either."""
    tv = _blocks_tv(8, [(0, [10.0] * 8), (5.0, [11.5] * 8), (0, [12.0] * 8), (50.0, [13.0] * 6 + [11.0] * 2), (0, [12.0] * 8)])
    m = variability.model_from_measurement(tv, np.full(8, 10.0))
    assert variability.sign_test_p(np.array([1.0] * 6 + [-1.0] * 2))[0] * 2 > 0.05
    assert m.idle_factors.tolist() == [1.0, 1.0] and not m.has_idle_effect


def test_the_machine_drifting_across_the_blocks_is_not_an_idle_effect():
    """The machine slows steadily from block to block (10, 11, 12.1, … ms), each waited block
    exactly between its neighbours up to a ±1 % scatter: an idle pass comparing with repeat
    passes seconds earlier would see +10 to +20 %; the blocks see nothing."""
    speeds = [10.0 * 1.1**j for j in range(5)]
    scatter = [1.01, 0.99] * 4
    blocks = [(0, [speeds[0]] * 8)]
    for j, gap in ((1, 5.0), (3, 50.0)):
        blocks += [(gap, [speeds[j] * f for f in scatter]), (0, [speeds[j + 1]] * 8)]
    # speeds[1] and speeds[3] are the geometric means of their neighbours
    m = variability.model_from_measurement(_blocks_tv(8, blocks), np.full(8, 10.0))
    assert m.idle_factors.tolist() == [1.0, 1.0] and not m.has_idle_effect


def _brute_sign(d: list[float]) -> tuple[float, float]:
    """Plain-Python oracle: every sign pattern of the nonzero values, equally likely."""
    nz = [x for x in d if x != 0]
    if not nz:
        return 1.0, 1.0
    up = sum(x > 0 for x in nz)
    counts = [sum(p) for p in itertools.product((0, 1), repeat=len(nz))]
    return sum(c >= up for c in counts) / len(counts), sum(c <= up for c in counts) / len(counts)


@settings(max_examples=60, deadline=None)
@given(hst.lists(hst.sampled_from([-2.0, -0.5, 0.0, 0.3, 1.0]), min_size=0, max_size=10))
def test_sign_test_is_exact(d):
    assert variability.sign_test_p(np.array(d)) == pytest.approx(_brute_sign(d))


def test_sign_test_hand_worked():
    # eight of eight above: one pattern in 256; seven of eight: 9 in 256
    assert variability.sign_test_p(np.ones(8)) == pytest.approx((1 / 256, 1.0))
    assert variability.sign_test_p(np.array([1.0] * 7 + [-1.0]))[0] == pytest.approx(9 / 256)


def _brute_rank_sum(a: list[float], b: list[float]) -> tuple[float, float]:
    """Plain-Python oracle: every way of choosing which of the pooled values are ``a``'s."""
    pooled = a + b
    ranks = average_ranks(pooled)
    observed = sum(ranks[: len(a)])
    sums = [sum(ranks[k] for k in c) for c in itertools.combinations(range(len(pooled)), len(a))]
    return sum(s >= observed - 1e-9 for s in sums) / len(sums), sum(s <= observed + 1e-9 for s in sums) / len(sums)


@settings(max_examples=60, deadline=None)
@given(a=hst.lists(hst.integers(0, 4), min_size=1, max_size=6), b=hst.lists(hst.integers(0, 4), min_size=1, max_size=7))
def test_rank_sum_is_exact_with_ties(a, b):
    got = variability.rank_sum_p(np.array(a, float), np.array(b, float))
    assert got == pytest.approx(_brute_rank_sum([float(x) for x in a], [float(x) for x in b]), abs=1e-12)


def test_rank_sum_matches_the_textbook_tests():
    from scipy import stats  # an independent implementation (installed with the tracer's scikit-image)

    rng = np.random.default_rng(3)
    for _ in range(20):
        a, b = rng.normal(0.3, 1, 8), rng.normal(0, 1, 9)  # exact, no ties
        up, down = variability.rank_sum_p(a, b)
        assert up == pytest.approx(stats.mannwhitneyu(a, b, alternative="greater", method="exact").pvalue, abs=1e-12)
        assert down == pytest.approx(stats.mannwhitneyu(a, b, alternative="less", method="exact").pvalue, abs=1e-12)
        a, b = np.round(rng.normal(0.3, 1, 40), 1), np.round(rng.normal(0, 1, 30), 1)  # beyond the exact size, ties
        up, down = variability.rank_sum_p(a, b)
        assert up == pytest.approx(stats.mannwhitneyu(a, b, alternative="greater", method="asymptotic").pvalue, abs=1e-9)
        assert down == pytest.approx(stats.mannwhitneyu(a, b, alternative="less", method="asymptotic").pvalue, abs=1e-9)


def test_an_idle_gap_inside_the_controls_spread_is_not_applied():
    main = np.full(8, 10.0)
    tv = {
        "sample": [{"episode": "a", "steps": list(range(8))}],
        "passes_ms": [[10.0] * 8],
        "idle_gaps_ms": [0, 5.0] * 4,
        "idle_ms": [9.0, 10.1, 11.0, 9.9, 9.5, 10.3, 10.5, 9.7],  # after-gap events straddle the controls
        "seconds": 0.0,
    }
    m = variability.model_from_measurement(tv, main)
    assert m.idle_factors.tolist() == [1.0] and not m.has_idle_effect


@pytest.mark.parametrize("gap, expected", [(0, 1.0), (5, 1.25), (10, 1.5), (55, 1.35), (100, 1.2), (1000, 1.2), (-1, 1.0)])
def test_idle_factor_is_linear_between_the_measured_gaps(gap, expected):
    assert variability.idle_factor(gap, np.array([10.0, 100.0]), np.array([1.5, 1.2])) == pytest.approx(expected)


# ----------------------------------------------------------------------------- the idle-aware walk
def event_oracle(a, delta, gamma, queue, strict, gaps, factors):
    """Plain-Python event simulation of the discrete protocol (docs/design/design.md §4) in which an
    event that starts after the pipeline idled for g ms takes δ·F(g); returns (served, Σa)."""
    n = len(a)
    arrivals = [i * gamma for i in range(n)]
    waiting: deque[int] = deque()
    nxt_arrival, j, t, free_at, last_end = 0, 0, 0.0, 0.0, None
    served, total = 0, 0.0
    busy = False
    while True:
        # next instant: a completion or an arrival, completions first at equal times
        candidates = []
        if busy:
            candidates.append(free_at)
        if nxt_arrival < n:
            candidates.append(arrivals[nxt_arrival])
        if not candidates:
            break
        t = min(candidates)
        if busy and free_at <= t:
            busy = False
            last_end = free_at
        while nxt_arrival < n and arrivals[nxt_arrival] <= t:
            if strict:
                waiting.append(nxt_arrival)
                while len(waiting) > max(queue, 1):
                    waiting.popleft()
            elif queue == 0:
                if not busy and not waiting:
                    waiting.append(nxt_arrival)
            else:
                waiting.append(nxt_arrival)
                if busy:
                    while len(waiting) > queue:
                        waiting.popleft()
            nxt_arrival += 1
        if not busy and waiting:
            if strict and (last_end is not None and not any(arr == t for arr in arrivals[:nxt_arrival])):
                continue  # strict: pick up only at an arrival instant
            batch = waiting.pop() if strict and queue <= 1 else waiting.popleft()
            if strict and queue <= 1:
                waiting.clear()
            idle = 0.0 if last_end is None else t - last_end
            free_at = t + delta[j] * variability.idle_factor(idle, np.asarray(gaps), np.asarray(factors))
            total += a[j]
            j += 1
            served += 1
            busy = True
            del batch
        if not busy and not waiting and nxt_arrival >= n:
            break
    return served, total


def walk():
    from tempora_sim.engine.kernels import discrete_idle_walk

    return discrete_idle_walk


def test_idle_effect_hand_worked():
    """δ = 10 ms, γ = 11 ms, no queue. Traced: every event ends before the next arrival (4 of
    4 served). With F = 1.5 after any idle: event 1 starts at 11 after 1 ms idle and ends at
    26, so batch 2 (22) is dropped; batch 3 starts at 33 and ends at 48: 3 of 4."""
    a = np.array([1.0, 0.5, 0.25, 0.125])
    d = np.full(4, 10.0)
    w = walk()
    assert w(a, d, 11.0, 0, False, 0, 0.0, np.zeros(0), np.zeros(0))[:2] == (4, pytest.approx(1.875))
    served, ssum, _ = w(a, d, 11.0, 0, False, 0, 0.0, np.array([1.0]), np.array([1.5]))
    assert (served, ssum) == (3, pytest.approx(1.75))  # step-indexed: events 0, 1, 2 score a_0..a_2
    # with a queue of 1 the delayed batch waits and nothing is lost: 0–10, 11–26, 26–36, 36–46
    assert w(a, d, 11.0, 1, False, 0, 0.0, np.array([1.0]), np.array([1.5]))[0] == 4


@settings(max_examples=150, deadline=None)
@given(
    n=hst.integers(1, 25),
    data=hst.data(),
    queue=hst.sampled_from([0, 1, 2]),
    gamma=hst.floats(2.0, 30.0),
    factors=hst.lists(hst.floats(0.6, 2.0), min_size=0, max_size=3),
)
def test_idle_walk_matches_the_event_simulation(n, data, queue, gamma, factors):
    delta = data.draw(hst.lists(hst.floats(0.5, 40.0), min_size=n, max_size=n))
    a = data.draw(hst.lists(hst.floats(0.0, 1.0), min_size=n, max_size=n))
    gaps = sorted(data.draw(hst.lists(hst.floats(0.1, 30.0), min_size=len(factors), max_size=len(factors), unique=True)))
    served, ssum, _ = walk()(np.array(a), np.array(delta), gamma, queue, False, 0, 0.0, np.array(gaps, float), np.array(factors, float))
    o_served, o_sum = event_oracle(a, delta, gamma, queue, False, gaps, factors)
    assert served == o_served
    assert ssum == pytest.approx(o_sum, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(n=hst.integers(1, 30), data=hst.data(), queue=hst.sampled_from([0, 1, 3]), strict=hst.booleans(), gamma=hst.floats(2.0, 30.0))
def test_idle_walk_without_an_effect_is_the_replay_kernel(n, data, queue, strict, gamma):
    from tempora_sim.engine.kernels import discrete_one

    delta = np.array(data.draw(hst.lists(hst.floats(0.5, 40.0), min_size=n, max_size=n)))
    a = np.array(data.draw(hst.lists(hst.floats(0.0, 1.0), min_size=n, max_size=n)))
    assert walk()(a, delta, gamma, queue, strict, 0, 0.0, np.zeros(0), np.zeros(0)) == discrete_one(a, delta, gamma, queue, strict, 0, 0.0)


# ----------------------------------------------------------------------------- replicates
def _uniforms(seed, r, label, ep, n):
    u = np.random.default_rng([seed, r, zlib.crc32(label.encode())]).random()
    v = np.random.default_rng([seed, r, zlib.crc32(f"{label}\x00{ep}".encode())]).random(n)
    return u, v


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pass_sd=hst.floats(0.0, 0.2),
    event_sd=hst.floats(0.0, 0.2),
    idle=hst.floats(0.8, 1.6),
    seed=hst.integers(0, 2**16),
    rho=hst.sampled_from([1.0, 0.8, 0.5]),
    drift=hst.sampled_from([None, 0.0, 0.15]),
)
def test_replicates_match_an_event_simulation_drawing_from_the_same_model(tmp_path_factory, pass_sd, event_sd, idle, seed, rho, drift):
    """Each replicate's discrete rows equal a plain-Python simulation whose times are the
    traced ones scaled by factors drawn, by the documented rule, from the model the
    measurement gives (pass shift from the predictive normal, residuals ⌊v·M⌋-th smallest, idle
    curve), with the machine's drift between the two traces' speed probes (``drift``: the log
    gap of their probe levels; None: no probes) added to the shift's variance."""
    d = tmp_path_factory.mktemp("rep")
    var = syn.SyntheticVariability(pass_sd, event_sd, gaps_ms=(5.0, 40.0), idle_factor=(idle, idle))
    probes = {} if drift is None else {"standard": 2.0, "tent": 2.0 * math.exp(drift)}
    write(d, ("standard", "tent"), var, num_batches=24, rng_seed=seed, probes=probes)
    ts = load_traces(d, cache=False)
    res = run_sweep(ts, protocols="discrete", rho=[rho])
    reps = replicates_of(res, 3, seed)
    lam = res.frame.get_column("lambda_ms")[0]
    # every pass of a trace (the traced one at 0 and the measured ones), their spread pooled
    # over the group's traces around each trace's own mean
    own = [np.concatenate(([0.0], variability.timing_model(t).shifts)) for t in ts.traces]
    df = sum(p.size - 1 for p in own)
    pooled_sd = math.sqrt(sum(float(((p - p.mean()) ** 2).sum()) for p in own) / df)
    # the drift: sample SD of the two traces' log median probe times (one degree of freedom)
    medians = [statistics.median(x["ms"] for x in t.meta["speed_probe"]) for t in ts.traces] if probes else []
    drift_var = statistics.variance([math.log(m) for m in medians]) if probes else 0.0
    t975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
    for trace in ts.traces:
        model = variability.timing_model(trace)
        label = trace.group.label()
        ra = trace.replay_arrays
        start = 0
        for ep, n in zip(ra.episodes, ra.lengths):
            a, delta = ra.a[start : start + n], ra.delta[start : start + n]
            start += n
            for r, frame in enumerate(reps.reps):
                u, v = _uniforms(seed, r, label, ep, n)
                # predictive normal of a new pass's shift: mean of its K + 1 passes, scale
                # √(pooled sd²·(1+1/(K+1)) + drift²)·t_df/z, df by Welch–Satterthwaite
                k = model.shifts.size + 1
                var_passes = pooled_sd**2 * (1 + 1 / k)
                total = var_passes + drift_var
                dof = df if drift_var == 0 else max(1, math.floor(total**2 / (var_passes**2 / df + drift_var**2) + 1e-9))
                scale = math.sqrt(total) * t975[dof] / 1.959964
                shift = float(np.sum(model.shifts)) / k + scale * NormalDist().inv_cdf(min(max(u, 1e-3), 1 - 1e-3))
                res_ = model.residuals[np.minimum((v * model.residuals.size).astype(int), model.residuals.size - 1)]
                times = delta * np.exp(shift + res_)
                served, _ = event_oracle(a.tolist(), times.tolist(), lam / rho, 1, False, model.idle_gaps_ms, model.idle_factors)
                row = frame.filter((pl.col("method") == trace.method) & (pl.col("episode") == ep))
                assert row.get_column("served")[0] == served


def test_pooled_spread_hand_worked_and_one_trace_alone_keeps_its_own():
    """Measured shifts {0.1, 0.2} and {0.3}, with the traced pass at 0: passes {0, 0.1, 0.2}
    (mean 0.1, squares 0.02) and {0, 0.3} (mean 0.15, squares 0.045); pooled σ = √(0.065/3),
    df = 2 + 1; the first trace's scale is σ·√(1 + 1/3)·t_3/z around 0.1. One trace alone: its
    own σ (0.1) and df = K = 2."""
    mk = lambda shifts: variability.TimingModel(np.array(shifts), np.zeros(4), np.zeros(0), np.zeros(0), 4, 1.0)  # noqa: E731
    a, b = mk([0.1, 0.2]), mk([0.3])
    sd, df = variability.pooled_shift_sd([a, b])
    assert df == 3 and sd == pytest.approx(math.sqrt(0.065 / 3))
    centre, scale = variability.shift_spread(a.shifts, (sd, df))
    assert centre == pytest.approx(0.1) and scale == pytest.approx(sd * math.sqrt(4 / 3) * 3.182 / 1.959964)
    alone = variability.shift_spread(a.shifts, variability.pooled_shift_sd([a]))
    assert alone == pytest.approx(variability.shift_spread(a.shifts))
    assert alone == pytest.approx((0.1, 0.1 * math.sqrt(4 / 3) * 4.303 / 1.959964))
    # a pass measured exactly as the traced one everywhere: no spread, the traced times
    still = mk([0.0, 0.0])
    assert variability.shift_spread(still.shifts) == (0.0, 0.0) and still.shift(0.99) == 0.0


class _Probed:
    """What :func:`variability.probe_drift` reads of a trace: its speed probes."""

    def __init__(self, ms, kind="matmul"):
        self.meta = {
            "speed_probe": [{"episode": "e", "step": 50 * i, "ms": m} for i, m in enumerate(ms)],
            "speed_probe_kind": kind if ms else "none",
        }


def test_probe_drift_hand_worked():
    """Two traces whose median probes are 2 and 2·e^0.1 ms: log medians {ln 2, ln 2 + 0.1}, SD
    0.1/√2, df 1. One probed trace alone: its own probes 1, e^0.2, e^0.1 ms (logs {0, 0.2,
    0.1}: SD 0.1, df 2). Fewer than two probes, or probes of two kinds: nothing."""
    sd, df = variability.probe_drift([_Probed([2.0, 2.0, 9.0]), _Probed([2 * math.exp(0.1)]), _Probed([])])
    assert df == 1 and sd == pytest.approx(0.1 / math.sqrt(2))
    sd, df = variability.probe_drift([_Probed([1.0, math.exp(0.2), math.exp(0.1)]), _Probed([])])
    assert df == 2 and sd == pytest.approx(0.1)
    assert variability.probe_drift([_Probed([2.0]), _Probed([])]) is None
    assert variability.probe_drift([_Probed([2.0]), _Probed([2.5], kind="other")]) is None


def test_shift_spread_with_drift_hand_worked():
    """Shifts {0.1, 0.2} (passes {0, 0.1, 0.2}: σ = 0.1, K = 2) and a drift of σ_d = 0.05 with
    4 df: a = 0.01·(1 + 1/3), b = 0.0025, df = ⌊(a + b)²/(a²/2 + b²/4)⌋ = 2, scale =
    √(a + b)·t_2/z. A drift alone (no passes): σ_d·t_4/z around 0. No drift, or a drift of
    zero: the passes' own spread, exactly."""
    a, b = 0.01 * 4 / 3, 0.0025
    df = math.floor((a + b) ** 2 / (a**2 / 2 + b**2 / 4))
    assert df == 2
    centre, scale = variability.shift_spread(np.array([0.1, 0.2]), None, (0.05, 4))
    assert centre == pytest.approx(0.1) and scale == pytest.approx(math.sqrt(a + b) * 4.303 / 1.959964)
    assert variability.shift_spread(np.zeros(0), None, (0.05, 4)) == pytest.approx((0.0, 0.05 * 2.776 / 1.959964))
    plain = variability.shift_spread(np.array([0.1, 0.2]))
    assert variability.shift_spread(np.array([0.1, 0.2]), None, (0.0, 4)) == plain
    assert variability.shift_spread(np.array([0.1, 0.2]), None, None) == plain
    assert variability.shift_spread(np.zeros(0)) is None


def test_a_group_without_speed_probes_has_no_drift_and_one_with_them_widens(tmp_path):
    """The synthetic traces carry no probes unless asked: their models have no drift. Probes
    at 2 and 2.4 ms put the group's log-median gap into every model's drift."""
    var = syn.SyntheticVariability(0.05, 0.05, gaps_ms=())
    plain = variability.timing_models(load_traces(write(tmp_path / "a", ("standard", "tent"), var), cache=False).traces)
    assert all(m.drift is None for m in plain)
    traces = load_traces(write(tmp_path / "b", ("standard", "tent"), var, probes={"standard": 2.0, "tent": 2.4}), cache=False).traces
    probed = variability.timing_models(traces)
    sd, df = probed[0].drift
    gap = math.log(schema.probe_median_ms(traces[1].meta) / schema.probe_median_ms(traces[0].meta))  # ≈ ln 1.2 (probes ± 1 %)
    assert df == 1 and probed[1].drift == probed[0].drift and sd == pytest.approx(abs(gap) / math.sqrt(2))
    assert (
        variability.shift_spread(probed[0].shifts, probed[0].pooled, probed[0].drift)[1]
        > variability.shift_spread(probed[0].shifts, probed[0].pooled)[1]
    )
    # and the answers say so
    res = run_sweep(load_traces(tmp_path / "b", cache=False), protocols="discrete", rho=[1.0])
    timing = replicates_of(res, 2, 0)
    assert timing.drift == pytest.approx(sd)
    assert f"speed probes, σ up to {sd:.1%}" in timing_replicates.describe(timing, 2)
    assert "speed probes" not in timing_replicates.describe(replicates_of(run_sweep(load_traces(tmp_path / "a", cache=False)), 2, 0), 2)


def test_common_random_numbers_keep_identical_methods_tied(tmp_path):
    """Two methods with the same rows and the same measurement take the same draws in every
    replicate: their paired lead interval is exactly [0, 0] while their own intervals widen."""
    var = syn.SyntheticVariability(0.1, 0.1)
    write(tmp_path, ("standard",), var)
    syn.write_trace(tmp_path / "tent.parquet", "tent", episodes=EPISODES, num_batches=40, variability=var, rng_seed=7)
    syn.write_trace(
        tmp_path / "eta.parquet", "eta", episodes=EPISODES, num_batches=40, variability=var, rng_seed=7, profile=syn.PROFILES["tent"]
    )
    ts = load_traces(tmp_path, cache=False)
    res = run_sweep(ts, protocols="discrete", rho=[1.0])
    timing = replicates_of(res, 20, 0)
    rows = an.align_group_dtypes(an.trace_rows(ts.traces), res.frame)
    iv = an.utility_intervals(res.frame, rows, timing=timing)
    iv0 = an.utility_intervals(res.frame, rows)
    pick = lambda ivx, m: ivx.index.filter((pl.col("method") == m) & (pl.col("episode") == "__all__"))  # noqa: E731
    tent, eta = pick(iv, "tent"), pick(iv, "eta")
    lo, hi = iv.difference(tent.get_column("row").to_numpy(), eta.get_column("row").to_numpy())
    assert lo[0] == 0.0 and hi[0] == 0.0
    base = pick(iv0, "tent")
    assert (tent["hi"][0] - tent["lo"][0]) > (base["hi"][0] - base["lo"][0])
    # and the replicates did move the utility
    assert any(
        r.filter(pl.col("method") == "tent")["utility"].to_list() != res.frame.filter(pl.col("method") == "tent")["utility"].to_list()
        for r in timing.reps
    )


# ----------------------------------------------------------------------------- reductions
def test_zero_measured_variability_gives_todays_intervals_exactly(tmp_path):
    write(tmp_path, variability=syn.SyntheticVariability(0.0, 0.0, gaps_ms=()))
    ts = load_traces(tmp_path, cache=False)
    res = run_sweep(ts)
    timing = replicates_of(res, 20, 0)
    assert timing.count == 20 and set(timing.status.values()) == {variability.MEASURED}
    rows = an.align_group_dtypes(an.trace_rows(ts.traces), res.frame)
    with_t, without = an.utility_intervals(res.frame, rows, timing=timing), an.utility_intervals(res.frame, rows)
    assert np.array_equal(with_t.boot, without.boot)
    assert with_t.index.equals(without.index)
    assert (
        interval_columns(res, None, timing).drop("timing_uncertainty").equals(interval_columns(res, None, None).drop("timing_uncertainty"))
    )
    assert pooled_bounds(res.frame, None, timing).equals(pooled_bounds(res.frame, None, None))


def test_a_trace_without_the_measurement_reads_and_replays_as_before(tmp_path):
    write(tmp_path / "with", variability=syn.SyntheticVariability(0.0, 0.0, gaps_ms=()))
    write(tmp_path / "without")
    a, b = run_sweep(load_traces(tmp_path / "with", cache=False)), run_sweep(load_traces(tmp_path / "without", cache=False))
    assert a.frame.equals(b.frame)
    timing = replicates_of(b, 20, 0)
    assert timing.count == 0 and set(timing.status.values()) == {variability.UNKNOWN}
    assert "unknown" in timing_replicates.describe(timing, 20)
    cols = interval_columns(b, None, timing)
    assert cols.get_column("timing_uncertainty").unique().to_list() == [variability.UNKNOWN]


def test_timing_replicates_zero_turns_it_off(tmp_path):
    write(tmp_path, variability=syn.SyntheticVariability(0.2, 0.2))
    res = run_sweep(load_traces(tmp_path, cache=False))
    assert replicates_of(res, 0, 0).count == 0
    assert "not included" in timing_replicates.describe(replicates_of(res, 0, 0), 0)


# ----------------------------------------------------------------------------- hand-worked intervals
def test_with_timing_hand_worked_lead_loses_its_certainty():
    """A leads B by 10 pp in every batch resample (certain). Timing replicate 1 costs A 20 pp:
    half the draws then read −10 pp, and the 95 % lead interval is [−10, +10] pp: uncertain."""
    R = 1000
    index = pl.DataFrame({"method": ["A", "B"], "row": [0, 1], "pair": [0, 0], "lo": [0.5, 0.4], "hi": [0.5, 0.4]})
    iv = st.Intervals(index, np.array([[0.5] * R, [0.4] * R]), st.BootstrapOptions())
    assert iv.difference([0], [1]) == (pytest.approx(0.1), pytest.approx(0.1))
    out = st.with_timing(iv, np.array([[0.0, -0.2], [0.0, 0.0]]))
    lo, hi = out.difference([0], [1])
    assert lo[0] == pytest.approx(-0.1) and hi[0] == pytest.approx(0.1)
    assert out.index.get_column("lo").to_list() == pytest.approx([0.3, 0.4])
    # no replicates: unchanged
    assert st.with_timing(iv, np.zeros((2, 0))) is iv


def _write_measured(path: Path, method: str, profile: syn.MethodProfile, factors: list[float]) -> None:
    """A trace whose measurement has one repeat pass per factor, each scaling every sample
    event's main-pass δ by that factor (no idle pass)."""
    meta, table = syn.make_trace(method, episodes=EPISODES, num_batches=30, profile=profile, checkpoints=None, rng_seed=3)
    adapt = table.to_pydict()
    main = {
        ep: [d for e, p_, d in zip(adapt["episode"], adapt["phase"], adapt["delta_ms"]) if e == ep and p_ == "adapt"][:4] for ep in EPISODES
    }
    meta[schema.VARIABILITY_KEY] = {
        "sample": [{"episode": ep, "steps": [0, 1, 2, 3]} for ep in EPISODES],
        "passes_ms": [[f * d for ep in EPISODES for d in main[ep]] for f in factors],
        "idle_gaps_ms": [],
        "idle_ms": [],
        "seconds": 0.0,
    }
    pq.write_table(table.replace_schema_metadata(schema.encode_metadata(meta)), path)


def test_a_winner_is_certain_only_if_its_lead_survives_timing(tmp_path):
    """B (50 ms, 45 % accurate) beats A (30 ms, 30 %) at ρ = 70 % (γ = 54.3 ms): on the traced
    times B serves every batch and its 15 pp lead is certain on batches alone. The device
    measured passes 20 % slower and 10 % faster than the traced one: in a 20 % slower pass B
    takes 60 ms > γ and, without a queue, loses every other batch (U ≈ 24 %), so the lead does
    not survive timing: uncertain. (Two passes: the predictive normal of a new pass's shift
    is centred on their mean, +4 %, and wide: t₁ at 95 % is 12.7.)"""
    exact = lambda e, acc: syn.MethodProfile(e, 0.0, 0.0, 0.0, acc)  # noqa: E731
    _write_measured(tmp_path / "standard.parquet", "standard", syn.MethodProfile(38.0, 0.0, 0.0, 0.0, 0.2, updates=False), [1.2, 0.9])
    _write_measured(tmp_path / "a.parquet", "a", exact(30.0, 0.30), [1.2, 0.9])
    _write_measured(tmp_path / "b.parquet", "b", exact(50.0, 0.45), [1.2, 0.9])
    ts = load_traces(tmp_path, cache=False)
    res = run_sweep(ts, protocols="discrete", rho=[0.7], queue=0)
    rows = an.align_group_dtypes(an.trace_rows(ts.traces), res.frame)
    before = an.pooled_winners(res.frame, an.utility_intervals(res.frame, rows)).row(0, named=True)
    assert (before["winner"], before["runner_up"], before["certain"]) == ("b", "a", True)
    timing = replicates_of(res, 20, 0)
    shifts = variability.timing_model(ts.traces[0]).shifts
    assert shifts == pytest.approx(sorted([math.log(1.2), math.log(0.9)]))
    after = an.pooled_winners(res.frame, an.utility_intervals(res.frame, rows, timing=timing)).row(0, named=True)
    assert after["winner"] == "b" and after["certain"] is False
    assert after["lead_lo"] < 0 < after["lead_hi"]


# ----------------------------------------------------------------------------- idle effect switch
def test_idle_effect_changes_the_point_estimate_and_can_be_switched_off(tmp_path):
    """Events just under γ at ρ = 70 % idle before each arrival; a measured 1.6× slowdown after
    idle makes them overrun, so without a queue the next arrival is dropped — unless
    --no-idle-effect."""
    profile = syn.MethodProfile(50.0, 0.0, 0.0, 0.0, 0.4)
    var = syn.SyntheticVariability(0.0, 0.0, gaps_ms=(2.0,), idle_factor=(1.6,))  # 4 after-gap events
    for m, p in (("standard", syn.MethodProfile(38.0, 0.0, 0.0, 0.0, 0.2, updates=False)), ("slow", profile)):
        syn.write_trace(tmp_path / f"{m}.parquet", m, episodes=EPISODES, num_batches=20, profile=p, variability=var)
    ts = load_traces(tmp_path, cache=False)
    on = run_sweep(ts, protocols="discrete", rho=[0.7], queue=0)
    off = run_sweep(ts, protocols="discrete", rho=[0.7], queue=0, no_idle_effect=True)
    alpha = lambda r: r.frame.filter((pl.col("method") == "slow") & (pl.col("episode") == "__all__"))["alpha"][0]  # noqa: E731
    assert alpha(off) == 1.0  # γ = 38/0.7 = 54.3 ms > 50 ms
    # batch 0: 0–50 (no idle before the first event); batch 1: idle 4.3 ms, 54.3–134.3, so
    # batch 2 (108.6) is dropped; batch 3: 162.9–242.9, batch 4 dropped … → 0, 1, 3, …, 19: 11 of 20
    assert alpha(on) == 0.55


# ----------------------------------------------------------------------------- sweep --intervals
def test_sweep_intervals_writes_bounds_of_every_term(tmp_path):
    write(tmp_path / "t", variability=syn.SyntheticVariability(0.05, 0.05))
    res = CliRunner().invoke(main, ["sweep", str(tmp_path / "t"), "--intervals", "--out", str(tmp_path / "out"), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    assert "timing uncertainty: included" in res.output
    for f in (pl.read_parquet(tmp_path / "out" / "utility.parquet"), pl.read_csv(tmp_path / "out" / "utility.csv")):
        for term in ("utility", "alpha", "served_acc", "acc", "kappa", "cov", "m", "beta", "acc_adapt", "acc_frozen"):
            assert f"{term}_lo" in f.columns and f"{term}_hi" in f.columns
        pooled = f.filter(pl.col("episode") == "__all__")
        disc = pooled.filter(pl.col("protocol") == "discrete")
        assert disc["alpha_lo"].null_count() == 0 and (disc["alpha_lo"] <= disc["alpha_hi"]).all()
        amort = pooled.filter(pl.col("protocol") == "amortised")
        assert amort["beta_lo"].null_count() == 0 and disc["beta_lo"].null_count() == disc.height
        assert set(f["timing_uncertainty"].to_list()) == {"measured"}


def test_sweep_intervals_without_timing_bracket_the_estimates(tmp_path):
    write(tmp_path / "t")
    res = CliRunner().invoke(main, ["sweep", str(tmp_path / "t"), "--intervals", "--out", str(tmp_path / "out"), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    assert "timing uncertainty: unknown" in res.output
    f = pl.read_parquet(tmp_path / "out" / "utility.parquet")
    for term in ("utility", "alpha", "kappa", "beta", "acc"):
        part = f.filter(pl.col(f"{term}_lo").is_not_null())
        assert part.height and (part[f"{term}_lo"] <= part[term] + 1e-12).all() and (part[term] <= part[f"{term}_hi"] + 1e-12).all()
    # per-episode schedule terms do not move with another draw of batches: zero width
    ep = f.filter((pl.col("episode") != "__all__") & (pl.col("protocol") == "discrete"))
    assert (ep["alpha_lo"] == ep["alpha"]).all() and (ep["alpha_hi"] == ep["alpha"]).all()


@pytest.mark.parametrize("args", [["--timing-replicates", "-1"], ["--timing-replicates", "x"]])
def test_bad_timing_replicates_is_one_line(tmp_path, args):
    write(tmp_path / "t", ("standard",))
    res = CliRunner().invoke(main, ["sweep", str(tmp_path / "t"), "--intervals", *args])
    assert res.exit_code == 2
    assert "--timing-replicates" in res.output and "Traceback" not in res.output


def test_traces_from_before_the_measurement_say_their_timing_uncertainty_is_unknown():
    """The demo set as the first tracer wrote it (tests/golden/demo-traces) has no timing data."""
    legacy = Path(__file__).resolve().parents[2] / "tests" / "golden" / "demo-traces"
    first = next(legacy.rglob("*.parquet"))
    assert schema.VARIABILITY_KEY not in schema.decode_metadata(pq.read_schema(first), first)
    res = CliRunner().invoke(main, ["advise", str(first.parent), "--rho", "0.6"])
    assert res.exit_code == 0, res.output
    assert "timing uncertainty: unknown" in res.output


def test_the_committed_demo_traces_carry_their_timing_variability():
    """traces/demo was taken with the measurement: every trace has it, and advise uses it."""
    demo = Path(__file__).resolve().parents[2] / "traces" / "demo"
    files = sorted(demo.rglob("*.parquet"))
    assert len(files) == 23
    for f in files:
        assert schema.VARIABILITY_KEY in schema.decode_metadata(pq.read_schema(f), f), f
    res = CliRunner().invoke(main, ["advise", str(files[0].parent), "--rho", "0.6"])
    assert res.exit_code == 0, res.output
    assert "timing uncertainty: unknown" not in res.output
