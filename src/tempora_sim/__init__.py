"""tempora_sim: replay schema-v2 (and v1) traces under any ρ / T / B grid. Never imports torch.

``tempora_sim.sweep(...)`` is the notebook API (defined in :mod:`tempora_sim.replay`). It is
imported on first use, so the command line starts (and answers ``--help``) without loading
polars and numba.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("tempora")  # the one place it is declared: pyproject.toml
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

__all__ = ["sweep", "run_sweep", "SweepOptions", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("sweep", "run_sweep", "SweepOptions"):
        from . import replay

        return getattr(replay, name)
    raise AttributeError(f"module 'tempora_sim' has no attribute '{name}'")
