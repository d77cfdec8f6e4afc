"""Predicted traces (tempora_sim.prediction.transfer, prediction_check, the timing-noise term, the commands):
identical devices give back the source times, known phase factors are recovered, intervals widen
with the transfer's error, predicted traces read in every command, and bad input is one line,
exit 2, nothing written. Synthetic traces and profiles (tempora_sim.sweeps.synthetic) keep it fast."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

import tempora_schema as schema
from tempora_schema.prediction import PREDICTED_KEY, PREDICTED_MARK, measured_device
from tempora_sim import analyses as an
from tempora_sim import run_sweep
from tempora_sim.commands.main import main
from tempora_sim.prediction.check import validate_prediction
from tempora_sim.prediction.transfer import (
    Pairs,
    PredictionError,
    choose_kind,
    fit_phase,
    fit_transfer,
    fold_ids,
    predict,
    trace_bytes,
    write_prediction,
)
from tempora_sim.sweeps import synthetic as syn
from tempora_sim.sweeps import variability
from tempora_sim.sweeps.traces import load_traces
from tempora_sim.uncertainty import bootstrap as st
from tempora_sim.uncertainty import timing_replicates
from tempora_sim.uncertainty.timing_replicates import replicates_of

EPISODES = ("gaussian_noise", "fog", "contrast")
METHODS = ("standard", "adabn", "tent", "sar")
SOURCE, TARGET = "cuda:source-gpu", "cpu:target-board"


def write_setting(
    root: Path,
    *,
    e_factor: float = 1.0,
    l_factor: float = 1.0,
    noise_sd: float = 0.0,
    methods=METHODS,
    batches: int = 8,
    num_batches: int = 40,
    model: str = "resnet50",
    target_overrides: dict | None = None,
) -> dict[str, Path]:
    """Source traces (``SOURCE``), full target traces and profiles of them (``TARGET``)."""
    var = syn.SyntheticVariability(pass_sd=0.02, event_sd=0.01, per_episode=4, episodes=3)
    for i, m in enumerate(methods):
        meta, table = syn.make_trace(
            m, episodes=EPISODES, num_batches=num_batches, device=SOURCE, probe_ms=2.0, variability=var, model=model, rng_seed=11 + i
        )
        syn.write_table(root / "source" / f"{m}.parquet", table)
        tmeta, ttable = syn.on_device(meta, table, TARGET, threads=4, e_factor=e_factor, l_factor=l_factor, noise_sd=noise_sd, rng_seed=i)
        syn.write_table(root / "measured" / f"{m}.parquet", ttable)
        pmeta, ptable = syn.profile_of(tmeta, ttable, batches)
        if target_overrides and m in target_overrides:
            pmeta = dict(pmeta, **target_overrides[m])
            ptable = ptable.replace_schema_metadata(schema.arrow_schema(pmeta).metadata)
        syn.write_table(root / "profiles" / f"{m}.parquet", ptable)
    return {k: root / k for k in ("source", "measured", "profiles")}


def fitted(prediction, method: str):
    return next(p for p in prediction.pairings if p.source.method == method).transfers["fit"]


def predicted(prediction, method: str, transfer: str = "fit"):
    return next(t for _, t in prediction.traces[transfer] if t.method == method)


# ------------------------------------------------------------------------------ the model
def test_fit_phase_kinds():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert fit_phase("scale", x, 3 * x).a == pytest.approx(3.0)
    aff = fit_phase("affine", x, 2 * x + 1)
    assert (aff.a, aff.b) == (pytest.approx(2.0), pytest.approx(1.0))
    assert fit_phase("affine", np.ones(4), np.ones(4)) is None  # no spread: no slope
    assert fit_phase("scale", np.zeros(4), np.ones(4)) is None
    # an event whose source phase is 0 stays 0 (a batch a policy did not adapt)
    assert list(aff(np.array([0.0, 1.0]))) == [0.0, pytest.approx(3.0)]


def test_a_line_that_fits_each_fold_but_not_the_whole_is_not_chosen():
    """A 12-event profile (4 batches of 3 episodes, two folds) of ETA on two threads against its
    one-thread trace: a positive slope on each fold, a negative one on all twelve events. The
    affine kind won the held-out comparison and then could not be fitted, so `predict` refused
    the whole folder ("no transfer model fits"); the phase now takes the kind that fits."""
    xe = np.array([22.32, 33.01, 23.59, 22.73, 35.4, 22.98, 22.5, 35.77, 40.24, 22.5, 23.2, 43.36])
    ye = np.array([21.15, 20.7, 22.13, 20.89, 20.8, 18.54, 20.16, 20.85, 18.86, 18.68, 19.85, 20.13])
    steps, episodes = np.repeat(np.arange(4), 3), np.tile(np.array(["contrast", "fog", "gaussian_noise"]), 4)
    folds, k = fold_ids(steps, episodes)
    assert k == 2 and fit_phase("affine", xe, ye) is None
    assert all(fit_phase("affine", xe[folds != f], ye[folds != f]) is not None for f in range(k))
    assert choose_kind(xe, ye, folds, k) == "scale"
    pairs = Pairs(episodes, steps, xe, 0.9 * xe, ye, 0.9 * ye)
    fitted = fit_transfer(pairs)
    assert fitted is not None and fitted.e.kind == "scale" and fitted.e.a == pytest.approx(ye.sum() / xe.sum())


def test_identical_devices_give_back_the_source_times(tmp_path):
    noise = 0.03
    paths = write_setting(tmp_path, noise_sd=noise)
    pred = predict(paths["source"], paths["profiles"])
    source = {t.method: t for t in load_traces(paths["source"]).traces}
    for m in METHODS:
        t = predicted(pred, m)
        src, got = source[m].adapt_delta, t.adapt_delta
        n = fitted(pred, m).events
        # the mean within its variability (3 standard errors of the profile's mean, plus rounding)
        assert abs(got.mean() / src.mean() - 1) < 3 * noise / math.sqrt(n) + 0.005, m
        # and every event within the noise of the device (the map is close to the identity)
        assert np.max(np.abs(np.log(got / src))) < 6 * noise / math.sqrt(n) + 0.02, m
        assert t.meta["device"] == TARGET + PREDICTED_MARK and t.meta["threads"] == 4
        # accuracy and checkpoints are the source's
        assert t.rows["correct"].to_list() == source[m].rows["correct"].to_list()
        assert t.rows["phase"].to_list() == source[m].rows["phase"].to_list()


def test_known_phase_factors_are_recovered(tmp_path):
    paths = write_setting(tmp_path, e_factor=2.5, l_factor=6.0, noise_sd=0.002)
    pred = predict(paths["source"], paths["profiles"])
    source = {t.method: t for t in load_traces(paths["source"]).traces}
    for m in ("tent", "sar"):
        tr = fitted(pred, m)
        src, got = source[m].adapt, predicted(pred, m).adapt
        assert np.allclose(got["e_ms"].to_numpy(), 2.5 * src["e_ms"].to_numpy(), rtol=0.02), m
        assert np.allclose(got["l_ms"].to_numpy(), 6.0 * src["l_ms"].to_numpy(), rtol=0.02), m
        assert tr.sd_log < 0.01
        # frozen rows' e mapped by the e model
        f_src = source[m].frozen["e_ms"].to_numpy()
        f_got = predicted(pred, m).frozen["e_ms"].to_numpy()
        assert np.allclose(f_got, 2.5 * f_src, rtol=0.02)
    # standard never adapts: its ℓ stays 0 ("zero" model)
    assert fitted(pred, "standard").l.kind == "zero"
    # the one-factor baselines cannot follow two factors: the per-method factor misses one phase
    src_tent, got_tent = source["tent"].adapt, predicted(pred, "tent").adapt
    assert got_tent["delta_ms"].mean() == pytest.approx(2.5 * src_tent["e_ms"].mean() + 6 * src_tent["l_ms"].mean(), rel=0.02)
    meta = predicted(pred, "tent").meta[PREDICTED_KEY]
    assert meta["baselines"]["speed-probe"] == pytest.approx(2.5, rel=0.02)  # probes scaled like e


def test_written_trace_reads_back_identically(tmp_path):
    paths = write_setting(tmp_path, e_factor=2.0, l_factor=3.0)
    pred = predict(paths["source"], paths["profiles"])
    written = write_prediction(pred, tmp_path / "out", [paths["source"]], paths["profiles"])
    assert len(written) == len(METHODS)
    back = {t.method: t for t in load_traces(tmp_path / "out").traces}
    for m in METHODS:
        mem = predicted(pred, m)
        assert back[m].rows.select("e_ms", "l_ms", "delta_ms", "correct").equals(mem.rows.select("e_ms", "l_ms", "delta_ms", "correct"))
        assert back[m].meta[PREDICTED_KEY]["model"] == mem.meta[PREDICTED_KEY]["model"]
        assert "predicted" in back[m].group.label()
    assert trace_bytes(mem)[:4] == b"PAR1"


def test_variability_of_the_profile_is_kept_as_ratios(tmp_path):
    paths = write_setting(tmp_path, e_factor=2.0, l_factor=3.0)
    pred = predict(paths["source"], paths["profiles"])
    prof = {t.method: t for t in load_traces(paths["profiles"], profiles=True).traces}
    t = predicted(pred, "tent")
    a = variability.timing_model(t)
    b = variability.timing_model(prof["tent"])
    assert a is not None and b is not None and a.prediction is not None
    assert np.allclose(a.shifts, b.shifts) and np.allclose(a.residuals, b.residuals)


# ------------------------------------------------------------------------------ intervals
def _width(traces_dir: Path, replicates: int = 12) -> float:
    result = run_sweep(load_traces(traces_dir), protocols="discrete", rho="1,0.5")
    timing = replicates_of(result, replicates, 0)
    iv = an.utility_intervals(result.frame, None, st.BootstrapOptions(resamples=200), timing=timing)
    return float(np.mean(iv.index["hi"].to_numpy() - iv.index["lo"].to_numpy()))


def test_intervals_widen_with_the_transfer_error(tmp_path):
    paths = write_setting(tmp_path, e_factor=2.0, l_factor=3.0)
    pred = predict(paths["source"], paths["profiles"])
    widths = []
    for sd in (0.0, 0.05, 0.2):
        out = tmp_path / f"sd{sd}"
        for _, t in pred.traces["fit"]:
            meta = dict(t.meta)
            meta[PREDICTED_KEY] = dict(meta[PREDICTED_KEY], error=dict(meta[PREDICTED_KEY]["error"], sd_log=sd))
            t.meta = meta
            out.mkdir(exist_ok=True)
            (out / f"{t.method}.parquet").write_bytes(trace_bytes(t))
        widths.append(_width(out))
    assert widths[0] < widths[1] < widths[2]
    # and the answers say the transfer error is in them
    result = run_sweep(load_traces(tmp_path / "sd0.2"), protocols="discrete", rho="1")
    assert "transfer error" in timing_replicates.describe(replicates_of(result, 4, 0), 4)


def test_prediction_shift_matches_t_at_95():
    model = variability.TimingModel(np.zeros(0), np.zeros(1), np.zeros(0), np.zeros(0), 0, 0.0, prediction=(0.1, 4))
    hi = model.prediction_shift(0.975)
    assert hi == pytest.approx(0.1 * 2.776, rel=1e-3)  # Student's t, 4 df, at 97.5 %
    assert variability.TimingModel(np.zeros(0), np.zeros(1), np.zeros(0), np.zeros(0), 0, 0.0).prediction_shift(0.975) == 0.0


# ------------------------------------------------------------------------------ commands
def _run(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_predicted_traces_read_in_every_command(tmp_path):
    paths = write_setting(tmp_path, e_factor=2.0, l_factor=3.0, noise_sd=0.01)
    out = tmp_path / "pred"
    res = _run(["predict", paths["source"], "--profiles", paths["profiles"], "--out", out, "--transfer", "fit,method-median"])
    assert res.exit_code == 0, res.output
    assert "predicted" in res.output and "tent" in res.output
    folders = sorted(p.name for p in out.iterdir())
    assert folders == ["cpu-target-board-4thr-predicted", "cpu-target-board-4thr-predicted-method-median"]
    fit_dir = out / folders[0]
    res = _run(["sweep", fit_dir, "--protocol", "discrete", "--rho", "1,0.5", "--timing-replicates", "3"])
    assert res.exit_code == 0, res.output
    assert "(predicted)" in res.output
    res = _run(
        [
            "report",
            fit_dir,
            "--out",
            tmp_path / "report",
            "--protocol",
            "discrete",
            "--rho",
            "1,0.5",
            "--timing-replicates",
            "2",
            "--no-figures",
        ]
    )
    assert res.exit_code == 0, res.output
    assert "(predicted)" in (tmp_path / "report" / "report.md").read_text()
    res = _run(["advise", fit_dir, "--rho", "70%", "--timing-replicates", "2"])
    assert res.exit_code == 0, res.output
    assert "predicted" in res.output
    res = _run(["explore", fit_dir, "--out", tmp_path / "page.html", "--timing-replicates", "2"])
    assert res.exit_code == 0, res.output
    assert "(predicted)" in (tmp_path / "page.html").read_text()


def test_validate_prediction_prints_the_model_and_its_baselines(tmp_path):
    paths = write_setting(tmp_path, e_factor=2.0, l_factor=5.0, noise_sd=0.01)
    out = tmp_path / "pred"
    assert _run(["predict", paths["source"], "--profiles", paths["profiles"], "--out", out]).exit_code == 0
    res = _run(
        [
            "validate-prediction",
            out,
            "--against",
            paths["measured"],
            "--source",
            paths["source"],
            "--profiles",
            paths["profiles"],
            "--resamples",
            "200",
            "--timing-replicates",
            "2",
        ]
    )
    assert res.exit_code == 0, res.output
    for word in ("fit", "speed-probe", "method-median", "same winner", "Spearman", "coverage", "λ error"):
        assert word in res.output, word
    checks = validate_prediction(
        out, paths["measured"], st.BootstrapOptions(resamples=200, timing_replicates=2), paths["source"], paths["profiles"]
    )
    fit, probe = checks[0], checks[1]
    assert fit.name == "fit" and max(abs(m.delta) for m in fit.methods) < 0.03
    # one factor for both phases cannot follow ℓ × 5 and e × 2
    assert max(abs(m.delta) for m in probe.methods) > 0.2
    assert fit.decisions.agree is not None and fit.decisions.agree >= 0.9
    assert fit.decisions.coverage is not None and fit.decisions.coverage >= 0.9


def test_validate_prediction_across_device_kinds_names_the_baseline_it_cannot_form(tmp_path):
    # a GPU's speed probe and a CPU's time different work: no one speed factor, and the check
    # says so instead of refusing the whole comparison
    gpu_probe = {"speed_probe_kind": "matmul-2048-fp32x8"}
    paths = write_setting(tmp_path, e_factor=2.0, l_factor=5.0, target_overrides={m: gpu_probe for m in METHODS})
    out = tmp_path / "pred"
    assert _run(["predict", paths["source"], "--profiles", paths["profiles"], "--out", out]).exit_code == 0
    args = ["--source", paths["source"], "--profiles", paths["profiles"], "--resamples", "200", "--timing-replicates", "2"]
    res = _run(["validate-prediction", out, "--against", paths["measured"], *args])
    assert res.exit_code == 0, res.output
    assert "baseline speed-probe: not evaluated" in res.output and "no machine-speed probes of the same kind" in res.output
    header = next(line for line in res.stdout.splitlines() if line.startswith("group · method"))
    assert "method-median" in header and "speed-probe" not in header  # the other baseline keeps its column
    checks = validate_prediction(
        out, paths["measured"], st.BootstrapOptions(resamples=200, timing_replicates=2), paths["source"], paths["profiles"]
    )
    assert [(c.name, c.unavailable is None) for c in checks] == [("fit", True), ("method-median", True), ("speed-probe", False)]
    # asked for by name, the baseline it cannot form is still a one-line refusal
    refused = _run(["predict", paths["source"], "--profiles", paths["profiles"], "--out", tmp_path / "p2", "--transfer", "speed-probe"])
    assert refused.exit_code == 2 and "no 'speed-probe' baseline" in refused.stderr
    assert not (tmp_path / "p2").exists()


def test_validate_prediction_separates_the_machine_slowing_from_the_transfer(tmp_path):
    """The measured traces taken while the machine ran 25 % slower than during the profiles
    (their speed probes and every time × 1.25): the prediction is 20 % low, all of it the
    machine's, and the check says so instead of blaming the transfer."""
    slow, methods = 1.25, ("standard", "tent")
    for i, m in enumerate(methods):
        meta, table = syn.make_trace(m, episodes=EPISODES, num_batches=40, device=SOURCE, probe_ms=2.0, model="resnet50", rng_seed=11 + i)
        syn.write_table(tmp_path / "source" / f"{m}.parquet", table)
        tmeta, ttable = syn.on_device(meta, table, TARGET, threads=4, e_factor=0.8, l_factor=3.0)
        pmeta, ptable = syn.profile_of(tmeta, ttable, 8)
        syn.write_table(tmp_path / "profiles" / f"{m}.parquet", ptable)
        smeta, stable = syn.on_device(tmeta, ttable, TARGET, threads=4, e_factor=slow, l_factor=slow)
        syn.write_table(tmp_path / "measured" / f"{m}.parquet", stable)
    out = tmp_path / "pred"
    assert _run(["predict", tmp_path / "source", "--profiles", tmp_path / "profiles", "--out", out]).exit_code == 0
    (fit,) = validate_prediction(out, tmp_path / "measured", st.BootstrapOptions(resamples=200, timing_replicates=2))
    for m in fit.methods:
        assert m.delta == pytest.approx(1 / slow - 1, abs=1e-6), m.method
        assert m.machine == pytest.approx(slow - 1, abs=1e-9)
        assert m.delta_at_profile_speed == pytest.approx(0.0, abs=1e-6)
    (lam,) = fit.lambdas
    assert lam.cv_predicted == pytest.approx(lam.cv_measured, rel=1e-6)  # the same spread, scaled
    res = _run(["validate-prediction", out, "--against", tmp_path / "measured", "--resamples", "200", "--timing-replicates", "2"])
    assert res.exit_code == 0, res.output
    assert "largest |δ̄ error|: fit 20.0 % (0 of 2 within 10 %)" in res.output
    assert "+25.0 % to +25.0 % against their profiles" in res.output
    assert "the fit's largest |δ̄ error| is 0.0 % (2 of 2 within 10 %)" in res.output
    assert "σ / mean of standard's δ: predicted" in res.output


