"""The tempora-trace CLI: every bad input is one `error:` line and exit 2; good input writes a
trace the simulator reads; calibrate prints the simulator's λ."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.cifar import tiny_cifar_args
from tempora_trace.cli import main

pytestmark = pytest.mark.usefixtures("tiny_models")


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bad_cases(root, tmp):
    missing_cuda = "cuda:99" if torch.cuda.is_available() else "cuda"
    return {
        "unknown method": (["--method", "nope", *tiny_cifar_args(root, tmp)], "unknown method 'nope'"),
        "missing method": (tiny_cifar_args(root, tmp), "--method is required"),
        "unknown model": (["--method", "tent", "--model", "resnet1000"], "unknown model 'resnet1000'"),
        "unknown dataset": (["--method", "tent", "--dataset", "mnist-c"], "unknown dataset 'mnist-c'"),
        "unknown domain": (["--method", "tent", "--domains", "rain"], "unknown domain 'rain'"),
        "no data root": (["--method", "tent", "--dataset", "cifar10-c", "--model", "tiny-bn"], "needs --data-root"),
        "missing data root": (
            ["--method", "tent", "--dataset", "cifar10-c", "--model", "tiny-bn", "--data-root", tmp / "nowhere"],
            "is not a directory",
        ),
        "missing corruption file": (["--method", "tent", *tiny_cifar_args(root, tmp), "--domains", "snow"], "snow.npy"),
        "missing weights file": (["--method", "tent", "--dataset", "imagenet-c", "--weights", tmp / "none.pth"], "weights file not found"),
        "weights not in cache": (["--method", "tent", "--dataset", "imagenet-c", "--model", "resnet18"], "resnet18-f37072fd.pth"),
        "cuda absent": (["--method", "tent", "--device", missing_cuda, *tiny_cifar_args(root, tmp)], "CUDA"),
        "incompatible method": (
            ["--method", "adabn", *tiny_cifar_args(root, tmp), "--model", "tiny-gn"],
            "needs BatchNorm layers but model 'tiny-gn' uses GroupNorm; compatible built-in models: demo-resnet",
        ),
        "wrong input family": (
            ["--method", "tent", "--dataset", "cifar10-c", "--data-root", root, "--model", "resnet18", "--weights", "random"],
            "built for imagenet",
        ),
        "unknown method option": (["--method", "tent", "--param", "lr_typo=1", *tiny_cifar_args(root, tmp)], "has no option"),
        "budget without lambda": (["--method", "tent", "--budgets-ms", "100", *tiny_cifar_args(root, tmp)], "needs --lambda-ms"),
        "bad frozen sample": (["--method", "tent", "--frozen-sample", "many"], "expected a number ≥ 1 or 'all'"),
        "unknown flag": (["--method", "tent", "--bogus"], "no such option '--bogus'"),
        "bad severity": (["--method", "tent", "--severity", "9"], "'--severity': 9 is not in the range 1<=x<=5"),
        "nothing to resume": (["--method", "tent", "--resume", *tiny_cifar_args(root, tmp)], "nothing to resume"),
    }


CASES = list(bad_cases(Path("r"), Path("t")))


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2(case, cifar_c_root, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    monkeypatch.delenv("TEMPORA_DATA", raising=False)
    argv, needle = bad_cases(cifar_c_root, tmp_path)[case]
    code, out, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tempora-trace: error: "), err
    assert needle in lines[0]
    assert not list(tmp_path.rglob("*.partial")), "a rejected run must not leave a partial run behind"


def test_entry_point_reports_errors_without_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    proc = subprocess.run(
        [sys.executable, "-m", "tempora_trace.cli", "--method", "nope"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("tempora-trace: error: unknown method 'nope'") and "Traceback" not in proc.stderr


def test_cli_writes_a_trace_the_simulator_reads_and_calibrate_prints_its_lambda(cifar_c_root, tmp_path, capsys):
    from tempora_sim.sweeps.traces import lambda_from_standard, load_traces

    code, out, err = run(["--method", "tent", *tiny_cifar_args(cifar_c_root, tmp_path)], capsys)
    assert code == 0 and err == ""
    path = tmp_path / "tent-bs8.parquet"
    assert f"wrote {path}" in out
    code, out, _ = run(["calibrate", *tiny_cifar_args(cifar_c_root, tmp_path)[:-1]], capsys)
    assert code == 0
    assert out.splitlines()[0].startswith("fog") and "acc" in out  # the one-line episode summary
    traces = load_traces(tmp_path)
    assert sorted(t.method for t in traces.traces) == ["standard", "tent"]
    lam = lambda_from_standard(next(t for t in traces.traces if t.method == "standard"))
    assert f"λ = {lam:.3f} ms" in out
    code, out, _ = run(["calibrate", *tiny_cifar_args(cifar_c_root, tmp_path)], capsys)
    assert "using existing" in out and f"λ = {lam:.3f} ms" in out


def test_list_names_everything(capsys):
    code, out, _ = run(["--list"], capsys)
    assert code == 0
    for name in ("standard", "adabn", "tent", "resnet50", "vit_base_patch16_224", "cifar-resnet18", "imagenet-c", "demo"):
        assert name in out
