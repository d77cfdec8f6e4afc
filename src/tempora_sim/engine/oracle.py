"""Plain-Python replay oracle: the simulations the Numba kernels are tested against.

Written independently of :mod:`tempora_sim.engine.kernels` and on purpose in the most literal form:
the discrete protocol is a discrete-event simulation with an explicit clock, a heap of
arrival/completion events and a FIFO queue with eviction (docs/design/design.md §4, paper Appendix B.2);
the other protocols are direct loops over the formulas of paper §3. Slow, obvious, and the
baseline the benchmark measures the kernels against.

Event order at equal times: completions, then arrivals, then pickup by a free pipeline.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

COMPLETION, ARRIVAL = 0, 1


@dataclass
class DiscreteResult:
    served: int
    served_sum: float  # Σ a over served events
    score_sum: float  # Σ score over all N batches (served a + skipped fallback/random)
    served_batches: list  # batch indices in service order (for tests)
    ak_sums: list | None = None  # Σ a·κ(r) over served events, per T (deadline + patience)
    frozen_served: int = 0  # served events taken by the frozen model (budget + deadline)


def discrete_reference(
    a,
    delta,
    gamma,
    queue=1,
    sync="buffered",
    skipped="null",
    num_classes=None,
    fallback=False,
    arrivals=None,
    e=None,
    lam=None,
    T=(),
    n_adapt=None,
    f_delta=None,
    f_acc=None,
) -> DiscreteResult:
    """Simulate one episode: batches arrive at ``i * gamma``; one pipeline; FIFO queue of ``queue``.

    ``arrivals`` (a list of nondecreasing times) replaces the periodic ``i * gamma``. Combined
    pressures (docs/design/design.md §9): for each threshold in ``T`` a served event also scores
    ``a_j · κ(r_j)``, r_j = (pickup − arrival of its batch) + e_j, κ(r) = 1/(1 + max(0, r − λ)/(T − λ));
    events ``j >= n_adapt`` are the frozen model's, taking ``f_delta`` and scoring ``f_acc``.

    The j-th processing event (0-based) takes ``delta[j]`` and scores ``a[j]`` (step-indexed
    replay). ``sync='strict'`` only lets the pipeline pick up at an arrival instant strictly
    after it became free (Alfarra et al.'s forced idling), and never after the last arrival.
    A dropped or evicted batch scores 0 (``skipped='null'``), ``1/num_classes``
    (``'random'``), or with ``fallback`` the accuracy of the event in progress when it was
    dropped (dual-model fallback: the current adapted model's forward-only prediction).
    """
    n = len(a)
    strict = sync == "strict"
    times = [i * gamma for i in range(n)] if arrivals is None else list(arrivals)
    e = delta if e is None else e
    n_adapt = n if n_adapt is None else n_adapt
    ak_sums = [0.0] * len(T)
    frozen_served = 0
    events: list[tuple[float, int, int]] = [(times[i], ARRIVAL, i) for i in range(n)]
    heapq.heapify(events)
    waiting: deque[int] = deque()
    busy = False
    last_free_time = -math.inf  # when the pipeline last became free
    events_started = 0
    current_event = -1  # index of the event in progress (or the last one)
    served_batches: list[int] = []
    served_sum = 0.0
    dropped_scores = 0.0

    def drop(batch: int) -> None:
        nonlocal dropped_scores
        if fallback:
            if current_event >= 0:  # nothing in progress yet: no fallback prediction exists
                dropped_scores += f_acc if current_event >= n_adapt else a[current_event]
        elif skipped == "random":
            dropped_scores += 1.0 / num_classes

    clock = 0.0
    while events:
        clock = events[0][0]
        arrived_now = False
        # 1) completions at this instant, 2) arrivals at this instant
        while events and events[0][0] == clock:
            _, kind, batch = heapq.heappop(events)
            if kind == COMPLETION:
                busy = False
                last_free_time = clock
            else:
                arrived_now = True
                if queue == 0:
                    if busy or (strict and last_free_time == clock):
                        drop(batch)
                    else:
                        waiting.append(batch)  # the batch is taken on arrival below
                else:
                    if len(waiting) == queue:
                        drop(waiting.popleft())
                    waiting.append(batch)
        # 3) a free pipeline picks up the oldest waiting batch
        may_pick = not strict or (arrived_now and last_free_time < clock)
        if not busy and waiting and may_pick:
            batch = waiting.popleft()
            current_event = events_started
            if events_started < n_adapt:
                latency, score, intrinsic = delta[events_started], a[events_started], e[events_started]
            else:
                latency, score, intrinsic = f_delta, f_acc, f_delta
                frozen_served += 1
            served_sum += score
            response = clock - times[batch] + intrinsic
            for k, threshold in enumerate(T):
                ak_sums[k] += score / (1.0 + max(0.0, response - lam) / (threshold - lam))
            served_batches.append(batch)
            events_started += 1
            busy = True
            heapq.heappush(events, (clock + latency, COMPLETION, -1))
        if queue == 0:
            while waiting:  # capacity 0: whatever was not taken on arrival is lost
                drop(waiting.popleft())
    # strict synchronisation never drains: what is still queued at the end is lost
    while waiting:
        drop(waiting.popleft())
    return DiscreteResult(len(served_batches), served_sum, served_sum + dropped_scores, served_batches, ak_sums, frozen_served)


def paper_recurrence(delta, gamma, n, plus=1):
    """Served batch indices (1-based) from the paper's recurrence (§3.1), for b = 1.

    p_1 = 1, s_1 = 0; f_j = s_j + δ_j; p_{j+1} = max(p_j + 1, ⌊f_j/γ⌋ + plus) capped at N
    while batches remain (the queue holds batch N after the last arrival); s_{j+1} =
    max(f_j, t_{p_{j+1}}). ``plus=2`` is Alfarra et al.'s strict synchronisation (no drain).
    """
    p, s, j, out = 1, 0.0, 0, []
    while True:
        out.append(p)
        f = s + delta[j]
        j += 1
        nxt = max(p + 1, math.floor(f / gamma) + plus)
        if plus == 1:
            nxt = min(nxt, n) if p < n else n + 1
        if nxt > n:
            return out
        s = max(f, (nxt - 1) * gamma)
        p = nxt


@dataclass
class ContinuousResult:
    utility: float
    acc: float
    kappa: float
    cov: float


def continuous_reference(a, e, l, lam, T) -> ContinuousResult:
    """Greedy user: w_i = ℓ_{i−1} + e_i, d_i = max(0, w_i − λ), κ_i = 1/(1 + d_i/(T − λ))."""
    if T <= lam:
        raise ValueError("T must exceed λ")
    kappas = []
    prev_l = 0.0
    for ei, li in zip(e, l):
        wait = prev_l + ei
        kappas.append(1.0 / (1.0 + max(0.0, wait - lam) / (T - lam)))
        prev_l = li
    n = len(a)
    utility = sum(x * k for x, k in zip(a, kappas)) / n
    acc = sum(a) / n
    kappa = sum(kappas) / n
    cov = sum((x - acc) * (k - kappa) for x, k in zip(a, kappas)) / n
    return ContinuousResult(utility, acc, kappa, cov)


@dataclass
class AmortisedResult:
    m: int
    utility: float
    acc_adapt: float | None
    acc_frozen: float | None
    frozen_gap: int | None


def amortised_cutoff(delta, lam, budget, rule="strict") -> int:
    """m: ``strict`` adapts batch j while Σ_{i≤j} c_i ≤ B; ``overshoot`` while Σ_{i<j} c_i < B."""
    spent = 0.0
    m = 0
    for d in delta:
        c = max(0.0, d - lam)
        if rule == "strict":
            if spent + c > budget:
                break
            spent += c
        else:
            if not spent < budget:
                break
            spent += c
        m += 1
    return m


def amortised_reference(a, delta, lam, budget, frozen_rows, rule="strict", frozen_from_adapt=False):
    """Amortised utility; ``frozen_rows`` maps checkpoint -> list of (step, correct, n)."""
    n = len(a)
    m = amortised_cutoff(delta, lam, budget, rule)
    acc_adapt = sum(a[:m]) / m if m else None
    if m == n:
        return AmortisedResult(m, acc_adapt, acc_adapt, None, None)
    acc_frozen, gap = None, None
    if frozen_from_adapt:
        acc_frozen, gap = sum(a[m:]) / (n - m), 0
    else:
        for ck in sorted((c for c in frozen_rows if c <= m), reverse=True):
            rows = [(c, k) for step, c, k in frozen_rows[ck] if step >= m]
            if rows:
                acc_frozen = sum(c for c, _ in rows) / sum(k for _, k in rows)
                gap = m - ck
                break
    if acc_frozen is None:
        return AmortisedResult(m, None, acc_adapt, None, None)
    beta = m / n
    utility = beta * (acc_adapt or 0.0) + (1 - beta) * acc_frozen
    return AmortisedResult(m, utility, acc_adapt, acc_frozen, gap)
