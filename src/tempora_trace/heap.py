"""The host heap's policy during a run: one more condition the clock must hold fixed.

A CPU event allocates its activations (and, when it adapts, their gradients) afresh and frees
them when it ends. Whether the next event gets those pages back or asks the kernel for new
ones is decided by glibc's malloc, whose defaults adapt to the process's history: the
threshold above which a block is mapped on its own (and unmapped when freed) moves with the
sizes freed so far, and the top of the heap is handed back to the kernel whenever enough of
it is free. So two processes running the same events can settle in different regimes: one
reuses every page, the other takes thousands of fresh pages per event, each a minor page
fault (a few µs in a virtual machine). On the 2-core CPU this is a 20–40 % difference in δ
that depended on nothing but what else the process had allocated before (a trace's scoring
and checkpoints, a live run's held logits), and it was why traced and live events disagreed
(docs/design/timing.md, "The heap").

:func:`apply_heap_policy` fixes the policy before anything is timed, the same way in the
tracer and the live runner:

``steady`` (default)
    both thresholds pinned (``mallopt``): blocks up to 32 MiB come from the heap and the heap
    is never trimmed, so after the warm-up every event reuses the pages of the one before —
    the state a long-running server settles into when its allocator keeps memory (jemalloc,
    tcmalloc, or glibc with ``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=…``).
    Blocks above 32 MiB (ResNet-50's largest activations at batch 64) are still mapped per
    event: that cost is the same in every process and stays in the times.
``system``
    the allocator as the process found it (glibc's adaptive defaults): the times of a
    deployment that does not tune its allocator, regime and all; two runs may differ.

Where the C library is not glibc (macOS, musl) the policy cannot be set and the run records
``system``. GPU events allocate on the device (PyTorch's caching allocator), so the policy only
touches their host side.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

#: The policies :func:`apply_heap_policy` knows (``--heap``).
HEAP_POLICIES = ("steady", "system")
DEFAULT_HEAP = "steady"

#: glibc's mallopt parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: The largest mmap threshold glibc accepts on 64-bit (half its 64 MiB heap size).
MMAP_THRESHOLD = 32 * 2**20
#: Trim only beyond this much free memory at the heap's top (mallopt takes an int, so the
#: largest one: 2 GiB), in effect never during a run.
TRIM_THRESHOLD = 2**31 - 1


def _glibc():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") else None


def apply_heap_policy(policy: str) -> str:
    """Set the process's heap policy (once, before the warm-up) and return what was applied:
    ``steady`` or ``system``, the value a trace and a live run record as ``heap``."""
    if policy not in HEAP_POLICIES:
        raise ValueError(f"heap policy must be one of {', '.join(HEAP_POLICIES)}, not {policy!r}")
    if policy == "system":
        return "system"
    libc = _glibc()
    if libc is None:
        return "system"
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return "steady" if ok else "system"


def minor_faults() -> int | None:
    """The process's minor page faults so far (None where the OS does not count them)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


class FaultTally:
    """Minor page faults of each main-pass event, read just outside its timed region.

    The trace records their median and largest (metadata ``heap_faults``): near 0 under the
    ``steady`` policy; thousands per event mean the run's times depend on the heap's regime
    (``system`` policy, or blocks above 32 MiB mapped afresh for every event)."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self._start: int | None = None

    def before(self) -> None:
        self._start = minor_faults()

    def after(self) -> None:
        end = minor_faults()
        if self._start is not None and end is not None:
            self.counts.append(end - self._start)
        self._start = None

    def summary(self) -> dict[str, int] | None:
        if not self.counts:
            return None
        ordered = sorted(self.counts)
        return {"events": len(ordered), "median": int(ordered[len(ordered) // 2]), "max": int(ordered[-1])}
