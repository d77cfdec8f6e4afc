"""Numba kernels: one call per protocol replays every episode × grid value (docs/design/design.md §4).

Layout: all episodes ("series") of all traces are concatenated into flat float64 arrays
(``a``, ``e``, ``l``, ``delta``) with ``offsets[s]:offsets[s+1]`` delimiting series ``s``; λ is
per series. Kernels return per-(series, grid value) *sums* rather than means so the caller
can pool episodes exactly (``episode = "__all__"`` rows). Each kernel runs ``prange`` over the
flattened (series × grid value) task list, which keeps both cores busy whether the sweep is
wide (many episodes) or deep (one long trace, many values).

Time conventions shared with :mod:`tempora_sim.engine.oracle` (which is written independently
as an event-driven simulation): batch ``i`` (0-based) arrives at ``i * gamma``; at equal
times a completion frees the pipeline, then the arrival is enqueued (evicting the oldest
queued batch if the queue is full), then a free pipeline picks up the oldest queued batch.
With capacity 0 a batch is only taken if it arrives when the pipeline is free. The periodic
discrete walk's decision is :mod:`tempora_schema.discrete`'s rule, compiled here and called
as plain Python by the live runner.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from tempora_schema.discrete import last_arrival as _schema_last_arrival
from tempora_schema.discrete import next_pick as _schema_next_pick
from tempora_sim.engine.idle import idle_factor as _idle_rule

#: Below this many per-batch operations a kernel call runs on one thread: waking a thread
#: pool costs more than it saves (tens of ms on a loaded 2-core machine, where OpenMP
#: barriers wait for a descheduled worker), while the paper grid needs ~1 M operations.
PARALLEL_MIN_WORK = 4_000_000

SKIP_NULL = 0
SKIP_RANDOM = 1
SKIP_FALLBACK = 2


def use_threads(work: int) -> int:
    """Set Numba's thread count for a kernel call doing ``work`` per-batch operations."""
    threads = numba.config.NUMBA_NUM_THREADS if work >= PARALLEL_MIN_WORK else 1
    numba.set_num_threads(threads)
    return threads


#: "Has batch i arrived by f?" — tempora_schema's one definition, compiled here and called
#: as plain Python by the live runner (same float64 operations, same answers).
last_arrival = njit(cache=True, inline="always")(_schema_last_arrival)
_last_arrival = last_arrival
#: Which batch comes next and when (tempora_schema's one definition, compiled).
next_pick = njit(cache=True, inline="always")(_schema_next_pick)


@njit(cache=True, inline="always")
def _skipped_score(skipped, skip_mode, acc_in_progress, skip_value):
    """What ``skipped`` batches dropped during one event score together: 0 (null), 1/C each
    (random), or the accuracy of the event in progress (dual-model fallback)."""
    if skip_mode == SKIP_FALLBACK:
        return skipped * acc_in_progress
    if skip_mode == SKIP_RANDOM:
        return skipped * skip_value
    return 0.0


@njit(cache=True)
def discrete_one(a, delta, gamma, queue, strict, skip_mode, skip_value):
    """Replay one episode at inter-arrival ``gamma``; return (served, Σa served, Σ skipped scores)."""
    return _discrete_walk(a, delta, gamma, queue, strict, skip_mode, skip_value, np.empty(0, np.int64))


@njit(cache=True)
def discrete_served(delta, gamma, queue, strict):
    """Batch index served by each event (−1 after the last) of one episode: the same walk as
    :func:`discrete_one`, for checks that compare decisions batch by batch (``validate``)."""
    out = np.full(delta.shape[0], -1, np.int64)
    _discrete_walk(np.zeros(delta.shape[0]), delta, gamma, queue, strict, SKIP_NULL, 0.0, out)
    return out


