"""The protocol registry: one :class:`~tempora_sim.protocols.base.Protocol` per protocol, in the
order the tables list them (the paper's four, then the combined ones).

The replay, the terminal tables, the analyses' labels and orders and the report's per-protocol
columns iterate over this registry. A new protocol is a new module in this package (its class
and a ``PROTOCOL`` instance; every module's is registered at import, in the vocabulary's order)
plus its word in :mod:`tempora_schema.vocabulary`. docs/design/architecture.md lists what still names
protocols one by one.
"""

from __future__ import annotations

import importlib
import pkgutil
from contextlib import contextmanager
from typing import Iterator, Sequence

from tempora_schema.vocabulary import COMBINED_PROTOCOLS, LIVE_PROTOCOLS, PROTOCOLS
from tempora_sim.engine.grids import Grid
from tempora_sim.errors import GridError
from tempora_sim.protocols.base import (
    BASE_COLUMNS,
    COLUMNS,
    MEASURES,
    POOLED,
    SCENARIO_COLUMNS,
    Protocol,
    Rows,
    frame,
)

__all__ = [
    "BASE_COLUMNS",
    "COLUMNS",
    "POOLED",
    "SCENARIO_COLUMNS",
    "Protocol",
    "Rows",
    "combined",
    "frame",
    "get",
    "grid_of",
    "live",
    "live_setting_columns",
    "names",
    "parse_protocols",
    "reference",
    "register",
    "registered",
    "single",
    "temporal",
    "unregister",
    "with_grids",
]

_REGISTRY: dict[str, Protocol] = {}


def register(protocol: Protocol) -> Protocol:
    """Add ``protocol`` (after the ones already registered); its name must be new."""
    if not protocol.name or protocol.name in _REGISTRY or protocol.name == "all":
        raise ValueError(f"protocol name '{protocol.name}' is empty, reserved or taken")
    unknown = sorted(set(protocol.terms) - set(MEASURES))
    if unknown:
        raise ValueError(f"protocol '{protocol.name}' fills {unknown}, which the sweep has no column for (protocols.base.BASE_COLUMNS)")
    _REGISTRY[protocol.name] = protocol
    return protocol


def unregister(name: str) -> None:
    """Remove a protocol (tests register toy ones for a while)."""
    del _REGISTRY[name]


@contextmanager
def registered(protocol: Protocol) -> Iterator[Protocol]:
    """``protocol`` registered for the duration of a ``with`` block."""
    register(protocol)
    try:
        yield protocol
    finally:
        unregister(protocol.name)


def grid_of(param: str) -> Grid:
    """The grid a ``param`` / ``param2`` column names (KeyError if no protocol has it)."""
    for protocol in _REGISTRY.values():
        for grid in protocol.grids:
            if grid.param == param:
                return grid
    raise KeyError(param)


def with_grids(params: tuple[str, ...]) -> str:
    """The first protocol whose grid parameters are ``params`` (``("rho",)`` → discrete)."""
    for name, protocol in _REGISTRY.items():
        if tuple(g.param for g in protocol.grids) == tuple(params):
            return name
    raise KeyError(params)


def get(name: str) -> Protocol:
    """The registered protocol called ``name`` (KeyError if none)."""
    return _REGISTRY[name]


def names() -> tuple[str, ...]:
    """Every registered protocol, single-pressure first as registered, then the combined."""
    return single() + combined()


def single() -> tuple[str, ...]:
    """The single-pressure protocols (offline included): what ``all`` means."""
    return tuple(n for n, p in _REGISTRY.items() if not p.combined)


def temporal() -> tuple[str, ...]:
    """The single-pressure protocols that put time pressure on the stream (every one but offline)."""
    return tuple(n for n, p in _REGISTRY.items() if not p.combined and p.grids)


def reference() -> str:
    """The single-pressure protocol without time pressure (no grid: offline), whose ranking of
    the methods the temporal ones are compared with."""
    return next(n for n, p in _REGISTRY.items() if not p.combined and not p.grids)


def combined() -> tuple[str, ...]:
    """The protocols with two pressures at once (docs/design/design.md §9)."""
    return tuple(n for n, p in _REGISTRY.items() if p.combined)


def live() -> tuple[str, ...]:
    """The protocols played against a real clock (``tempora-trace live``), in table order."""
    return tuple(n for n, p in _REGISTRY.items() if p.live)


def live_setting_columns() -> tuple[str, ...]:
    """Every live protocol's setting columns, in table order (a validation row fills its own)."""
    return tuple(dict.fromkeys(k for n in live() for k in _REGISTRY[n].live_setting))


def parse_protocols(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``--protocol``: a comma list of protocol names, ``all`` for every single-pressure one."""
    items = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else list(spec)
    if not items or not all(items):
        raise GridError(f"--protocol: empty item in '{spec}'")
    out: list[str] = []
    for p in items:
        if p == "all":
            out += single()
        elif p in _REGISTRY:
            out.append(p)
        else:
            raise GridError(f"--protocol: unknown protocol '{p}' (choose from all, {', '.join(names())})")
    return tuple(dict.fromkeys(out))


def _register_built_ins() -> None:
    """Register the ``PROTOCOL`` of every module of this package, in the vocabulary's order:
    every protocol word has its module and every module's protocol is a word."""
    found: dict[str, Protocol] = {}
    for info in pkgutil.iter_modules(__path__):
        protocol = getattr(importlib.import_module(f"{__name__}.{info.name}"), "PROTOCOL", None)
        if protocol is not None:
            found[protocol.name] = protocol
    words = PROTOCOLS + COMBINED_PROTOCOLS
    if set(found) != set(words):
        raise ImportError(f"tempora_sim.protocols: modules for {sorted(found)}, but tempora_schema.vocabulary names {list(words)}")
    played = tuple(name for name in words if found[name].live)
    if played != LIVE_PROTOCOLS:
        raise ImportError(
            f"tempora_sim.protocols: {list(played)} are played live, but tempora_schema.vocabulary names {list(LIVE_PROTOCOLS)}"
        )
    for name in words:
        register(found[name])


_register_built_ins()
