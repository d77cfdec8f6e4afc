"""The optional ``timing_variability`` metadata of a trace (docs/reference/trace-schema.md, "Timing variability").

After its main pass the tracer times a sample of the stream again, outside every row of the
trace: ``passes`` back-to-back repeat passes, then *idle blocks*: passes over the sample
alternately back to back and with every event after an idle wait of a given length (traces
written before the blocks carry one *idle pass* instead, in which every other event follows a
wait). A repeat event runs the same computation as the main-pass
event of the same (episode, step) — the method is reset and reseeded exactly as the main pass
started the episode — so the ratio of the two times is pure timing variability of the device.
The simulator turns those ratios into timing replicates (``tempora_sim.sweeps.variability``).

The key is optional: a trace without it reads as before, and the answers drawn from it say
that their timing uncertainty is unknown. Its value::

    {"sample": [{"episode": "gaussian_noise", "steps": [0, 1, 2, 3]}, ...],
     "passes_ms": [[δ, ...], ...],     # one list per repeat pass, δ (ms) per sample event
     "idle_gaps_ms": [],               # the older idle pass: wait before each event (0: back to back)
     "idle_ms": [],                    # the older idle pass: δ of its events (empty: none)
     "idle_blocks": [                  # optional: the idle blocks, in the order they ran
         {"gap_ms": 0, "settle_s": 0.0, "ms": [δ, ...]},     # back to back
         {"gap_ms": 4.2, "settle_s": 0.0, "ms": [δ, ...]},   # every event after a 4.2 ms wait
         {"gap_ms": 0, "settle_s": 0.0, "ms": [δ, ...]}, ...],
     "seconds": 3.1}                   # wall time the whole measurement took

Sample events are in sample order (episodes as listed, steps ascending), the same order in
every list. A block's ``settle_s`` is the untimed run-in before its recorded pass. The blocks
start and end back to back, and no two waited blocks are adjacent, so every waited block has a
back-to-back block on each side; a trace has the blocks or the idle pass, not both. Nothing
here imports torch or pyarrow.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from tempora_schema.errors import TraceSchemaError

#: Metadata key of the timing-variability measurement (optional in schema v2).
VARIABILITY_KEY = "timing_variability"
#: Key of the idle blocks inside the value (optional).
IDLE_BLOCKS_KEY = "idle_blocks"
_KEYS = {"sample", "passes_ms", "idle_gaps_ms", "idle_ms", "seconds"}
_BLOCK_KEYS = {"gap_ms", "settle_s", "ms"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_time(v: Any, positive: bool) -> bool:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return ok and (v > 0 if positive else v >= 0)


def sample_size(tv: Mapping[str, Any]) -> int:
    """Number of sample events (Σ len(steps))."""
    return sum(len(item["steps"]) for item in tv["sample"])


def idle_blocks(tv: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The value's idle blocks, in the order they ran (empty: none measured)."""
    return list(tv.get(IDLE_BLOCKS_KEY) or [])


def map_sample_events(tv: Mapping[str, Any], times: Callable[[list], list], gaps: Callable[[list], list] | None = None) -> dict[str, Any]:
    """A copy of ``tv`` with every list of per-sample-event times (each repeat pass, the idle
    pass, each idle block) replaced by ``times(list)``, and the idle pass's gaps by
    ``gaps(list)`` (kept when None): what a rescaled or cut trace does to its measurement."""
    out = dict(tv, passes_ms=[times(p) for p in tv["passes_ms"]], idle_ms=times(tv["idle_ms"]) if tv["idle_ms"] else [])
    if gaps is not None:
        out["idle_gaps_ms"] = gaps(tv["idle_gaps_ms"]) if tv["idle_ms"] else []
    if IDLE_BLOCKS_KEY in tv:
        out[IDLE_BLOCKS_KEY] = [dict(b, ms=times(b["ms"])) for b in tv[IDLE_BLOCKS_KEY]]
    return out


