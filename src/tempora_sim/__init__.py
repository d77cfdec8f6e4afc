"""tempora_sim: replay schema-v1 traces under any ρ / T / B grid. Never imports torch.

``tempora_sim.sweep(...)`` is the notebook API (defined in :mod:`tempora_sim.replay`).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tempora")  # the one place it is declared: pyproject.toml
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

from .replay import run_sweep, sweep  # noqa: E402  (numba itself is only imported on first replay)

__all__ = ["sweep", "run_sweep", "__version__"]
