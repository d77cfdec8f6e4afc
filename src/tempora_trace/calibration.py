"""λ from a `standard` trace (:func:`calibrate`), and how far its per-batch δ spread.

λ = mean + 6σ amplifies every outlier: one 100 ms hiccup among 17 ms batches moves λ by
several milliseconds and hands every method that much slack. So calibrate shows the spread
next to λ — σ/mean, max/median, the five largest δ and where they happened, and λ under
the robust rule for comparison — and warns in one line when the machine looks noisy (σ above 2 % of the mean, or any δ above 3× the
median), which is when λ should be re-measured on a quiet machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow.parquet as pq

from tempora_schema import lambda_ms
from tempora_schema.provision import lambda_provision

from .config import TraceConfig
from .runner import TraceRun
from .timing import device_slug, resolve_device
from .writer import check_reusable

#: σ/mean above this looks like a noisy machine.
NOISY_CV = 0.02
#: a δ above this multiple of the median looks like a hiccup.
NOISY_MAX_OVER_MEDIAN = 3.0


@dataclass(frozen=True)
class Dispersion:
    count: int
    mean_ms: float
    std_ms: float
    median_ms: float
    max_ms: float
    #: the largest δ, largest first: (episode, step, δ ms)
    largest: tuple[tuple[str, int, float], ...]
    #: λ under the robust rule (median + 6 × 1.4826 × MAD), for comparison with the paper's
    robust_lambda_ms: float

    @property
    def cv(self) -> float:
        """σ/mean (population σ, as in λ)."""
        return self.std_ms / self.mean_ms if self.mean_ms > 0 else 0.0

    @property
    def max_over_median(self) -> float:
        return self.max_ms / self.median_ms if self.median_ms > 0 else 0.0

    def noisy_reasons(self) -> list[str]:
        reasons = []
        if self.cv > NOISY_CV:
            reasons.append(f"σ {self.std_ms:.3f} ms is {100 * self.cv:.1f} % of the mean (> {100 * NOISY_CV:g} %)")
        if self.max_over_median > NOISY_MAX_OVER_MEDIAN:
            ep, step, d = self.largest[0]
            reasons.append(f"δ {d:.3f} ms at {ep} step {step} is {self.max_over_median:.1f}× the median (> {NOISY_MAX_OVER_MEDIAN:g}×)")
        return reasons


def dispersion(episodes: list[str], steps: list[int], deltas: list[float], top: int = 5) -> Dispersion:
    """Spread of the adapt-row δ given as parallel lists."""
    d = np.asarray(deltas, dtype=float)
    if d.size == 0:
        raise ValueError("no adapt rows")
    order = np.argsort(-d, kind="stable")[:top]
    return Dispersion(
        count=int(d.size),
        mean_ms=float(d.mean()),
        std_ms=float(d.std()),
        median_ms=float(np.median(d)),
        max_ms=float(d.max()),
        largest=tuple((episodes[i], int(steps[i]), float(d[i])) for i in order),
        robust_lambda_ms=lambda_ms(d, "robust"),
    )


def trace_dispersion(path: Path) -> Dispersion:
    """:func:`dispersion` of the adapt rows of a trace file."""
    t = pq.read_table(path, columns=["phase", "episode", "step", "delta_ms"]).to_pydict()
    idx = [i for i, p in enumerate(t["phase"]) if p == "adapt"]
    return dispersion([t["episode"][i] for i in idx], [t["step"][i] for i in idx], [t["delta_ms"][i] for i in idx])


def dispersion_lines(disp: Dispersion) -> list[str]:
    """What calibrate prints under λ: three lines, plus a one-line warning on a noisy machine."""
    lines = [
        f"spread: σ/mean {100 * disp.cv:.2f} %, max/median {disp.max_over_median:.2f} "
        f"(median {disp.median_ms:.3f} ms, max {disp.max_ms:.3f} ms)",
        "largest δ: " + ", ".join(f"{d:.3f} ms ({ep} step {step})" for ep, step, d in disp.largest),
        f"robust rule: λ = {disp.robust_lambda_ms:.3f} ms (median + 6 × 1.4826 × MAD; `tempora-sim --lambda-rule robust`)",
    ]
    reasons = disp.noisy_reasons()
    if reasons:
        lines.append(
            "warning: this machine looks noisy — "
            + "; ".join(reasons)
            + ": λ = mean + 6σ turns such hiccups into slack; re-measure on a quiet machine or pass --lambda-ms"
        )
    return lines


def lambda_ms_of(path: Path) -> tuple[float, float, float, int]:
    """λ = mean + 6σ (population σ) of the adapt-row δ of a `standard` trace: (λ, mean, σ, batches)."""
    table = pq.read_table(path, columns=["phase", "delta_ms"]).to_pydict()
    deltas = np.array([d for p, d in zip(table["phase"], table["delta_ms"]) if p == "adapt"], dtype=float)
    lam, mean, std = lambda_provision(deltas)
    return lam, mean, std, len(deltas)


@dataclass(frozen=True)
class Calibration:
    """What ``tempora-trace calibrate`` found: the standard trace and λ = mean + 6σ of its δ."""

    path: Path
    #: True when a complete, matching trace was reused instead of measured again
    reused: bool
    lambda_ms: float
    mean_ms: float
    std_ms: float
    batches: int


def calibrate(cfg: TraceConfig, echo: Callable[[str], None] = lambda s: None) -> Calibration:
    """Trace ``standard`` under the resolved ``cfg`` (or reuse its complete, matching trace,
    unless ``cfg.force`` or ``cfg.resume``) and compute λ from it. ``echo`` receives the
    tracer's episode summaries."""
    path = cfg.output_dir(device_slug(resolve_device(cfg.device))) / f"{cfg.file_stem()}.parquet"
    reused = path.exists() and not cfg.force and not cfg.resume
    if reused:
        check_reusable(path, cfg)
    else:
        path = TraceRun(cfg, echo).run()
    return Calibration(path, reused, *lambda_ms_of(path))


def calibration_lines(result: Calibration) -> Iterator[str]:
    """What ``tempora-trace calibrate`` prints, line by line: the trace written (or reused), λ
    with its mean and σ, and the spread of the trace's δ (:func:`dispersion_lines`)."""
    yield f"using existing {result.path} (pass --force to re-measure)" if result.reused else f"wrote {result.path}"
    yield (
        f"λ = {result.lambda_ms:.3f} ms  (mean {result.mean_ms:.3f} ms + 6 × σ {result.std_ms:.3f} ms "
        f"over {result.batches} batches of standard inference)"
    )
    yield from dispersion_lines(trace_dispersion(result.path))
