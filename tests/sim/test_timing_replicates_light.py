"""Light timing replicates (``replicates_of(..., measures=…)``): each replicate replays the same
rows into the measure columns the intervals read only, and a relabelling runs once, on the base.
The oracle is the full replicate set of the same sweep (every column, relabelled frame by frame):
the light set must hold the same numbers and give the same shifts, pooled over seeds or not."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tempora_sim import run_sweep
from tempora_sim.sweeps import synthetic as syn
from tempora_sim.sweeps.traces import load_traces
from tempora_sim.sweeps.utility_table import pool_seeds, pooling_inputs
from tempora_sim.uncertainty.term_intervals import ALL_TERMS
from tempora_sim.uncertainty.timing_replicates import INTERVAL_MEASURES, replicates_of

EPISODES = ("gaussian_noise", "fog")
KEYS = ["group", "method", "episode", "protocol", "value"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Three methods, two seeds, every paper protocol and one combined, with measured variability."""
    folder = tmp_path_factory.mktemp("light")
    var = syn.SyntheticVariability(0.1, 0.1)
    for seed in (2025, 2026):
        for m in ("standard", "tent", "eta"):
            syn.write_trace(folder / f"{m}-{seed}.parquet", m, episodes=EPISODES, num_batches=30, variability=var, seed=seed)
    ts = load_traces(folder, cache=False)
    return run_sweep(ts, protocols="offline,discrete,continuous,amortised,discrete-continuous", rho=[0.3, 1.0], T_ms=[400, 900])


def test_light_replicates_hold_the_full_replicates_numbers(swept):
    full = replicates_of(swept, 4, 3)
    light = replicates_of(swept, 4, 3, measures=ALL_TERMS)
    assert light.measures == pooling_inputs(ALL_TERMS) and full.measures is None
    assert light.count == full.count == 4
    for f, r in zip(full.reps, light.reps):
        assert r.columns == list(light.measures)
        assert r.equals(f.select(light.measures))  # same rows, same order, same values (nulls included)
    assert any(not f.get_column("utility").equals(swept.frame.get_column("utility")) for f in full.reps)  # timing moved them


def test_utility_only_pools_with_nothing_more():
    assert pooling_inputs(INTERVAL_MEASURES) == ("utility",)
    assert pooling_inputs(["served_acc", "cov"]) == ("served_acc", "cov", "served", "utility", "acc", "kappa")


@pytest.mark.parametrize("pool", [None, pool_seeds])
def test_light_shifts_equal_the_full_shifts_after_a_relabelling(swept, pool):
    """A relabelling that renames, filters and reorders rows (as the page's short keys and
    2-D cells do): applied to every full frame, or once to the light set's base."""
    codes = {m: f"m{i}" for i, m in enumerate(("eta", "standard", "tent"))}

    def relabel(f: pl.DataFrame) -> pl.DataFrame:
        return f.filter(pl.col("protocol") != "offline").with_columns(pl.col("method").replace_strict(codes)).sort("value", descending=True)

    full = replicates_of(swept, 5, 1).map(relabel)
    light = replicates_of(swept, 5, 1, measures=("utility", "served_acc", "kappa")).map(relabel)
    assert light.base.equals(full.base)
    index = relabel(swept.frame).filter(pl.col("episode") == "__all__").sample(fraction=1.0, shuffle=True, seed=5)
    keys = ["seed", *KEYS] if pool is None else KEYS
    want = full.shifts_of(index, keys, ["utility", "served_acc", "kappa"], pool=pool)
    got = light.shifts_of(index, keys, ["utility", "served_acc", "kappa"], pool=pool)
    for c in want:
        np.testing.assert_array_equal(got[c], want[c])
    assert np.abs(want["utility"]).sum() > 0


def test_a_light_set_refuses_what_it_did_not_replay_and_a_relabelling_that_drops_its_rows(swept):
    light = replicates_of(swept, 2, 0, measures=INTERVAL_MEASURES)
    with pytest.raises(ValueError, match="not 'acc'"):
        light.shifts_of(swept.frame, ["seed", *KEYS], ["acc"])
    with pytest.raises(ValueError, match="row index"):
        light.map(lambda f: f.select(KEYS))