def validate_variability(tv: Any, path: object = "<trace>") -> None:
    """Raise ``TraceSchemaError`` unless ``tv`` is a well-formed ``timing_variability`` value."""

    def bad(rule: str) -> None:
        raise TraceSchemaError(path, f"metadata '{VARIABILITY_KEY}': {rule}")

    if not isinstance(tv, dict):
        bad("must be a JSON object")
    if set(tv) - {IDLE_BLOCKS_KEY} != _KEYS:
        bad(f"must have exactly the keys {', '.join(sorted(_KEYS))} (and optionally {IDLE_BLOCKS_KEY})")
    sample = tv["sample"]
    if not isinstance(sample, list) or not sample:
        bad("'sample' must be a non-empty list")
    seen = set()
    for i, item in enumerate(sample):
        if not isinstance(item, dict) or set(item) != {"episode", "steps"}:
            bad(f"sample item {i} must be an object with keys episode, steps")
        if not isinstance(item["episode"], str) or not item["episode"]:
            bad(f"sample item {i}: 'episode' must be a non-empty string")
        if item["episode"] in seen:
            bad(f"sample item {i}: episode {item['episode']!r} listed twice")
        seen.add(item["episode"])
        steps = item["steps"]
        if not isinstance(steps, list) or not steps or not all(_is_int(s) and s >= 0 for s in steps):
            bad(f"sample item {i}: 'steps' must be a non-empty list of integers >= 0")
        if any(b <= a for a, b in zip(steps, steps[1:])):
            bad(f"sample item {i}: 'steps' must be strictly increasing")
    k = sum(len(item["steps"]) for item in sample)
    passes = tv["passes_ms"]
    if not isinstance(passes, list) or not passes:
        bad("'passes_ms' must be a non-empty list of passes")
    for p, times in enumerate(passes):
        if not isinstance(times, list) or len(times) != k or not all(_is_time(t, True) for t in times):
            bad(f"pass {p} must list {k} finite times > 0 (one per sample event)")
    gaps, idle = tv["idle_gaps_ms"], tv["idle_ms"]
    if not isinstance(gaps, list) or not isinstance(idle, list) or len(gaps) != len(idle) or len(idle) not in (0, k):
        bad(f"'idle_gaps_ms' and 'idle_ms' must both be empty or both list {k} values")
    if not all(_is_time(g, False) for g in gaps) or not all(_is_time(t, True) for t in idle):
        bad("idle gaps must be finite and >= 0, idle-pass times finite and > 0")
    if not _is_time(tv["seconds"], False):
        bad("'seconds' must be a finite number >= 0")
    if IDLE_BLOCKS_KEY in tv:
        _validate_blocks(tv[IDLE_BLOCKS_KEY], k, bool(idle), bad)


def _validate_blocks(blocks: Any, k: int, has_idle_pass: bool, bad) -> None:
    if has_idle_pass:
        bad(f"'{IDLE_BLOCKS_KEY}' and an idle pass ('idle_ms') cannot both be present")
    if not isinstance(blocks, list) or len(blocks) < 3:
        bad(f"'{IDLE_BLOCKS_KEY}' must be a list of at least three blocks")
    waited = []
    for b, item in enumerate(blocks):
        if not isinstance(item, dict) or set(item) != _BLOCK_KEYS:
            bad(f"idle block {b} must be an object with keys {', '.join(sorted(_BLOCK_KEYS))}")
        if not _is_time(item["gap_ms"], False) or not _is_time(item["settle_s"], False):
            bad(f"idle block {b}: 'gap_ms' and 'settle_s' must be finite numbers >= 0")
        times = item["ms"]
        if not isinstance(times, list) or len(times) != k or not all(_is_time(t, True) for t in times):
            bad(f"idle block {b} must list {k} finite times > 0 (one per sample event)")
        waited.append(item["gap_ms"] > 0)
    if waited[0] or waited[-1] or not any(waited) or any(a and b for a, b in zip(waited, waited[1:])):
        bad(f"'{IDLE_BLOCKS_KEY}' must start and end back to back (gap 0), with a back-to-back block between any two waited ones")


def check_variability_rows(tv: Mapping[str, Any], episode_lengths: Mapping[str, int], path: object = "<trace>") -> None:
    """Every sample (episode, step) names an adapt row of the trace."""
    for i, item in enumerate(tv["sample"]):
        n = episode_lengths.get(item["episode"])
        if n is None:
            raise TraceSchemaError(path, f"metadata '{VARIABILITY_KEY}' sample item {i} names episode {item['episode']!r}, not in the rows")
        if item["steps"][-1] >= n:
            raise TraceSchemaError(path, f"metadata '{VARIABILITY_KEY}' sample item {i}: step {item['steps'][-1]} is beyond its episode")
