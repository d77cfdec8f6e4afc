"""Trace options are declared once (tempora_trace.options): the click options of run, live and
calibrate, the TraceConfig / LiveSettings mapping, the campaign's TOML keys and its argv all
come from that declaration and agree with each other."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest

from tempora_trace import options as trace_options
from tempora_trace.campaign import TRACE_OPTIONS, load_campaign, trace_location
from tempora_trace.cli import cli
from tempora_trace.config import TraceConfig
from tempora_trace.live_runner import LiveSettings


@pytest.mark.parametrize("command", trace_options.COMMANDS)
def test_each_command_has_exactly_its_declared_options_in_order(command):
    declared = trace_options.options_of(command)
    params = [p for p in cli.commands[command].params if isinstance(p, click.Option) and "--help" not in p.opts]
    assert [p.name for p in params] == [o.name for o in declared]
    for p, o in zip(params, declared):
        assert p.opts[0] == o.flag and p.help == o.help_for(command)
        assert p.multiple == o.multiple and p.is_flag == o.is_flag


def test_every_target_is_a_field():
    config_fields = {f.name for f in dataclasses.fields(TraceConfig)}
    live_fields = {f.name for f in dataclasses.fields(LiveSettings)}
    for o in trace_options.TRACE_OPTIONS:
        assert o.config_field is None or o.config_field in config_fields, o.flag
        assert o.live is None or o.live in live_fields, o.flag
        assert o.config_field is not None or o.live is not None or o.name in ("params", "profile", "offline"), o.flag
    # live's protocol side is every LiveSettings field, each filled by one option
    assert sorted(o.live for o in trace_options.options_of("live") if o.live) == sorted(live_fields)


def test_config_mapping_by_hand():
    opts = trace_options.parse_args(
        "run",
        ["--method", "tent", "--no-default-checkpoints", "--domains", "fog,snow", "--param", "lr=0.001", "--profile", "paper"],
    )
    kw = trace_options.config_kwargs("run", opts)
    assert kw["method"] == "tent" and kw["default_checkpoints"] is False and kw["domains"] == ["fog", "snow"]
    assert kw["method_params"] == {"lr": 0.001, "profile": "paper"}
    assert kw["checkpoints"] == [] and kw["budgets_ms"] == [] and kw["frozen_sample"] == 32
    assert "offline" not in kw and "params" not in kw


def test_live_lambda_goes_to_the_protocol_not_the_trace():
    opts = trace_options.parse_args("live", ["--method", "tent", "--rho", "1,50%", "--lambda-ms", "2s", "--B", "1s"])
    live = trace_options.live_kwargs(opts)
    assert live["lambda_ms"] == 2000.0 and live["rho"] == [1.0, 0.5] and live["budgets_ms"] == [1000.0]
    assert live["protocols"] == "discrete" and live["queue"] == 1
    assert "lambda_ms" not in trace_options.config_kwargs("live", opts)
    assert trace_options.config_kwargs("run", trace_options.parse_args("run", ["--lambda-ms", "3"]))["lambda_ms"] == 3.0


def test_calibrate_takes_no_method_options():
    names = {o.name for o in trace_options.options_of("calibrate")}
    assert not names & {"method", "params", "profile", "checkpoints", "budgets_ms", "lambda_ms"}
    assert "method_params" not in trace_options.config_kwargs("calibrate", trace_options.parse_args("calibrate", []))


def test_argv_round_trips_through_the_parser():
    values = {
        "method": "tent",
        "batch_size": 32,
        "checkpoints": [0, 5],
        "no_default_checkpoints": True,
        "frozen_sample": "all",
        "domains": ("fog", "snow"),
        "params": ["lr=0.001", "steps=2"],
        "budgets_ms": [1000.0, 2500.0],
        "lambda_ms": "12.5",
        "quiet": False,
    }
    argv = trace_options.to_argv(values)
    assert "--quiet" not in argv and argv.count("--param") == 2
    opts = trace_options.parse_args("run", argv)
    assert opts["method"] == "tent" and opts["batch_size"] == 32 and opts["checkpoints"] == [0, 5]
    assert opts["no_default_checkpoints"] is True and opts["frozen_sample"] is None and opts["domains"] == "fog,snow"
    assert opts["params"] == ("lr=0.001", "steps=2") and opts["budgets_ms"] == [1000.0, 2500.0] and opts["lambda_ms"] == 12.5
    with pytest.raises(ValueError, match="not trace options: lr"):
        trace_options.to_argv({"lr": 3})


def test_campaign_keys_are_the_declared_ones():
    assert TRACE_OPTIONS == {o.name: o.campaign for o in trace_options.TRACE_OPTIONS if o.campaign is not None}
    assert set(TRACE_OPTIONS) == {
        "max_batches",
        "frozen_sample",
        "threads",
        "heap",
        "workers",
        "checkpoints",
        "no_default_checkpoints",
        "input_size",
        "class_map",
        "corruptions",
        # timing variability (tempora_trace.variability)
        "timing_sample",
        "timing_passes",
        "idle_gaps",
        "idle_settle",
        # the machine-speed probe's interval
        "probe_every",
    }
    assert all("run" in trace_options.BY_NAME[k].commands for k in TRACE_OPTIONS)


CAMPAIGN = """
[machines.cpu]
device = "cpu"

[[groups]]
dataset = "demo"
batch_size = 16
seeds = [7]
streams = ["dirichlet:0.1"]
methods = ["cmf"]
domains = ["fog"]
options = { max_batches = 3, threads = 1, checkpoints = [0, 2], no_default_checkpoints = true, frozen_sample = "all" }
params = { cmf = { lr = 0.0005, prior_correction = false } }
budgets_ms = [1000, 1500]
"""


def test_campaign_task_is_the_run_command_it_launches(tmp_path: Path):
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN)
    task = next(t for t in load_campaign(path).tasks if t.method == "cmf")
    argv = task.argv(tmp_path, lambda_ms=20.0)
    assert argv[0] == "run"
    opts = trace_options.parse_args("run", argv[1:])
    cfg = TraceConfig(**trace_options.config_kwargs("run", opts)).resolved()
    assert cfg.stream == "dirichlet:0.1" and cfg.batch_size == 16 and cfg.seed == 7 and cfg.domains == ["fog"]
    assert cfg.max_batches == 3 and cfg.threads == 1 and cfg.checkpoints == [0, 2] and cfg.default_checkpoints is False
    assert cfg.frozen_sample is None and cfg.quiet is True
    assert cfg.method_params == {"lr": 0.0005, "prior_correction": False}  # a TOML boolean stays a boolean
    assert cfg.budgets_ms == [1000.0, 1500.0] and cfg.lambda_ms == 20.0
    location = trace_location(task, tmp_path)
    assert location.name == f"{cfg.file_stem()}.parquet" and location.parent.parent.parent == tmp_path / "demo"


def test_help_and_option_errors_load_no_torch():
    """The command boundary: `--help` and a refused option need only click, the option
    declaration and tempora_schema; the library modules (torch) load when a command runs."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tempora_trace.cli import main\n"
        "for argv in (['--help'], ['run', '--help'], ['live', '--batch-size', '0']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "loaded = [m for m in ('torch', 'tempora_trace.config', 'tempora_trace.calibration', 'tempora_trace.runner') if m in sys.modules]\n"
        "print(','.join(loaded) or 'none')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parent)
    assert out.stdout.strip().splitlines()[-1] == "none", out.stdout + out.stderr
