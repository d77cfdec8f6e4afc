"""tempora_sim: replay schema-v2 (and v1) traces under any ρ / T / B grid. Never imports torch.

The notebook API: ``import tempora_sim as ts``, then ``ts.sweep``, ``ts.report``, ``ts.advise``,
``ts.explore``, ``ts.validate``, ``ts.read_traces`` (defined in :mod:`tempora_sim.api`;
docs/guide/python-api.md). They are imported on first use, so the command line starts (and
answers ``--help``) without loading polars and numba.

The package is in wings, each layered on the ones below it (``make lint`` checks the order):
``engine`` (kernels, oracle, grids, arrivals, the idle rule) → ``protocols`` → ``sweeps``
(options, traces, replay, scenarios, the utility table, the timing-variability model) →
``uncertainty`` (bootstrap, timing replicates, term intervals, coverage) → ``analyses`` →
``prediction`` → ``exploration`` → ``reporting`` → ``validation`` → ``api`` → ``commands``.
"""

from __future__ import annotations

from typing import Any

#: The notebook API (tempora_sim.api) and the sweep's entry points (tempora_sim.sweeps.replay).
_API = ("sweep", "report", "advise", "explore", "validate", "read_traces", "Advice")
_SWEEP = ("run_sweep", "SweepOptions")

__all__ = [*_API, *_SWEEP, "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from tempora_sim.process import version

        return version()
    if name in _API:
        from tempora_sim import api

        return getattr(api, name)
    if name in _SWEEP:
        from tempora_sim.sweeps import replay

        return getattr(replay, name)
    raise AttributeError(f"module 'tempora_sim' has no attribute '{name}'")