@njit(cache=True)
def _discrete_walk(a, delta, gamma, queue, strict, skip_mode, skip_value, served_out):
    """The discrete replay of one episode; writes the batch of event j to ``served_out[j]``
    when that array is non-empty.

    Event ``j`` (0-based) is served with latency ``delta[j]`` and accuracy ``a[j]``
    (step-indexed replay). ``p`` is the batch index served by the current event; after it
    finishes at ``f`` the next batch is found in O(1) by :func:`tempora_schema.discrete.next_pick`
    (buffered with b >= 1, b = 0, or strict synchronisation; see there).
    """
    n = a.shape[0]
    inv_gamma = 1.0 / gamma
    p = 0
    j = 0
    start = 0.0
    start_next = 0.0
    served_sum = 0.0
    skipped_score = 0.0
    record = served_out.shape[0] > 0
    while True:
        if record:
            served_out[j] = p
        f = start + delta[j]
        served_sum += a[j]
        # nxt == n means "no further event"
        nxt, start_next = next_pick(p, _last_arrival(f, gamma, inv_gamma), f, gamma, queue, strict, n)
        skipped_score += _skipped_score(nxt - p - 1, skip_mode, a[j], skip_value)
        j += 1
        if nxt >= n:
            break
        p = nxt
        start = start_next
    return j, served_sum, skipped_score


@njit(cache=True, parallel=True)
def discrete_kernel(a, delta, offsets, lam, rho, queue, strict, skip_mode, skip_value, max_delta, sum_a):
    """All series × ρ values. Returns (served[S,K], served_sum[S,K], score_sum[S,K]).

    ``max_delta``/``sum_a`` per series give an O(1) answer when no event can outlast an
    inter-arrival time: then every event starts at its batch's arrival j·γ and ends before
    (j+1)·γ, so every batch is served whatever the queue or synchronisation. The bound keeps
    a margin of ~10 ulp per batch so float rounding of j·γ + δ_j can never reach the next
    arrival; cases inside the margin (e.g. δ exactly γ) go through the event loop.
    """
    n_series = offsets.shape[0] - 1
    n_vals = rho.shape[0]
    served = np.zeros((n_series, n_vals), np.int64)
    served_sum = np.zeros((n_series, n_vals))
    score_sum = np.zeros((n_series, n_vals))
    for task in prange(n_series * n_vals):
        s = task // n_vals
        v = task % n_vals
        lo = offsets[s]
        hi = offsets[s + 1]
        gamma = lam[s] / rho[v]
        if max_delta[s] < gamma * (1.0 - 1e-15 * (hi - lo + 1)):
            served[s, v] = hi - lo
            served_sum[s, v] = sum_a[s]
            score_sum[s, v] = sum_a[s]
            continue
        cnt, ssum, skip = discrete_one(a[lo:hi], delta[lo:hi], gamma, queue, strict, skip_mode, skip_value[s])
        served[s, v] = cnt
        served_sum[s, v] = ssum
        score_sum[s, v] = ssum + skip
    return served, served_sum, score_sum


@njit(cache=True, parallel=True)
def response_delays(e, l, offsets, lam):
    """d_i = max(0, ℓ_{i-1} + e_i − λ) per series (ℓ before an episode's first batch is 0)."""
    d = np.empty_like(e)
    for s in prange(offsets.shape[0] - 1):
        prev = 0.0
        for i in range(offsets[s], offsets[s + 1]):
            w = prev + e[i]
            d[i] = max(0.0, w - lam[s])
            prev = l[i]
    return d


@njit(cache=True, parallel=True, fastmath={"reassoc", "nsz"})
def continuous_kernel(a, d, offsets, lam, T):
    """All series × T values. Returns (Σ aκ, Σ κ, Cov(a, κ) population) per [S,K]; NaN where T <= λ."""
    n_series = offsets.shape[0] - 1
    n_vals = T.shape[0]
    sum_ak = np.full((n_series, n_vals), np.nan)
    sum_k = np.full((n_series, n_vals), np.nan)
    cov = np.full((n_series, n_vals), np.nan)
    for task in prange(n_series * n_vals):
        s = task // n_vals
        v = task % n_vals
        h = T[v] - lam[s]
        if not h > 0.0:
            continue
        lo = offsets[s]
        hi = offsets[s + 1]
        n = hi - lo
        sk = 0.0
        sa = 0.0
        sak = 0.0
        for i in range(lo, hi):
            kappa = h / (h + d[i])  # = 1 / (1 + d/h), one division
            sk += kappa
            sa += a[i]
            sak += a[i] * kappa
        sum_ak[s, v] = sak
        sum_k[s, v] = sk
        # population covariance from the same sums: a, κ ∈ [0, 1], so the one-pass form
        # loses nothing measurable (|error| ~ 1e-16) and halves the work
        cov[s, v] = sak / n - (sa / n) * (sk / n)
    return sum_ak, sum_k, cov


