"""User-facing errors of the tracer.

Everything a user can get wrong (a name, a path, a missing weight file, a device that is not
there) raises a :class:`TraceError` (a :class:`tempora_schema.errors.TemporaError`); the CLI prints its
message as one line and exits 2. A
traceback means a bug in Tempora, never bad input. An output the run must not silently
overwrite is the one :class:`tempora_schema.errors.OutputError` every command shares.
"""

from __future__ import annotations

from tempora_schema.errors import OptionError, OutputError, TemporaError

__all__ = ["ConfigError", "DataError", "DeviceError", "OutputError", "TraceError", "WeightsError"]


class TraceError(TemporaError):
    """Base class: the message is one line that says what is wrong and what to do."""


class ConfigError(TraceError, OptionError):
    """Inconsistent or unknown options (unknown dataset/model/domain, bad values)."""


class DataError(TraceError):
    """A dataset folder or file is missing or malformed."""


class WeightsError(TraceError):
    """Model weights are missing or do not fit the architecture."""


class UserCodeError(ConfigError):
    """The user's own code (a model factory, a module) failed to import or to run. The message
    is one line naming the module and the exception; ``debug_detail`` holds the traceback,
    which ``--debug`` prints above that line."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.debug_detail = detail


class DeviceError(TraceError):
    """The requested device is not available."""