def test_probe_drift_takes_a_sustained_change_and_ignores_one_slow_probe():
    probes = lambda ms: {"speed_probe": [{"episode": "a", "step": 50 * i, "ms": x} for i, x in enumerate(ms)]}  # noqa: E731
    halfway = schema.probe_drift(probes([2.0, 2.0, 2.0, 1.5, 1.5, 1.5]))  # medians of three: 2, 2, 1.5, 1.5
    assert halfway.change == pytest.approx(1 / 3) and (halfway.fast_ms, halfway.slow_ms) == (1.5, 2.0) and halfway.moved
    blip = schema.probe_drift(probes([2.0, 2.0, 3.0, 2.0, 2.0]))  # medians of three: 2, 2, 2
    assert blip.change == 0.0 and not blip.moved
    assert schema.probe_drift(probes([2.0, 3.0])) is None and schema.probe_drift({"speed_probe": []}) is None


def test_validate_prediction_names_a_trace_whose_machine_changed_speed_inside_it(tmp_path):
    """A measured ``tent`` trace whose machine ran 25 % faster from its second episode on is
    named with its change; the ``standard`` trace with one slow probe is not; the source traces,
    steady, are counted."""
    for i, m in enumerate(("standard", "tent")):
        meta, table = syn.make_trace(m, episodes=EPISODES, num_batches=120, device=SOURCE, probe_ms=2.0, model="resnet50", rng_seed=21 + i)
        syn.write_table(tmp_path / "source" / f"{m}.parquet", table)
        tmeta, ttable = syn.on_device(meta, table, TARGET, threads=4, e_factor=0.8, l_factor=3.0)
        syn.write_table(tmp_path / "profiles" / f"{m}.parquet", syn.profile_of(tmeta, ttable, 8)[1])
        probes = tmeta["speed_probe"]
        assert len(probes) == 9  # steps 0, 50 and 100 of three episodes
        if m == "tent":
            probes = [dict(p, ms=p["ms"] * (1.0 if p["episode"] == EPISODES[0] else 0.75)) for p in probes]
        else:
            probes = [dict(p, ms=p["ms"] * (1.5 if k == 4 else 1.0)) for k, p in enumerate(probes)]
        mmeta = dict(tmeta, speed_probe=probes)
        syn.write_table(tmp_path / "measured" / f"{m}.parquet", pa.Table.from_pydict(ttable.to_pydict(), schema=schema.arrow_schema(mmeta)))
    out = tmp_path / "pred"
    assert _run(["predict", tmp_path / "source", "--profiles", tmp_path / "profiles", "--out", out]).exit_code == 0
    opts = st.BootstrapOptions(resamples=200, timing_replicates=2)
    fit = validate_prediction(out, tmp_path / "measured", opts, tmp_path / "source", tmp_path / "profiles")[0]
    drift = dict(fit.measured_drifts)
    assert drift["tent"].moved and drift["tent"].change == pytest.approx(1 / 0.75 - 1, abs=0.03)
    assert not drift["standard"].moved
    assert sorted(name for name, _ in fit.source_drifts) == ["standard", "tent"]
    assert not any(d.moved for _, d in fit.source_drifts)
    args = ["--source", tmp_path / "source", "--profiles", tmp_path / "profiles", "--resamples", "200", "--timing-replicates", "2"]
    res = _run(["validate-prediction", out, "--against", tmp_path / "measured", *args])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("inside a trace:"))
    assert "within 1 of 2 measured traces (tent 3" in line and "and 0 of 2 source traces;" in line
    assert "those methods' time errors mix machine speeds" in line and "not checked" not in line


