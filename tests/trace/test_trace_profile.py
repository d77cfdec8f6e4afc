"""`tempora-trace profile`: the first batches of every episode of a trace's stream, timing only.
A profile's rows are the trace's own first events in every column but the times; it has the
trace's identity plus ``kind = "profile"``; the simulator predicts from it."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import tempora_schema as schema
from helpers.cifar import tiny_cifar_args
from tempora_trace.cli import main

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_models")

NON_TIMING = ("episode", "domain", "severity", "phase", "checkpoint", "step", "n", "correct", "updated")


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def read(path):
    table = pq.read_table(path)
    return schema.decode_metadata(table.schema, path), table.to_pydict()


def common(root, out, method="tent"):
    args = tiny_cifar_args(root, out, "--method", method, "--threads", "1", "--warmup-batches", "1")
    i = args.index("--domains")
    args[i + 1] = "gaussian_noise,fog"
    return args


def test_profile_is_the_traces_prefix_in_every_non_timing_column(cifar_c_root, tmp_path, capsys):
    code, out, err = run(["run", *common(cifar_c_root, tmp_path / "traces")], capsys)
    assert code == 0, err
    code, out, err = run(["profile", *common(cifar_c_root, tmp_path / "profiles"), "--profile-batches", "2"], capsys)
    assert code == 0, err
    tmeta, trace = read(tmp_path / "traces" / "tent-bs8.parquet")
    pmeta, prof = read(tmp_path / "profiles" / "tent-bs8.parquet")
    assert pmeta["kind"] == "profile" and pmeta["profile_batches"] == 2 and pmeta["frozen_eval"] == 0
    assert "profile" not in tmeta.get("kind", "")
    # the same identity (method, data, model, weights, device, threads, batch size, seed, stream …)
    assert schema.TraceIdentity.from_metadata(pmeta) == schema.TraceIdentity.from_metadata(tmeta)
    assert pmeta[schema.VARIABILITY_KEY] and pmeta["speed_probe"]  # the timing measurements are kept
    first = [
        tuple(trace[c][i] for c in NON_TIMING)
        for i in range(len(trace["step"]))
        if trace["phase"][i] == schema.PHASE_ADAPT and trace["step"][i] < 2
    ]
    got = [tuple(prof[c][i] for c in NON_TIMING) for i in range(len(prof["step"]))]
    assert got == first and len(got) == 4
    assert all(p == schema.PHASE_ADAPT for p in prof["phase"])
    assert all(t > 0 for t in prof["delta_ms"])


def test_profile_takes_no_checkpoint_options_and_reads_only_as_a_profile(cifar_c_root, tmp_path, capsys):
    code, _, err = run(["profile", *common(cifar_c_root, tmp_path / "p"), "--checkpoints", "1"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()
    code, _, err = run(["profile", *common(cifar_c_root, tmp_path / "p"), "--profile-batches", "0"], capsys)
    assert code == 2 and "--profile-batches" in err and len(err.strip().splitlines()) == 1


def test_a_trace_and_a_profile_of_one_device_predict_it(cifar_c_root, tmp_path, capsys):
    """End to end through both tools: `standard` and `tent` traced, profiled, predicted."""
    from tempora_sim.prediction.transfer import predict

    for m in ("standard", "tent"):
        assert run(["run", *common(cifar_c_root, tmp_path / "traces", m)], capsys)[0] == 0
        assert run(["profile", *common(cifar_c_root, tmp_path / "profiles", m), "--profile-batches", "2"], capsys)[0] == 0
    pred = predict(tmp_path / "traces", tmp_path / "profiles")
    traces = {t.method: t for _, t in pred.traces["fit"]}
    assert sorted(traces) == ["standard", "tent"]
    assert traces["tent"].meta["device"].endswith("(predicted)")
    assert traces["tent"].meta["predicted"]["accuracy"]["differ"] == 0  # same arithmetic, same device


def test_an_interrupted_profile_resumes_and_refuses_another_length(cifar_c_root, tmp_path, capsys):
    from tempora_trace.config import config_from_options
    from tempora_trace.options import parse_args
    from tempora_trace.profiling import ProfileRun

    args = [*common(cifar_c_root, tmp_path / "p"), "--profile-batches", "2"]
    cfg = config_from_options("profile", parse_args("profile", args))

    def stop(index, name):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ProfileRun(cfg, lambda s: None).run(stop)
    assert not (tmp_path / "p" / "tent-bs8.parquet").exists()
    code, _, err = run(["profile", *common(cifar_c_root, tmp_path / "p"), "--profile-batches", "3", "--resume"], capsys)
    assert code == 2 and "profile_batches" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["profile", *args, "--resume"], capsys)
    assert code == 0, err
    meta, rows = read(tmp_path / "p" / "tent-bs8.parquet")
    assert meta["profile_batches"] == 2 and sorted(set(rows["episode"])) == ["fog", "gaussian_noise"] and len(rows["step"]) == 4


def test_profile_episodes_keep_the_streams_first_batches():
    import numpy as np

    from tempora_trace.data import Episode
    from tempora_trace.profiling import profile_episodes

    batches = lambda k, base: [np.arange(2) + base + 2 * i for i in range(k)]  # noqa: E731
    episodic = [Episode("fog", ["fog"], [batches(5, 0)]), Episode("snow", ["snow"], [batches(2, 100)])]
    got = profile_episodes(episodic, 3)
    assert [e.num_batches for e in got] == [3, 2]
    assert all(np.array_equal(a, b) for a, b in zip(got[0].batches[0], episodic[0].batches[0][:3]))
    # a continual stream's one episode: its first batches, across the domains in order
    continual = [Episode("continual", ["fog", "snow"], [batches(2, 0), batches(4, 100)])]
    (one,) = profile_episodes(continual, 3)
    assert [len(b) for b in one.batches] == [2, 1] and one.num_batches == 3
    assert np.array_equal(one.locate(2)[1], continual[0].batches[1][0])


def test_the_auto_length_is_a_share_of_the_longest_episode_with_a_floor():
    import numpy as np

    from tempora_trace.data import Episode
    from tempora_trace.options import PROFILE_MIN_BATCHES, PROFILE_SHARE
    from tempora_trace.profiling import profile_length

    def stream(*lengths):
        return [Episode(f"d{i}", [f"d{i}"], [[np.arange(2)] * n]) for i, n in enumerate(lengths)]

    assert (PROFILE_SHARE, PROFILE_MIN_BATCHES) == (0.025, 8)
    assert profile_length(7, stream(156)) == 7  # a count is a count
    assert profile_length("auto", stream(*[156] * 15)) == 8  # the demo set: 3.9 batches, the floor
    assert profile_length("auto", stream(782, 782)) == 20  # ImageNet-C, 50,000 images at 64
    assert profile_length("auto", stream(2340)) == 59  # the demo set as one continual episode
    assert profile_length("auto", stream(400, 40)) == 10 and profile_length("auto", stream(401)) == 11  # 2.5 %, rounded up
    assert profile_length("auto", stream(3)) == 8  # shorter than the floor: the whole episode


def test_the_default_profile_records_its_rule_and_resumes_only_as_auto(cifar_c_root, tmp_path, capsys):
    code, _, err = run(["profile", *common(cifar_c_root, tmp_path / "p")], capsys)
    assert code == 0, err
    meta, rows = read(tmp_path / "p" / "tent-bs8.parquet")
    assert meta["profile_batches"] == 8 and meta["profile_auto"] == {"share": 0.025, "min": 8}
    counts = {e: rows["episode"].count(e) for e in set(rows["episode"])}
    assert set(counts) == {"fog", "gaussian_noise"} and max(counts.values()) <= 8
    code, _, err = run(["profile", *common(cifar_c_root, tmp_path / "p2"), "--profile-batches", "auto2"], capsys)
    assert code == 2 and "expected a number ≥ 1 or 'auto'" in err and len(err.strip().splitlines()) == 1
    # a profile chosen by count carries no rule, and a rule only belongs to a profile
    schema.validate_kind({**meta, "profile_batches": 4, "profile_auto": {"share": 0.5, "min": 4}})
    for bad in ({"share": 0, "min": 4}, {"share": 0.025}, {"share": 0.025, "min": True}, "auto"):
        with pytest.raises(schema.TraceSchemaError, match="profile_auto"):
            schema.validate_kind({**meta, "profile_auto": bad})
    trace_meta = {k: v for k, v in meta.items() if k not in ("kind", "profile_batches")}
    with pytest.raises(schema.TraceSchemaError, match="belongs to a profile"):
        schema.validate_kind(trace_meta)
