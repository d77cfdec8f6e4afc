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
    path = trace_run(tiny_config(cifar_c_root, tmp_path / "out", idle_settle=0.05))
    table, meta = read(path)
    tv = meta[schema.VARIABILITY_KEY]
    schema.validate_table(table, meta, path)  # the optional key passes the reader's rules
    # two episodes of 4 batches: the whole stream is the sample
    assert tv["sample"] == [{"episode": "gaussian_noise", "steps": [0, 1, 2, 3]}, {"episode": "fog", "steps": [0, 1, 2, 3]}]
    assert len(tv["passes_ms"]) == 2 and all(len(p) == 8 for p in tv["passes_ms"])
    # the idle blocks: back to back, then 0.25×, 1× and 4× the first repeat pass's median δ,
    # each followed by a back-to-back block; each after its run-in
    typical = sorted(tv["passes_ms"][0])[3:5]
    median = (typical[0] + typical[1]) / 2
    blocks = schema.idle_blocks(tv)
    assert [b["gap_ms"] for b in blocks] == pytest.approx([0, 0.25 * median, 0, median, 0, 4 * median, 0], rel=1e-4)
    assert all(len(b["ms"]) == 8 and all(t > 0 for t in b["ms"]) for b in blocks)
    # the first block follows the back-to-back repeat passes at once; every other runs in first
    assert blocks[0]["settle_s"] < 0.05 and all(b["settle_s"] >= 0.05 for b in blocks[1:])
    assert tv["idle_ms"] == [] and tv["idle_gaps_ms"] == []
    assert tv["seconds"] >= 6 * 0.05


def test_a_waited_block_waits_before_every_event(cifar_c_root, tmp_path, monkeypatch):
    """Every event of a waited block, run-in included, follows its wait; every event of a
    back-to-back block follows none."""
    waits = []
    real = tv_mod.time_sample_event
    monkeypatch.setattr(tv_mod, "time_sample_event", lambda run, b, gap: (waits.append(gap), real(run, b, gap))[1])
    _, meta = read(trace_run(tiny_config(cifar_c_root, tmp_path / "out", idle_gaps="3ms,7ms", idle_settle=0, timing_passes=1)))
    # one repeat pass (8 events, no wait), then B W B W B of 8 events each (no run-in)
    assert waits == [0.0] * 16 + [3.0] * 8 + [0.0] * 8 + [7.0] * 8 + [0.0] * 8
    assert [b["settle_s"] for b in schema.idle_blocks(meta[schema.VARIABILITY_KEY])] == [0.0] * 5


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
    path = trace_run(tiny_config(cifar_c_root, tmp_path / "out", warmup_batches=0, timing_passes=1, idle_settle=0, **extra))
    _, meta = read(path)
    main = logits["main"]  # 2 episodes × 4 steps, in sample order
    assert len(main) == 8 and len(logits["repeat"]) == 8 * 8  # one repeat pass and seven idle blocks
    for k, rep in enumerate(logits["repeat"]):
        assert torch.equal(rep, main[k % 8]), f"repeat event {k} differs from main-pass event {k % 8}"
    assert len(meta[schema.VARIABILITY_KEY]["passes_ms"]) == 1


def test_no_idle_blocks_with_idle_gaps_none(cifar_c_root, tmp_path):
    _, meta = read(trace_run(tiny_config(cifar_c_root, tmp_path / "out", idle_gaps="none", timing_passes=3, timing_sample=3)))
    tv = meta[schema.VARIABILITY_KEY]
    assert tv["idle_ms"] == [] and tv["idle_gaps_ms"] == [] and schema.IDLE_BLOCKS_KEY not in tv
    assert len(tv["passes_ms"]) == 3
    assert tv["sample"] == [{"episode": "gaussian_noise", "steps": [0, 1]}, {"episode": "fog", "steps": [0]}]


def test_the_run_in_comes_from_the_option_then_the_machine_then_the_default(cifar_c_root, tmp_path, monkeypatch):
    from tempora_trace.config import IDLE_SETTLE_ENV
    from tempora_trace.options import DEFAULT_IDLE_SETTLE_S

    monkeypatch.setenv(IDLE_SETTLE_ENV, "0.25")
    assert tiny_config(cifar_c_root, tmp_path, idle_settle=None).resolved().idle_settle == 0.25
    assert tiny_config(cifar_c_root, tmp_path, idle_settle=2.0).resolved().idle_settle == 2.0
    monkeypatch.setenv(IDLE_SETTLE_ENV, "")
    assert tiny_config(cifar_c_root, tmp_path, idle_settle=None).resolved().idle_settle == DEFAULT_IDLE_SETTLE_S == 0.0
    for bad, rule in (("soon", "is not a number"), ("nan", "0..60"), ("-1", "0..60"), ("120", "0..60")):
        monkeypatch.setenv(IDLE_SETTLE_ENV, bad)
        with pytest.raises(ConfigError, match=rule):
            tiny_config(cifar_c_root, tmp_path, idle_settle=None).resolved()


