"""Numba kernels against the plain-Python reference, hand-worked examples and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempora_sim.engine import kernels as K
from tempora_sim.engine import oracle as R

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------------------
# helpers: one episode through a kernel
# --------------------------------------------------------------------------------------


def kernel_discrete(a, delta, lam, rho, queue=1, sync="buffered", skipped="null", num_classes=10, fallback=False):
    a = np.asarray(a, np.float64)
    delta = np.asarray(delta, np.float64)
    mode = K.SKIP_FALLBACK if fallback else (K.SKIP_RANDOM if skipped == "random" else K.SKIP_NULL)
    served, ssum, score = K.discrete_kernel(
        a,
        delta,
        np.array([0, len(a)], np.int64),
        np.array([lam]),
        np.array([rho], np.float64),
        queue,
        sync == "strict",
        mode,
        np.array([1.0 / num_classes]),
        np.array([delta.max()]),
        np.array([a.sum()]),
    )
    return int(served[0, 0]), float(ssum[0, 0]), float(score[0, 0])


def kernel_continuous(a, e, l, lam, T):
    a = np.asarray(a, np.float64)
    off = np.array([0, len(a)], np.int64)
    lam_ = np.array([lam])
    d = K.response_delays(np.asarray(e, np.float64), np.asarray(l, np.float64), off, lam_)
    sak, sk, cov = K.continuous_kernel(a, d, off, lam_, np.array([T], np.float64))
    n = len(a)
    return sak[0, 0] / n, a.mean(), sk[0, 0] / n, cov[0, 0], d


def kernel_amortised(a, delta, lam, budget, frozen_rows, rule="strict", frozen_from_adapt=False):
    a = np.asarray(a, np.float64)
    off = np.array([0, len(a)], np.int64)
    pa_, pc_ = K.amortised_prefixes(a, np.asarray(delta, np.float64), off, np.array([lam]))
    cks = sorted(frozen_rows)
    rows = [sorted(frozen_rows[c]) for c in cks]
    steps = np.array([r[0] for rs in rows for r in rs], np.int64)
    suf_c, suf_n = [], []
    for rs in rows:
        corr = np.array([r[1] for r in rs], float)
        nn = np.array([r[2] for r in rs], float)
        suf_c += list(np.cumsum(corr[::-1])[::-1])
        suf_n += list(np.cumsum(nn[::-1])[::-1])
    m, asum, facc, gap = K.amortised_kernel(
        pa_,
        pc_,
        off,
        np.array([budget], np.float64),
        rule == "overshoot",
        np.array([frozen_from_adapt]),
        np.array([0, len(cks)], np.int64),
        np.array(cks, np.int64),
        np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64),
        steps,
        np.array(suf_c, float),
        np.array(suf_n, float),
    )
    return int(m[0, 0]), float(asum[0, 0]), float(facc[0, 0]), int(gap[0, 0])


# --------------------------------------------------------------------------------------
# strategies: float times, and times on a lattice so arrivals and completions tie
# --------------------------------------------------------------------------------------

accs = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def episodes(draw, lattice=None):
    n = draw(st.integers(1, 40))
    a = draw(st.lists(accs, min_size=n, max_size=n))
    if lattice is None:
        lattice = draw(st.booleans())
    if lattice:
        e = [float(x) for x in draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))]
        l = [float(x) for x in draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))]
        lam = float(draw(st.integers(1, 6)))
        rho = draw(st.sampled_from([0.25, 0.5, 1.0, 2.0, 1 / 3]))
    else:
        e = draw(st.lists(st.floats(0.0, 150.0), min_size=n, max_size=n))
        l = draw(st.lists(st.floats(0.0, 150.0), min_size=n, max_size=n))
        lam = draw(st.floats(1.0, 80.0))
        rho = draw(st.floats(0.05, 3.0))
    delta = [x + y for x, y in zip(e, l)]
    return a, e, l, delta, lam, rho


discrete_options = st.fixed_dictionaries(
    {
        "queue": st.integers(0, 3),
        "sync": st.sampled_from(["buffered", "strict"]),
        "mode": st.sampled_from(["null", "random", "fallback"]),
    }
)


# --------------------------------------------------------------------------------------
# discrete
# --------------------------------------------------------------------------------------


@FAST
@given(episodes(), discrete_options)
def test_discrete_kernel_matches_event_simulation(ep, opt):
    a, _, _, delta, lam, rho = ep
    skipped = "random" if opt["mode"] == "random" else "null"
    fallback = opt["mode"] == "fallback"
    ref = R.discrete_reference(a, delta, lam / rho, opt["queue"], opt["sync"], skipped, 10, fallback)
    served, ssum, score = kernel_discrete(a, delta, lam, rho, opt["queue"], opt["sync"], skipped, 10, fallback)
    assert served == ref.served
    assert ssum == pytest.approx(ref.served_sum, abs=1e-9)
    assert score == pytest.approx(ref.score_sum, abs=1e-9)
    assert 1 <= served <= len(a)
    if opt["mode"] == "null":
        assert score == pytest.approx(ssum, abs=1e-12)  # U = α · ā_served exactly
    # the event loop itself, bypassing the kernel's every-batch-served shortcut
    mode = {"null": K.SKIP_NULL, "random": K.SKIP_RANDOM, "fallback": K.SKIP_FALLBACK}[opt["mode"]]
    cnt, ssum1, skip = K.discrete_one(
        np.asarray(a, float), np.asarray(delta, float), lam / rho, opt["queue"], opt["sync"] == "strict", mode, 0.1
    )
    assert cnt == ref.served and ssum1 + skip == pytest.approx(ref.score_sum, abs=1e-9)


@FAST
@given(episodes())
def test_single_slot_queue_is_the_papers_recurrence(ep):
    """b = 1 buffered serves p_{j+1} = max(p_j + 1, ⌊f_j/γ⌋ + 1); strict (b ≤ 1) uses + 2."""
    _, _, _, delta, lam, rho = ep
    n = len(delta)
    gamma = lam / rho
    ref = R.discrete_reference([0.0] * n, delta, gamma, queue=1)
    assert [p + 1 for p in ref.served_batches] == R.paper_recurrence(delta, gamma, n, plus=1)
    for b in (0, 1):
        strict = R.discrete_reference([0.0] * n, delta, gamma, queue=b, sync="strict")
        assert [p + 1 for p in strict.served_batches] == R.paper_recurrence(delta, gamma, n, plus=2)


def test_paper_example_tent_availability():
    """Constant δ = 97.1 ms at λ = γ = 39.9 ms (paper Table 2/3, Tent): α ≈ 41 %."""
    n = 781
    served, _, _ = kernel_discrete([0.5] * n, [97.1] * n, 39.9, 1.0)
    assert served / n == pytest.approx(0.411, abs=0.005)
    # every event covers 97.1/39.9 ≈ 2.43 arrivals, so availability ≈ 1/2.43
    assert served / n == pytest.approx(39.9 / 97.1, abs=0.005)


def test_unbuffered_slightly_slow_pipeline_serves_every_other_batch():
    n = 100
    served, _, _ = kernel_discrete([1.0] * n, [40.4] * n, 40.0, 1.0, queue=0)
    assert served == 50
    ref = R.discrete_reference([1.0] * n, [40.4] * n, 40.0, queue=0)
    assert ref.served_batches == list(range(0, n, 2))


def test_single_slot_buffer_absorbs_a_slightly_slow_pipeline():
    """With b = 1 the same pipeline only skips once its 1 % lag adds up to a whole interval."""
    n = 1000
    served, _, _ = kernel_discrete([1.0] * n, [40.4] * n, 40.0, 1.0, queue=1)
    ref = R.discrete_reference([1.0] * n, [40.4] * n, 40.0, queue=1)
    assert served == ref.served
    # one skip per ~100 events: about n / 1.01 served (the drain adds the last one)
    assert abs(served - n / 1.01) <= 2 and served < n
    assert ref.served_batches[:100] == list(range(100))


def test_skipped_scores():
    a = [0.2, 0.4, 0.6, 0.8]
    # δ = 2.5γ: events serve batches 0, 2, 3 (0-based); batch 1 is evicted during event 0
    served, ssum, score = kernel_discrete(a, [25.0] * 4, 10.0, 1.0, queue=1)
    ref = R.discrete_reference(a, [25.0] * 4, 10.0, queue=1)
    assert ref.served_batches == [0, 2, 3] and served == 3
    assert ssum == pytest.approx(0.2 + 0.4 + 0.6) and score == pytest.approx(ssum)
    _, _, rnd = kernel_discrete(a, [25.0] * 4, 10.0, 1.0, skipped="random", num_classes=10)
    assert rnd == pytest.approx(ssum + 0.1)
    _, _, fb = kernel_discrete(a, [25.0] * 4, 10.0, 1.0, fallback=True)
    assert fb == pytest.approx(ssum + 0.2)  # skipped during event 0, scored with a_0


@FAST
@given(episodes(lattice=False))
def test_vanishing_utilisation_recovers_offline(ep):
    a, _, _, delta, lam, _ = ep
    served, ssum, score = kernel_discrete(a, delta, lam, 1e-9)
    assert served == len(a)
    assert score / len(a) == pytest.approx(np.mean(a), abs=1e-12)


# --------------------------------------------------------------------------------------
# continuous
# --------------------------------------------------------------------------------------


@FAST
@given(episodes(), st.floats(0.5, 2000.0))
def test_continuous_kernel_matches_reference_and_decomposes(ep, slack):
    a, e, l, _, lam, _ = ep
    T = lam + slack
    util, acc, kappa, cov, d = kernel_continuous(a, e, l, lam, T)
    ref = R.continuous_reference(a, e, l, lam, T)
    assert util == pytest.approx(ref.utility, abs=1e-12)
    assert kappa == pytest.approx(ref.kappa, abs=1e-12)
    assert cov == pytest.approx(ref.cov, abs=1e-12)
    assert util == pytest.approx(acc * kappa + cov, abs=1e-12)
    kappas = 1.0 / (1.0 + d / (T - lam))
    assert ((kappas > 0) & (kappas <= 1)).all()
    assert cov == pytest.approx(np.cov(a, kappas, ddof=0)[0, 1] if len(a) > 1 else 0.0, abs=1e-12)


def test_continuous_hand_example():
    """e = λ + 10, ℓ = 5: first wait 10 ms over λ, then 15 ms; T − λ = 10 → κ = 1/2, then 2/5."""
    lam = 40.0
    util, acc, kappa, cov, d = kernel_continuous([0.5, 1.0, 1.0], [50.0] * 3, [5.0] * 3, lam, 50.0)
    assert list(d) == [10.0, 15.0, 15.0]
    assert kappa == pytest.approx((0.5 + 0.4 + 0.4) / 3)
    assert util == pytest.approx((0.25 + 0.4 + 0.4) / 3)


def test_continuous_fast_method_keeps_full_value():
    util, acc, kappa, cov, _ = kernel_continuous([0.3, 0.6], [38.0, 39.0], [0.0, 0.0], 39.9, 50.0)
    assert kappa == 1.0 and cov == pytest.approx(0.0, abs=1e-15) and util == pytest.approx(0.45)


def test_continuous_threshold_not_above_lambda_is_nan():
    util, *_ = kernel_continuous([0.5], [50.0], [0.0], 40.0, 40.0)
    assert math.isnan(util)


# --------------------------------------------------------------------------------------
# amortised
# --------------------------------------------------------------------------------------


@st.composite
def frozen_tables(draw, n):
    cks = draw(st.lists(st.integers(0, max(0, n - 1)), min_size=0, max_size=4, unique=True))
    table = {}
    for c in cks:
        steps = draw(st.lists(st.integers(c, n - 1), min_size=1, max_size=6, unique=True))
        table[c] = [(s, draw(st.integers(0, 64)), 64) for s in sorted(steps)]
    return table


@FAST
@given(st.data())
def test_amortised_kernel_matches_reference(data):
    a, _, _, delta, lam, _ = data.draw(episodes())
    n = len(a)
    frozen = data.draw(frozen_tables(n))
    budget = data.draw(st.one_of(st.just(0.0), st.floats(0.0, 3000.0)))
    rule = data.draw(st.sampled_from(["strict", "overshoot"]))
    from_adapt = data.draw(st.booleans()) and not frozen
    m, asum, facc, gap = kernel_amortised(a, delta, lam, budget, frozen, rule, from_adapt)
    ref = R.amortised_reference(a, delta, lam, budget, frozen, rule, from_adapt)
    assert m == ref.m
    assert asum == pytest.approx(sum(a[:m]), abs=1e-9)
    if m == n:
        assert gap == -1 and math.isnan(facc)
    elif ref.acc_frozen is None:
        assert gap == -2 and math.isnan(facc)
    else:
        assert facc == pytest.approx(ref.acc_frozen, abs=1e-12)
        assert gap == ref.frozen_gap
        beta = m / n
        assert ref.utility == pytest.approx(beta * (asum / m if m else 0.0) + (1 - beta) * facc, abs=1e-12)


def test_amortised_cutoff_rules_by_hand():
    lam = 40.0
    delta = [50.0] * 10  # c_i = 10 ms
    assert R.amortised_cutoff(delta, lam, 35.0, "strict") == 3  # 30 ≤ 35 < 40
    assert R.amortised_cutoff(delta, lam, 35.0, "overshoot") == 4  # spent 30 < 35 before batch 4
    assert R.amortised_cutoff(delta, lam, 40.0, "strict") == 4
    assert R.amortised_cutoff(delta, lam, 40.0, "overshoot") == 4
    for rule in ("strict", "overshoot"):
        m, *_ = kernel_amortised([0.5] * 10, delta, lam, 35.0, {0: [(9, 1, 2)]}, rule)
        assert m == {"strict": 3, "overshoot": 4}[rule]


def test_amortised_zero_budget_freezes_at_step_zero_and_infinite_recovers_offline():
    a = [0.1, 0.9, 0.5, 0.7]
    delta = [45.0, 47.0, 41.0, 60.0]
    frozen = {0: [(0, 1, 4), (2, 3, 4)]}
    m, asum, facc, gap = kernel_amortised(a, delta, 40.0, 0.0, frozen)
    assert (m, gap) == (0, 0) and facc == pytest.approx(4 / 8)
    m, asum, facc, gap = kernel_amortised(a, delta, 40.0, math.inf, frozen)
    assert m == 4 and asum / m == pytest.approx(np.mean(a)) and gap == -1


def test_amortised_nearest_lower_checkpoint_and_gap():
    a = [0.5] * 10
    delta = [50.0] * 10
    frozen = {0: [(0, 10, 64), (5, 20, 64), (9, 30, 64)], 8: [(8, 64, 64), (9, 64, 64)]}
    m, _, facc, gap = kernel_amortised(a, delta, 40.0, 55.0, frozen)  # m = 5, no checkpoint 5
    assert m == 5 and gap == 5 and facc == pytest.approx(50 / 128)


def test_amortised_untouched_model_uses_adapt_rows_as_frozen():
    a = [0.2, 0.4, 0.6, 0.8]
    m, asum, facc, gap = kernel_amortised(a, [50.0] * 4, 40.0, 10.0, {}, frozen_from_adapt=True)
    assert m == 1 and gap == 0 and facc == pytest.approx(0.6)


@pytest.mark.parametrize("queue,sync", [(0, "buffered"), (1, "buffered"), (2, "strict"), (1, "strict")])
def test_latency_equal_to_interval_goes_through_the_event_loop(queue, sync):
    """δ = γ exactly (a non-representable 39.9 ms): the shortcut must not decide it."""
    n = 500
    a = list(np.linspace(0, 1, n))
    delta = [39.9] * n
    ref = R.discrete_reference(a, delta, 39.9, queue, sync)
    served, ssum, _ = kernel_discrete(a, delta, 39.9, 1.0, queue, sync)
    assert served == ref.served and ssum == pytest.approx(ref.served_sum, abs=1e-9)
