"""The idle rule, in one place: how much slower (or faster) an event runs after the device waited.

``F(gap)`` is 1 at no wait, linear between the gaps the trace's idle pass measured, and constant
beyond the largest (docs/design/statistics.md, "The idle effect"). Plain Python on NumPy-like
arrays: :mod:`tempora_sim.engine.kernels` compiles this same function for the discrete idle
kernel, and the live-run check (:mod:`tempora_sim.validation.live_runs`) calls it as it is.
"""

from __future__ import annotations


def idle_factor(gap, gaps, factors):
    """F(gap) for measured ``gaps`` (ascending, ms) and their ``factors``."""
    k = gaps.shape[0]
    if k == 0 or gap <= 0.0:
        return 1.0
    if gap >= gaps[k - 1]:
        return factors[k - 1]
    x0, y0 = 0.0, 1.0
    for i in range(k):
        if gap <= gaps[i]:
            return y0 + (factors[i] - y0) * (gap - x0) / (gaps[i] - x0)
        x0, y0 = gaps[i], factors[i]
    return factors[k - 1]
