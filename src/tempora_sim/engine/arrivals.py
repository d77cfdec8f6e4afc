"""Arrival processes for the discrete protocols (docs/design/design.md §9).

The paper's discrete protocol assumes perfectly periodic arrivals, batch ``i`` at ``i·γ``.
Real sources are bursty or recorded; here an arrival process is a *generator* of arrival
times, and the kernels take those times as data, so a new kind needs no new kernel.

Every kind keeps ρ = λ/γ as the *mean* load: the mean inter-arrival gap is γ.

* ``periodic`` — ``t_i = i·γ`` (the default; replayed by the O(1) periodic kernel).
* ``poisson[:SEED]`` — exponential gaps with mean γ (``t_0 = 0``).
* ``burst:ON,OFF[:SEED]`` — an on/off source. ON and OFF are the mean lengths of the on and
  off periods in units of γ (exponentially distributed, so the source is Markov-modulated);
  during an on period batches arrive back to back at the burst rate ``(ON+OFF)/(ON·γ)``, so
  the long-run rate stays 1/γ.
* ``file:PATH`` — recorded timestamps (CSV or Parquet; a column ``t_ms`` in ms or ``t_s`` in
  seconds, or the first numeric column read as ms). The gaps are rescaled so their mean is γ,
  unless the sweep asks for absolute times. When an episode has more batches than the
  recording, the gap sequence repeats. The seed rotates the starting gap (seed 0 starts at the
  recording's first gap), so several seeds are several windows into one recording.

Episodes see different realisations, seeded from ``(seed, episode name)``, and every method of
a group sees the same realisation for the same episode (common random numbers: differences
between methods are never arrival noise).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tempora_sim.errors import GridError

KINDS = ("periodic", "poisson", "burst", "file")


@dataclass(frozen=True)
class ArrivalSpec:
    """A parsed ``--arrivals`` value."""

    kind: str = "periodic"
    seed: int = 0
    on: float = 0.0  # burst: mean on-period, in units of γ
    off: float = 0.0  # burst: mean off-period, in units of γ
    path: str = ""  # file
    gaps: tuple[float, ...] = ()  # file: recorded gaps in ms, as read

    @property
    def periodic(self) -> bool:
        return self.kind == "periodic"

    @property
    def random(self) -> bool:
        """Whether the seed changes the realisation (several seeds pool like episodes)."""
        return self.kind != "periodic"

    def label(self) -> str:
        """Canonical text, as written to the ``arrivals`` output column."""
        if self.kind == "periodic":
            return "periodic"
        if self.kind == "poisson":
            return "poisson"
        if self.kind == "burst":
            return f"burst:{self.on:g},{self.off:g}"
        return f"file:{Path(self.path).name}"

    def with_seed(self, seed: int) -> "ArrivalSpec":
        return ArrivalSpec(self.kind, seed, self.on, self.off, self.path, self.gaps)


def _seed(text: str, spec: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        raise GridError(f"--arrivals: seed '{text}' in '{spec}' is not an integer") from None
    if not 0 <= seed < 2**63:
        raise GridError(f"--arrivals: seed {seed} in '{spec}' must be in [0, 2^63)")
    return seed


#: ON and OFF of a burst source (mean period lengths in units of γ) lie in this range: beyond
#: it a period's length overflows a float or a count of batches.
BURST_RANGE = (1e-6, 1e6)


def _positive(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise GridError(f"--arrivals: {what} '{text}' in '{spec}' is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise GridError(f"--arrivals: {what} in '{spec}' must be a finite number > 0 (got {text})")
    low, high = BURST_RANGE
    if not low <= value <= high:
        raise GridError(f"--arrivals: {what} in '{spec}' must be from {low:g} to {high:g} (mean period in units of γ; got {text})")
    return value


def parse_arrivals(spec: str | ArrivalSpec | None) -> ArrivalSpec:
    """``periodic`` | ``poisson[:SEED]`` | ``burst:ON,OFF[:SEED]`` | ``file:PATH``."""
    if spec is None:
        return ArrivalSpec()
    if isinstance(spec, ArrivalSpec):
        return spec
    text = str(spec).strip()
    kind, _, rest = text.partition(":")
    if kind == "periodic" and not rest:
        return ArrivalSpec()
    if kind == "poisson":
        return ArrivalSpec("poisson", _seed(rest, text) if rest else 0)
    if kind == "burst":
        params, _, seed = rest.partition(":")
        parts = params.split(",")
        if len(parts) != 2:
            raise GridError(f"--arrivals: '{text}' needs burst:ON,OFF (mean on/off lengths in units of γ), e.g. burst:2,8")
        on, off = (_positive(p, name, text) for p, name in zip(parts, ("ON", "OFF")))
        return ArrivalSpec("burst", _seed(seed, text) if seed else 0, on=on, off=off)
    if kind == "file" and rest:
        return ArrivalSpec("file", 0, path=rest, gaps=tuple(read_gaps(rest)))
    raise GridError(f"--arrivals: cannot read '{text}' (use periodic, poisson[:SEED], burst:ON,OFF[:SEED] or file:PATH)")


def read_gaps(path: str | Path) -> np.ndarray:
    """Inter-arrival gaps (ms) of a recorded timestamp file: CSV or Parquet, see module doc."""
    p = Path(path)
    try:
        frame = pl.read_parquet(p) if p.suffix.lower() in (".parquet", ".pq") else pl.read_csv(p)
    except FileNotFoundError:
        raise GridError(f"--arrivals: {p}: no such file") from None
    except (OSError, pl.exceptions.PolarsError, UnicodeDecodeError) as exc:
        raise GridError(f"--arrivals: {p}: cannot read timestamps ({str(exc).splitlines()[0][:120]})") from None
    if "t_ms" in frame.columns:
        col, scale = "t_ms", 1.0
    elif "t_s" in frame.columns:
        col, scale = "t_s", 1000.0
    else:
        numeric = [c for c, t in frame.schema.items() if t.is_numeric()]
        if not numeric:
            raise GridError(f"--arrivals: {p}: no numeric column of timestamps (name it t_ms or t_s)")
        col, scale = numeric[0], 1.0
    try:
        t = frame[col].cast(pl.Float64).to_numpy() * scale
    except pl.exceptions.PolarsError:
        raise GridError(f"--arrivals: {p}: column '{col}' is not numeric") from None
    if t.size < 2 or not np.isfinite(t).all():
        raise GridError(f"--arrivals: {p}: need at least two finite timestamps in column '{col}'")
    gaps = np.diff(t)
    if (gaps < 0).any():
        raise GridError(f"--arrivals: {p}: timestamps in column '{col}' must not decrease")
    if not gaps.sum() > 0:
        raise GridError(f"--arrivals: {p}: all timestamps are equal; the mean gap must be > 0")
    return gaps


def episode_rng(seed: int, episode: str) -> np.random.Generator:
    """The generator of one episode's arrivals: the same for every method of a group."""
    return np.random.default_rng([seed, zlib.crc32(episode.encode("utf-8"))])


