"""Timing variability measured by the tracer after the main pass (tempora_trace.variability):
what it samples, that repeat events run the main pass's computation, that the rows are
untouched, the options, and the schema rules of the optional metadata."""

from __future__ import annotations

import copy

import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

import tempora_schema as schema
from helpers.cifar import tiny_config
from tempora_trace import variability as tv_mod
from tempora_trace.cli import cli
from tempora_trace.errors import ConfigError
from tempora_trace.runner import trace_run

pytestmark = pytest.mark.usefixtures("tiny_models")


def read(path):
    table = pq.read_table(path)
    return table, schema.decode_metadata(table.schema, path)


# ----------------------------------------------------------------------------- the plan
def test_sample_plan_spreads_the_sample_over_up_to_four_episodes():
    # 15 episodes of 10: episodes 0, round(4.67) = 5, round(9.33) = 9, 14; 16 = 4 × 4
    assert tv_mod.sample_plan([10] * 15, 16) == [(0, 4), (5, 4), (9, 4), (14, 4)]
    # 17 events: the first episode takes the remainder
    assert tv_mod.sample_plan([10] * 15, 17) == [(0, 5), (5, 4), (9, 4), (14, 4)]
    # two episodes of 4 batches: capped at their length
    assert tv_mod.sample_plan([4, 4], 16) == [(0, 4), (1, 4)]
    # one (continual) episode; fewer events than episodes
    assert tv_mod.sample_plan([100], 16) == [(0, 16)]
    assert tv_mod.sample_plan([5, 5, 5], 2) == [(0, 1), (2, 1)]
    assert tv_mod.sample_plan([5, 5], 0) == []


def test_idle_pass_waits_before_every_other_event_cycling_through_the_gaps():
    gaps = (10.0, 40.0)
    assert [tv_mod.idle_gap(i, gaps) for i in range(7)] == [0, 10, 0, 40, 0, 10, 0]
    assert [tv_mod.idle_gap(i, ()) for i in range(3)] == [0, 0, 0]


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("1x,4x", ((1.0, True), (4.0, True))),
        ("50ms,2s", ((50.0, False), (2000.0, False))),
        ("none", ()),
        ("2x,30", ((2.0, True), (30.0, False))),
    ],
)
def test_idle_gaps_parse(text, parsed):
    assert tv_mod.parse_idle_gaps(text) == parsed
    assert tv_mod.parse_idle_gaps(tv_mod.format_idle_gaps(parsed)) == parsed


@pytest.mark.parametrize("text", ["0x", "-1ms", "abc", "61s", "1x,,2x", "nanx"])
def test_bad_idle_gaps_are_refused(text, cifar_c_root, tmp_path):
    with pytest.raises(ConfigError, match="--idle-gaps"):
        tiny_config(cifar_c_root, tmp_path, idle_gaps=text).resolved()


# ----------------------------------------------------------------------------- the run
def test_default_trace_carries_a_valid_measurement(cifar_c_root, tmp_path):
    path = trace_run(tiny_config(cifar_c_root, tmp_path / "out"))
    table, meta = read(path)
    tv = meta[schema.VARIABILITY_KEY]
    schema.validate_table(table, meta, path)  # the optional key passes the reader's rules
    # two episodes of 4 batches: the whole stream is the sample
    assert tv["sample"] == [{"episode": "gaussian_noise", "steps": [0, 1, 2, 3]}, {"episode": "fog", "steps": [0, 1, 2, 3]}]
    assert len(tv["passes_ms"]) == 2 and all(len(p) == 8 for p in tv["passes_ms"])
    # idle pass: every other event waits 1× then 4× the first repeat pass's median δ
    typical = sorted(tv["passes_ms"][0])[3:5]
    median = (typical[0] + typical[1]) / 2
    gaps = tv["idle_gaps_ms"]
    assert gaps[0::2] == [0.0] * 4
    assert gaps[1::2] == pytest.approx([median, 4 * median, median, 4 * median])
    assert len(tv["idle_ms"]) == 8 and all(t > 0 for t in tv["idle_ms"])
    assert tv["seconds"] >= 0


def test_measurement_leaves_the_rows_untouched_and_can_be_turned_off(cifar_c_root, tmp_path):
    with_tv = trace_run(tiny_config(cifar_c_root, tmp_path / "a"))
    without = trace_run(tiny_config(cifar_c_root, tmp_path / "b", timing_sample=0))
    (ta, ma), (tb, mb) = read(with_tv), read(without)
    assert schema.VARIABILITY_KEY in ma and schema.VARIABILITY_KEY not in mb
    same = ["episode", "domain", "phase", "checkpoint", "step", "n", "correct", "updated"]
    assert ta.select(same).equals(tb.select(same))