@njit(cache=True, parallel=True)
def amortised_prefixes(a, delta, offsets, lam):
    """Per-series prefix sums (leading 0) of a and of overheads c = max(0, δ − λ).

    Series s occupies ``offsets[s] + s .. offsets[s+1] + s`` of both outputs; the sums are
    accumulated left to right, exactly as the oracle adds overheads batch by batch.
    """
    pa_ = np.empty(a.shape[0] + offsets.shape[0] - 1)
    pc_ = np.empty(a.shape[0] + offsets.shape[0] - 1)
    for s in prange(offsets.shape[0] - 1):
        base = offsets[s] + s
        acc_a = 0.0
        acc_c = 0.0
        pa_[base] = 0.0
        pc_[base] = 0.0
        for i in range(offsets[s], offsets[s + 1]):
            acc_a += a[i]
            acc_c += max(0.0, delta[i] - lam[s])
            pa_[base + 1 + i - offsets[s]] = acc_a
            pc_[base + 1 + i - offsets[s]] = acc_c
    return pa_, pc_


@njit(cache=True, inline="always")
def _frozen_lookup(m, s, ck_offsets, ck_values, row_offsets, f_steps, f_suf_correct, f_suf_n):
    """Accuracy of the model frozen after m steps on its rows with step >= m, and the gap m - m*."""
    lo = ck_offsets[s]
    c = ck_offsets[s + 1] - 1
    while c >= lo and ck_values[c] > m:
        c -= 1
    while c >= lo:
        r0 = row_offsets[c]
        r1 = row_offsets[c + 1]
        # first row of checkpoint c with step >= m (rows sorted by step)
        left = r0
        right = r1
        while left < right:
            mid = (left + right) // 2
            if f_steps[mid] < m:
                left = mid + 1
            else:
                right = mid
        if left < r1:
            return f_suf_correct[left] / f_suf_n[left], m - ck_values[c]
        c -= 1
    return np.nan, -2


@njit(cache=True, parallel=True)
def amortised_kernel(
    pa_,
    pc_,
    offsets,
    budgets,
    overshoot,
    frozen_from_adapt,
    ck_offsets,
    ck_values,
    row_offsets,
    f_steps,
    f_suf_correct,
    f_suf_n,
):
    """All series × B values from prefix sums of a (``pa_``) and overheads c (``pc_``).

    Returns m[S,K], Σ a over the first m batches, frozen accuracy (NaN when m = N or no
    usable frozen rows) and frozen_gap (−1 when m = N, −2 when no frozen rows can serve m).
    """
    n_series = offsets.shape[0] - 1
    n_vals = budgets.shape[0]
    m_out = np.zeros((n_series, n_vals), np.int64)
    adapt_sum = np.zeros((n_series, n_vals))
    frozen_acc = np.full((n_series, n_vals), np.nan)
    gap = np.full((n_series, n_vals), -1, np.int64)
    for task in prange(n_series * n_vals):
        s = task // n_vals
        v = task % n_vals
        base = offsets[s] + s
        n = offsets[s + 1] - offsets[s]
        budget = budgets[v]
        # prefix c sums S_0..S_n live at pc_[base .. base+n]; nondecreasing since c >= 0
        if overshoot:
            # m = min{j >= 0 : S_j >= B}, or n
            left = 0
            right = n + 1
            while left < right:
                mid = (left + right) // 2
                if pc_[base + mid] >= budget:
                    right = mid
                else:
                    left = mid + 1
            m = min(left, n)
        else:
            # m = max{j >= 0 : S_j <= B}
            left = 0
            right = n + 1
            while left < right:
                mid = (left + right) // 2
                if pc_[base + mid] <= budget:
                    left = mid + 1
                else:
                    right = mid
            m = left - 1
            if m < 0:
                m = 0
        m_out[s, v] = m
        adapt_sum[s, v] = pa_[base + m]
        if m < n:
            if frozen_from_adapt[s]:
                frozen_acc[s, v] = (pa_[base + n] - pa_[base + m]) / (n - m)
                gap[s, v] = 0
            else:
                acc, g = _frozen_lookup(m, s, ck_offsets, ck_values, row_offsets, f_steps, f_suf_correct, f_suf_n)
                frozen_acc[s, v] = acc
                gap[s, v] = g
    return m_out, adapt_sum, frozen_acc, gap


