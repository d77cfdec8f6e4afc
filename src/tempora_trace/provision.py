"""λ of a finished ``standard`` trace, read back from its file.

Its own module because both ``tempora-trace calibrate`` (cli) and campaigns (campaign, which
the cli also runs) need it; the formula itself lives once, in ``tempora_schema.provision``.
"""

from __future__ import annotations

from pathlib import Path


def lambda_ms_of(path: Path) -> tuple[float, float, float, int]:
    """λ = mean + 6σ (population σ) of the adapt-row δ of a `standard` trace: (λ, mean, σ, batches)."""
    import numpy as np
    import pyarrow.parquet as pq

    from tempora_schema.provision import lambda_provision

    table = pq.read_table(path, columns=["phase", "delta_ms"]).to_pydict()
    deltas = np.array([d for p, d in zip(table["phase"], table["delta_ms"]) if p == "adapt"], dtype=float)
    lam, mean, std = lambda_provision(deltas)
    return lam, mean, std, len(deltas)
