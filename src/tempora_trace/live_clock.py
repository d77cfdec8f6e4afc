"""The live protocols on the real clock: when a batch arrives and how each batch is served.

**Discrete** (:func:`play_discrete`): batch i arrives at ``t0 + i·γ`` on the tracer's
monotonic clock; each decision reads the clock once and applies the replay's own rule
(:mod:`tempora_schema.discrete`), so replaying the recorded times reproduces every decision.
**Amortised** (:func:`play_amortised`): batches back to back, each adapting event charged
``max(0, δ − λ)`` against the budget until the cut-off. Both take the method's events as
callables (:data:`ServeFn`, :class:`AmortisedHooks`), so they know nothing of models or files;
:mod:`tempora_trace.live_runner` runs them against a method and writes what they served.
:func:`check_schedule` bounds a schedule (:data:`MAX_SCHEDULE_MS`): a live run waits for real.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tempora_schema.discrete import last_arrival as _schema_last_arrival
from tempora_schema.discrete import next_pick

from .errors import ConfigError
from .timing import SPIN_NS, Event, now_ns, wait_until

#: Longest λ and longest gap γ between two arrivals a live schedule may have (one hour):
#: a live run waits for real, and beyond this an option is a typo, not an experiment.
MAX_SCHEDULE_MS = 3_600_000.0


def last_arrival(f_ms: float, gamma_ms: float) -> int:
    """Largest i ≥ 0 with i·γ ≤ f: the schema's definition, the one the replay kernels compile."""
    return int(_schema_last_arrival(float(f_ms), float(gamma_ms), 1.0 / float(gamma_ms)))


def schedule_bound() -> str:
    return f"at most {MAX_SCHEDULE_MS / 60_000:g} min between arrivals and for λ"


def check_schedule(gammas: Sequence[float], option: str, label: Callable[[float], str] | None, rhos: Sequence[float] | None = None) -> None:
    """Refuse an arrival gap γ beyond :data:`MAX_SCHEDULE_MS` (or not finite), naming the
    option that asked for it: a live run would wait that long for real."""
    for k, gamma in enumerate(gammas):
        if not (math.isfinite(gamma) and gamma <= MAX_SCHEDULE_MS):
            what = label(gamma) if label is not None else f"{option} {rhos[k]:g}"  # type: ignore[index]
            shown = f"{gamma:.3g} ms" if math.isfinite(gamma) else "beyond any float"
            raise ConfigError(f"{what}: arrivals {shown} apart are longer than a live run allows ({schedule_bound()})")


# ------------------------------------------------------------------------ the two protocols
@dataclass
class Served:
    """One served batch on the episode clock (ms since t0)."""

    event: int
    pickup_ms: float
    predict_ms: float
    free_ms: float
    ev: Event
    #: correct predictions; in a live run None until the clock stands still (:class:`HeldScores`)
    correct: Any
    mode: str = "adapt"
    charged_ms: float | None = None
    spent_ms: float | None = None


#: ``serve(i) -> (event, correct)``: run batch i (staged, on the device); ``correct`` may be
#: None when the caller scores the batch later (:class:`HeldScores`).
ServeFn = Callable[[int], tuple[Event, Any]]
#: ``prepare(i) -> ns``: make batch i available (stage its chunk); returns the ns it took.
PrepareFn = Callable[[int], int]


def play_discrete(
    num_batches: int,
    gamma_ms: float,
    queue: int,
    serve: ServeFn,
    prepare: PrepareFn | None = None,
    spin_ns: int = SPIN_NS,
    idle: Callable[[], object] | None = None,
) -> list[Served | None]:
    """Play one episode of the discrete protocol on the real clock; per batch, how it was served.

    ``None`` marks a skipped batch. The decision after each event uses one clock reading
    ``f`` (recorded as that event's ``free_ms`` and, when a batch is waiting, the next event's
    ``pickup_ms``), so replaying the recorded times reproduces every decision. ``idle`` runs
    only while the pipeline waits for an arrival (:func:`wait_until`), never between an
    event's end and the next pickup.
    """
    if num_batches <= 0:
        return []
    out: list[Served | None] = [None] * num_batches
    t0 = now_ns()
    pickup = t0
    nxt, p, j = 0, -1, 0
    while True:
        if prepare is not None:
            paused = prepare(nxt)
            t0 += paused  # the episode clock stands still while a chunk stages
            pickup += paused
        ev, correct = serve(nxt)
        ready = now_ns()
        out[nxt] = Served(j, (pickup - t0) / 1e6, (ev.predict_ns - t0) / 1e6, (ready - t0) / 1e6, ev, correct)
        p, j = nxt, j + 1
        f = (ready - t0) / 1e6
        nxt, start = next_pick(p, last_arrival(f, gamma_ms), f, gamma_ms, queue, False, num_batches)
        if nxt >= num_batches:
            break
        # start == f: the batch was waiting; else the pipeline idles until its arrival
        pickup = ready if start == f else wait_until(t0 + math.ceil(start * 1e6), spin_ns, idle)
    return out


@dataclass
class AmortisedHooks:
    """What the amortised loop needs from the method, beyond running events."""

    serve_adapt: ServeFn
    serve_frozen: ServeFn
    #: save / restore the state before a step (strict rule only), freeze for the rest.
    save: Callable[[], Any]
    undo: Callable[[Any], None]
    freeze: Callable[[], None]


def play_amortised(
    num_batches: int, lambda_ms: float, budget_ms: float, rule: str, hooks: AmortisedHooks, prepare: PrepareFn | None = None
) -> tuple[list[Served], int]:
    """Play one episode of the amortised protocol; return the batches and the cut-off m."""
    out: list[Served] = []
    t0 = now_ns()
    spent = 0.0
    m: int | None = None
    for i in range(num_batches):
        if prepare is not None:
            t0 += prepare(i)
        if m is None and rule == "overshoot" and not spent < budget_ms:
            m = i
            hooks.freeze()
        if m is not None:
            ev, correct = hooks.serve_frozen(i)
            out.append(
                Served(i, (ev.start_ns - t0) / 1e6, (ev.predict_ns - t0) / 1e6, (now_ns() - t0) / 1e6, ev, correct, "frozen", 0.0, spent)
            )
            continue
        saved = hooks.save() if rule == "strict" else None
        ev, correct = hooks.serve_adapt(i)
        charged = max(0.0, ev.e_ms + ev.l_ms - lambda_ms)
        if rule == "strict" and spent + charged > budget_ms:
            spent += charged  # the undone step was paid for in real time
            m = i
            hooks.undo(saved)
            hooks.freeze()
            ev, correct = hooks.serve_frozen(i)
            out.append(
                Served(
                    i, (ev.start_ns - t0) / 1e6, (ev.predict_ns - t0) / 1e6, (now_ns() - t0) / 1e6, ev, correct, "frozen", charged, spent
                )
            )
            continue
        spent += charged
        out.append(
            Served(i, (ev.start_ns - t0) / 1e6, (ev.predict_ns - t0) / 1e6, (now_ns() - t0) / 1e6, ev, correct, "adapt", charged, spent)
        )
    return out, (num_batches if m is None else m)
