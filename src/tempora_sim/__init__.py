"""tempora_sim: replay schema-v2 (and v1) traces under any ρ / T / B grid. Never imports torch.

``tempora_sim.sweep(...)`` is the notebook API (defined in :mod:`tempora_sim.replay`).
"""

__version__ = "0.1.0"

from .replay import run_sweep, sweep  # noqa: E402  (numba itself is only imported on first replay)

__all__ = ["sweep", "run_sweep", "__version__"]
