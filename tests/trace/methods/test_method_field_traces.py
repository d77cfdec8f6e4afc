"""T3A, EATA and MEMO traced end to end on the demo data (reduced size) through the CLI: EATA
reads its Fisher samples from the demo set's clean split, T3A's support-set updates are
recorded as updates, so the amortised replay counts it as adapting, and MEMO, which keeps
nothing from a batch, records none and all its work in e."""

from __future__ import annotations

import pytest

from tempora_trace.cli import main


@pytest.fixture
def small_demo_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "tempora-home-demo"
    monkeypatch.setenv("TEMPORA_HOME", str(home))
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "64")
    return home


@pytest.mark.parametrize("method", ["t3a", "eata", pytest.param("memo", marks=pytest.mark.slow)])
def test_field_method_traces_on_the_demo(method, small_demo_home, tmp_path, capsys):
    from tempora_sim.sweeps.traces import load_traces

    out = tmp_path / "traces"
    argv = ["--dataset", "demo", "--model", "demo-resnet", "--method", method, "--device", "cpu", "--out", str(out)]
    # one warm-up batch and no timing-variability pass: neither is under test, and MEMO's
    # defaults (32 augmented views of every image) make each extra event cost seconds
    options = ["--batch-size", "16", "--warmup-batches", "1", "--timing-sample", "0", "--quiet"]
    assert main([*argv, "--domains", "gaussian_noise", *options]) == 0
    assert capsys.readouterr().err == ""
    (trace,) = load_traces(out).traces
    adapt = trace.adapt
    assert trace.method == method and adapt.height == 4
    params = trace.meta["method_params"]
    if method == "memo":
        assert not adapt["updated"].any() and params["n_augmentations"] == 32
        assert (adapt["e_ms"] > 10 * adapt["l_ms"]).all()  # the per-sample adaptation is intrinsic
        return
    assert adapt["updated"].any()
    if method == "t3a":
        assert params["filter_K"] == 100
    else:
        assert params["fisher_alpha"] == 1.0