def test_validate_prediction_says_when_the_machine_speed_cannot_be_compared(tmp_path):
    gpu_probe = {"speed_probe_kind": "matmul-2048-fp32x8"}
    paths = write_setting(tmp_path, methods=("standard", "tent"), target_overrides={m: gpu_probe for m in ("standard", "tent")})
    out = tmp_path / "pred"
    assert _run(["predict", paths["source"], "--profiles", paths["profiles"], "--out", out]).exit_code == 0
    (fit,) = validate_prediction(out, paths["measured"], st.BootstrapOptions(resamples=200, timing_replicates=2))
    assert all(m.machine is None and m.delta_at_profile_speed is None for m in fit.methods)
    res = _run(["validate-prediction", out, "--against", paths["measured"], "--resamples", "200", "--timing-replicates", "2"])
    assert res.exit_code == 0, res.output
    assert "the machine's speed change between them is not known" in res.output


def _expect_refused(tmp_path, source, profiles, words):
    out = tmp_path / "never"
    res = _run(["predict", source, "--profiles", profiles, "--out", out])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not out.exists()


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ({"model": "vit_b_16"}, ["does not match", "model"]),
        ({"batch_size": 32}, ["does not match", "batch_size"]),
        ({"stream": "continual"}, ["does not match", "stream"]),
    ],
)
def test_profile_of_another_configuration_is_refused(tmp_path, override, words):
    paths = write_setting(tmp_path, target_overrides={"tent": override})
    _expect_refused(tmp_path, paths["source"], paths["profiles"], words)