@pytest.mark.parametrize("policy", [None, "every:2"])
def test_repeat_events_run_the_main_pass_computation(cifar_c_root, tmp_path, monkeypatch, policy):
    """Each repeat event starts from the state the main pass had at that step (reset and
    reseeded as the main pass started the episode, a sparse-adaptation policy deciding as it
    did): on a CPU its logits are bit-identical."""
    from tempora_trace import runner, timing

    logits = {"main": [], "repeat": []}

    def recorder(kind):
        def timed(method, x, clock, adapt=True, peak=True, gate=None):
            ev = timing.timed_event(method, x, clock, adapt, peak, gate=gate)
            if adapt:
                logits[kind].append(ev.logits.detach().clone())
            return ev

        return timed

    monkeypatch.setattr(runner, "timed_event", recorder("main"))
    monkeypatch.setattr(tv_mod, "timed_event", recorder("repeat"))
    extra = {"policy": policy} if policy else {}
    path = trace_run(tiny_config(cifar_c_root, tmp_path / "out", warmup_batches=0, timing_passes=1, **extra))
    _, meta = read(path)
    main = logits["main"]  # 2 episodes × 4 steps, in sample order
    assert len(main) == 8 and len(logits["repeat"]) == 2 * 8  # one repeat pass and the idle pass
    for k, rep in enumerate(logits["repeat"]):
        assert torch.equal(rep, main[k % 8]), f"repeat event {k} differs from main-pass event {k % 8}"
    assert len(meta[schema.VARIABILITY_KEY]["passes_ms"]) == 1


def test_no_idle_pass_with_idle_gaps_none(cifar_c_root, tmp_path):
    _, meta = read(trace_run(tiny_config(cifar_c_root, tmp_path / "out", idle_gaps="none", timing_passes=3, timing_sample=3)))
    tv = meta[schema.VARIABILITY_KEY]
    assert tv["idle_ms"] == [] and tv["idle_gaps_ms"] == []
    assert len(tv["passes_ms"]) == 3
    assert tv["sample"] == [{"episode": "gaussian_noise", "steps": [0, 1]}, {"episode": "fog", "steps": [0]}]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--timing-sample", "-1"], "--timing-sample"),
        (["--timing-passes", "0"], "--timing-passes"),
        (["--idle-gaps", "soon"], "--idle-gaps"),
    ],
)
def test_cli_refuses_bad_timing_options_in_one_line(cifar_c_root, tmp_path, args, message):
    res = CliRunner().invoke(
        cli,
        ["run", "--method", "tent", "--dataset", "cifar10-c", "--model", "tiny-bn", "--data-root", str(cifar_c_root)]
        + ["--batch-size", "8", "--out", str(tmp_path / "out"), *args],
    )
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ----------------------------------------------------------------------------- schema rules
GOOD = {
    "sample": [{"episode": "a", "steps": [0, 1]}, {"episode": "b", "steps": [0]}],
    "passes_ms": [[1.0, 2.0, 3.0]],
    "idle_gaps_ms": [0, 5.0, 0],
    "idle_ms": [1.0, 2.0, 3.0],
    "seconds": 0.5,
}


def _broken(path, value):
    tv = copy.deepcopy(GOOD)
    *head, last = path
    target = tv
    for key in head:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return tv


def test_a_well_formed_measurement_passes():
    schema.validate_variability(copy.deepcopy(GOOD))
    schema.check_variability_rows(GOOD, {"a": 2, "b": 1})


@pytest.mark.parametrize(
    "path, value, rule",
    [
        (("seconds",), KeyError, "exactly the keys"),
        (("sample",), [], "non-empty list"),
        (("sample", 0, "steps"), [1, 0], "strictly increasing"),
        (("sample", 0, "steps"), [0, -1], "integers >= 0"),
        (("sample", 1, "episode"), "a", "listed twice"),
        (("passes_ms",), [[1.0, 2.0]], "must list 3"),
        (("passes_ms", 0, 1), 0.0, "must list 3"),
        (("passes_ms", 0, 1), float("nan"), "must list 3"),
        (("idle_ms",), [1.0], "both be empty"),
        (("idle_gaps_ms", 1), -1.0, "idle gaps"),
        (("seconds",), -1, "'seconds'"),
    ],
)
def test_malformed_measurements_are_rejected(path, value, rule):
    with pytest.raises(schema.TraceSchemaError, match=rule):
        schema.validate_variability(_broken(path, value), "t.parquet")


def test_sample_must_name_rows_of_the_trace():
    with pytest.raises(schema.TraceSchemaError, match="not in the rows"):
        schema.check_variability_rows(GOOD, {"a": 2})
    with pytest.raises(schema.TraceSchemaError, match="beyond its episode"):
        schema.check_variability_rows(GOOD, {"a": 1, "b": 1})