@njit(cache=True, parallel=True)
def offline_kernel(a, offsets):
    """Σ a per series (offline utility numerator)."""
    n_series = offsets.shape[0] - 1
    out = np.zeros(n_series)
    for s in prange(n_series):
        acc = 0.0
        for i in range(offsets[s], offsets[s + 1]):
            acc += a[i]
        out[s] = acc
    return out


# --------------------------------------------------------------------------------------
# General arrivals and combined pressures (docs/design/design.md §9)
# --------------------------------------------------------------------------------------


@njit(cache=True)
def discrete_general_one(a, e, delta, t, queue, strict, skip_mode, skip_value, lam, h, n_adapt, f_delta, f_acc, ak_out):
    """Replay one episode against arbitrary arrival times ``t`` (nondecreasing, ms).

    The same rules as :func:`discrete_one` with ``t[i]`` in place of ``i·γ``; at one instant,
    completions come first, then every arrival at that instant is enqueued (evicting the
    oldest when full), then a free pipeline picks up. Two pressures can be layered on:

    * deadline + patience: served event ``j`` scores ``a_j · κ(r_j)`` into ``ak_out[k]`` for
      every ``h[k] = T_k − λ``, with the response time ``r_j = (pickup − arrival) + e_j`` and
      ``κ(r) = h / (h + max(0, r − λ))``;
    * budget: events ``j >= n_adapt`` are served by the frozen model, taking ``f_delta`` and
      scoring ``f_acc`` (its intrinsic time is its whole latency).

    Returns (served, Σ score of served events, Σ skipped scores, served frozen events).
    """
    n = t.shape[0]
    nh = h.shape[0]
    # first pickup: all arrivals at t[0] are enqueued, then the oldest left is taken
    q = 0
    while q + 1 < n and t[q + 1] == t[0]:
        q += 1
    p = 0 if queue == 0 else max(0, q - queue + 1)
    skipped_score = 0.0
    if p > 0:
        if skip_mode == SKIP_RANDOM:
            skipped_score += p * skip_value
    start = t[p]
    k = q  # last arrival index with t[k] <= current time
    j = 0
    served_sum = 0.0
    frozen_served = 0
    while True:
        if j < n_adapt:
            lat = delta[j]
            acc = a[j]
            ej = e[j]
        else:
            lat = f_delta
            acc = f_acc
            ej = f_delta
            frozen_served += 1
        served_sum += acc
        if nh > 0:
            r = start - t[p] + ej
            over = max(0.0, r - lam)
            for v in range(nh):
                ak_out[v] += acc * (h[v] / (h[v] + over))
        f = start + lat
        while k + 1 < n and t[k + 1] <= f:
            k += 1
        nxt = n
        start_next = 0.0
        if strict:
            first = k + 1  # first arrival strictly after f
            if first < n:
                last = first
                while last + 1 < n and t[last + 1] == t[first]:
                    last += 1
                nxt = first if queue == 0 else max(p + 1, last - queue + 1)
                start_next = t[first]
        elif queue == 0:
            first = k + 1
            while first - 1 > p and t[first - 1] >= f:
                first -= 1
            cand = max(p + 1, first)
            if cand < n:
                nxt = cand
                start_next = t[cand]
        elif k > p:
            nxt = max(p + 1, k - queue + 1)
            start_next = f
        elif p + 1 < n:
            last = p + 1
            while last + 1 < n and t[last + 1] == t[p + 1]:
                last += 1
            nxt = max(p + 1, last - queue + 1)
            start_next = t[p + 1]
            if last > k:
                k = last
        skipped_score += _skipped_score(nxt - p - 1, skip_mode, acc, skip_value)
        j += 1
        if nxt >= n:
            break
        p = nxt
        start = start_next
    return j, served_sum, skipped_score, frozen_served


