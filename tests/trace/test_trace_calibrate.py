"""`tempora-trace calibrate`: the spread of standard's δ beside λ, and the noisy-machine warning
(hand-worked examples)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tempora_trace.calibration import dispersion, dispersion_lines


def test_hand_worked_noisy_example():
    # nine 10 ms batches and one 40 ms hiccup: mean 13, σ = √((9·9 + 27²)/10) = 9, median 10
    deltas = [10.0] * 9 + [40.0]
    disp = dispersion(["fog"] * 10, list(range(10)), deltas)
    assert (disp.count, disp.mean_ms, disp.median_ms, disp.max_ms) == (10, 13.0, 10.0, 40.0)
    assert math.isclose(disp.std_ms, 9.0) and math.isclose(disp.cv, 9 / 13) and disp.max_over_median == 4.0
    assert disp.largest == (("fog", 9, 40.0), ("fog", 0, 10.0), ("fog", 1, 10.0), ("fog", 2, 10.0), ("fog", 3, 10.0))
    lines = dispersion_lines(disp)
    assert lines[0] == "spread: σ/mean 69.23 %, max/median 4.00 (median 10.000 ms, max 40.000 ms)"
    assert lines[1].startswith("largest δ: 40.000 ms (fog step 9), 10.000 ms (fog step 0)")
    # robust rule: median 10, MAD 0 → λ = 10 (the hiccup moves it not at all; mean + 6σ = 67)
    assert disp.robust_lambda_ms == 10.0 and lines[2].startswith("robust rule: λ = 10.000 ms")
    assert len(lines) == 4 and lines[3].startswith("warning: this machine looks noisy")
    assert "69.2 % of the mean (> 2 %)" in lines[3] and "at fog step 9 is 4.0× the median (> 3×)" in lines[3]


@pytest.mark.parametrize(
    "deltas, warns",
    [
        ([10.0, 10.1, 9.9, 10.0], False),  # σ 0.0707 = 0.71 % of the mean, max/median 1.01
        ([10.0, 10.6, 9.4, 10.0], True),  # σ 0.42 = 4.2 % of the mean
        ([10.0] * 200 + [31.0], True),  # σ/mean 1.0 % but one δ at 3.1× the median
    ],
)
def test_warning_thresholds(deltas, warns):
    lines = dispersion_lines(dispersion(["a"] * len(deltas), list(range(len(deltas))), deltas))
    assert any(line.startswith("warning:") for line in lines) is warns
    assert len(lines) == 3 + warns


def test_calibrate_prints_spread_under_lambda(cifar_c_root, tmp_path, capsys, one_thread, tiny_models):
    from tempora_trace.cli import lambda_ms_of, main

    args = [
        "calibrate",
        "--dataset",
        "cifar10-c",
        "--data-root",
        str(cifar_c_root),
        "--domains",
        "fog",
        "--batch-size",
        "8",
        "--model",
        "tiny-bn",
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    lam = lambda_ms_of(tmp_path / "standard-bs8.parquet")[0]
    i = next(k for k, line in enumerate(out) if line.startswith("λ = "))
    assert out[i].startswith(f"λ = {lam:.3f} ms")
    assert out[i + 1].startswith("spread: σ/mean ") and out[i + 2].startswith("largest δ: ")
    assert out[i + 2].count(" step ") == 4  # four adapt rows: all of them listed
    assert out[i + 3].startswith("robust rule: λ = ")


def test_calibrate_library_traces_once_then_reuses(cifar_c_root, tmp_path, one_thread, tiny_models):
    from tempora_trace.calibration import calibrate, lambda_ms_of
    from tempora_trace.config import TraceConfig

    cfg = TraceConfig(
        dataset="cifar10-c", data_root=str(cifar_c_root), domains=["fog"], batch_size=8, model="tiny-bn", out=str(tmp_path), quiet=True
    ).resolved()
    first = calibrate(cfg)
    assert not first.reused and first.path == tmp_path / "standard-bs8.parquet" and first.batches == 4
    assert (first.lambda_ms, first.mean_ms, first.std_ms, first.batches) == lambda_ms_of(first.path)
    assert math.isclose(first.lambda_ms, first.mean_ms + 6 * first.std_ms)
    mtime = first.path.stat().st_mtime_ns
    again = calibrate(cfg)
    assert again.reused and again == dataclasses.replace(first, reused=True) and first.path.stat().st_mtime_ns == mtime
