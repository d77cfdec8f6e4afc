"""Timing replicates of a sweep: the same grid replayed under the traces' measured variability.

:mod:`tempora_sim.timing_noise` defines the model and the draws; this module replays them
through :func:`tempora_sim.replay.replay_frames` (kept apart so that the replay, which applies
the idle effect, and the replicates, which call the replay, do not import each other).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .replay import replay_frames, run_sweep
from .timing_noise import (
    DEFAULT_REPLICATES,
    MEASURED,
    UNKNOWN,
    TimingReplicates,
    idle_curves,
    replicate_factors,
    scaled,
    timing_models,
    trace_label,
)


def replicates_of(result, count: int = DEFAULT_REPLICATES, seed: int = 0, models: list | None = None) -> TimingReplicates | None:
    """Replay a sweep (:class:`tempora_sim.replay.SweepResult`) again under ``count`` timing
    replicates drawn from its traces' measured variability. ``base`` is the sweep's own frame.
    None when the sweep kept no series; no replicates when ``count`` is 0 or no trace measured
    its variability (the status then says ``unknown``)."""
    if result is None or getattr(result, "series", None) is None:
        return None
    series, opt = result.series, result.resolved
    if models is None:  # else one per trace of the series (e.g. measured on the uncut trace)
        models = timing_models(series.traces)
    # a predicted trace whose profile measured no variability has a model for its transfer error only
    status = {trace_label(t): (MEASURED if m is not None and m.events > 0 else UNKNOWN) for t, m in zip(series.traces, models)}
    if count <= 0 or all(m is None for m in models):
        return TimingReplicates(result.frame, [], status)
    curves = None if opt.no_idle_effect else idle_curves(series, models)
    reps = []
    for r in range(count):
        factors = replicate_factors(series, models, r, seed)
        frames = replay_frames(scaled(series, factors), opt, None, idle_curves=curves if curves is not None else _NO_CURVES)
        reps.append(pl.concat(frames, how="vertical"))
    drift = max((m.drift[0] for m in models if m is not None and m.drift is not None), default=0.0)
    prediction = max((m.prediction[0] for m in models if m is not None and m.prediction is not None), default=0.0)
    return TimingReplicates(result.frame, reps, status, drift, prediction)


#: ``replay_frames``'s idle_curves value meaning "no idle effect" (None means "from the traces").
_NO_CURVES = (np.zeros(1, np.int64), np.zeros(0), np.zeros(0))


def replicates(source, options=None, count: int = DEFAULT_REPLICATES, seed: int = 0, /, **changes) -> TimingReplicates:
    """Sweep ``source`` (as :func:`tempora_sim.sweep`) and replay it under ``count`` timing replicates."""
    return replicates_of(run_sweep(source, options, **changes), count, seed)
