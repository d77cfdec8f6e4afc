"""TimingReplicates.shifts_of (tempora_sim.uncertainty.timing_replicates): the replicates' rows
matched to the base's once and read as one [rows, R] matrix give exactly the shifts of a
plain-Python reference that looks every row up in a dictionary, frame by frame."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from tempora_sim.uncertainty.timing_replicates import TimingReplicates

KEYS = ["group", "method", "episode", "protocol", "value"]


def mean_over_seeds(frame: pl.DataFrame) -> pl.DataFrame:
    """A pooling over seeds for the test: the plain mean of each column (nulls skipped)."""
    return frame.group_by(KEYS, maintain_order=True).agg(pl.col(c).mean() for c in ("utility", "acc") if c in frame.columns)


def sweep_frame(rng: np.random.Generator, seeds: int) -> pl.DataFrame:
    """A small sweep table: two groups, three methods, two episodes, an offline row (value
    null) and a grid of three values, per seed; some utilities null."""
    rows = []
    for seed in range(seeds):
        for group in ("g1", "g2"):
            for method in ("a", "b", "c"):
                for episode in ("__all__", "fog"):
                    for protocol, value in (("offline", None), ("discrete", 0.5), ("discrete", 1), ("discrete", 2.0)):
                        u = None if rng.random() < 0.1 else float(rng.random())
                        rows.append((group, method, episode, protocol, value, seed, u, float(rng.random())))
    return pl.DataFrame(
        rows,
        schema={
            "group": pl.String,
            "method": pl.String,
            "episode": pl.String,
            "protocol": pl.String,
            "value": pl.Float64,
            "seed": pl.Int64,
            "utility": pl.Float64,
            "acc": pl.Float64,
        },
        orient="row",
    )


def replicate_of(base: pl.DataFrame, rng: np.random.Generator, kind: str) -> pl.DataFrame:
    """A replicate: same rows and order with new values, or shuffled, or with rows missing and
    one extra, or a repeated row (the first counts), or without the ``acc`` column."""
    rep = base.with_columns(
        pl.Series("utility", [None if u is None or rng.random() < 0.1 else u + rng.normal(0, 0.05) for u in base["utility"]]),
        pl.Series("acc", base["acc"].to_numpy() + rng.normal(0, 0.05, base.height)),
    )
    if kind == "shuffled":
        return rep.sample(fraction=1.0, shuffle=True, seed=int(rng.integers(1 << 30)))
    if kind == "missing":
        extra = rep.head(1).with_columns(pl.lit("g9").alias("group"))
        return pl.concat([rep.filter(pl.Series(rng.random(rep.height) > 0.2)), extra])
    if kind == "repeated":
        first = rep.head(3).with_columns(pl.col("utility") + 10.0)
        return pl.concat([first, rep])
    if kind == "no acc":
        return rep.drop("acc")
    return rep


def reference_shifts(timing: TimingReplicates, index: pl.DataFrame, column: str, pool) -> np.ndarray:
    """Row by row: a dictionary of every frame's first row per key, the replicate's value minus
    the base's, 0 where either is missing or not finite."""
    frames = [timing.base, *timing.reps]
    if pool is not None and any(f.get_column("seed").n_unique() > 1 for f in frames):
        frames = [pool(f) for f in frames]

    def lookup(frame: pl.DataFrame) -> dict:
        table = {}
        for r in frame.iter_rows(named=True):
            key = tuple(float(r[k]) if k == "value" and r[k] is not None else r[k] for k in KEYS)
            table.setdefault(key, r.get(column))
        return table

    base, *reps = (lookup(f) for f in frames)
    out = np.zeros((index.height, len(reps)))
    for i, r in enumerate(index.iter_rows(named=True)):
        key = tuple(float(r[k]) if k == "value" and r[k] is not None else r[k] for k in KEYS)
        b = base.get(key)
        for j, rep in enumerate(reps):
            v = rep.get(key)
            if b is not None and v is not None and math.isfinite(v - b):
                out[i, j] = v - b
    return out


@pytest.mark.parametrize("seeds", [1, 2])
@pytest.mark.parametrize("case", range(4))
def test_shifts_equal_a_row_by_row_dictionary_lookup(seeds, case):
    rng = np.random.default_rng(100 * seeds + case)
    base = sweep_frame(rng, seeds)
    kinds = ["same order", "shuffled", "missing", "repeated", "no acc", "same order"]
    timing = TimingReplicates(base, [replicate_of(base, rng, k) for k in kinds])
    # the index: the base's keys shuffled, a key no frame holds, and an integer value column
    index = pl.concat(
        [
            base.select(KEYS).unique().sample(fraction=1.0, shuffle=True, seed=case),
            pl.DataFrame([("g1", "z", "fog", "discrete", 0.5)], schema=base.select(KEYS).schema, orient="row"),
        ]
    )
    pool = mean_over_seeds
    got = timing.shifts_of(index, KEYS, ["utility", "acc"], pool=pool)
    for column in ("utility", "acc"):
        want = reference_shifts(timing, index, column, pool)
        assert got[column].shape == (index.height, len(kinds))
        assert np.array_equal(got[column], want)
    # one column alone, asked again of the same (cached) matching, answers the same
    assert np.array_equal(timing.shifts(index, KEYS, "utility", pool=pool), got["utility"])
    # the shifts are not all zero: the test compares real values
    assert np.count_nonzero(got["utility"]) > index.height


def test_a_column_no_frame_holds_and_an_empty_index_shift_nothing():
    rng = np.random.default_rng(7)
    base = sweep_frame(rng, 1)
    timing = TimingReplicates(base, [replicate_of(base, rng, "same order") for _ in range(3)])
    index = base.select(KEYS)
    assert np.array_equal(timing.shifts(index, KEYS, "served"), np.zeros((index.height, 3)))
    assert timing.shifts(index.head(0), KEYS, "utility").shape == (0, 3)
    assert TimingReplicates(base, []).shifts(index, KEYS, "utility").shape == (index.height, 0)
