"""Fill Numba's on-disk cache with every replay kernel, once: ``make install`` runs
``python -m tempora_sim.sweeps.kernel_cache``.

Numba compiles a kernel the first time a process calls it and keeps the machine code beside
the source (``__pycache__``), keyed by the source file. A fresh install has none, so each of
its first sweeps compiles every kernel it calls (about 14 s of CPU on a 2-core machine), and
a test run starts several such processes at once. Compiled here once, every later process
loads them in under a second. Nothing depends on this having run: a kernel missing from the
cache is compiled where it is first called, as before.
"""

from __future__ import annotations

import sys
import time

from tempora_sim import protocols as P
from tempora_sim.protocols.base import warm_inputs
from tempora_sim.sweeps.replay import warm_kernels
from tempora_sim.sweeps.variability import warm_idle_kernel


def compile_every_kernel() -> float:
    """Compile (or load) every kernel the replay, its idle effect and ``validate`` call; seconds spent."""
    t0 = time.perf_counter()
    warm_kernels([*P.single(), "arrivals"])
    warm_idle_kernel()
    from tempora_sim.engine import kernels as K

    a = warm_inputs()[0]
    K.discrete_served(a, 1.5, 1, False)  # the served set of a live run (validate)
    return time.perf_counter() - t0


def main() -> int:
    seconds = compile_every_kernel()
    print(f"replay kernels in Numba's cache ({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
