"""The discrete protocol's decision rule, declared once: which batch the pipeline serves next.

Batch ``i`` (0-based) arrives at ``i·γ``. At equal times a completion frees the pipeline, then
arrivals are enqueued (the oldest evicted from a full queue of ``b``), then a free pipeline
takes the oldest queued batch (docs/design/design.md §4). Two functions say it all:

* :func:`last_arrival`: has batch ``i`` arrived by instant ``f``?
* :func:`next_pick`: after the event serving batch ``p`` frees the pipeline at ``f``, which batch
  comes next and when it starts.

The replay kernels (:mod:`tempora_sim.engine.kernels`) compile both with Numba and the live runner
(:mod:`tempora_trace.live_runner`) calls them as plain Python, so a live run and its replay decide
alike wherever the clock readings agree. The plain-Python oracle (:mod:`tempora_sim.engine.oracle`), an
event-queue simulation written independently, is what the tests check them against. Plain
floats and ints only: nothing here may import numpy, Numba or torch.
"""

from __future__ import annotations

import math


def last_arrival(f: float, gamma: float, inv_gamma: float) -> int:
    """Largest i ≥ 0 with i·γ ≤ f, exactly as arrivals are timed (i·γ in float64).

    The one definition of "has batch i arrived by instant f": the replay kernels compile this
    function with Numba and the live runner calls it as it is, so a live run and its replay
    can only disagree where f and i·γ are equal to the last bit."""
    q = f * inv_gamma
    if q > 4.0e18:
        return 4_000_000_000_000_000_000
    k = math.floor(q)
    while (k + 1) * gamma <= f:
        k += 1
    while k > 0 and k * gamma > f:
        k -= 1
    return k


def next_pick(p: int, k: int, f: float, gamma: float, queue: int, strict: bool, n: int) -> tuple[int, float]:
    """The batch served after batch ``p``'s event frees the pipeline at ``f``, and its start.

    ``k = last_arrival(f, γ, 1/γ)``; ``n`` batches in the episode; returns ``(n, 0.0)`` when no
    further event happens. With a start equal to ``f`` the batch was waiting (taken at once);
    otherwise the pipeline idles until the batch's arrival ``start``.

    * buffered, capacity b ≥ 1: the queue holds the last min(b, K − p) arrivals up to
      K = min(k, n − 1), so the next batch is max(p + 1, K − b + 1) at ``f``, or batch p + 1 at
      its arrival if nothing is waiting. For b = 1 this is the paper's recurrence
      p' = max(p + 1, ⌊f/γ⌋ + 1) (1-based).
    * buffered, b = 0: the first batch arriving at or after ``f``, started on arrival.
    * strict synchronisation: the pipeline only picks up at arrival instants strictly after
      ``f`` (Alfarra et al.'s "+2"): at instant I the queue holds the last b of (p, I]; with
      b ≤ 1 the batch served is I itself. No drain: a pickup needs an arrival.
    """
    if strict:
        instant = k + 1
        if instant < n:
            return (instant if queue == 0 else max(p + 1, instant - queue + 1)), instant * gamma
        return n, 0.0
    if queue == 0:
        first = k if k * gamma == f else k + 1
        cand = max(p + 1, first)
        if cand < n:
            return cand, cand * gamma
        return n, 0.0
    kc = min(k, n - 1)
    if kc > p:
        return max(p + 1, kc - queue + 1), f
    if p + 1 < n:
        return p + 1, (p + 1) * gamma
    return n, 0.0
