"""The clock: one batch event split at the prediction boundary (docs/design/design.md §2).

``e`` runs from pickup (device idle, batch already on the device) to the logits being
available; ``ℓ`` from there until the method is ready for the next batch. The device is
synchronised at each boundary so queued kernels are charged to the phase that issued them.
Accuracy counting, transfers and everything else happen outside these two regions.

Two more things keep the clock honest (docs/design/timing.md): Python's cyclic garbage collector
never runs inside an event (:func:`collector_paused`; collections happen between events),
and a fixed reference computation (:class:`SpeedProbe`) measures the machine's speed at
fixed points outside the events, so traces taken on a slowed-down machine can be spotted.
"""

from __future__ import annotations

import contextlib
import gc
import platform
import re
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from .errors import DeviceError
from .methods.base import TTAMethod

if TYPE_CHECKING:  # pragma: no cover
    from .policies import PolicyGate


def resolve_device(spec: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N``; a clear error when CUDA or that index is absent."""
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise DeviceError(f"unknown device '{spec}'; use cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise DeviceError(f"unsupported device '{spec}'; use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise DeviceError(f"device '{spec}' requested but CUDA is not available on this machine")
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise DeviceError(f"device '{spec}' requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    return torch.device("cuda", index)


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe_device(device: torch.device) -> str:
    """Metadata ``device``: kind and name, e.g. ``cuda:NVIDIA H100 80GB HBM3``."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{cpu_model_name()}"


def device_slug(device: torch.device) -> str:
    """Directory name for a device: ``cpu`` or ``cuda-<lower-case name>``."""
    if device.type == "cpu":
        return "cpu"
    name = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")
    return f"cuda-{name}"


class DeviceClock:
    """Synchronisation and peak-memory probes for one device."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_bytes(self) -> int | None:
        """Peak allocated bytes since :meth:`reset_peak` (None where not measurable)."""
        return int(torch.cuda.max_memory_allocated(self.device)) if self.cuda else None


@dataclass
class Event:
    logits: torch.Tensor
    e_ms: float
    l_ms: float
    peak_mem_bytes: int | None
    updated: bool
    #: ``now_ns()`` stamps of pickup, prediction emitted and pipeline free (the live runner
    #: places events on its arrival timeline with them; ``e_ms``/``l_ms`` are their differences).
    start_ns: int = 0
    predict_ns: int = 0
    end_ns: int = 0


#: The one clock of the tracer and the live runner: monotonic, integer nanoseconds.
now_ns = time.perf_counter_ns

#: Default spin window of :func:`wait_until`: sleep until this close to the target, then spin.
SPIN_NS = 500_000


def clock_resolution_ns() -> float:
    """Resolution the OS reports for :data:`now_ns` (ns)."""
    return time.get_clock_info("perf_counter").resolution * 1e9


#: Idle work (:func:`wait_until`'s ``idle``) runs only when at least this much time is left.
IDLE_WORK_NS = 5_000_000


def wait_until(target_ns: int, spin_ns: int = SPIN_NS, idle: Callable[[], object] | None = None) -> int:
    """Block until ``now_ns() >= target_ns`` and return that reading.

    ``time.sleep`` alone wakes up late by up to a scheduler tick, so it only covers the wait
    up to ``spin_ns`` before the target; the last stretch is a busy loop on the clock.
    ``idle`` (housekeeping such as a garbage collection) runs first when at least
    :data:`IDLE_WORK_NS` are left, so it fills a wait instead of delaying the next pickup.
    """
    now = now_ns()
    if idle is not None and target_ns - now >= IDLE_WORK_NS:
        idle()
        now = now_ns()
    remaining = target_ns - now
    if remaining > spin_ns:
        time.sleep((remaining - spin_ns) / 1e9)
    now = now_ns()
    while now < target_ns:
        now = now_ns()
    return now


def timed_event(
    method: TTAMethod, x: torch.Tensor, clock: DeviceClock, adapt: bool = True, peak: bool = True, gate: "PolicyGate | None" = None
) -> Event:
    """Run predict (and adapt) on ``x`` and time both phases; ``x`` must already be on the device.

    ``peak=False`` skips the peak-memory reading around the event: on CUDA, resetting and
    reading the allocator's statistics costs hundreds of µs, which a live run cannot spend
    between an event's end and its next decision (the trace keeps the reading).

    ``gate`` (an adapting event under a sparse-adaptation policy, docs/design/design.md §11) decides
    whether this event adapts: a decision known beforehand is taken before the clock starts;
    an entropy policy's check runs after the prediction and is timed inside ℓ. An event the
    policy does not adapt records ℓ = 0 (entropy: the check's time) and ``updated = False``;
    what ``predict`` kept for ``adapt`` is let go after the clock stops."""
    decided = gate.before() if (gate is not None and adapt) else None
    run_adapt = adapt and decided is not False
    if peak:
        clock.reset_peak()
    clock.sync()
    t0 = now_ns()
    logits = method.predict(x)
    clock.sync()
    t1 = now_ns()
    if run_adapt and decided is None and gate is not None:
        run_adapt = gate.after(logits)
    if run_adapt:
        method.adapt()
    if adapt:
        clock.sync()
    t2 = now_ns()
    peak_bytes = clock.peak_bytes() if peak else None
    if adapt and not run_adapt:
        method.skip_adapt()
    if adapt and decided is False:
        t2 = t1  # nothing ran after the prediction: ℓ is exactly 0
    return Event(
        logits, (t1 - t0) / 1e6, (t2 - t1) / 1e6 if adapt else 0.0, peak_bytes, bool(method.last_updated) and run_adapt, t0, t1, t2
    )


# ------------------------------------------------------------------ garbage collection
@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector off for the duration (it would otherwise start whenever an
    allocation count crosses its threshold, i.e. inside some timed event), with every object
    that exists on entry frozen out of later collections so the explicit ones stay cheap
    (a full collection over torch's ~300k objects costs hundreds of ms on a CPU). The caller
    collects between events (:func:`collect_between_events`) and between chunks
    (:func:`collect_between_chunks`). The collector's state is restored on exit."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def collect_between_events() -> None:
    """The young generations (microseconds): cyclic garbage an event left behind — tensors
    included — is freed before the next event, so it never inflates a measured peak."""
    gc.collect(1)


def collect_between_chunks() -> None:
    """A full collection of everything created since :func:`collector_paused` froze the heap."""
    gc.collect()


# ------------------------------------------------------------------ machine-speed probe
class SpeedProbe:
    """A fixed reference computation on the trace's device: ``reps`` chained fp32 matrix
    products of ``size``×``size`` operands, a few milliseconds on the device it runs on.

    :meth:`measure` runs it once untimed, then three times timed (synchronised), and returns
    the median in ms. Traces whose probes differ by more than a few percent were taken on a
    machine running at different speeds (frequency, contention), so their δ are not directly
    comparable. ``kind`` names the computation; it is recorded with the measurements.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.clock = DeviceClock(device)
        # CPU: 256² × 8 ≈ 0.27 GFLOP (a few ms on one core); CUDA: 2048² × 8 ≈ 137 GFLOP
        # (a few ms on a data-centre GPU, long enough not to be launch-bound).
        self.size, self.reps = (2048, 8) if device.type == "cuda" else (256, 8)
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(self.size, self.size, generator=gen) / self.size**0.5
        self.a = a.to(device)
        self.b = torch.randn(self.size, self.size, generator=gen).to(device)

    @property
    def kind(self) -> str:
        return f"matmul-{self.size}-fp32x{self.reps}"

    def _run(self) -> None:
        with torch.no_grad():
            y = self.b
            for _ in range(self.reps):
                y = self.a @ y

    def measure(self) -> float:
        prior = torch.backends.cuda.matmul.allow_tf32 if self.clock.cuda else None
        if self.clock.cuda:
            torch.backends.cuda.matmul.allow_tf32 = False  # the same arithmetic whatever the caller set
        try:
            self._run()
            times = []
            for _ in range(3):
                self.clock.sync()
                t0 = time.perf_counter_ns()
                self._run()
                self.clock.sync()
                times.append((time.perf_counter_ns() - t0) / 1e6)
        finally:
            if prior is not None:
                torch.backends.cuda.matmul.allow_tf32 = prior
        return float(statistics.median(times))
