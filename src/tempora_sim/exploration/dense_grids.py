"""The page's dense grids: the values of ρ, T and B every view of a comparison group is replayed on.

Denser than the paper's grids, and including the group's own checkpoint budgets and the values
where its methods' standings change, so the page's curves and maps have no gaps where a winner
switches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl

from tempora_sim.engine import grids


@dataclass(frozen=True)
class GroupGrids:
    rho: tuple[float, ...]
    T_ms: tuple[float, ...]
    B_ms: tuple[float, ...]
    rho2: tuple[float, ...]
    T2_ms: tuple[float, ...]
    B2_ms: tuple[float, ...]

    def dense(self, param: str) -> tuple[float, ...]:
        """The dense grid of one parameter (a one-parameter view's x axis)."""
        return {"rho": self.rho, "T_ms": self.T_ms, "B_ms": self.B_ms}[param]

    def dense_2d(self, param: str) -> tuple[float, ...]:
        """The second axis of a combined view (its first is ``rho2``)."""
        return {"T_ms": self.T2_ms, "B_ms": self.B2_ms}[param]


# ----------------------------------------------------------------------------- grids
def _union(*parts: Sequence[float], digits: int = 9) -> tuple[float, ...]:
    vals = {round(float(v), digits) for p in parts for v in p if v is not None and math.isfinite(float(v))}
    return tuple(sorted(vals))


def checkpoint_budgets(members, lam: float) -> list[float]:
    """Per method and frozen checkpoint m*: the budget at which the method has adapted m*
    batches in every episode (the largest over episodes of the overhead spent before batch m*,
    overhead c = max(0, δ − λ) as the amortised replay counts it)."""
    out: list[float] = []
    for t in members:
        ad = t.adapt.select("episode", "delta_ms")
        if not ad.height:
            continue
        spent: dict[str, np.ndarray] = {}
        for ep, part in ad.partition_by("episode", as_dict=True).items():
            c = np.clip(part.get_column("delta_ms").to_numpy() - lam, 0.0, None)
            spent[ep[0]] = np.concatenate(([0.0], np.cumsum(c)))
        fr = getattr(t, "frozen", None)
        if fr is None or not fr.height or "checkpoint" not in fr.columns:
            continue
        for ck in sorted(set(fr.get_column("checkpoint").to_list())):
            ck = int(ck)
            if ck <= 0:
                continue
            reach = [s[ck] for s in spent.values() if ck < s.size]
            if reach:
                out.append(float(max(reach)))
    return out


def group_grids(members, lam_max: float, opts) -> GroupGrids:
    """The dense grids of one group (``opts``: the resolved sweep options; their grids join)."""
    rho = _union(np.arange(1, POINTS + 1) / POINTS, opts.rho)
    t_hi = max(2000.0, 40 * lam_max, max(opts.T_ms) if opts.explicit_T else 0.0)
    t_lo = lam_max * 1.01
    t_default = [] if opts.explicit_T else [v for v in grids.DEFAULT_T_MS if v > lam_max]
    T = _union(np.geomspace(t_lo, t_hi, POINTS), t_default, opts.T_ms if opts.explicit_T else ())
    spend = 0.0
    for t in members:
        ad = t.adapt.select("episode", "delta_ms")
        if ad.height:
            per = (
                ad.with_columns((pl.col("delta_ms") - lam_max).clip(lower_bound=0.0).alias("c")).group_by("episode").agg(pl.col("c").sum())
            )
            spend = max(spend, float(per.get_column("c").max() or 0.0))
    b_hi = max(spend * 1.05, max(opts.B_ms) if opts.B_ms else 0.0, 1000.0)
    ck = checkpoint_budgets(members, lam_max)
    B = _union([0.0], np.geomspace(1.0, b_hi, POINTS), opts.B_ms, ck)
    rho2 = _union(np.linspace(1.0 / POINTS_2D, 1.0, POINTS_2D))
    T2 = _union(np.geomspace(t_lo, t_hi, POINTS_2D))
    B2 = _union([0.0], np.geomspace(1.0, b_hi, POINTS_2D - 1))
    return GroupGrids(rho, T, B, rho2, T2, B2)


#: Values of each one-parameter grid (before the given and default values are added).
POINTS = 100


#: Values per axis of the combined protocols' 2-D grids.
POINTS_2D = 20
