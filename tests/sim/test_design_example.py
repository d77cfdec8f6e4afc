"""The worked example of docs/design/design.md §4, replayed by the simulator.

The design document promises that every number can be checked by hand; this test keeps its
worked example (one episode, N = 4, λ = 40 ms) true for the Numba kernels and the reference
engine alike, so the document and the code cannot drift apart.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tempora_schema import arrow_schema
from tempora_sim import sweep
from tempora_sim.sweeps.synthetic import make_trace

A_CORRECT = [4, 6, 8, 2]  # of n = 8: a = 0.5, 0.75, 1.0, 0.25
E_MS = [30.0, 40.0, 20.0, 30.0]
L_MS = [20.0, 40.0, 0.0, 30.0]
#: frozen rows (checkpoint, step, correct): checkpoint 0 scores 4/8 on steps 0–3, checkpoint 2
#: scores 6/8 on step 2 and 2/8 on step 3.
FROZEN = [(0, 0, 4), (0, 1, 4), (0, 2, 4), (0, 3, 4), (2, 2, 6), (2, 3, 2)]
LAMBDA_MS = 40.0


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    meta, _ = make_trace("tent", episodes=["ep"], num_batches=4, batch_size=8, num_classes=10, checkpoints=None)
    rows = {name: [] for name in arrow_schema().names}

    def add(phase, checkpoint, step, correct, e, l):
        values = dict(
            episode="ep",
            domain="ep",
            severity=None,
            phase=phase,
            checkpoint=checkpoint,
            step=step,
            n=8,
            correct=correct,
            e_ms=e,
            l_ms=l,
            delta_ms=e + l,
            updated=phase == "adapt",
            peak_mem_bytes=None,
        )
        for name in rows:
            rows[name].append(values.get(name))

    for i in range(4):
        add("adapt", -1, i, A_CORRECT[i], E_MS[i], L_MS[i])
    for checkpoint, step, correct in FROZEN:
        add("frozen", checkpoint, step, correct, 10.0, 0.0)
    path = tmp_path_factory.mktemp("design-example") / "tent.parquet"
    pq.write_table(pa.table(rows, schema=arrow_schema(meta)), path)
    return path


def _rows(path, engine, **options):
    frame = sweep(path, lambda_ms=LAMBDA_MS, engine=engine, **options)
    return frame.filter(frame["episode"] == "ep")


def _one(frame, protocol, value=None):
    picked = frame.filter(frame["protocol"] == protocol)
    if value is not None:
        picked = picked.filter((picked["value"] - value).abs() < 1e-9)
    assert picked.height == 1, (protocol, value, picked)
    return picked.row(0, named=True)


@pytest.mark.parametrize("engine", ["numba", "python"])
def test_offline_continuous_and_discrete(example, engine):
    frame = _rows(example, engine, protocols="offline,discrete,continuous", rho="1", T_ms="100")
    assert _one(frame, "offline")["utility"] == pytest.approx(0.625)
    disc = _one(frame, "discrete", 1.0)
    assert (disc["served"], disc["alpha"]) == (3, pytest.approx(0.75))
    assert disc["served_acc"] == pytest.approx(0.75)
    assert disc["utility"] == pytest.approx(0.5625)
    cont = _one(frame, "continuous", 100.0)
    assert cont["acc"] == pytest.approx(0.625)
    assert cont["kappa"] == pytest.approx(0.875)
    assert cont["utility"] == pytest.approx(0.515625)
    assert cont["cov"] == pytest.approx(-0.03125)


@pytest.mark.parametrize("engine", ["numba", "python"])
@pytest.mark.parametrize(
    "options, served, utility",
    [
        (dict(fallback=True), 3, 0.75),
        (dict(skipped="random"), 3, 0.5875),
        (dict(queue=0), 2, 0.3125),
        (dict(sync="strict"), 2, 0.3125),
    ],
)
def test_discrete_variants(example, engine, options, served, utility):
    disc = _one(_rows(example, engine, protocols="discrete", rho="1", **options), "discrete", 1.0)
    assert disc["served"] == served
    assert disc["utility"] == pytest.approx(utility)


@pytest.mark.parametrize("engine", ["numba", "python"])
def test_amortised_cutoffs_and_frozen_lookup(example, engine):
    strict = _rows(example, engine, protocols="amortised", B_ms="10,40,50,100")
    assert [_one(strict, "amortised", b)["m"] for b in (10, 40, 50, 100)] == [1, 1, 3, 4]
    b50 = _one(strict, "amortised", 50)
    assert (b50["acc_adapt"], b50["acc_frozen"], b50["frozen_gap"]) == (pytest.approx(0.75), pytest.approx(0.25), 1)
    assert b50["utility"] == pytest.approx(0.625)
    b40 = _one(strict, "amortised", 40)
    assert (b40["acc_frozen"], b40["utility"]) == (pytest.approx(0.5), pytest.approx(0.5))
    overshoot = _rows(example, engine, protocols="amortised", B_ms="0,10,40,60", budget_rule="overshoot")
    assert [_one(overshoot, "amortised", b)["m"] for b in (0, 10, 40, 60)] == [0, 1, 2, 4]