def test_method_without_profile_is_refused(tmp_path):
    paths = write_setting(tmp_path)
    (paths["profiles"] / "sar.parquet").unlink()
    _expect_refused(tmp_path, paths["source"], paths["profiles"], ["sar", "no profile"])


def test_profile_without_source_is_refused(tmp_path):
    paths = write_setting(tmp_path)
    (paths["source"] / "sar.parquet").unlink()
    _expect_refused(tmp_path, paths["source"], paths["profiles"], ["sar", "no source trace"])


def test_overlapping_profiles_are_refused(tmp_path):
    paths = write_setting(tmp_path)
    (paths["profiles"] / "copy").mkdir()
    (paths["profiles"] / "copy" / "tent.parquet").write_bytes((paths["profiles"] / "tent.parquet").read_bytes())
    _expect_refused(tmp_path, paths["source"], paths["profiles"], ["second trace of method 'tent'", "keep one"])


def test_profiles_and_traces_do_not_mix(tmp_path):
    paths = write_setting(tmp_path)
    res = _run(["sweep", paths["profiles"], "--protocol", "offline"])
    assert res.exit_code == 2 and "a profile" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    _expect_refused(tmp_path, paths["source"], paths["source"], ["a trace, not a profile"])


def test_predicted_trace_cannot_be_a_source(tmp_path):
    paths = write_setting(tmp_path)
    pred = predict(paths["source"], paths["profiles"])
    write_prediction(pred, tmp_path / "pred", [paths["source"]], paths["profiles"])
    with pytest.raises(PredictionError, match="cannot be the source"):
        predict(tmp_path / "pred", paths["profiles"])


