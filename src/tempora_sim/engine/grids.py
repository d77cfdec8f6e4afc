"""Parameter grids of the three protocols, with unit suffixes (paper §4.1 defaults).

ρ is a fraction (``0.7``) or a percentage (``70%``); T and B are milliseconds by default and
accept ``ms``/``s`` suffixes (``500ms``, ``1s``, ``1.5s``). A grid is a comma list, ``@file`` (values
separated by commas, spaces or new lines) or a range ``start:stop:step``; values must be finite. Defaults are the paper's ResNet-50
grids: ρ ∈ {100, 70, 50, 35, 25} %, T ∈ {50, 100, 200, 400, 1000} ms, B ∈ {1, 2, 4, 8, 16, 32} s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tempora_schema.errors import OptionError
from tempora_sim.errors import GridError
from tempora_toolkit import command_line as command

DEFAULT_RHO = (1.0, 0.7, 0.5, 0.35, 0.25)
DEFAULT_T_MS = (50.0, 100.0, 200.0, 400.0, 1000.0)
DEFAULT_B_MS = (1000.0, 2000.0, 4000.0, 8000.0, 16000.0, 32000.0)


def _grid(spec, name: str, parse) -> tuple[float, ...]:
    """A grid from a comma list, ``@file`` or ``start:stop:step`` (see :mod:`tempora_toolkit.command_line`)."""
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


def _g(x: float) -> str:
    return f"{x:.4g}"


def _time_label(letter: str, value: float) -> str:
    return f"{letter}={value / 1000:g}s" if value >= 1000 else f"{letter}={value:g}ms"


@dataclass(frozen=True)
class Grid:
    """One grid parameter of a protocol: its word (the ``param`` / ``param2`` column and the
    :class:`~tempora_sim.sweeps.options.ResolvedOptions` field holding its values), its command-line
    flag, default values (in the unit the replay uses: ρ a fraction, T and B in ms), parser
    and labels."""

    param: str
    flag: str
    default: tuple[float, ...]
    parse: Callable[[object], tuple[float, ...]]
    #: compact column label (terminal tables, maps): ``ρ=70%``, ``T=50ms``, ``B=1s``
    label: Callable[[float], str]
    #: scenario label of the report's tables (four significant digits): ``ρ=70%``, ``T=50ms``, ``B=1s``
    scenario_label: Callable[[float], str]
    #: only values above the group's λ are defined (continuous utility needs T > λ)
    above_lambda: bool = False
    #: the figures' axis: its label and the value as drawn (ρ in %, B in s)
    axis_label: str = ""
    axis: Callable[[float], float] = float


RHO = Grid(
    "rho",
    "--rho",
    DEFAULT_RHO,
    parse_rho,
    lambda v: f"ρ={v * 100:g}%",
    lambda v: f"ρ={_g(v * 100)}%",
    axis_label="utilisation ρ (%)",
    axis=lambda v: v * 100,
)
T = Grid(
    "T_ms",
    "--T",
    DEFAULT_T_MS,
    parse_T,
    lambda v: _time_label("T", v),
    lambda v: f"T={_g(v)}ms",
    above_lambda=True,
    axis_label="threshold T (ms)",
    axis=lambda v: v,
)
B = Grid(
    "B_ms",
    "--B",
    DEFAULT_B_MS,
    parse_B,
    lambda v: _time_label("B", v),
    lambda v: f"B={_g(v / 1000)}s" if v >= 1000 else f"B={_g(v)}ms",
    axis_label="budget B (s)",
    axis=lambda v: v / 1000,
)