@njit(cache=True, parallel=True)
def discrete_general_kernel(a, e, delta, u, scale, offsets, lam, queue, strict, skip_mode, skip_value, h, n_adapt, f_delta, f_acc):
    """All series × K cells for one arrival realisation.

    ``u`` holds unit-mean-gap arrival times flattened like ``a``; cell ``(s, k)`` replays
    ``u · scale[s, k]`` (scale = γ, or 1 for absolute times), so one realisation serves every
    ρ. ``h[s]`` are the patience margins ``T − λ`` of series ``s`` (no columns: no decay);
    ``n_adapt``/``f_delta``/``f_acc`` [S, K] configure the budget freeze. Returns
    (served, served_sum, score_sum, frozen_served) [S, K] and ak_sum [S, K, H].
    """
    n_series = offsets.shape[0] - 1
    n_cells = scale.shape[1]
    nh = h.shape[1]
    served = np.zeros((n_series, n_cells), np.int64)
    served_sum = np.zeros((n_series, n_cells))
    score_sum = np.zeros((n_series, n_cells))
    ak = np.zeros((n_series, n_cells, nh))
    frozen = np.zeros((n_series, n_cells), np.int64)
    for task in prange(n_series * n_cells):
        s = task // n_cells
        k = task % n_cells
        lo = offsets[s]
        hi = offsets[s + 1]
        if hi <= lo:
            continue
        cnt, ssum, skip, fz = discrete_general_one(
            a[lo:hi],
            e[lo:hi],
            delta[lo:hi],
            u[lo:hi] * scale[s, k],
            queue,
            strict,
            skip_mode,
            skip_value[s],
            lam[s],
            h[s],
            n_adapt[s, k],
            f_delta[s, k],
            f_acc[s, k],
            ak[s, k],
        )
        served[s, k] = cnt
        served_sum[s, k] = ssum
        score_sum[s, k] = ssum + skip
        frozen[s, k] = fz
    return served, served_sum, score_sum, ak, frozen


# ------------------------------------------------------------------ the idle effect (tempora_sim.sweeps.variability)
#: F(gap), compiled from the one plain-Python rule (:func:`tempora_sim.engine.idle.idle_factor`).
idle_factor = njit(cache=True, inline="always")(_idle_rule)


@njit(cache=True)
def discrete_idle_walk(a, delta, gamma, queue, strict, skip_mode, skip_value, gaps, factors):
    """:func:`_discrete_walk` in which event j, starting after the pipeline sat idle for g ms
    (its start minus the previous event's end; 0 for the first event), takes
    ``delta[j] · F(g)`` (:func:`idle_factor`). Returns (served, Σa served, Σ skipped scores)."""
    n = a.shape[0]
    inv_gamma = 1.0 / gamma
    p = 0
    j = 0
    start = 0.0
    prev_f = 0.0
    served_sum = 0.0
    skipped_score = 0.0
    while True:
        f = start + delta[j] * idle_factor(start - prev_f if j > 0 else 0.0, gaps, factors)
        prev_f = f
        served_sum += a[j]
        nxt, start_next = next_pick(p, _last_arrival(f, gamma, inv_gamma), f, gamma, queue, strict, n)
        skipped_score += _skipped_score(nxt - p - 1, skip_mode, a[j], skip_value)
        j += 1
        if nxt >= n:
            break
        p = nxt
        start = start_next
    return j, served_sum, skipped_score


@njit(cache=True, parallel=True)
def discrete_idle_kernel(a, delta, offsets, lam, rho, queue, strict, skip_mode, skip_value, c_off, c_gaps, c_factors, which):
    """The series ``which`` × ρ values with the idle effect (curve of series s:
    ``c_gaps/c_factors[c_off[s]:c_off[s+1]]``). Returns (served, served_sum, score_sum), one row per ``which``."""
    n_vals = rho.shape[0]
    served = np.zeros((which.shape[0], n_vals), np.int64)
    served_sum = np.zeros((which.shape[0], n_vals))
    score_sum = np.zeros((which.shape[0], n_vals))
    for task in prange(which.shape[0] * n_vals):
        w = task // n_vals
        v = task % n_vals
        s = which[w]
        lo = offsets[s]
        hi = offsets[s + 1]
        g = c_gaps[c_off[s] : c_off[s + 1]]
        fa = c_factors[c_off[s] : c_off[s + 1]]
        cnt, ssum, skip = discrete_idle_walk(a[lo:hi], delta[lo:hi], lam[s] / rho[v], queue, strict, skip_mode, skip_value[s], g, fa)
        served[w, v] = cnt
        served_sum[w, v] = ssum
        score_sum[w, v] = ssum + skip
    return served, served_sum, score_sum
