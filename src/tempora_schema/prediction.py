"""Profiles and predicted traces: what marks them and the rules they keep (docs/reference/trace-schema.md, "Profiles and predicted traces").

A **profile** (``tempora-trace profile``) is a trace file of the first ``profile_batches``
batches of every episode of a stream, timing only: the same columns and metadata as a trace,
plus ``kind = "profile"`` and ``profile_batches`` (with ``profile_auto``, the rule, when
``--profile-batches auto`` chose the count), and no frozen rows (``frozen_eval = 0``).
Its identity is the identity of the trace it shortens (the configuration, the device, the
library versions), so it pairs with a full trace of the same configuration taken elsewhere.

A **predicted trace** (``tempora-sim predict``) is a trace of a device that was only
profiled: a source trace's accuracy and checkpoint rows, with times mapped onto the profiled
device by a transfer model. It carries the metadata key ``predicted``::

    {"source":  {identity keys of the source trace, "created_at"},
     "profile": {identity keys of the profile, "profile_batches", "created_at"},
     "model":   {"e": {"kind": "scale"|"affine"|"zero", "a": 1.9, "b": 0.0}, "l": {...},
                 "events": 120, "folds": 4},
     "error":   {"sd_log": 0.031, "df": 4, "fold_bias_log": [...], "event_rms_log": 0.08},
     "baselines": {"speed_probe": 2.1 | null, "method_median": 1.95}}

and its ``device`` ends in :data:`PREDICTED_MARK`, so the comparison group of a predicted
trace is never the group of a measured one: every table, sentence and page that names the
group says "predicted". ``error`` is the transfer's out-of-sample error of the mean δ (log
scale, from held-out profile events); the simulator adds it to every timing replicate of the
trace, so its intervals widen with it (``tempora_sim.sweeps.variability``). Nothing here imports
torch or pyarrow.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from tempora_schema.errors import TraceSchemaError

#: Metadata key naming what a file is beyond a trace (absent: a trace).
KIND_KEY = "kind"
#: ``kind`` of a profile.
KIND_PROFILE = "profile"
#: Metadata key of a profile: batches per episode it times.
PROFILE_BATCHES_KEY = "profile_batches"
#: Metadata key of a profile whose length ``--profile-batches auto`` chose: the rule,
#: ``{"share": 0.025, "min": 8}`` (that share of the longest episode, at least ``min``).
PROFILE_AUTO_KEY = "profile_auto"
#: Metadata key of a predicted trace.
PREDICTED_KEY = "predicted"
#: What the device of a predicted trace ends with.
PREDICTED_MARK = " (predicted)"
#: Transfer-model kinds of a phase.
MODEL_KINDS = ("scale", "affine", "zero")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_profile(meta: Mapping[str, Any]) -> bool:
    """The file is a profile (``kind = "profile"``)."""
    return meta.get(KIND_KEY) == KIND_PROFILE


def is_predicted(meta: Mapping[str, Any]) -> bool:
    """The file is a predicted trace (metadata ``predicted``)."""
    return isinstance(meta.get(PREDICTED_KEY), Mapping)


def predicted_device(device: str) -> str:
    """The device a predicted trace names: the profiled device, marked as predicted."""
    return device if device.endswith(PREDICTED_MARK) else device + PREDICTED_MARK


def measured_device(device: str) -> str:
    """The profiled device behind a predicted trace's device name (itself for a measured one)."""
    return device[: -len(PREDICTED_MARK)] if device.endswith(PREDICTED_MARK) else device


def prediction_error(meta: Mapping[str, Any]) -> tuple[float, int] | None:
    """(σ, df) of a predicted trace's out-of-sample error of its mean δ (log scale); None for a
    measured trace."""
    if not is_predicted(meta):
        return None
    err = meta[PREDICTED_KEY]["error"]
    return float(err["sd_log"]), int(err["df"])


