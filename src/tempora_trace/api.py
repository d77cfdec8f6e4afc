"""The tracer as a library: trace a configuration, profile it, calibrate λ, play a method live.

Each function takes a :class:`~tempora_trace.config.TraceConfig` and/or its fields as keyword
arguments — the names of ``tempora-trace run``'s options with underscores (``method``,
``dataset``, ``model``, ``device``, ``domains`` as a list, ``max_batches``, ``threads``,
``heap``, ``method_params`` as a dict …) — checks them exactly as the command does, and returns
what was written. Progress is silent unless ``quiet=False``. Bad input raises the one-line
errors the command prints (subclasses of :class:`~tempora_trace.errors.TraceError`).

The traces are read back, swept and reported with :mod:`tempora_sim.api`
(docs/guide/python-api.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .calibration import Calibration
from .calibration import calibrate as _calibrate
from .config import TraceConfig
from .errors import ConfigError
from .live_runner import LiveSettings, run_live
from .options import DEFAULT_PROFILE_BATCHES
from .profiling import profile_run
from .runner import trace_run

__all__ = ["trace", "profile", "calibrate", "live", "TraceConfig", "LiveSettings", "Calibration"]

_CONFIG_FIELDS = {f.name for f in dataclasses.fields(TraceConfig)}
_LIVE_FIELDS = {f.name for f in dataclasses.fields(LiveSettings)}


def _config(config: TraceConfig | None, fields: dict[str, Any], quiet: bool) -> TraceConfig:
    unknown = sorted(set(fields) - _CONFIG_FIELDS)
    if unknown:
        raise ConfigError(f"not trace options: {', '.join(unknown)} (the fields of TraceConfig: {', '.join(sorted(_CONFIG_FIELDS))})")
    base = config if config is not None else TraceConfig()
    return dataclasses.replace(base, **fields, quiet=quiet).resolved()


def trace(config: TraceConfig | None = None, /, *, quiet: bool = True, **fields: Any) -> Path:
    """Trace one method (``tempora-trace run``) and return the written Parquet file.
    ``resume=True`` continues an interrupted run after its last complete episode."""
    return trace_run(_config(config, fields, quiet))


def profile(
    config: TraceConfig | None = None, /, *, profile_batches: int | str = DEFAULT_PROFILE_BATCHES, quiet: bool = True, **fields: Any
) -> Path:
    """Profile one method (``tempora-trace profile``): the first ``profile_batches`` batches of
    every episode (``"auto"``: 2.5 % of the longest episode, at least 8), timing only, and
    return the written file; ``tempora-sim predict`` turns a
    trace taken elsewhere and this profile into a predicted trace of this device."""
    return profile_run(_config(config, {**fields, "profile_batches": profile_batches}, quiet))


def calibrate(config: TraceConfig | None = None, /, *, quiet: bool = True, **fields: Any) -> Calibration:
    """Trace ``standard`` (or reuse its complete trace) and return λ = mean + 6σ of its δ
    with the trace's path (``tempora-trace calibrate``)."""
    return _calibrate(_config(config, {**fields, "method": "standard"}, quiet))


def live(config: TraceConfig | None = None, settings: LiveSettings | None = None, /, *, quiet: bool = True, **fields: Any) -> Path:
    """Play one method live against a real clock (``tempora-trace live``) and return the
    live-run file. ``fields`` are TraceConfig's and :class:`~tempora_trace.live_runner.LiveSettings`'
    (``protocols``, ``rho``, ``gamma_ms``, ``queue``, ``budgets_ms``, ``lambda_ms``, ``repeats``,
    ``trace_alongside`` …)."""
    live_fields = {k: v for k, v in fields.items() if k in _LIVE_FIELDS}
    cfg = _config(config, {k: v for k, v in fields.items() if k not in _LIVE_FIELDS}, quiet)
    base = settings if settings is not None else LiveSettings()
    return run_live(cfg, dataclasses.replace(base, **live_fields))
