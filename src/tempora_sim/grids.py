"""Parameter grids of the three protocols, with unit suffixes (paper §4.1 defaults).

ρ is a fraction (``0.7``) or a percentage (``70%``); T and B are milliseconds by default and
accept ``ms``/``s`` suffixes (``500ms``, ``1s``, ``1.5s``). Defaults are the paper's ResNet-50
grids: ρ ∈ {100, 70, 50, 35, 25} %, T ∈ {50, 100, 200, 400, 1000} ms, B ∈ {1, 2, 4, 8, 16, 32} s.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Sequence

from .errors import GridError

DEFAULT_RHO = (1.0, 0.7, 0.5, 0.35, 0.25)
DEFAULT_T_MS = (50.0, 100.0, 200.0, 400.0, 1000.0)
DEFAULT_B_MS = (1000.0, 2000.0, 4000.0, 8000.0, 16000.0, 32000.0)

PROTOCOLS = ("offline", "discrete", "continuous", "amortised")
#: Two pressures at once (docs/design.md §9): opt-in, never part of ``all``.
COMBINED_PROTOCOLS = ("discrete-continuous", "discrete-amortised")
#: ``param`` column value of each protocol's grid (combined ones add ``param2``).
PARAM_OF = {"offline": None, "discrete": "rho", "continuous": "T_ms", "amortised": "B_ms",
            "discrete-continuous": "rho", "discrete-amortised": "rho"}
PARAM2_OF = {"discrete-continuous": "T_ms", "discrete-amortised": "B_ms"}

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TIME = re.compile(rf"^\s*({_NUMBER})\s*(ms|s)?\s*$")
_RATIO = re.compile(rf"^\s*({_NUMBER})\s*(%)?\s*$")


def _split(spec: str | float | Iterable) -> list:
    if isinstance(spec, str):
        parts = [p for p in spec.split(",") if p.strip()]
        if not parts:
            raise GridError(f"empty grid '{spec}'")
        return parts
    if isinstance(spec, (int, float)):
        return [spec]
    return list(spec)


def parse_time_ms(item: str | float, name: str) -> float:
    """``'1s'`` → 1000.0, ``'500ms'`` → 500.0, ``'250'`` → 250.0 (ms)."""
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        value = float(item)
    else:
        match = _TIME.match(str(item))
        if not match:
            raise GridError(f"--{name}: cannot read '{item}' as a time (use e.g. 500, 500ms or 1.5s)")
        value = float(match.group(1)) * (1000.0 if match.group(2) == "s" else 1.0)
    if not math.isfinite(value):
        raise GridError(f"--{name}: '{item}' is not a finite time")
    return value


def parse_ratio(item: str | float, name: str = "rho") -> float:
    """``'70%'`` → 0.7, ``'0.7'`` → 0.7."""
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        value = float(item)
    else:
        match = _RATIO.match(str(item))
        if not match:
            raise GridError(f"--{name}: cannot read '{item}' as a utilisation (use e.g. 0.7 or 70%)")
        value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    if not math.isfinite(value):
        raise GridError(f"--{name}: '{item}' is not finite")
    return value


def parse_rho(spec) -> tuple[float, ...]:
    values = tuple(parse_ratio(x, "rho") for x in _split(spec))
    for v in values:
        if v <= 0:
            raise GridError(f"--rho: utilisation must be > 0 (got {v:g}); ρ = λ/γ and γ must be finite")
    return values


def parse_T(spec) -> tuple[float, ...]:
    values = tuple(parse_time_ms(x, "T") for x in _split(spec))
    for v in values:
        if v <= 0:
            raise GridError(f"--T: threshold must be > 0 ms (got {v:g})")
    return values


def parse_B(spec) -> tuple[float, ...]:
    values = tuple(parse_time_ms(x, "B") for x in _split(spec))
    for v in values:
        if v < 0:
            raise GridError(f"--B: budget must be >= 0 ms (got {v:g})")
    return values


def parse_protocols(spec: str | Sequence[str]) -> tuple[str, ...]:
    items = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for p in items:
        if p == "all":
            out += PROTOCOLS
        elif p in PROTOCOLS or p in COMBINED_PROTOCOLS:
            out.append(p)
        else:
            raise GridError(
                f"--protocol: unknown protocol '{p}' (choose from all, {', '.join(PROTOCOLS + COMBINED_PROTOCOLS)})"
            )
    return tuple(dict.fromkeys(out))
