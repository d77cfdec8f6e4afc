"""Timing variability, measured on the device after the main pass (docs/guide/tracer.md, docs/design/timing.md).

A trace records one timed pass. How much would the times move on the next pass, and after the
pipeline sat idle? After every episode of the main pass is on disk, the tracer times a
*sample* of the stream again — outside every row of the trace, which is already written:

* the sample: the first steps of up to :data:`MAX_EPISODES` episodes spread over the stream,
  ``sample`` events in all;
* ``passes`` back-to-back repeat passes over the sample. Each episode's part starts as the
  main pass started that episode (``reset()`` where the stream resets, RNGs seeded from
  ``(seed, episode)``), so every repeat event runs the same computation as the main-pass event
  of the same step, and the ratio of their times is the device's pass-to-pass variability;
* the idle blocks: whole passes over the sample, alternately back to back and with every event
  after an idle wait (one block per gap of ``idle_gaps``, multiples of the sample's median δ
  or fixed times), starting and ending back to back: B W₁ B W₂ … B. A waited block's events
  are compared with the same events of the blocks either side, a second or two away, so the
  machine's speed at the moment cancels and what is left is the cost of waiting. On a machine
  whose speed depends on whether it has been sleeping (a virtual machine whose host gives an
  idle core away), that cost builds up and wears off over about a second, so single events
  after a wait, or short blocks beside them, measure neither; whole blocks of the sample do
  (docs/results/validation-runs.md). Where it takes longer, every block but the first (the
  repeat passes ran back to back just before it) can first run the sample untimed for
  ``settle_s`` seconds.

The events are timed by :func:`~tempora_trace.timing.timed_event`, staged and re-warmed like
the main pass's (:meth:`~tempora_trace.runner.MethodRun._staged`). Cost: ``passes × sample``
events, then seven blocks of one pass over the sample each (with its waits in a waited block)
and six run-ins of ``settle_s`` (each to the end of the event running then): with the defaults
(16 events, two passes, gaps 0.25 ×, 1 × and 4 × the median δ, no run-in) about 228 δ;
``--timing-sample 0`` turns it off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import tempora_schema as schema
from tempora_toolkit.command_line import parse_time_ms

from .options import DEFAULT_IDLE_GAPS as DEFAULT_IDLE_GAPS_TEXT
from .options import DEFAULT_IDLE_SETTLE_S, DEFAULT_TIMING_PASSES, DEFAULT_TIMING_SAMPLE
from .timing import collect_between_events, now_ns, timed_event, wait_until

#: The sample spreads over at most this many episodes.
MAX_EPISODES = 4


@dataclass(frozen=True)
class VariabilityPlan:
    """What to measure: ``sample`` events per pass, ``passes`` repeat passes, the idle blocks'
    waits and their run-in."""

    sample: int = DEFAULT_TIMING_SAMPLE
    passes: int = DEFAULT_TIMING_PASSES
    #: ``(value, relative)``: ``relative`` gaps are multiples of the first repeat pass's median δ
    idle_gaps: tuple[tuple[float, bool], ...] = field(default_factory=lambda: DEFAULT_IDLE_GAPS)
    #: untimed run-in of every idle block (s)
    settle_s: float = DEFAULT_IDLE_SETTLE_S

    @property
    def enabled(self) -> bool:
        return self.sample > 0 and self.passes > 0


def sample_plan(episode_lengths: list[int], sample: int) -> list[tuple[int, int]]:
    """``(episode index, k)`` pairs: the first ``k`` steps of each chosen episode.

    Up to :data:`MAX_EPISODES` episodes evenly spread over the stream (first and last
    included), ``sample`` steps shared out as evenly as they go (earlier episodes take the
    remainder), each capped at its episode's length."""
    n = len(episode_lengths)
    if n == 0 or sample <= 0:
        return []
    count = min(MAX_EPISODES, n, sample)
    chosen = sorted({int(round(x)) for x in np.linspace(0, n - 1, count)})
    base, extra = divmod(sample, len(chosen))
    plan = []
    for j, i in enumerate(chosen):
        k = min(base + (1 if j < extra else 0), episode_lengths[i])
        if k > 0:
            plan.append((i, k))
    return plan


def parse_idle_gaps(text: str) -> tuple[tuple[float, bool], ...]:
    """``--idle-gaps``: ``none``, or comma-separated ``<k>x`` (multiples of the sample's median
    δ) and times (ms, or with ``ms``/``s``), each > 0 and at most 60 s (ValueError otherwise)."""
    text = text.strip()
    if text == "none":
        return ()
    out = []
    for item in (t.strip() for t in text.split(",")):
        if item.endswith("x"):
            try:
                k = float(item[:-1])
            except ValueError:
                raise ValueError(f"'{item}' is neither <k>x nor a time") from None
            if not (np.isfinite(k) and 0 < k <= 1000):
                raise ValueError(f"'{item}': a multiple must be > 0 and at most 1000")
            out.append((k, True))
        else:
            ms = parse_time_ms(item, "--idle-gaps")
            if not 0 < ms <= 60_000:
                raise ValueError(f"'{item}': a gap must be > 0 and at most 60 s")
            out.append((float(ms), False))
    if not out:
        raise ValueError("empty list")
    return tuple(out)


