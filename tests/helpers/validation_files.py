"""Synthetic trace and live-run folders for the tests of ``tempora-sim validate``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tempora_sim.sweeps import synthetic as syn


def write_validation_set(
    tmp: Path, variability, live_factors: Sequence[np.ndarray], rhos: Sequence[float], episodes: Sequence[str], num_batches: int, **trace_kw
) -> tuple[Path, Path]:
    """Traces of ``standard`` and ``tent`` under ``tmp/t`` and, under ``tmp/l``, one live file of
    ``tent`` per ρ of ``rhos`` (``tent-<ρ>.parquet``), one run per entry of ``live_factors``
    (each event's traced time × its factor); λ = mean + 6σ of standard's δ. Returns (live, traces)."""
    (tmp / "t").mkdir(parents=True)
    (tmp / "l").mkdir()
    tables = {}
    for m in ("standard", "tent"):
        meta, table = syn.make_trace(m, episodes=episodes, num_batches=num_batches, variability=variability, **trace_kw)
        pq.write_table(table, tmp / "t" / f"{m}.parquet")
        tables[m] = (meta, table)
    std = tables["standard"][1]
    delta = np.asarray(std.filter(pc.equal(std.column("phase"), "adapt")).column("delta_ms").to_pylist())
    lam = float(delta.mean() + 6 * delta.std())
    for rho in rhos:
        _, live = syn.make_live(*tables["tent"], rho, live_factors, queue=1, lambda_ms=lam)
        pq.write_table(live, tmp / "l" / f"tent-{rho:g}.parquet")
    return tmp / "l", tmp / "t"
