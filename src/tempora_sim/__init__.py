"""tempora_sim: replay schema-v2 (and v1) traces under any ρ / T / B grid. Never imports torch.

The notebook API is :mod:`tempora_sim.api` (``from tempora_sim import api as ts``: ``ts.sweep``,
``ts.report``, ``ts.advise``, ``ts.explore``, ``ts.validate``, ``ts.read_traces``;
docs/guide/python-api.md). ``tempora_sim.sweep(...)`` (defined in :mod:`tempora_sim.replay`) is
also here, imported on first use, so the command line starts (and answers ``--help``) without
loading polars and numba.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sweep", "run_sweep", "SweepOptions", "__version__"]

#: True in the ``tempora-sim`` program (set by :func:`tempora_sim.cli.run`), False when a
#: notebook or another program imports the package: process-wide shortcuts that only the
#: program may take (Numba's start, :func:`tempora_sim.replay.warm_kernels`) check it.
IN_PROGRAM = False


def __getattr__(name: str) -> Any:
    # The version is read from the package metadata (declared once, in pyproject.toml) on first
    # use, not at import: the command line installs its Ctrl-C guard after this module runs.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("tempora-tta")
        except PackageNotFoundError:  # a source tree on sys.path that was never installed
            return "0+unknown"
    if name in ("sweep", "run_sweep", "SweepOptions"):
        from . import replay

        return getattr(replay, name)
    raise AttributeError(f"module 'tempora_sim' has no attribute '{name}'")
