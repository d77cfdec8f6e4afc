"""The discrete protocol's decision rule has one home (tempora_schema.discrete): hand-worked
cases, the rule walked in plain Python against the independent event-queue oracle
(tempora_sim.engine.oracle), and the Numba kernel's walk against the plain-Python rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tempora_schema.discrete import last_arrival, next_pick
from tempora_sim.engine import kernels
from tempora_sim.engine import oracle as R

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rule(p, f, gamma, queue, strict=False, n=10):
    return next_pick(p, last_arrival(f, gamma, 1.0 / gamma), f, gamma, queue, strict, n)


@pytest.mark.parametrize(
    "p, f, queue, strict, expected",
    [
        # γ = 10: batches 0, 1, 2 have arrived by f = 25; batch 0's event ends at 25
        (0, 25.0, 1, False, (2, 25.0)),  # queue of 1 holds batch 2 (1 evicted): taken at once
        (0, 25.0, 2, False, (1, 25.0)),  # queue of 2 holds 1 and 2: the oldest first
        (0, 25.0, 0, False, (3, 30.0)),  # no queue: the next arrival, at 30
        (0, 20.0, 0, False, (2, 20.0)),  # no queue, batch 2 arrives as the pipeline frees: taken
        (2, 25.0, 1, False, (3, 30.0)),  # nothing waiting: idle until batch 3 arrives
        (0, 25.0, 1, True, (3, 30.0)),  # strict: pickup only at the next arrival instant, 30
        (0, 25.0, 3, True, (1, 30.0)),  # strict, queue of 3: the last 3 of (0, 3] -> 1, 2, 3
        (9, 95.0, 1, False, (10, 0.0)),  # the last batch served: no further event
        (8, 95.0, 1, True, (10, 0.0)),  # strict never drains: no arrival after 90
    ],
)
def test_hand_worked(p, f, queue, strict, expected):
    assert rule(p, f, 10.0, queue, strict) == expected


def walk(delta, gamma, queue, strict):
    """The rule walked in plain Python: the batch served by each event."""
    n, p, start, served = len(delta), 0, 0.0, []
    for d in delta:
        served.append(p)
        f = start + d
        p, start = next_pick(p, last_arrival(f, gamma, 1.0 / gamma), f, gamma, queue, strict, n)
        if p >= n:
            break
    return served


@st.composite
def episodes(draw):
    n = draw(st.integers(1, 40))
    if draw(st.booleans()):  # on a lattice, so arrivals and completions tie
        delta = [float(x) for x in draw(st.lists(st.integers(0, 24), min_size=n, max_size=n))]
        gamma = draw(st.sampled_from([2.0, 3.0, 4.0, 6.0, 12.0]))
    else:
        delta = draw(st.lists(st.floats(0.0, 300.0), min_size=n, max_size=n))
        gamma = draw(st.floats(1.0, 150.0))
    return delta, gamma


@FAST
@given(episodes(), st.integers(0, 3), st.booleans())
def test_rule_matches_the_event_queue_oracle(ep, queue, strict):
    delta, gamma = ep
    expected = R.discrete_reference([0.0] * len(delta), delta, gamma, queue, "strict" if strict else "buffered").served_batches
    assert walk(delta, gamma, queue, strict) == expected


@FAST
@given(episodes(), st.integers(0, 3), st.booleans())
def test_numba_walk_is_the_rule(ep, queue, strict):
    delta, gamma = ep
    served = kernels.discrete_served(np.asarray(delta, dtype=np.float64), gamma, queue, strict)
    assert [int(b) for b in served if b >= 0] == walk(delta, gamma, queue, strict)


def test_live_runner_decides_with_the_same_rule():
    """The live runner's clock (tempora_trace.live_clock) imports the rule itself, not a copy of it."""
    pytest.importorskip("torch")
    from tempora_trace import live_clock

    assert live_clock.next_pick is next_pick
