"""λ, the latency provision of a comparison group, computed in one place for both tools.

The tracer's ``calibrate`` and the simulator both call :func:`lambda_ms` (docs/reference/trace-schema.md,
"λ rules"): ``paper`` = mean(δ) + 6·σ(δ) over the adapt rows of the group's ``standard``
trace (paper §4: a 6σ provision; the default), ``robust`` = median + 6 × 1.4826 × MAD.
Torch-free and pyarrow-free: numpy only.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

#: ``paper``: mean + 6σ (population σ), the paper's §4 provision and the default.
#: ``robust``: median + 6 × 1.4826 × MAD, which one hiccup cannot inflate.
LAMBDA_RULES = ("paper", "robust")
#: λ = mean(δ) + LAMBDA_SIGMAS · σ(δ).
LAMBDA_SIGMAS = 6.0
#: MAD × 1.4826 estimates σ for normally distributed data.
MAD_TO_SIGMA = 1.4826
#: λ above this multiple of the robust λ of the same ``standard`` δ is flagged as inflated by a
#: few slow batches. For a bell-shaped δ the two rules agree (ratio ≈ 1) however wide the spread,
#: so a device whose speed simply varies is not flagged (its variability is the timing
#: intervals' business); one 30 ms stall among 11 ms batches gives 1.7, three stalled batches
#: in sixty more.
LAMBDA_ROBUST_LIMIT = 1.4


def lambda_ms(deltas: Iterable[float] | np.ndarray, rule: str = "paper") -> float:
    """λ in ms from the per-batch latencies δ of standard inference.

    ``paper``: ``mean(δ) + 6·std(δ)`` with the population standard deviation (ddof = 0), as the
    reference implementation summarises timings with ``numpy.std``; with 781+ batches the ddof
    choice changes λ by < 0.1 %. ``robust``: ``median(δ) + 6 · 1.4826 · MAD(δ)``, where
    ``MAD = median(|δ − median(δ)|)``: the same provision for normal noise, but a few slow
    outliers (a garbage collection, another process) move it by at most a few ranks.
    """
    d = np.asarray(deltas if isinstance(deltas, np.ndarray) else list(deltas), dtype=np.float64).ravel()
    if rule not in LAMBDA_RULES:
        raise ValueError(f"unknown λ rule {rule!r}; expected one of {', '.join(LAMBDA_RULES)}")
    if d.size == 0:
        raise ValueError("λ needs at least one latency")
    if not np.isfinite(d).all():
        raise ValueError("λ needs finite latencies")
    if rule == "paper":
        return float(d.mean() + LAMBDA_SIGMAS * d.std(ddof=0))
    med = float(np.median(d))
    mad = float(np.median(np.abs(d - med)))
    return med + LAMBDA_SIGMAS * MAD_TO_SIGMA * mad


def lambda_provision(delta_ms: Sequence[float] | np.ndarray, rule: str = "paper") -> tuple[float, float, float]:
    """``(λ, mean, σ)`` in ms of the per-batch latencies ``delta_ms`` of standard inference
    (λ by :func:`lambda_ms` under ``rule``; mean and population σ for the dispersion line)."""
    delta = np.asarray(delta_ms, dtype=float)
    if delta.size == 0:
        raise ValueError("λ needs at least one adapt row of the standard trace")
    return lambda_ms(delta, rule), float(np.mean(delta)), float(np.std(delta, ddof=0))


def inflated_lambda(lam: float, delta_ms: Sequence[float] | np.ndarray) -> tuple[float, float] | None:
    """``(λ / robust λ, robust λ)`` when λ exceeds :data:`LAMBDA_ROBUST_LIMIT` × the robust λ of
    the standard trace's δ (λ inflated by a few of its batches: a stall, another process), else
    None. Comparing with the median instead would flag every device whose speed merely varies."""
    delta = np.asarray(delta_ms, dtype=float)
    if delta.size == 0 or not np.isfinite(delta).all():
        return None
    robust = lambda_ms(delta, "robust")
    return (lam / robust, robust) if robust > 0 and lam > LAMBDA_ROBUST_LIMIT * robust else None
