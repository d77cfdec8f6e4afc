"""Parameter grids of the three protocols, with unit suffixes (paper §4.1 defaults).

ρ is a fraction (``0.7``) or a percentage (``70%``); T and B are milliseconds by default and
accept ``ms``/``s`` suffixes (``500ms``, ``1s``, ``1.5s``). A grid is a comma list, ``@file`` (values
separated by commas, spaces or new lines) or a range ``start:stop:step``; values must be finite. Defaults are the paper's ResNet-50
grids: ρ ∈ {100, 70, 50, 35, 25} %, T ∈ {50, 100, 200, 400, 1000} ms, B ∈ {1, 2, 4, 8, 16, 32} s.
"""

from __future__ import annotations

from typing import Sequence

from tempora_schema import command
from tempora_schema.errors import OptionError
from tempora_schema.vocabulary import COMBINED_PROTOCOLS, PROTOCOLS  # noqa: F401  (re-exported)

from .errors import GridError

DEFAULT_RHO = (1.0, 0.7, 0.5, 0.35, 0.25)
DEFAULT_T_MS = (50.0, 100.0, 200.0, 400.0, 1000.0)
DEFAULT_B_MS = (1000.0, 2000.0, 4000.0, 8000.0, 16000.0, 32000.0)

#: ``param`` column value of each protocol's grid (combined ones add ``param2``).
PARAM_OF = {
    "offline": None,
    "discrete": "rho",
    "continuous": "T_ms",
    "amortised": "B_ms",
    "discrete-continuous": "rho",
    "discrete-amortised": "rho",
}
PARAM2_OF = {"discrete-continuous": "T_ms", "discrete-amortised": "B_ms"}


def _grid(spec, name: str, parse) -> tuple[float, ...]:
    """A grid from a comma list, ``@file`` or ``start:stop:step`` (see :mod:`tempora_schema.command`)."""
    try:
        return tuple(command.expand_grid(spec, f"--{name}", parse))
    except OptionError as exc:
        raise GridError(str(exc)) from None


def parse_time_ms(item: str | float, name: str) -> float:
    """``'1s'`` → 1000.0, ``'500ms'`` → 500.0, ``'250'`` → 250.0 (ms)."""
    try:
        return command.parse_time_ms(item, f"--{name}")
    except OptionError as exc:
        raise GridError(str(exc)) from None


def parse_ratio(item: str | float, name: str = "rho") -> float:
    """``'70%'`` → 0.7, ``'0.7'`` → 0.7."""
    try:
        return command.parse_ratio(item, f"--{name}")
    except OptionError as exc:
        raise GridError(str(exc)) from None


def parse_rho(spec) -> tuple[float, ...]:
    values = _grid(spec, "rho", command.parse_ratio)
    for v in values:
        if v <= 0:
            raise GridError(f"--rho: utilisation must be > 0 (got {v:g}); ρ = λ/γ and γ must be finite")
    return values


def parse_T(spec) -> tuple[float, ...]:
    values = _grid(spec, "T", command.parse_time_ms)
    for v in values:
        if v <= 0:
            raise GridError(f"--T: threshold must be > 0 ms (got {v:g})")
    return values


def parse_B(spec) -> tuple[float, ...]:
    values = _grid(spec, "B", command.parse_time_ms)
    for v in values:
        if v < 0:
            raise GridError(f"--B: budget must be >= 0 ms (got {v:g})")
    return values


def parse_protocols(spec: str | Sequence[str]) -> tuple[str, ...]:
    items = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else list(spec)
    if not items or not all(items):
        raise GridError(f"--protocol: empty item in '{spec}'")
    out: list[str] = []
    for p in items:
        if p == "all":
            out += PROTOCOLS
        elif p in PROTOCOLS or p in COMBINED_PROTOCOLS:
            out.append(p)
        else:
            raise GridError(f"--protocol: unknown protocol '{p}' (choose from all, {', '.join(PROTOCOLS + COMBINED_PROTOCOLS)})")
    return tuple(dict.fromkeys(out))