def test_predicted_and_measured_traces_of_one_device_are_not_pooled(tmp_path):
    paths = write_setting(tmp_path)
    pred = predict(paths["source"], paths["profiles"])
    write_prediction(pred, tmp_path / "pred", [paths["source"]], paths["profiles"])
    traces = load_traces([tmp_path / "pred", paths["measured"]])
    groups = traces.groups()
    assert len(groups) == 2
    devices = sorted(k.device for k in groups)
    assert devices == [TARGET, TARGET + PREDICTED_MARK] and measured_device(devices[1]) == TARGET


def test_schema_rules_of_profiles_and_predicted_traces(tmp_path):
    meta, table = syn.make_trace("tent", episodes=EPISODES[:1], num_batches=10)
    pmeta, ptable = syn.profile_of(meta, table, 4)
    schema.validate_table(ptable, pmeta)
    with pytest.raises(schema.TraceSchemaError, match="frozen rows"):
        schema.validate_table(
            table.replace_schema_metadata(schema.arrow_schema(dict(meta, kind="profile", profile_batches=4, frozen_eval=0)).metadata),
            dict(meta, kind="profile", profile_batches=4, frozen_eval=0),
        )
    with pytest.raises(schema.TraceSchemaError, match="profile of 2 batch"):
        schema.validate_table(ptable, dict(pmeta, profile_batches=2))
    with pytest.raises(schema.TraceSchemaError, match="kind"):
        schema.validate_metadata(dict(meta, kind="sketch"))
    with pytest.raises(schema.TraceSchemaError, match="says predicted"):
        schema.validate_metadata(dict(meta, device="cpu (predicted)"))
    with pytest.raises(schema.TraceSchemaError, match="predicted"):
        schema.validate_metadata(dict(meta, device="cpu (predicted)", predicted={"source": {}}))