#: The waited blocks' idle waits by default (``--idle-gaps``), parsed: 0.25 ×, 1 × and 4 × the
#: sample's median δ, about the idle a pipeline sees between events at ρ = 80 %, 50 % and 20 %.
DEFAULT_IDLE_GAPS = parse_idle_gaps(DEFAULT_IDLE_GAPS_TEXT)


def format_idle_gaps(gaps: tuple[tuple[float, bool], ...]) -> str:
    return ",".join(f"{v:g}x" if rel else f"{v:g}ms" for v, rel in gaps) if gaps else "none"


def time_sample_event(run: Any, batch: Any, gap_ms: float) -> float:
    """One staged batch of the sample timed as every variability-pass event is: after an idle
    wait of ``gap_ms`` (none when 0), on ``run``'s device and clock, its policy's gate asked as
    in the main pass, a collection after it. Returns its δ (e + ℓ) in ms."""
    if gap_ms > 0:
        wait_until(now_ns() + int(gap_ms * 1e6))
    x = batch.x.to(run.device, non_blocking=True)
    ev = timed_event(run.method, x, run.clock, gate=getattr(run, "gate", None))  # a policy decides as in the main pass
    run._last_event_end = time.perf_counter()
    delta = ev.e_ms + ev.l_ms
    del ev, x
    collect_between_events()
    return delta


def measure(run: Any, plan: VariabilityPlan) -> dict[str, Any] | None:
    """Time the sample again (``plan.passes`` back-to-back passes, then the idle blocks) and
    return the ``timing_variability`` metadata value, or None when there is nothing to time.
    ``run`` is the :class:`~tempora_trace.runner.MethodRun` whose main pass is done (its
    episodes, method, stager and clock).

    Leaves the method in whatever state the last sample event left it: call it after the main
    pass, whose rows are already written."""
    if not plan.enabled:
        return None
    t_start = time.perf_counter()
    parts = sample_plan([ep.num_batches for ep in run.episodes], plan.sample)
    if not parts:
        return None

    def part(index: int, k: int, gap: float, stop_at: float = float("inf")) -> list[float]:
        """The first ``k`` steps of episode ``index``, started as the main pass started it,
        every event after ``gap`` ms; the run-in stops at ``stop_at`` (perf_counter seconds)."""
        episode = run.episodes[index]
        run.start_episode(index, episode)
        times = []
        for chunk in run._staged(episode, range(k)):
            for b in chunk:
                if time.perf_counter() >= stop_at:
                    return times
                times.append(round(time_sample_event(run, b, gap), 6))
        return times

    def one_pass(gap: float) -> list[float]:
        return [t for index, k in parts for t in part(index, k, gap)]

    def block(gap: float, settle: bool = True) -> dict[str, Any]:
        """The sample's parts in turn, untimed, for ``plan.settle_s`` (``settle``); then one
        recorded pass."""
        t0 = time.perf_counter()
        stop_at, turn = t0 + (plan.settle_s if settle else 0.0), 0
        while time.perf_counter() < stop_at:
            part(*parts[turn % len(parts)], gap, stop_at)
            turn += 1
        lead = time.perf_counter() - t0
        return {"gap_ms": round(gap, 6), "settle_s": round(lead, 3), "ms": [max(t, 1e-6) for t in one_pass(gap)]}

    passes = [one_pass(0.0) for _ in range(plan.passes)]
    typical = float(np.median(passes[0]))
    gaps_ms = [v * typical if rel else v for v, rel in plan.idle_gaps]
    blocks = [block(0.0, settle=False)] if gaps_ms else []  # the repeat passes ran back to back before it
    for gap in gaps_ms:
        blocks += [block(gap), block(0.0)]
    # an event measured as exactly 0 ms (a coarse clock) carries no ratio: floor it at 1 ns
    tv = {
        "sample": [{"episode": run.episodes[i].name, "steps": list(range(k))} for i, k in parts],
        "passes_ms": [[max(t, 1e-6) for t in p] for p in passes],
        "idle_gaps_ms": [],
        "idle_ms": [],
        **({schema.IDLE_BLOCKS_KEY: blocks} if blocks else {}),
        "seconds": round(time.perf_counter() - t_start, 3),
    }
    schema.validate_variability(tv, "timing variability")
    return tv
