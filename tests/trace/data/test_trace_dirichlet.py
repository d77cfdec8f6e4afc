"""The Dirichlet label-shift stream order (docs/design/design.md §9 and the tracer docs)."""

from __future__ import annotations

import numpy as np
import pytest

from tempora_trace.data.streams import batch_order, dirichlet_order
from tempora_trace.errors import ConfigError


def _labels(n=2000, k=10, seed=0):
    return np.random.default_rng(seed).integers(0, k, n)


def _run_lengths(labels: np.ndarray) -> float:
    changes = np.count_nonzero(labels[1:] != labels[:-1])
    return len(labels) / (changes + 1)


def test_every_sample_at_most_once_and_full_batches():
    labels = _labels()
    batches = dirichlet_order(labels, 64, 2025, "fog", 0.1)
    flat = np.concatenate(batches)
    assert len(batches) == len(labels) // 64 and all(len(b) == 64 for b in batches)
    assert len(np.unique(flat)) == len(flat)


def test_small_alpha_gives_long_single_class_runs_large_alpha_approaches_iid():
    labels = _labels()
    runs = {a: _run_lengths(labels[np.concatenate(dirichlet_order(labels, 64, 1, "fog", a))]) for a in (0.01, 1.0, 1000.0)}
    iid = _run_lengths(labels[np.concatenate(batch_order(len(labels), 64, 1, "fog"))])
    assert runs[0.01] > 5 * runs[1.0] and runs[1.0] > iid
    assert runs[1000.0] == pytest.approx(iid, rel=0.2)
    # per-batch class diversity: small α batches hold few classes
    few = np.mean([len(np.unique(labels[b])) for b in dirichlet_order(labels, 64, 1, "fog", 0.01)])
    many = np.mean([len(np.unique(labels[b])) for b in dirichlet_order(labels, 64, 1, "fog", 1000.0)])
    assert few < 3 and many > 9


def test_seeded_by_seed_and_domain_only():
    labels = _labels()
    a = dirichlet_order(labels, 64, 7, "fog", 0.1)
    assert all(np.array_equal(x, y) for x, y in zip(a, dirichlet_order(labels, 64, 7, "fog", 0.1)))
    assert not np.array_equal(np.concatenate(a), np.concatenate(dirichlet_order(labels, 64, 7, "snow", 0.1)))
    assert len(dirichlet_order(labels, 64, 7, "fog", 0.1, max_batches=3)) == 3
    assert np.array_equal(dirichlet_order(labels, 64, 7, "fog", 0.1, max_batches=3)[2], a[2])


@pytest.mark.parametrize("alpha", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_alpha_is_a_config_error(alpha):
    with pytest.raises(ConfigError):
        dirichlet_order(_labels(100), 10, 1, "fog", alpha)


@pytest.mark.slow
def test_dirichlet_trace_is_its_own_group(tmp_path, monkeypatch):
    """A traced dirichlet stream records its α in the stream, names its file by it, resets per
    domain, and the simulator keeps it apart from the i.i.d. stream of the same setting."""
    import polars as pl

    from tempora_sim.sweeps.replay import run_sweep
    from tempora_trace.cli import main

    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "256")
    common = [
        "--dataset",
        "demo",
        "--domains",
        "gaussian_noise,fog",
        "--batch-size",
        "32",
        "--max-batches",
        "4",
        "--frozen-sample",
        "2",
        "--threads",
        "1",
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    for method in ("standard", "tent"):
        assert main(["run", "--method", method, *common]) == 0
        assert main(["run", "--method", method, "--stream", "dirichlet", "--dirichlet-alpha", "0.05", *common]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == [
        "standard-bs32-dirichlet0.05.parquet",
        "standard-bs32.parquet",
        "tent-bs32-dirichlet0.05.parquet",
        "tent-bs32.parquet",
    ]
    frame = run_sweep(tmp_path, protocols="offline").frame
    assert set(frame["stream"].unique()) == {"episodic", "dirichlet:0.05"}
    assert frame.filter(pl.col("episode") == "__all__").height == 4
    assert main(["run", "--method", "tent", "--dirichlet-alpha", "0.05", *common]) == 2
