"""Errors the simulator reports to users as one line (the CLI prints them and exits 2).

Everything a user can get wrong (a bad trace file, an impossible grid value, a group without
a λ) raises a :class:`SimError` subclass whose message is the whole story: which file or
group, and which rule. Nothing else is allowed to escape the CLI as a traceback.
"""

from __future__ import annotations

from tempora_schema import TraceSchemaError
from tempora_schema.errors import OptionError, TemporaError


class SimError(TemporaError):
    """Base class: a problem with the user's input, reported as one line."""


class TraceFileError(SimError):
    """A trace file cannot be read or breaks the trace schema (message: ``path: rule``)."""

    def __init__(self, path: object, rule: str):
        self.path = str(path)
        self.rule = rule
        super().__init__(f"{self.path}: {rule}")

    @classmethod
    def from_schema_error(cls, exc: TraceSchemaError) -> "TraceFileError":
        return cls(exc.path, exc.rule)


class GroupError(SimError):
    """A comparison group is inconsistent (duplicate method, no λ available, ...)."""


class GridError(SimError, OptionError):
    """A ρ / T / B grid value or option is invalid."""


class ProtocolError(SimError):
    """A protocol cannot be evaluated on the given traces (e.g. amortised without frozen rows)."""


class SimWarning(UserWarning):
    """Something the user should know but that does not stop the sweep (one line each):
    a T ≤ λ skipped, a schema-v1 trace, a group measured at uneven machine speeds."""