def test_a_bad_machine_setting_is_one_line_on_the_command_line(cifar_c_root, tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPORA_IDLE_SETTLE", "1.5s")
    res = CliRunner().invoke(
        cli,
        ["run", "--method", "tent", "--dataset", "cifar10-c", "--model", "tiny-bn", "--data-root", str(cifar_c_root)]
        + ["--batch-size", "8", "--out", str(tmp_path / "out")],
    )
    assert res.exit_code == 2
    assert "TEMPORA_IDLE_SETTLE='1.5s' is not a number of seconds" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--timing-sample", "-1"], "--timing-sample"),
        (["--timing-passes", "0"], "--timing-passes"),
        (["--idle-gaps", "soon"], "--idle-gaps"),
        (["--idle-settle", "-1"], "--idle-settle"),
        (["--idle-settle", "61"], "--idle-settle"),
        (["--idle-settle", "soon"], "--idle-settle"),
        (["--idle-settle", "nan"], "--idle-settle"),
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


BLOCKS = dict(
    GOOD,
    idle_gaps_ms=[],
    idle_ms=[],
    idle_blocks=[{"gap_ms": 0, "settle_s": 1.5, "ms": [1.0, 2.0, 3.0]}, {"gap_ms": 4.0, "settle_s": 1.5, "ms": [1.1, 2.1, 3.1]}]
    + [{"gap_ms": 0, "settle_s": 1.6, "ms": [1.0, 2.0, 3.0]}],
)


def test_well_formed_idle_blocks_pass():
    schema.validate_variability(copy.deepcopy(BLOCKS))
    assert [b["gap_ms"] for b in schema.idle_blocks(BLOCKS)] == [0, 4.0, 0]
    assert schema.idle_blocks(GOOD) == []


@pytest.mark.parametrize(
    "change, rule",
    [
        (lambda tv: tv.update(idle_ms=[1.0, 2.0, 3.0], idle_gaps_ms=[0, 5.0, 0]), "cannot both"),
        (lambda tv: tv.update(idle_blocks=tv["idle_blocks"][:2]), "at least three"),
        (lambda tv: tv.update(idle_blocks="blocks"), "at least three"),
        (lambda tv: tv["idle_blocks"][1].pop("settle_s"), "keys gap_ms, ms, settle_s"),
        (lambda tv: tv["idle_blocks"][1].update(gap_ms=-1.0), "'gap_ms' and 'settle_s'"),
        (lambda tv: tv["idle_blocks"][1].update(settle_s=float("inf")), "'gap_ms' and 'settle_s'"),
        (lambda tv: tv["idle_blocks"][1].update(ms=[1.0, 2.0]), "must list 3"),
        (lambda tv: tv["idle_blocks"][1].update(ms=[1.0, 0.0, 2.0]), "must list 3"),
        (lambda tv: tv["idle_blocks"][0].update(gap_ms=2.0), "start and end back to back"),
        (lambda tv: tv["idle_blocks"][1].update(gap_ms=0), "start and end back to back"),
        (lambda tv: tv["idle_blocks"].insert(2, dict(tv["idle_blocks"][1])), "between any two waited"),
        (lambda tv: tv.update(extra=1), "exactly the keys"),
    ],
)
def test_malformed_idle_blocks_are_rejected(change, rule):
    tv = copy.deepcopy(BLOCKS)
    change(tv)
    with pytest.raises(schema.TraceSchemaError, match=rule):
        schema.validate_variability(tv, "t.parquet")


def test_map_sample_events_reaches_every_list_of_event_times():
    double = lambda xs: [2 * x for x in xs]  # noqa: E731
    got = schema.map_sample_events(BLOCKS, double)
    assert got["passes_ms"] == [[2.0, 4.0, 6.0]] and got["idle_ms"] == [] and got["idle_gaps_ms"] == []
    assert [b["ms"] for b in got["idle_blocks"]] == [[2.0, 4.0, 6.0], [2.2, 4.2, 6.2], [2.0, 4.0, 6.0]]
    assert [b["gap_ms"] for b in got["idle_blocks"]] == [0, 4.0, 0] and got["sample"] == BLOCKS["sample"]
    # the older idle pass: its times mapped, its gaps only when asked
    first = lambda xs: xs[:1]  # noqa: E731
    assert schema.map_sample_events(GOOD, double)["idle_gaps_ms"] == [0, 5.0, 0]
    cut = schema.map_sample_events(GOOD, first, gaps=first)
    assert cut["idle_ms"] == [1.0] and cut["idle_gaps_ms"] == [0] and cut["passes_ms"] == [[1.0]]
    assert BLOCKS["idle_blocks"][0]["ms"] == [1.0, 2.0, 3.0]  # the value itself is left as it was


def test_sample_must_name_rows_of_the_trace():
    with pytest.raises(schema.TraceSchemaError, match="not in the rows"):
        schema.check_variability_rows(GOOD, {"a": 2})
    with pytest.raises(schema.TraceSchemaError, match="beyond its episode"):
        schema.check_variability_rows(GOOD, {"a": 1, "b": 1})
