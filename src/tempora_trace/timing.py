"""The clock: one batch event split at the prediction boundary (docs/design.md §2).

``e`` runs from pickup (device idle, batch already on the device) to the logits being
available; ``ℓ`` from there until the method is ready for the next batch. The device is
synchronised at each boundary so queued kernels are charged to the phase that issued them.
Accuracy counting, transfers and everything else happen outside these two regions.
"""

from __future__ import annotations

import platform
import re
import time
from dataclasses import dataclass

import torch

from .errors import DeviceError
from .methods.base import TTAMethod


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


def wait_until(target_ns: int, spin_ns: int = SPIN_NS) -> int:
    """Block until ``now_ns() >= target_ns`` and return that reading.

    ``time.sleep`` alone wakes up late by up to a scheduler tick, so it only covers the wait
    up to ``spin_ns`` before the target; the last stretch is a busy loop on the clock.
    """
    now = now_ns()
    remaining = target_ns - now
    if remaining > spin_ns:
        time.sleep((remaining - spin_ns) / 1e9)
    now = now_ns()
    while now < target_ns:
        now = now_ns()
    return now


def timed_event(method: TTAMethod, x: torch.Tensor, clock: DeviceClock, adapt: bool = True) -> Event:
    """Run predict (and adapt) on ``x`` and time both phases; ``x`` must already be on the device."""
    clock.reset_peak()
    clock.sync()
    t0 = now_ns()
    logits = method.predict(x)
    clock.sync()
    t1 = now_ns()
    if adapt:
        method.adapt()
        clock.sync()
    t2 = now_ns()
    peak = clock.peak_bytes()
    return Event(logits, (t1 - t0) / 1e6, (t2 - t1) / 1e6 if adapt else 0.0, peak, bool(method.last_updated) and adapt,
                 t0, t1, t2)