def test_a_profile_that_times_fewer_domains_than_the_stream_is_named():
    """A continual stream's profile is its first batches, one corruption: `predict` says that
    the transfer fitted there is applied to every other domain; an episodic stream's profile
    times the first batches of every domain and is not named."""
    from types import SimpleNamespace

    import polars as pl

    from tempora_schema import GroupKey
    from tempora_sim.prediction.transfer import domain_coverage_lines

    meta = {"dataset": "demo", "model": "demo-resnet", "device": "cpu:board (predicted)", "batch_size": 64, "seed": 1, "threads": 2}
    meta |= {"stream": "continual", "severity": 5, "domains": ["gaussian_noise", "fog", "snow"], "max_batches": None, "weights": "x"}
    target = GroupKey.from_metadata(meta)
    frame = lambda *domains: SimpleNamespace(adapt=pl.DataFrame({"domain": list(domains)}))  # noqa: E731
    continual = SimpleNamespace(target=target, source=frame("gaussian_noise", "fog", "snow"), profile=frame("gaussian_noise"))
    (line,) = domain_coverage_lines([continual, continual])  # once per target group
    assert "the profiles time 1 of the stream's 3 domains (gaussian_noise)" in line and "A continual stream" in line
    episodic = SimpleNamespace(target=target, source=frame("gaussian_noise", "fog", "snow"), profile=frame("gaussian_noise", "fog", "snow"))
    assert domain_coverage_lines([episodic]) == []
