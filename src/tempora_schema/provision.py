"""λ, the latency provision of a comparison group, computed in one place for both tools.

λ = mean(δ) + 6·σ(δ) over the adapt rows of the group's ``standard`` trace (paper §4: a 6σ
provision). σ is the population standard deviation (ddof = 0), as the reference recorders
summarise per-batch timings with ``numpy.std``; with 781+ batches the ddof choice changes λ by
less than 0.1 %.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: λ = mean(δ) + LAMBDA_SIGMAS · σ(δ).
LAMBDA_SIGMAS = 6.0


def lambda_provision(delta_ms: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """``(λ, mean, σ)`` in ms of the per-batch latencies ``delta_ms`` of standard inference."""
    delta = np.asarray(delta_ms, dtype=float)
    if delta.size == 0:
        raise ValueError("λ needs at least one adapt row of the standard trace")
    mean, std = float(np.mean(delta)), float(np.std(delta, ddof=0))
    return mean + LAMBDA_SIGMAS * std, mean, std
