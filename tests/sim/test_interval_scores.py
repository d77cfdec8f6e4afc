"""The per-corruption intervals' fast path against a plain reference: every protocol's score
matrix equals its per-row scores bit for bit, and the cells' bootstrap draws equal those of the
cell-by-cell construction (each cell's scores concatenated in seed order, stacked by length)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tempora_sim import analyses as an
from tempora_sim import run_sweep
from tempora_sim.sweeps.traces import load_traces
from tempora_sim.sweeps.utility_table import POOLED, SEED, group_columns
from tempora_sim.uncertainty import bootstrap as st

DEMO = Path(__file__).resolve().parents[2] / "traces" / "demo" / "demo-resnet"


@pytest.fixture(scope="module")
def demo():
    ts = load_traces(DEMO, cache=False)
    res = run_sweep(ts, protocols="offline,discrete,continuous,amortised", rho=[1.0, 0.5, 0.25], T_ms=[100, 400], B_ms=[2000, 8000])
    rows = an.align_group_dtypes(an.trace_rows(ts.traces), res.frame)
    return res.frame, rows


@pytest.fixture(scope="module")
def two_seeds(demo):
    """The demo with a second seed listed first (the cells concatenate seeds in seed order) whose
    episodes have fewer batches, more in some episodes than in others (cells of several lengths),
    and which lacks one method's episode (rows over other units)."""
    frame, rows = demo
    seed = frame.get_column(SEED)[0]
    other = rows.with_columns(pl.lit(seed + 1).cast(rows.schema[SEED]).alias(SEED)).filter(
        pl.col("step") < pl.col("step").max().over("method", "episode") - pl.col("episode").rank("dense") % 3
    )
    later = frame.with_columns(pl.lit(seed + 1).cast(frame.schema[SEED]).alias(SEED), (pl.col("utility") * 0.9).alias("utility"))
    first = frame.row(0, named=True)  # one method's episode only in the first seed: cells and units of another make-up
    later = later.filter((pl.col("method") != first["method"]) | (pl.col("episode") != first["episode"]))
    return pl.concat([later, frame]), pl.concat([other, rows])


def _episodes(frame, rows):
    per_ep = frame.filter((pl.col("episode") != POOLED) & pl.col("utility").is_not_null())
    sk = [c for c in group_columns(frame) if c in rows.columns] + [SEED]
    by_trace = (
        rows.filter(pl.col("phase") == "adapt")
        .sort(sk + ["method", "episode", "step"])
        .partition_by(sk + ["method", "episode"], as_dict=True)
    )
    for key, urows in per_ep.partition_by(sk + ["method", "episode"], as_dict=True).items():
        if key in by_trace:
            yield urows, by_trace[key]


def test_score_matrix_equals_the_per_row_scores_bit_for_bit(demo):
    frame, rows = demo
    seen = set()
    for urows, trows in _episodes(frame, rows):
        matrix = st.batch_score_matrix(trows, urows)
        expected = st.batch_scores(trows, urows)
        assert matrix.shape == (len(expected), trows.height)
        for got, want in zip(matrix, expected):
            assert got.tobytes() == want.tobytes()
        seen.update(urows.get_column("protocol").to_list())
    assert seen == {"offline", "discrete", "continuous", "amortised"}


@pytest.mark.parametrize("case", ["demo", "two_seeds"])
def test_cell_draws_equal_the_cell_by_cell_construction(case, request):
    frame, rows = request.getfixturevalue(case)
    opts = st.BootstrapOptions(resamples=200, seed=3)
    got = an.utility_intervals(frame, rows, opts, pooled=False)
    names = group_columns(frame) + ["method", "episode", "protocol", "value"]
    cells: dict[tuple, list] = {}
    for urows, trows in _episodes(frame, rows):
        seed = urows.get_column(SEED)[0]
        for r, s in zip(urows.iter_rows(named=True), st.batch_scores(trows, urows)):
            cells.setdefault(tuple(r[c] for c in names), []).append((seed, s))
    reference = [(dict(zip(names, k)), np.concatenate([s for _, s in sorted(v, key=lambda x: x[0])])) for k, v in cells.items()]
    want = st.episode_intervals(reference, opts)
    assert got.index.equals(want.index) and got.index.height == len(reference) > 0
    assert got.boot.tobytes() == want.boot.tobytes()
    if case == "two_seeds":  # one seed's cells and concatenated cells of several lengths
        one = rows.filter(pl.col(SEED) == frame.get_column(SEED)[-1]).group_by("method", "episode").len()["len"].max()
        lengths = {v.size for _, v in reference}
        assert one in lengths and len({n for n in lengths if n > one}) > 1


@pytest.mark.parametrize("case", ["demo", "two_seeds"])
def test_pooled_draws_equal_the_row_by_row_construction(case, request):
    frame, _ = request.getfixturevalue(case)
    opts = st.BootstrapOptions(resamples=200, seed=5)
    got = an.utility_intervals(frame, None, opts)
    g = group_columns(frame)
    per_ep = frame.filter((pl.col("episode") != POOLED) & pl.col("utility").is_not_null()).sort(SEED, "episode")
    rows: dict[tuple, list] = {}
    for r in per_ep.iter_rows(named=True):
        rows.setdefault(tuple(r[c] for c in g + ["method", "protocol", "value"]), []).append(r)
    units = [
        (
            dict(zip(g + ["method"], k[:-2])) | {"episode": POOLED, "protocol": k[-2], "value": k[-1]},
            np.array([r["utility"] for r in v]),
            np.array([float(r["num_batches"]) for r in v]),
            tuple(f"{r[SEED]}/{r['episode']}" for r in v),
        )
        for k, v in rows.items()
    ]
    want = st.unit_intervals(units, opts)
    assert got.index.equals(want.index) and got.index.height == len(units) > 0
    assert got.boot.tobytes() == want.boot.tobytes()
    assert got.index.get_column("pair").n_unique() == (2 if case == "two_seeds" else 1)
