"""The issue's acceptance command on the demo data (reduced size): the CLI writes a valid
trace with the committed demo model that the simulator loads, on CPU."""

from __future__ import annotations

import os

import pytest

from tempora_trace.cli import main


@pytest.fixture
def small_demo_home(tmp_path_factory, monkeypatch):
    """A private $TEMPORA_HOME with a reduced demo test split (64 images)."""
    home = tmp_path_factory.getbasetemp() / "tempora-home-demo"
    monkeypatch.setenv("TEMPORA_HOME", str(home))
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "64")
    return home


def test_demo_tent_trace_is_read_by_the_simulator(small_demo_home, tmp_path, capsys):
    from tempora_sim.sweeps.traces import load_traces

    out = tmp_path / "traces" / "demo"
    argv = [
        "--dataset",
        "demo",
        "--model",
        "demo-resnet",
        "--method",
        "tent",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--domains",
        "gaussian_noise",
        "brightness",
        "--batch-size",
        "16",
        "--quiet",
    ]
    assert main(argv) == 0
    assert main([a if a != "tent" else "standard" for a in argv]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    traces = load_traces(out)
    by_method = {t.method: t for t in traces.traces}
    assert set(by_method) == {"standard", "tent"}
    tent = by_method["tent"]
    assert tent.meta["dataset"] == "demo" and tent.meta["model"] == "demo-resnet" and tent.meta["num_classes"] == 10
    adapt = tent.adapt
    assert adapt.height == 2 * 4 and set(adapt["episode"].to_list()) == {"gaussian_noise", "brightness"}
    assert (adapt["l_ms"] > 0).all()
    std_adapt = by_method["standard"].adapt.filter(by_method["standard"].adapt["episode"] == "brightness")
    # the committed demo weights are loaded: far above chance (10 %) on the mildest corruption
    assert std_adapt["correct"].sum() / std_adapt["n"].sum() > 0.5
    assert sorted(os.listdir(out)) == ["standard-bs16.parquet", "tent-bs16.parquet"]


def test_a_machine_that_changes_speed_during_a_trace_is_named_once_it_is_written(small_demo_home, tmp_path, monkeypatch, capsys):
    """Four episodes probe the machine once each; the probe reads 2 ms twice, then 1.5 ms (the
    machine a quarter faster from the third episode on): the trace is written and one warning
    line says by how much its speed moved. A steady probe, or one slow probe, says nothing."""
    from tempora_trace import timing

    def run(times, name):
        it = iter(times)
        monkeypatch.setattr(timing.SpeedProbe, "measure", lambda self: next(it))
        argv = ["--dataset", "demo", "--model", "demo-resnet", "--method", "standard", "--device", "cpu", "--out", str(tmp_path)]
        options = ["--domains", "gaussian_noise", "fog", "contrast", "brightness", "--batch-size", "16", "--timing-sample", "0"]
        assert main([*argv, *options, "--name", name, "--quiet"]) == 0
        return capsys.readouterr().err

    err = run([2.0, 2.0, 1.5, 1.5], "moved")
    assert err.count("\n") == 1 and err.startswith("tempora-trace: warning: the machine's speed moved 33 % during this trace")
    assert "(medians of three successive speed probes, 1.50–2.00 ms)" in err and (tmp_path / "moved.parquet").exists()
    assert run([2.0, 2.0, 2.0, 2.0], "steady") == "" and run([2.0, 3.0, 2.0, 2.0], "one-slow-probe") == ""


def test_batchnorm_only_method_on_the_group_norm_demo_model_is_refused(capsys):
    assert main(["--method", "adabn", "--model", "demo-resnet-gn", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "tempora-trace: error: method 'adabn' needs BatchNorm layers but model 'demo-resnet-gn' uses GroupNorm; "
        "compatible built-in models: demo-resnet, resnet18, resnet50, cifar-resnet18, mobilenet_v2, mobilenet_v3_small"
    )