def validate_kind(meta: Mapping[str, Any], path: object = "<trace>") -> None:
    """The keys of a profile or a predicted trace (optional in schema v2; see the module)."""

    def bad(rule: str) -> None:
        raise TraceSchemaError(path, rule)

    kind = meta.get(KIND_KEY)
    if KIND_KEY in meta and kind != KIND_PROFILE:
        bad(f"metadata '{KIND_KEY}' must be '{KIND_PROFILE}' when present, got {kind!r}")
    if kind == KIND_PROFILE:
        pb = meta.get(PROFILE_BATCHES_KEY)
        if not _is_int(pb) or pb < 1:
            bad(f"a profile's metadata '{PROFILE_BATCHES_KEY}' must be a positive integer, got {pb!r}")
        if meta.get("frozen_eval") != 0:
            bad("a profile scores no frozen checkpoints: metadata 'frozen_eval' must be 0")
        if PROFILE_AUTO_KEY in meta:
            rule = meta[PROFILE_AUTO_KEY]
            ok = isinstance(rule, dict) and set(rule) == {"share", "min"}
            if not (ok and _is_number(rule["share"]) and 0 < rule["share"] <= 1 and _is_int(rule["min"]) and rule["min"] >= 1):
                bad(f'a profile\'s metadata \'{PROFILE_AUTO_KEY}\' must be {{"share": 0 < s <= 1, "min": n >= 1}}, got {rule!r}')
        if PREDICTED_KEY in meta:
            bad(f"a profile is measured: it cannot carry '{PREDICTED_KEY}'")
    else:
        for key in (PROFILE_BATCHES_KEY, PROFILE_AUTO_KEY):
            if key in meta:
                bad(f"metadata '{key}' belongs to a profile ('{KIND_KEY}': '{KIND_PROFILE}')")
    device = meta.get("device")
    if PREDICTED_KEY in meta:
        validate_predicted(meta[PREDICTED_KEY], path)
        if not (isinstance(device, str) and device.endswith(PREDICTED_MARK)):
            bad(f"a predicted trace's device must end with '{PREDICTED_MARK}', got {device!r}")
    elif isinstance(device, str) and device.endswith(PREDICTED_MARK):
        bad(f"device {device!r} says predicted, but the metadata has no '{PREDICTED_KEY}'")


def validate_predicted(p: Any, path: object = "<trace>") -> None:
    """``predicted``: source and profile identities, the model of each phase, its error."""

    def bad(rule: str) -> None:
        raise TraceSchemaError(path, f"metadata '{PREDICTED_KEY}': {rule}")

    if not isinstance(p, dict):
        bad("must be a JSON object")
    for key in ("source", "profile", "model", "error"):
        if not isinstance(p.get(key), dict):
            bad(f"'{key}' must be a JSON object")
    for side in ("source", "profile"):
        if not isinstance(p[side].get("method"), str) or not isinstance(p[side].get("device"), str):
            bad(f"'{side}' must name the method and device of the file it was made from")
    for phase in ("e", "l"):
        m = p["model"].get(phase)
        if not isinstance(m, dict) or m.get("kind") not in MODEL_KINDS:
            bad(f"model '{phase}' must be an object whose kind is one of {', '.join(MODEL_KINDS)}")
        if not (_is_number(m.get("a")) and _is_number(m.get("b"))) or m["a"] < 0:
            bad(f"model '{phase}' needs finite 'a' >= 0 and 'b'")
    err = p["error"]
    if not (_is_number(err.get("sd_log")) and err["sd_log"] >= 0):
        bad("error 'sd_log' must be a finite number >= 0")
    if not (_is_int(err.get("df")) and err["df"] >= 1):
        bad("error 'df' must be an integer >= 1")


def check_kind_rows(meta: Mapping[str, Any], adapt_counts, has_frozen: bool, path: object = "<trace>") -> None:
    """A profile has no frozen rows and at most ``profile_batches`` adapt rows per episode."""
    if not is_profile(meta):
        return
    if has_frozen:
        raise TraceSchemaError(path, "a profile has frozen rows (it times the stream only)")
    pb = int(meta[PROFILE_BATCHES_KEY])
    longest = int(max(adapt_counts)) if len(adapt_counts) else 0
    if longest > pb:
        raise TraceSchemaError(path, f"a profile of {pb} batch(es) per episode has an episode of {longest}")