def arrival_times(spec: ArrivalSpec, n: int, gamma: float, episode: str, absolute: bool = False) -> np.ndarray:
    """Arrival times (ms, ``t_0 = 0``, nondecreasing) of ``n`` batches with mean gap ``gamma``."""
    if n <= 0:
        return np.zeros(0)
    if spec.kind == "periodic":
        return np.arange(n, dtype=np.float64) * gamma
    if spec.kind == "file":
        gaps = np.asarray(spec.gaps, np.float64)
        start = spec.seed % gaps.size
        idx = (start + np.arange(n - 1)) % gaps.size
        g = gaps[idx]
        if not absolute:
            g = g * (gamma / gaps.mean())
        return np.concatenate(([0.0], np.cumsum(g)))
    rng = episode_rng(spec.seed, episode)
    if spec.kind == "poisson":
        return np.concatenate(([0.0], np.cumsum(rng.exponential(gamma, n - 1))))
    # burst: alternate on/off periods (exponential lengths, in units of γ) starting "on";
    # inside an on period arrivals are evenly spaced at the burst gap.
    burst_gap = gamma * spec.on / (spec.on + spec.off)
    out = np.empty(n)
    t = 0.0
    k = 0
    while k < n:
        on_len = rng.exponential(spec.on * gamma)
        count = max(1, int(round(on_len / burst_gap)))
        take = min(count, n - k)
        out[k : k + take] = t + burst_gap * np.arange(take)
        k += take
        t += burst_gap * count + rng.exponential(spec.off * gamma)
    return out
