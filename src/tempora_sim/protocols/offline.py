"""Offline: plain accuracy, no time pressure (the paper's reference column)."""

from __future__ import annotations

import numpy as np

from tempora_sim.protocols.base import Protocol, Rows, series_slices


class Offline(Protocol):
    name = "offline"
    title = "Offline utility (%): mean accuracy, no time pressure"
    page_terms = (("acc", "accuracy ā", "frac"),)

    def replay_numba(self, series, values, replay) -> dict:
        from tempora_sim.engine import kernels as K  # Numba loads only when a kernel runs

        K.use_threads(int(series.a.shape[0]))
        return {"sum_a": K.offline_kernel(series.a, series.offsets)}

    def replay_python(self, series, values, replay) -> dict:
        return {"sum_a": np.array([sum(series.a[x].tolist()) for x in series_slices(series)])}

    def batch_scores(self, row: dict, a, j, delays) -> np.ndarray:
        return a.copy()

    def batch_score_rows(self, rows, a, j, delays) -> np.ndarray:
        return np.tile(a, (rows.height, 1))

    def columns(self, rows: Rows, stats: dict) -> dict[str, np.ndarray]:
        return {"utility": rows.reduce(stats["sum_a"]) / rows.NN}


PROTOCOL = Offline()
